"""The GIL is released while the library computes: another Python thread runs during a
call (with the GIL held it could not run between the call's start and end)."""

import threading
import time

import tokensel


def test_other_threads_run_during_a_run():
    cfg = tokensel.Config(d=200, n_test=20, steps=20000, method="direct")
    span = {}

    def work():
        span["start"] = time.perf_counter()
        tokensel.run(cfg)
        span["end"] = time.perf_counter()

    worker = threading.Thread(target=work)
    ticks = []
    worker.start()
    while worker.is_alive():
        ticks.append(time.perf_counter())
        time.sleep(0.001)
    worker.join()
    assert span["end"] - span["start"] > 0.05, "the call is long enough to observe"
    inside = [t for t in ticks if span["start"] < t < span["end"]]
    assert len(inside) >= 10, (len(inside), span)

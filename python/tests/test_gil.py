"""The GIL is released while the library computes: another Python thread runs during a
call (with the GIL held it could not run between the call's start and end)."""

import threading
import time

import tokensel


def ticks_during(call):
    """Run `call` in a thread while this one ticks every millisecond: the call's span
    (start, end, result) and the ticks that fell inside it."""
    span = {}

    def work():
        span["start"] = time.perf_counter()
        span["result"] = call()
        span["end"] = time.perf_counter()

    worker = threading.Thread(target=work)
    ticks = []
    worker.start()
    while worker.is_alive():
        ticks.append(time.perf_counter())
        time.sleep(0.001)
    worker.join()
    assert span["end"] - span["start"] > 0.05, "the call is long enough to observe"
    return span, [t for t in ticks if span["start"] < t < span["end"]]


def test_other_threads_run_during_a_run():
    cfg = tokensel.Config(d=200, n_test=20, steps=20000, method="direct")
    span, inside = ticks_during(lambda: tokensel.run(cfg))
    assert len(inside) >= 10, (len(inside), span)


def test_other_threads_run_while_a_grid_cell_runs(tmp_path):
    spec = 'seeds = "0..1"\nsteps = 20000\n[config]\nd = 200\nn_test = 20\nmethod = "direct"\n[axes]\nmu_norm = [20]\n'
    span, inside = ticks_during(lambda: tokensel.run_cell(spec, 0, tmp_path / "gil"))
    assert span["result"].ran
    assert len(inside) >= 10, (len(inside), span)

#!/usr/bin/env python3
"""Benchmark (prints numbers; not a test): the cost of calling tokensel from Python.

    python python/bench.py [--bin PATH/tokensel] [--reps 5]

1. The default run (the balanced preset, 30,000 steps) through `tokensel.run(Config())`
   against the same run from the command line (`tokensel run --json --quiet`, timed from
   here as a subprocess): wall time, median of --reps, runs interleaved so that a change
   of machine load hits both. Compare the extension with a CLI of the same cargo profile
   (maturin develop builds the dev profile, opt-level 3: use target/debug/tokensel; a
   release wheel: target/release/tokensel).
2. judge from a dict of arrays against `tokensel judge EXT.npz --data DIR` on the same
   float32 trajectory (a NumPy implementation, d = 400, 500 steps, 21 recorded steps).

Prints the CPU model, the load average before and after, the median wall time and CPU
time (user + system, all threads; less sensitive to other processes' load) of each, and
the ratios.
"""

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import tokensel

ROOT = Path(__file__).resolve().parents[1]


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def cpu_seconds():
    """CPU time (user + system) of this process and its finished children, all threads."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(f):
    c0, t0 = cpu_seconds(), time.perf_counter()
    f()
    return time.perf_counter() - t0, cpu_seconds() - c0


def interleaved(reps, **fns):
    """Wall and CPU seconds of each function, `reps` rounds in turn."""
    times = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            times[k].append(timed(f))
    return times


def show(times):
    """Print each function's median wall and CPU time (and every wall time)."""
    med = {}
    for k, v in times.items():
        wall = statistics.median(t for t, _ in v)
        cpu = statistics.median(c for _, c in v)
        med[k] = (wall, cpu)
        print(f"   {k:>11}: wall {wall:.3f} s, CPU {cpu:.3f} s   (wall: {', '.join(f'{t:.3f}' for t, _ in v)})")
    return med


def numpy_float32(cfg, steps, record_at):
    """examples/numpy_reference.py's gradient descent on p (W = I, the stable softmax
    gradient) in float32 on tokensel's data. Returns the external-trajectory dict."""
    sys.path.insert(0, str(ROOT / "examples"))
    from numpy_reference import forward_backward

    d = tokensel.data(cfg)
    x, y, nu, p = (d[k].astype(np.float32) for k in ("X_train", "y_train", "nu", "p0"))
    rec = {k: [] for k in ("p", "scores", "attention", "output", "loss", "grad_q")}
    at = []
    for t in range(steps + 1):
        z, s, f, loss, grad = forward_backward(x, y, nu, p, naive=False)
        if t in record_at:
            at.append(t)
            for k, v in zip(rec, (p, z, s, f, loss, grad)):
                rec[k].append(np.array(v))
        p = p - np.float32(cfg.step_size) * grad
    out = {k: np.stack(v) for k, v in rec.items()}
    return {"steps": np.array(at, np.int64), "dtype": "float32", **out}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=str(ROOT / "target" / "debug" / "tokensel"))
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    load0 = os.getloadavg()
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; load average {load0[0]:.2f} (1 min)")
    print(f"CLI: {args.bin}; extension: {tokensel._tokensel.__file__}")

    cfg = tokensel.Config()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "cfg.toml").write_text(cfg.to_toml())
        cli_run = lambda: subprocess.run(
            [args.bin, "run", "--config", tmp / "cfg.toml", "--json", "--quiet"],
            check=True, capture_output=True,
        )
        py_run = lambda: tokensel.run(cfg)
        assert json.loads(cli_run().stdout) == tokensel.run(cfg).summary  # the same run
        times = interleaved(args.reps, cli=cli_run, python=py_run)
        print(f"\n1. default run ({cfg.steps} steps, d = {cfg.d}), median of {args.reps}:")
        med = show(times)
        print(f"   python / cli: wall {med['python'][0] / med['cli'][0]:.3f}, CPU {med['python'][1] / med['cli'][1]:.3f}")

        jcfg = tokensel.Config(d=400, n_test=200, steps=500)
        steps = sorted(set(range(0, 501, 25)))
        traj = numpy_float32(jcfg, 500, set(steps))
        (tmp / "j.toml").write_text(jcfg.to_toml())
        subprocess.run([args.bin, "data", "--config", tmp / "j.toml", "--out", tmp / "d"], check=True, capture_output=True)
        header = {"format": "tokensel-external/2", "dtype": "float32"}
        np.savez(tmp / "ext.npz", header=np.frombuffer(json.dumps(header).encode(), np.uint8),
                 **{k: v for k, v in traj.items() if k != "dtype"})
        cli_judge = lambda: subprocess.run(
            [args.bin, "judge", tmp / "ext.npz", "--data", tmp / "d", "--json", "--quiet"],
            capture_output=True,
        )
        py_judge = lambda: tokensel.judge(jcfg, traj)
        assert json.loads(cli_judge().stdout) == tokensel.judge(jcfg, traj)  # the same report
        times = interleaved(args.reps, npz_cli=cli_judge, dict_python=py_judge)
        print(f"\n2. judge, float32 NumPy run (d = {jcfg.d}, {jcfg.steps} steps, {len(steps)} recorded), median of {args.reps}:")
        med = show(times)
        print(f"   dict / npz: wall {med['dict_python'][0] / med['npz_cli'][0]:.3f}, CPU {med['dict_python'][1] / med['npz_cli'][1]:.3f}")
    print(f"\nload average after: {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    sys.exit(main())

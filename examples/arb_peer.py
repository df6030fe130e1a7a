"""Arb (through python-flint) on the same work as `tokensel certify`: the span step of the
default run enclosed in ball arithmetic, for a side-by-side cost measurement.

The peer does what tokensel's ball trainer does per step (src/train/span.rs, src/model.rs,
stable formulation, p-mode, W = I): z = G[1:, :] a with the EXACT Gram matrix G of the
rows [p(0); x_1 .. x_r] (formed once in integers by FLINT, rounded once to the working
precision), per sample the softmax shifted by the top score's midpoint, the centred
output f = g_top + sum_{j != top} s_j (g_j - g_top), l'(u) = -1 / (1 + exp(u)) (u = y f;
one occurrence of u), c_t = l'(u) y / n * s_t (g_t - f) (the top token's g_top - f as the
negated centred sum), and a[1:] -= alpha c. Its radii are Arb's own.

Usage (the venv's python with python-flint; tokensel built):

    python examples/arb_peer.py [--prec 128] [--warm 1000] [--steps 200] [--run N]
                                [--tokensel target/release/tokensel] [--json]

--prec is 64..=2^20 bits (the MPFR twin's range; 53 bits would be the f64 predictor);
the arguments and the tokensel binary are checked before any work (exit 2); a tokensel
command that fails or is killed partway ends the script with one line on stderr naming
it (exit 1).

It exports the default run's data with `tokensel data`, times `--steps` steps after
`--warm` steps (CPU time of this process, `time.process_time`, one thread: FLINT's
`ctx.threads = 1`) and reports the median over blocks of 20; then it times tokensel's
ball step and MPFR twin step at the same precision in the same sitting with
`tokensel cost --json` (CPU per step, RAYON_NUM_THREADS=1: one thread, like the peer).
`--run N` also times N whole steps from step 0 (e.g. 30000 for the default run). It
prints a table and, with --json, one JSON object.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

try:
    import flint
    from flint import arb, arb_mat, fmpz_mat
except ImportError:  # pragma: no cover - a clear message instead of a traceback
    sys.exit("arb_peer.py needs python-flint (pip install python-flint)")


def exact_ints(rows):
    """The f64 array `rows` as integers times 2^-k (k the smallest exponent's shift): exact."""
    m, e = np.frexp(rows)  # rows = m 2^e, 0.5 <= |m| < 1, m has 53 significant bits
    nz = rows != 0
    k = int(53 - e[nz].min()) if nz.any() else 0
    ints = [[int(v) for v in row] for row in np.ldexp(rows, k).astype(object)]
    # np.ldexp(.., k) is exact (a power-of-two scaling inside the f64 range) and every
    # scaled entry is an integer below 2^(53 + span), held exactly by Python's int
    # through float -> int conversion
    return ints, k


# The precisions the comparison supports: tokensel's MPFR twin row at --prec needs
# 64..=2^20 bits (src/arith/mpfr.rs MIN_TRUTH_PREC, MAX_PREC; at 53 bits `cost` times the
# f64 predictor instead, and the twin column would be NaN); the ball takes 53..=2^20.
MIN_PREC = 64
MAX_PREC = 1 << 20


def check_args(ap, args):
    """Refuse bad arguments before any work, argparse style (usage, message, exit 2)."""
    if not MIN_PREC <= args.prec <= MAX_PREC:
        ap.error(
            f"--prec {args.prec}: the peer is timed against tokensel's MPFR twin at the same "
            f"precision, which takes {MIN_PREC}..={MAX_PREC} bits (53 bits is the f64 "
            f"predictor, not an MPFR twin)"
        )
    if args.warm < 0:
        ap.error(f"--warm {args.warm}: must be >= 0")
    if args.steps < 20:
        ap.error(f"--steps {args.steps}: must be >= 20 (timed in blocks of 20 steps)")
    if args.run < 0:
        ap.error(f"--run {args.run}: must be >= 0")
    exe = shutil.which(args.tokensel)
    if exe is None:
        ap.error(
            f"--tokensel {args.tokensel}: no such executable (build it with "
            f"`cargo build --release`, or give the path of the tokensel binary)"
        )
    try:
        version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        ap.error(f"--tokensel {args.tokensel}: cannot run it: {e}")
    if version.returncode != 0 or not version.stdout.startswith("tokensel"):
        ap.error(f"--tokensel {args.tokensel}: `{exe} --version` does not answer as tokensel")
    args.tokensel = exe


def fail(message, status=1):
    """Stop with `message` as one line on stderr and exit `status` (no traceback)."""
    print(f"arb_peer.py: {' '.join(str(message).split())}", file=sys.stderr)
    sys.exit(status)


def tokensel(args, *command, env=None):
    """Run `tokensel COMMAND...` and return its standard output; a run that cannot start,
    is killed or fails ends the script with one line naming the command and why."""
    what = f"`tokensel {command[0]}`"
    try:
        out = subprocess.run([args.tokensel, *command], capture_output=True, text=True, env=env)
    except OSError as e:
        fail(f"{what} could not be run ({args.tokensel}): {e}")
    if out.returncode < 0:
        try:
            name = signal.Signals(-out.returncode).name
        except ValueError:
            name = f"signal {-out.returncode}"
        fail(f"{what} was killed by {name} before it finished")
    if out.returncode != 0:
        last = next((l for l in reversed(out.stderr.splitlines()) if l.strip()), "no message")
        fail(f"{what} failed with exit status {out.returncode}: {last.strip()}")
    return out.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prec", type=int, default=128,
                    help=f"precision in bits, {MIN_PREC}..={MAX_PREC} (default 128)")
    ap.add_argument("--warm", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--run", type=int, default=0)
    ap.add_argument("--tokensel", default="target/release/tokensel")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    check_args(ap, args)
    flint.ctx.prec = args.prec
    flint.ctx.threads = 1

    with tempfile.TemporaryDirectory() as tmp:
        tokensel(args, "data", "--out", tmp)
        try:
            X = np.load(os.path.join(tmp, "X_train.npy"))
            y = np.load(os.path.join(tmp, "y_train.npy")).astype(int)
            nu = np.load(os.path.join(tmp, "nu.npy"))
            p0 = np.load(os.path.join(tmp, "p0.npy"))
            with open(os.path.join(tmp, "config.toml")) as f:
                cfg = f.read()
            alpha = float(next(l.split("=")[1] for l in cfg.splitlines() if l.startswith("step_size")))
        except (OSError, ValueError, StopIteration) as e:
            fail(f"`tokensel data` did not write a readable data set: {e!r}")
    n, T, d = X.shape
    r = n * T
    rows = np.vstack([p0[None, :], X.reshape(r, d)])

    t0 = time.process_time()
    ints, k = exact_ints(rows)
    A = fmpz_mat(ints)
    G_int = A * A.transpose()  # exact
    scale = arb(2) ** (-2 * k)
    G1 = arb_mat(r, r + 1, [G_int[i + 1, j] for i in range(r) for j in range(r + 1)]) * scale
    nints, kn = exact_ints(nu[None, :])
    xg = fmpz_mat(ints[1:]) * fmpz_mat(nints).transpose()
    g = [arb(xg[j, 0]) * arb(2) ** (-(k + kn)) for j in range(r)]
    setup = time.process_time() - t0

    a = [arb(1)] + [arb(0)] * r
    neg_alpha = arb(-alpha)
    inv_n = arb(1) / n

    def step(a):
        z = G1 * arb_mat(r + 1, 1, a)
        c = [None] * r
        for i in range(n):
            zs = [z[i * T + t, 0] for t in range(T)]
            gs = g[i * T:(i + 1) * T]
            top = max(range(T), key=lambda t: zs[t].mid())
            shift = zs[top].mid()
            e = [(zt - shift).exp() for zt in zs]
            total = sum(e[1:], e[0])
            s = [et / total for et in e]
            acc = sum((s[j] * (gs[j] - gs[top]) for j in range(T) if j != top), arb(0))
            f = gs[top] + acc
            u = f * int(y[i])
            coef = -1 / (1 + u.exp()) * int(y[i]) * inv_n
            for t in range(T):
                diff = -acc if t == top else gs[t] - f
                c[i * T + t] = diff * s[t] * coef
        return [a[0]] + [aj + neg_alpha * cj for aj, cj in zip(a[1:], c)]

    for _ in range(args.warm):
        a = step(a)
    blocks = []
    for _ in range(args.steps // 20):
        t0 = time.process_time()
        for _ in range(20):
            a = step(a)
        blocks.append((time.process_time() - t0) / 20)
    peer_us = statistics.median(blocks) * 1e6
    run_s = None
    if args.run:
        b = [arb(1)] + [arb(0)] * r
        t0 = time.process_time()
        for _ in range(args.run):
            b = step(b)
        run_s = time.process_time() - t0 + setup

    env = dict(os.environ, RAYON_NUM_THREADS="1")
    out = tokensel(
        args, "cost", "--precs", str(args.prec), "--ball", str(args.prec),
        "--twin-reps", "15", "--reps", "3", "--json", env=env,
    )
    try:
        cost = json.loads(out)
        rows_ = cost["rows"]
        if not isinstance(rows_, list) or not all(isinstance(x, dict) for x in rows_):
            raise TypeError(f"`rows` is {type(rows_).__name__}, not a list of objects")
    except (ValueError, KeyError, TypeError) as e:
        fail(f"`tokensel cost --json` printed no cost report: {e!r}")

    def cpu_us(trainer):
        hit = [x for x in rows_ if x.get("trainer") == trainer
               and x.get("prec_bits") == args.prec and x.get("method") == "span"]
        try:
            return float(hit[0]["cpu_per_step_s"]) * 1e6 if hit else float("nan")
        except (KeyError, TypeError, ValueError) as e:
            fail(f"`tokensel cost --json`: the {trainer} row has no CPU time: {e!r}")

    ball_us, twin_us = cpu_us("ball"), cpu_us("mpfr")
    res = {
        "prec": args.prec,
        "cpu": cost.get("cpu"),
        "arb_step_cpu_us": peer_us,
        "arb_setup_cpu_s": setup,
        "arb_run_cpu_s": run_s,
        "arb_run_steps": args.run or None,
        "tokensel_ball_step_cpu_us": ball_us,
        "tokensel_twin_step_cpu_us": twin_us,
        "ball_speedup_over_arb": peer_us / ball_us,
        "python_flint": flint.__version__,
    }
    if args.json:
        print(json.dumps(res))
        return
    print(f"one span-enclosure step of the default run at {args.prec} bits, CPU time, one thread")
    print(f"  CPU: {res['cpu']}")
    print(f"  Arb (python-flint {flint.__version__})  {peer_us:10.1f} us per step"
          f" (median of {len(blocks)} blocks of 20 after {args.warm} steps)")
    print(f"  tokensel ball                {ball_us:10.1f} us per step ({peer_us / ball_us:.2f}x Arb's speed)")
    print(f"  tokensel MPFR twin           {twin_us:10.1f} us per step")
    print(f"  Arb set-up (exact Gram)      {setup:10.2f} s")
    if run_s is not None:
        print(f"  Arb whole run, {args.run} steps  {run_s:10.2f} s CPU (set-up included)")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        fail("interrupted", 130)

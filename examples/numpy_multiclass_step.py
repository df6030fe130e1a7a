#!/usr/bin/env python3
"""A NumPy peer for the cost of tokensel's K-class step (SPEC section 14), in the style of
../shared/peers/step_bench.py (the binary step): full-batch gradient descent on p with
W = I, float64, on the balanced sizes n = 20, d = 2000 with T = K + 6 tokens (relevant,
weak of the true class, one weak token per other class, 5 irrelevant), data drawn here
(the cost does not depend on the values).

    python examples/numpy_multiclass_step.py [--classes 2,4,10] [--method direct|span|both]
        [--steps 200] [--reps 7] [--threads N]

Prints one line per K and method, `numpy_multiclass_step_us K=<K> T=<T> <method> <us>`:
the median over --reps blocks of --steps steps (after 50 warm-up steps) of the time per
step in microseconds. `direct`: the scores as one (nT x d) @ p and the gradient as
c @ X (OpenBLAS), as step_bench.py does; `span`: the scores as H @ a with the Gram
matrix H = X X^T formed once (SPEC section 9; its precompute is not timed). Both also
form the loss, as tokensel's step does. A measurement, not a test: the numbers depend
on the machine and its load (docs/benchmarks.md, "Cost").

The maths (float64): z = X p, s = softmax(z) per sample; G_tc = <nu_c, x_t> with
nu_c = (mu_c - mean_c mu_c) / (sqrt 2 ||mu||^2); f_c = sum_t s_t G_tc; loss =
mean(logsumexp(f) - f_Y); gamma = softmax(f) - e_Y; h_t = sum_c gamma_c G_tc;
c_t = s_t (h_t - sum_u s_u h_u) / n; dL/dp = X^T c.
--threads N sets OPENBLAS_NUM_THREADS (and OMP_NUM_THREADS) before NumPy is imported.
Only NumPy and the standard library are used.
"""
import argparse
import os
import sys
import time


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="Median time per step of a NumPy K-class token-selection step "
        "(tokensel's K-class model, SPEC section 14), float64.",
    )
    ap.add_argument("--classes", default="2,4,10",
                    help="comma-separated K values, each 2..100 (default 2,4,10)")
    ap.add_argument("--method", choices=["direct", "span", "both"], default="both",
                    help="direct: X @ p and c @ X; span: H @ a (default both)")
    ap.add_argument("--steps", type=int, default=200, help="steps per timed block (default 200)")
    ap.add_argument("--reps", type=int, default=7, help="timed blocks, median reported (default 7)")
    ap.add_argument("--threads", type=int, default=None,
                    help="BLAS threads (OPENBLAS_NUM_THREADS; default: NumPy's own)")
    a = ap.parse_args(argv)
    try:
        ks = [int(k) for k in a.classes.split(",")]
    except ValueError:
        ap.error(f"--classes: not a comma-separated list of integers: {a.classes!r}")
    for k in ks:
        if not 2 <= k <= 100:
            ap.error(f"--classes: K must lie in 2..100, got {k}")
    for name in ("steps", "reps"):
        v = getattr(a, name)
        if not 1 <= v <= 100_000:
            ap.error(f"--{name} must lie in 1..100000, got {v}")
    if a.threads is not None and not 1 <= a.threads <= 1024:
        ap.error(f"--threads must lie in 1..1024, got {a.threads}")
    a.ks = ks
    return a


def setup(np, k, n=20, d=2000, mu_norm=20.0, rho=0.2, seed=0):
    """Data of the K-class layout: R, W_Y, one W_c per other class, 5 irrelevant."""
    t = k + 6
    rng = np.random.default_rng(seed)
    mu = np.zeros((k, d))
    mu[np.arange(k), np.arange(k)] = mu_norm
    y = rng.integers(0, k, n)
    x = rng.standard_normal((n, t, d))
    for i in range(n):
        x[i, 0] += mu[y[i]]
        x[i, 1] += rho * mu[y[i]]
        others = [c for c in range(k) if c != y[i]]
        for j, c in enumerate(others):
            x[i, 2 + j] += rho * mu[c]
    nu = (mu - mu.mean(0)).T / (np.sqrt(2) * mu_norm ** 2)  # d x K
    g = x @ nu  # n x T x K
    return x.reshape(n * t, d), g, y, t


def make_step(np, xf, g, y, n, t, method, lr=1e-4):
    rows = np.arange(n)

    def backward(z):
        a = z.reshape(n, t)
        a = a - a.max(1, keepdims=True)
        s = np.exp(a)
        s /= s.sum(1, keepdims=True)
        f = np.einsum("nt,ntk->nk", s, g)
        m = f.max(1, keepdims=True)
        e = np.exp(f - m)
        z_sum = e.sum(1, keepdims=True)
        loss = np.mean(np.log(z_sum[:, 0]) + m[:, 0] - f[rows, y])
        gamma = e / z_sum
        gamma[rows, y] -= 1.0
        h = np.matmul(g, gamma[:, :, None])[:, :, 0]
        hbar = (s * h).sum(1, keepdims=True)
        return (s * (h - hbar) / n).reshape(n * t), loss

    if method == "direct":
        def step(p):
            c, loss = backward(xf @ p)
            return p - lr * (c @ xf), loss
        return step, np.zeros(xf.shape[1])
    h_gram = xf @ xf.T

    def step(a):
        c, loss = backward(h_gram @ a)
        return a - lr * c, loss
    return step, np.zeros(xf.shape[0])


def main(argv):
    args = parse_args(argv)
    if args.threads is not None:
        os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import numpy as np

    methods = ["direct", "span"] if args.method == "both" else [args.method]
    for k in args.ks:
        xf, g, y, t = setup(np, k)
        n = g.shape[0]
        for method in methods:
            step, v = make_step(np, xf, g, y, n, t, method)
            for _ in range(50):
                v, _ = step(v)
            times = []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    v, _ = step(v)
                times.append((time.perf_counter() - t0) / args.steps * 1e6)
            if not np.all(np.isfinite(v)):
                print(f"K = {k} {method}: a non-finite parameter", file=sys.stderr)
                return 1
            print(f"numpy_multiclass_step_us K={k} T={t} {method} {np.median(times):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""A plain NumPy implementation of tokensel's run, for `tokensel judge` to check.

It reads a `tokensel data` directory (the NPY arrays, config.toml), trains p by full-batch
gradient descent with W fixed (the paper's first version, p-mode), and writes an
external trajectory (docs/judge.md):

    python examples/numpy_reference.py DATA_DIR --out EXT.json [--steps N] [--every K]
        [--float32] [--naive-softmax] [--bug wrong-sign|untransposed-w] [--step-scale S]
        [--perturb-p STEP:SIZE] [--p0-offset X] [--freeze-p-after K]

--float32        compute everything in float32 (data, parameters, arithmetic).
--naive-softmax  the textbook softmax gradient c_t = s_t (g_t - f), f = sum_t s_t g_t,
                 which cancels once s_top rounds to 1 (tokensel's stable form takes
                 g_top - f from the centred sum instead).
--bug wrong-sign gradient ascent instead of descent (a deliberately wrong model).
--bug untransposed-w  q = W p instead of W^T p (with a dense W(0): forgetting that a
                      framework's weight matrix is the paper's W^T).

Small deliberate faults, for `tokensel judge`'s diagnoses (tests/judge.rs):
--step-scale S        the step size times S (e.g. 1.0001: a step size 0.01% too large).
--perturb-p STEP:SIZE p multiplied by (1 + SIZE) just before the forward pass of step
                      STEP (a relative error SIZE in p from that step on).
--p0-offset X         X added to every coordinate of p(0).
--freeze-p-after K    no update after step K: p stays at p(K) (lost updates).

Only NumPy and the standard library are used. The maths is SPEC section 3:
z = X q, s = softmax(z), f = sum_t s_t <nu, x_t>, L = mean log(1 + exp(-y f)),
dL/dq = (1/n) sum_i l'(y_i f_i) y_i sum_t s_t (g_t - f_i) x_t with g_t = <nu, x_t>.
"""

import argparse
import json
import sys
import tomllib
from pathlib import Path

import numpy as np


def load(data_dir: Path, dtype):
    cfg = tomllib.loads((data_dir / "config.toml").read_text())
    if cfg.get("model", {}).get("kind", "token-selection") != "token-selection":
        sys.exit(f"numpy_reference.py trains the binary token-selection model; the data's config has [model] kind = {cfg['model']['kind']!r}")
    if cfg.get("optimizer", {}).get("kind", "gd") != "gd":
        sys.exit(f"numpy_reference.py takes constant gradient steps; the data's config has [optimizer] kind = {cfg['optimizer']['kind']!r}")
    if cfg.get("mode", "p") != "p":
        sys.exit(f"numpy_reference.py trains p only (mode = 'p'); the data's config has mode = {cfg['mode']!r}")
    arr = lambda name: np.load(data_dir / f"{name}.npy")
    x = arr("X_train").astype(dtype)
    y = arr("y_train").astype(dtype)
    nu = arr("nu").astype(dtype)
    p0 = arr("p0").astype(dtype)
    w = arr("W0").astype(dtype) if (data_dir / "W0.npy").exists() else None
    return cfg, x, y, nu, p0, w


def forward_backward(x, y, nu, q, naive):
    """Scores, attention, outputs, loss and dL/dq at q."""
    n = x.shape[0]
    z = x @ q                                   # (n, T)
    top = np.argmax(z, axis=1)
    e = np.exp(z - z[np.arange(n), top][:, None])
    s = e / e.sum(axis=1, keepdims=True)
    g = x @ nu                                  # (n, T): <nu, x_t>
    f = (s * g).sum(axis=1)
    if naive:
        c = s * (g - f[:, None])
    else:
        # g_top - f = sum_{t != top} s_t (g_top - g_t): no cancellation of O(1) terms
        g_top = g[np.arange(n), top]
        top_minus_f = (s * (g_top[:, None] - g)).sum(axis=1)
        c = s * ((g - g_top[:, None]) + top_minus_f[:, None])
    margin = y * f
    loss = np.logaddexp(0, -margin).mean()
    lprime = -1 / (1 + np.exp(margin))          # l'(u) = -1 / (1 + e^u)
    coef = lprime * y / n
    grad = np.einsum("i,it,itd->d", coef, c, x)
    return z, s, f, loss, grad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, help="number of updates (default: the config's)")
    ap.add_argument("--every", type=int, default=1, help="record every K steps (and the last)")
    ap.add_argument("--float32", action="store_true")
    ap.add_argument("--naive-softmax", action="store_true")
    ap.add_argument("--bug", choices=["wrong-sign", "untransposed-w"])
    ap.add_argument("--step-scale", type=float, default=1.0, metavar="S")
    ap.add_argument("--perturb-p", metavar="STEP:SIZE")
    ap.add_argument("--p0-offset", type=float, default=0.0, metavar="X")
    ap.add_argument("--freeze-p-after", type=int, metavar="K")
    args = ap.parse_args()
    perturb = None
    if args.perturb_p is not None:
        try:
            at, size = args.perturb_p.split(":")
            perturb = (int(at), float(size))
        except ValueError:
            sys.exit(f"--perturb-p {args.perturb_p!r}: expected STEP:SIZE, e.g. 4:1e-6")

    dtype = np.float32 if args.float32 else np.float64
    cfg, x, y, nu, p, w = load(args.data_dir, dtype)
    steps = cfg["steps"] if args.steps is None else args.steps
    alpha = dtype(cfg["step_size"] * args.step_scale)
    sign = dtype(-1) if args.bug == "wrong-sign" else dtype(1)
    p = p + dtype(args.p0_offset)
    rec = {k: [] for k in ("steps", "p", "scores", "attention", "output", "loss", "grad_q")}
    for t in range(steps + 1):
        if perturb is not None and t == perturb[0]:
            p = p * dtype(1 + perturb[1])
        wq = w if args.bug == "untransposed-w" else (None if w is None else w.T)
        q = p if w is None else wq @ p
        z, s, f, loss, grad = forward_backward(x, y, nu, q, args.naive_softmax)
        if t % args.every == 0 or t == steps:
            for k, v in (("steps", t), ("p", p), ("scores", z), ("attention", s), ("output", f),
                         ("loss", loss), ("grad_q", grad)):
                rec[k].append(v.tolist() if isinstance(v, np.ndarray) else float(v) if k != "steps" else v)
        frozen = args.freeze_p_after is not None and t >= args.freeze_p_after
        if t < steps and not frozen:
            grad_p = grad if w is None else wq.T @ grad
            p = p - sign * alpha * grad_p

    name = "numpy_reference.py" + "".join(
        f" {flag}" for flag, on in (("--float32", args.float32), ("--naive-softmax", args.naive_softmax)) if on
    ) + (f" --bug {args.bug}" if args.bug else "") + "".join(
        f" {flag} {value}"
        for flag, value, default in (
            ("--step-scale", args.step_scale, 1.0),
            ("--perturb-p", args.perturb_p, None),
            ("--p0-offset", args.p0_offset, 0.0),
            ("--freeze-p-after", args.freeze_p_after, None),
        )
        if value != default
    )
    write_external(args.out, rec, np.dtype(dtype).name, name, cfg)


def write_external(path, rec, dtype_name, implementation, cfg, extra_config=None):
    """Write the recorded quantities `rec` (for each quantity one entry per recorded
    step, arrays or nested lists, and `steps`) as a tokensel-external/2 file: NPZ where
    `path` ends in .npz (arrays in `dtype_name`, the header as uint8 JSON bytes), JSON
    otherwise. The header names the dtype, the implementation and the config values it
    used (seed, step size, mode, and any `extra_config` keys, e.g. the step rule's
    `optimizer`; `tokensel judge` checks them against the data's). The file appears
    complete or not at all (written beside it, then renamed)."""
    header = {
        "format": "tokensel-external/2",
        "dtype": dtype_name,
        "implementation": implementation,
        "config": {
            "seed": cfg["seed"],
            "step_size": cfg["step_size"],
            "mode": cfg.get("mode", "p"),
            **(extra_config or {}),
        },
    }
    quantities = {k: np.asarray(v) for k, v in rec.items() if k != "steps"}
    tmp = path.with_name(path.name + ".partial")
    if path.suffix.lower() == ".npz":
        with open(tmp, "wb") as fh:  # a file object: np.savez appends no suffix to it
            np.savez(
                fh,
                header=np.frombuffer(json.dumps(header).encode(), np.uint8),
                steps=np.asarray(rec["steps"], np.int64),
                **{k: v.astype(dtype_name) for k, v in quantities.items()},
            )
    else:
        out = {**header, "steps": [int(t) for t in rec["steps"]], **{k: v.tolist() for k, v in quantities.items()}}
        # NaN and infinities are written as null (JSON has no spelling for them)
        text = json.dumps(out, allow_nan=True)
        for token in ("-Infinity", "Infinity", "NaN"):
            text = text.replace(token, "null")
        tmp.write_text(text)
    tmp.replace(path)
    print(f"wrote {len(rec['steps'])} recorded steps to {path}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The same run as numpy_reference.py, in PyTorch with autograd (not run in CI).

    python examples/torch_reference.py DATA_DIR --out EXT.json [--steps N] [--every K]
        [--float32] [--bug wrong-sign]

It reads a `tokensel data` directory, trains p by full-batch gradient descent with W
fixed (p-mode), takes the gradient from autograd, and writes an external trajectory for
`tokensel judge` (README "Check your own implementation").

Note: autograd's softmax backward is the textbook form s * (g - <s, g>), which is what
numpy_reference.py calls --naive-softmax. On runs whose score gaps pass ~37 (float64) or
~17 (float32) `tokensel judge` will say so ("naive softmax saturation"); on the paper's
default setting the gaps stay small and the float64 run agrees with the twin.
"""

import argparse
import tomllib
import sys
from pathlib import Path

import numpy as np
import torch

from numpy_reference import write_external  # the same file format, next to this script


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, help="number of updates (default: the config's)")
    ap.add_argument("--every", type=int, default=1, help="record every K steps (and the last)")
    ap.add_argument("--float32", action="store_true")
    ap.add_argument("--bug", choices=["wrong-sign"])
    args = ap.parse_args()

    torch.use_deterministic_algorithms(True)
    dtype = torch.float32 if args.float32 else torch.float64
    cfg = tomllib.loads((args.data_dir / "config.toml").read_text())
    if cfg.get("mode", "p") != "p":
        sys.exit(f"torch_reference.py trains p only (mode = 'p'); the data's config has mode = {cfg['mode']!r}")
    arr = lambda name: torch.from_numpy(np.load(args.data_dir / f"{name}.npy")).to(dtype)
    x, y, nu, p = arr("X_train"), arr("y_train"), arr("nu"), arr("p0")
    w = arr("W0") if (args.data_dir / "W0.npy").exists() else None
    steps = cfg["steps"] if args.steps is None else args.steps
    alpha = cfg["step_size"]
    sign = -1.0 if args.bug == "wrong-sign" else 1.0
    g = x @ nu  # (n, T): <nu, x_t>

    rec = {k: [] for k in ("steps", "p", "scores", "attention", "output", "loss", "grad_q")}
    p = p.clone().requires_grad_(True)
    for t in range(steps + 1):
        q = p if w is None else w.T @ p
        q.retain_grad()
        z = x @ q
        s = torch.softmax(z, dim=1)
        f = (s * g).sum(dim=1)
        loss = torch.nn.functional.softplus(-y * f).mean()  # log(1 + exp(-y f))
        p.grad = None
        loss.backward()
        if t % args.every == 0 or t == steps:
            rec["steps"].append(t)
            for k, v in (("p", p), ("scores", z), ("attention", s), ("output", f), ("grad_q", q.grad)):
                rec[k].append(v.detach().tolist())
            rec["loss"].append(loss.item())
        if t < steps:
            with torch.no_grad():
                p -= sign * alpha * p.grad

    name = "torch_reference.py (autograd)" + (" --float32" if args.float32 else "")
    write_external(args.out, rec, "float32" if args.float32 else "float64", name, cfg)


if __name__ == "__main__":
    main()

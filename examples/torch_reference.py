#!/usr/bin/env python3
"""The same run as numpy_reference.py, in PyTorch with autograd (not run in CI).

    python examples/torch_reference.py DATA_DIR --out EXT.json [--steps N] [--every K]
        [--float32] [--naive-softmax] [--bug wrong-sign]

It reads a `tokensel data` directory, trains p by full-batch gradient descent with W
fixed (p-mode), takes the gradient from autograd, and writes an external trajectory for
`tokensel judge` (docs/judge.md).

--float32        compute in float32 (data, parameters, arithmetic).
--naive-softmax  use torch.softmax's own backward, the textbook form s * (G - <s, G>)
                 (G = dL/ds), which cancels once s_top rounds to 1: on runs whose score
                 gaps pass ~37 (float64) or ~17 (float32) `tokensel judge` says so
                 ("naive softmax saturation"). Without it the softmax's backward is the
                 stable form numpy_reference.py uses, centred on the top token.
--bug wrong-sign gradient ascent instead of descent (a deliberately wrong model).

The loss is log(1 + exp(-y f)) as torch.logaddexp(0, -y f) (softplus would replace it by
-y f past its threshold, an approximation of relative size up to ~1e-10).
"""

import argparse
import tomllib
import sys
from pathlib import Path

import numpy as np
import torch

from numpy_reference import write_external  # the same file format, next to this script


class StableSoftmax(torch.autograd.Function):
    """softmax over the last axis (torch.softmax's forward) with the backward centred on
    the top token: G_t - <s, G> = (G_t - G_top) + sum_u s_u (G_top - G_u), so no O(1)
    terms cancel once s_top rounds to 1 (SPEC section 6; numpy_reference.py's stable form)."""

    @staticmethod
    def forward(ctx, z):
        s = torch.softmax(z, dim=-1)
        top = z.argmax(dim=-1, keepdim=True)
        ctx.save_for_backward(s, top)
        return s

    @staticmethod
    def backward(ctx, grad_s):
        s, top = ctx.saved_tensors
        g_top = grad_s.gather(-1, top)
        centred = (grad_s - g_top) + (s * (g_top - grad_s)).sum(dim=-1, keepdim=True)
        return s * centred


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, help="number of updates (default: the config's)")
    ap.add_argument("--every", type=int, default=1, help="record every K steps (and the last)")
    ap.add_argument("--float32", action="store_true")
    ap.add_argument("--naive-softmax", action="store_true")
    ap.add_argument("--bug", choices=["wrong-sign"])
    args = ap.parse_args()

    torch.use_deterministic_algorithms(True)
    dtype = torch.float32 if args.float32 else torch.float64
    cfg = tomllib.loads((args.data_dir / "config.toml").read_text())
    if cfg.get("model", {}).get("kind", "token-selection") != "token-selection":
        sys.exit(f"torch_reference.py trains the binary token-selection model; the data's config has [model] kind = {cfg['model']['kind']!r}")
    if cfg.get("optimizer", {}).get("kind", "gd") != "gd":
        sys.exit(f"torch_reference.py takes constant gradient steps; the data's config has [optimizer] kind = {cfg['optimizer']['kind']!r}")
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
        s = torch.softmax(z, dim=1) if args.naive_softmax else StableSoftmax.apply(z)
        f = (s * g).sum(dim=1)
        loss = torch.logaddexp(torch.zeros_like(f), -y * f).mean()  # log(1 + exp(-y f))
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

    name = "torch_reference.py (autograd)" + "".join(
        f" {flag}" for flag, on in (("--float32", args.float32), ("--naive-softmax", args.naive_softmax)) if on
    ) + (f" --bug {args.bug}" if args.bug else "")
    write_external(args.out, rec, "float32" if args.float32 else "float64", name, cfg)


if __name__ == "__main__":
    main()

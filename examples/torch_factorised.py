#!/usr/bin/env python3
"""Factorised query-key attention in PyTorch: an nn.Linear pair judged by tokensel (not
run in CI: CI has no torch).

    python examples/torch_factorised.py DATA_DIR --out EXT.{json,npz} [--steps N]
        [--every K] [--float32] [--bug {wk-scale,bq-frozen}]

It reads a `tokensel data` directory of a `[factorised]` config (SPEC section 17:
z_it = (W_Q p + b_Q)^T (W_K x_it + b_K)), loads the data and the initial blocks by name
(W_Q0.npy, W_K0.npy, with biases b_Q0.npy, b_K0.npy, and p0.npy) into two
`nn.Linear(d, m)` layers (query and key; `.weight` is W_Q / W_K, `.bias` b_Q / b_K) and
the query token p, trains them by full-batch gradient descent with autograd (every
parameter by its own gradient, b_K too: PyTorch forms b_K's gradient, exactly 0 in exact
arithmetic, so b_K moves by rounding noise; tokensel keeps it at its init), and writes
an external trajectory (docs/judge.md) with p, q = W_K^T u
(u = W_Q p + b_Q), the blocks W_Q, W_K, b_Q, b_K, the scores, attention, outputs, loss
and grad_q = dL/dq (sum_it dL/dz_it x_it, from autograd's dL/dz).

--float32          compute in float32 (data, parameters, arithmetic).
--bug wk-scale     W_K's gradient scaled by 1.01 (a deliberately wrong model).
--bug bq-frozen    b_Q never updated.

The softmax's backward is the stable form of torch_reference.py (centred on the top
token); the loss log(1 + exp(-y f)) as torch.logaddexp(0, -y f).
"""

import argparse
import sys
import tomllib
from pathlib import Path

import numpy as np
import torch

from numpy_reference import write_external  # the same file format, next to this script
from torch_reference import StableSoftmax


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, help="number of updates (default: the config's)")
    ap.add_argument("--every", type=int, default=1, help="record every K steps (and the last)")
    ap.add_argument("--float32", action="store_true")
    ap.add_argument("--bug", choices=["wk-scale", "bq-frozen"])
    args = ap.parse_args()

    torch.use_deterministic_algorithms(True)
    dtype = torch.float32 if args.float32 else torch.float64
    cfg = tomllib.loads((args.data_dir / "config.toml").read_text())
    fact = cfg.get("factorised")
    if fact is None:
        sys.exit("torch_factorised.py trains the factorised query map; the data's config has no [factorised] section")
    if cfg.get("model", {}).get("kind", "token-selection") != "token-selection":
        sys.exit("torch_factorised.py trains the binary token-selection model")
    if cfg.get("optimizer", {}).get("kind", "gd") != "gd":
        sys.exit("torch_factorised.py takes constant gradient steps ([optimizer] kind = 'gd')")
    bias, train_p = fact.get("bias", False), fact.get("train_p", False)
    if args.bug == "bq-frozen" and not bias:
        sys.exit("--bug bq-frozen needs [factorised] bias = true")
    arr = lambda name: torch.from_numpy(np.load(args.data_dir / f"{name}.npy")).to(dtype)
    x, y, nu, p = arr("X_train"), arr("y_train"), arr("nu"), arr("p0")
    d, m = x.shape[-1], fact["m"]
    query, key = (torch.nn.Linear(d, m, bias=bias, dtype=dtype) for _ in range(2))
    with torch.no_grad():
        for layer, name in ((query, "Q"), (key, "K")):
            layer.weight.copy_(arr(f"W_{name}0"))
            if bias:
                layer.bias.copy_(arr(f"b_{name}0"))
    p = p.clone().requires_grad_(train_p)
    steps = cfg["steps"] if args.steps is None else args.steps
    alpha = cfg["step_size"]
    g = x @ nu  # (n, T): <nu, x_t>

    keys = ["steps", "p", "q", "W_Q", "W_K"] + (["b_Q", "b_K"] if bias else [])
    rec = {k: [] for k in keys + ["scores", "attention", "output", "loss", "grad_q"]}
    params = [("W_Q", query.weight), ("W_K", key.weight)]
    if bias:
        params += [("b_Q", query.bias), ("b_K", key.bias)]
    if train_p:
        params.append(("p", p))
    for t in range(steps + 1):
        u = query(p)  # W_Q p + b_Q (m)
        z = key(x) @ u  # (W_K x_it + b_K)^T u (n, T)
        z.retain_grad()
        s = StableSoftmax.apply(z)
        f = (s * g).sum(dim=1)
        loss = torch.logaddexp(torch.zeros_like(f), -y * f).mean()
        for _, w in params:
            w.grad = None
        loss.backward()
        if t % args.every == 0 or t == steps:
            with torch.no_grad():
                q = key.weight.T @ u  # the effective query W_K^T u (d)
                grad_q = torch.einsum("itd,it->d", x, z.grad)
            rec["steps"].append(t)
            for k, v in [("p", p), ("q", q)] + params[: 4 if bias else 2] + [
                ("scores", z),
                ("attention", s),
                ("output", f),
                ("grad_q", grad_q),
            ]:
                rec[k].append(v.detach().tolist())
            rec["loss"].append(loss.item())
        if t < steps:
            with torch.no_grad():
                for name, w in params:
                    if args.bug == "bq-frozen" and name == "b_Q":
                        continue
                    step = alpha * (1.01 if args.bug == "wk-scale" and name == "W_K" else 1.0)
                    w -= step * w.grad

    name = "torch_factorised.py (nn.Linear pair, autograd)" + (" --float32" if args.float32 else "") + (
        f" --bug {args.bug}" if args.bug else ""
    )
    write_external(args.out, rec, "float32" if args.float32 else "float64", name, cfg)


if __name__ == "__main__":
    main()

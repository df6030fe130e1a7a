#!/usr/bin/env python3
"""Check tokensel's real-setting model against the official `OurAttention` (one-off,
not run in CI: it needs PyTorch and a checkout of the official code).

    cargo run --example real_setting_pass -- out=DIR [d=32 tokens=8 classes=3 n=20 steps=5 lr=0.5]
    python examples/real_setting_official.py DIR --official PATH
        [--steps 5] [--lr 0.5] [--momentum 0] [--weight-decay 0] [--plant untransposed-w]

PATH is your checkout of keitaroskmt/benign-attention at commit a258264 (the version with
`main_real_setting.py`). Nothing of it is copied here: its `main_real_setting.py` is
imported as it is (importlib, under the module name `official_real_setting`, so its
`if __name__ == "__main__"` part does not run). It imports, at the top, packages the
model class does not use: torch, hydra-core, omegaconf and einops are imported for real
(`pip install torch hydra-core einops`); wandb, transformers and the checkout's own
`src.datasets.*` (which need torchvision and HF datasets) and `src.distributed_utils`
are replaced by empty stand-ins when they are not installed (the script prints which).
What comes from the official code: the class `OurAttention` (its parameters W, p, nu
and `forward_with_scores`), the optimiser class `SGD` and the loss
`nn.functional.cross_entropy(logits, target)` as `main()` writes it.

The official run uses SGD with momentum 0.9, weight decay 1e-3 and a cosine schedule
with warmup (config/optimizer/sgd.yaml, main_real_setting.yaml); the check steps with a
constant learning rate (the schedule is a per-epoch factor on lr, outside the model) and
plain SGD by default (--momentum / --weight-decay give torch's SGD those values; pass
the same to the Rust example).

Compared, in float64 (tokensel's f64 run) and float32 (tokensel's f32 run, and the
float32 model against tokensel's f64 run to show the float32 gap itself): at step 0 the
outputs, the attention, the loss and the .grad of every parameter (W, p, nu) under the
official loss; then the loss, outputs and attention at every step of K optimiser steps
and every parameter after them. Each quantity's difference is max |a - b| / max |b|
(0 where both are exactly 0). Pass: every difference <= 1e-10 in float64, <= 1e-3 in
float32; exit 1 otherwise.

--plant untransposed-w  loads W^T into the official model (the paper's convention
                        where the code expects its own): a planted bug the check must
                        catch (at step 0 p = 0, so the forward pass is blind to W and
                        dL/dp = W^T dL/dq is the first quantity to differ).
"""

import argparse
import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import torch

STUBBED_IF_MISSING = [
    "wandb",
    "transformers",
    "src",
    "src.datasets",
    "src.datasets.cifar",
    "src.datasets.glue",
    "src.datasets.agnews",
    "src.datasets.mnist",
    "src.distributed_utils",
]


class _Stub(types.ModuleType):
    """An empty stand-in module: every attribute is a do-nothing callable."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *a, **k: None


def import_official(path: Path):
    main_py = path / "main_real_setting.py" if path.is_dir() else path
    if not main_py.is_file():
        sys.exit(
            f"--official {path}: no main_real_setting.py there (a checkout of "
            "keitaroskmt/benign-attention at a258264)"
        )
    root = str(main_py.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    stubbed = []
    for name in STUBBED_IF_MISSING:
        if name in sys.modules:
            continue
        try:
            # the checkout's own src.* pull in torchvision / HF datasets: stand in for
            # them unless they import
            importlib.import_module(name)
        except Exception:
            sys.modules[name] = _Stub(name)
            stubbed.append(name)
    spec = importlib.util.spec_from_file_location("official_real_setting", main_py)
    module = importlib.util.module_from_spec(spec)
    saved = sys.argv
    sys.argv = [str(main_py)]
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as e:
        sys.exit(f"importing {main_py} needs `{e.name}` (pip install torch hydra-core einops)")
    finally:
        sys.argv = saved
    for name in ("OurAttention", "SGD"):
        if not hasattr(module, name):
            sys.exit(f"{main_py} has no `{name}`: not the version this check was written for")
    if stubbed:
        print(f"stand-ins for modules the model does not use: {', '.join(stubbed)}")
    return module


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    scale = np.max(np.abs(b)) if b.size else 0.0
    diff = np.max(np.abs(a - b)) if a.size else 0.0
    if scale == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return float(diff / scale)


def run_official(mod, data, dtype, args):
    x = torch.tensor(data["x"], dtype=dtype)
    y = torch.tensor(data["y"].astype(np.int64))
    n, t, d = x.shape
    k = data["nu"].shape[1]
    model = mod.OurAttention(d, k, dtype=dtype)
    w = data["W"].T if args.plant == "untransposed-w" else data["W"]
    state = {
        "W": torch.tensor(w, dtype=dtype),
        "p": torch.tensor(data["p"].reshape(d, 1), dtype=dtype),
        "nu": torch.tensor(data["nu"], dtype=dtype),
    }
    model.load_state_dict(state)
    opt = mod.SGD(
        model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay
    )
    rec = {"loss": [], "outputs": [], "attention": []}
    for step in range(args.steps + 1):
        opt.zero_grad()
        out, att = model.forward_with_scores(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        rec["loss"].append(loss.item())
        rec["outputs"].append(out.detach().double().numpy())
        rec["attention"].append(att.detach().double().numpy())
        if step == 0:
            for name, prm in model.named_parameters():
                rec[f"grad_{name}"] = prm.grad.detach().double().numpy().reshape(data[name].shape)
        if step == args.steps:
            break
        opt.step()
    for name, prm in model.named_parameters():
        rec[f"{name}_final"] = prm.detach().double().numpy().reshape(data[name].shape)
    return rec


def compare(rec, ours, names):
    rows = []
    for q in ["outputs", "attention", "loss"]:
        rows.append((f"{q} (step 0)", rel(rec[q][0], ours[q][0])))
    for name in names:
        rows.append((f"grad {name} (step 0)", rel(rec[f"grad_{name}"], ours[f"grad_{name}"])))
    for q in ["loss", "outputs", "attention"]:
        rows.append((f"{q} (every step)", rel(np.array(rec[q]), ours[q])))
    for name in names:
        rows.append((f"{name} after the steps", rel(rec[f"{name}_final"], ours[f"{name}_final"])))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=Path, help="the Rust example's output directory")
    ap.add_argument("--official", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--plant", choices=["untransposed-w"], default=None)
    args = ap.parse_args()
    mod = import_official(args.official)
    names = ["W", "p", "nu"]
    data = {k: np.load(args.dir / f"{k}.npy") for k in ["x", "y"] + names}
    if (args.dir / "nu_bias.npy").exists():
        sys.exit("the official model has no bias: run the example with bias=false")

    def ours(sub):
        o = {q: np.load(args.dir / sub / f"{q}.npy") for q in ["loss", "outputs", "attention"]}
        for name in names:
            o[f"grad_{name}"] = np.load(args.dir / sub / f"grad_{name}.npy")
            o[f"{name}_final"] = np.load(args.dir / sub / f"{name}_final.npy")
        if len(o["loss"]) != args.steps + 1:
            sys.exit(f"{args.dir / sub} holds {len(o['loss']) - 1} steps, not {args.steps}")
        return o

    ok = True
    runs = [
        ("float64", torch.float64, "f64", 1e-10),
        ("float32", torch.float32, "f32", 1e-3),
        ("float32 vs tokensel f64", torch.float32, "f64", None),
    ]
    for label, dtype, sub, tol in runs:
        rec = run_official(mod, data, dtype, args)
        rows = compare(rec, ours(sub), names)
        worst = max(r for _, r in rows)
        verdict = "" if tol is None else ("PASS" if worst <= tol else "FAIL")
        print(f"\n{label}: largest relative difference {worst:.3e} {verdict}")
        for what, r in rows:
            print(f"  {what:28s} {r:.3e}")
        if tol is not None and worst > tol:
            ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

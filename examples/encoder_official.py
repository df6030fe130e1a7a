"""The official one-layer encoder judged against tokensel's (docs/encoder.md): a one-off
check with PyTorch, not run in CI (CI has no torch).

It imports `OneLayerEncoder` from a user's checkout of the official repository
(keitaroskmt/benign-attention, `main_one_layer.py`; not copied here), under another module
name so that its script part does not run, loads the parameters BY NAME from the NPY
files `examples/encoder_pass.rs` wrote (`init/<state_dict key>.npy`), and the data
`x.npy`, `y.npy`, and compares, in float64 and in float32:

- the forward pass: the outputs f, the cls row's attention A[:, 0, :] over the T + 1
  positions (captured from the softmax module), the mean naive loss;
- the backward pass: every parameter's .grad of the mean naive loss
  (`torch.log(1.0 + torch.exp(-y * f)).mean()`, as the official loop writes it);
- K steps of `torch.optim.SGD(lr)` (the official loop: loss, f and attention recorded
  before each step) against tokensel's K steps of theta -= lr * grad, and the final
  parameters' displacements theta_K - theta_0.

Each quantity's difference is max |official - tokensel| / max |tokensel| over its entries;
the check passes when every float64 difference is below 1e-10 and every float32
difference below 1e-3 (float32 rounds each operation to 2^-24 ~ 6e-8 relative; the two
implementations sum in different orders). Exit status 0 on a pass, 1 on a failure.

    cargo run --example encoder_pass -- out=/tmp/enc d=32 m=24 t=8 n=20 steps=5
    python examples/encoder_official.py --official PATH/TO/benign-attention --dir /tmp/enc

`--plant scale` (the scale d^-1/2 omitted) and `--plant residual` (the residual taken from
LN_a(Z) instead of Z) change the OFFICIAL model to show that the comparison fails on a
wrong model.

Packages (the official module imports them at import time): torch, numpy, einops,
hydra-core, omegaconf, pandas, wandb (`pip install torch numpy einops hydra-core pandas
wandb`).
"""

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import torch

TOL = {"float64": 1e-10, "float32": 1e-3}


def import_official(checkout: Path):
    """`main_one_layer.py` of the checkout as the module `benign_official_one_layer`
    (its `if __name__ == "__main__"` part does not run); `main.py` found on sys.path."""
    sys.path.insert(0, str(checkout))
    saved = sys.argv
    sys.argv = [saved[0]]
    try:
        spec = importlib.util.spec_from_file_location(
            "benign_official_one_layer", checkout / "main_one_layer.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.argv = saved
    return module


def plant(model, which: str) -> None:
    """A planted bug in the official model (for showing that the check fails)."""
    if which == "scale":
        model.attn.scale = 1.0
    elif which == "residual":
        from einops import repeat

        def forward_with_scores(x):
            cls = repeat(model.cls_token, "1 1 d -> b 1 d", b=x.size(0))
            x = torch.cat((cls, x), dim=1)
            out, attn = model.attn.forward_with_scores(x)
            x = out + model.attn.norm(x)  # the bug: LN_a(Z) instead of Z
            x = model.ff(x) + x
            x = model.norm(x)
            return model.head(x[:, 0]).squeeze(1), attn[:, 0, 1:]

        model.forward_with_scores = forward_with_scores
    elif which:
        raise SystemExit(f"unknown --plant {which}")


def load(path: Path, dtype) -> torch.Tensor:
    return torch.from_numpy(np.load(path)).to(dtype)


def rel(official, ours) -> float:
    official = np.asarray(official, dtype=np.float64)
    ours = np.asarray(ours, dtype=np.float64)
    assert official.shape == ours.shape, (official.shape, ours.shape)
    top = np.abs(ours).max()
    return float(np.abs(official - ours).max() / (top if top > 0 else 1.0))


def run(module, meta: dict, data: Path, dtype_name: str, planted: str) -> dict:
    """The official forward, backward and K SGD steps in `dtype_name`, compared with
    tokensel's files of the same arithmetic; returns {quantity: difference}."""
    dtype = getattr(torch, dtype_name)
    ours = data / ("f64" if dtype_name == "float64" else "f32")
    model = module.OneLayerEncoder(
        dim=meta["d"], mlp_dim=meta["m"], use_skip_connection=meta["skip"]
    ).to(dtype)
    names = [name for name, _ in model.named_parameters()]
    state = {name: load(data / "init" / f"{name}.npy", dtype) for name in names}
    model.load_state_dict(state, strict=True)
    plant(model, planted)
    x, y = load(data / "x.npy", dtype), load(data / "y.npy", dtype)
    captured = {}
    model.attn.attend.register_forward_hook(
        lambda _m, _i, out: captured.__setitem__("a", out[:, 0, :].detach().clone())
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=meta["lr"])
    losses, fs, atts = [], [], []
    diffs = {}
    for step in range(meta["steps"] + 1):
        optimizer.zero_grad()
        f, _ = model.forward_with_scores(x)
        loss = torch.log(1.0 + torch.exp(-y * f)).mean()
        loss.backward()
        losses.append(loss.item())
        fs.append(f.detach().numpy().astype(np.float64))
        atts.append(captured["a"].numpy().astype(np.float64))
        if step == 0:
            for name, p in model.named_parameters():
                diffs[f"grad {name}"] = rel(
                    p.grad.detach().numpy(), np.load(ours / "grad0" / f"{name}.npy")
                )
        if step < meta["steps"]:
            optimizer.step()
    ref_f, ref_a = np.load(ours / "f.npy"), np.load(ours / "attention.npy")
    diffs["f (step 0)"] = rel(fs[0], ref_f[0])
    diffs["attention (step 0)"] = rel(atts[0], ref_a[0])
    diffs["loss (step 0)"] = rel(losses[0], np.load(ours / "loss.npy")[0])
    diffs["loss (every step)"] = rel(losses, np.load(ours / "loss.npy"))
    diffs["f (every step)"] = rel(np.stack(fs), ref_f)
    diffs["attention (every step)"] = rel(np.stack(atts), ref_a)
    # the displacement theta_K - theta_0 (the final values alone would hide a wrong
    # step under the size of theta_0)
    for name, p in model.named_parameters():
        start = state[name].numpy().astype(np.float64)
        diffs[f"moved {name}"] = rel(
            p.detach().numpy().astype(np.float64) - start,
            np.load(ours / "final" / f"{name}.npy") - start,
        )
    return diffs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--official", type=Path, required=True, help="checkout of benign-attention")
    ap.add_argument("--dir", type=Path, required=True, help="encoder_pass's output directory")
    ap.add_argument("--plant", default="", help="scale | residual: a planted bug")
    args = ap.parse_args()
    meta = json.loads((args.dir / "meta.json").read_text())
    module = import_official(args.official)
    ok = True
    for dtype_name in ("float64", "float32"):
        diffs = run(module, meta, args.dir, dtype_name, args.plant)
        worst = max(diffs, key=diffs.get)
        print(f"{dtype_name}: tolerance {TOL[dtype_name]:.0e}")
        for q, v in diffs.items():
            flag = "" if v <= TOL[dtype_name] else "   FAIL"
            print(f"  {q:32s} {v:.3e}{flag}")
        print(f"  largest: {worst} {diffs[worst]:.3e}")
        ok &= all(v <= TOL[dtype_name] for v in diffs.values())
    print("verdict:", "agree" if ok else "DISAGREE")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

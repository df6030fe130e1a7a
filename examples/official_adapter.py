#!/usr/bin/env python3
"""Run the official PyTorch code of the paper on tokensel's data, for `tokensel judge`.

    python examples/official_adapter.py DATA_DIR --official PATH --out EXT.npz
        [--float64] [--bug {wrong-sign,untransposed-w}] [--steps N] [--every K]
        [--w-every M]

PATH is your checkout of the official repository (keitaroskmt/benign-attention, the
"Final version" with `main.py`). Nothing of it is copied here: its `main.py` is imported
as it is (importlib, under another module name, so its `if __name__ == "__main__"`
script part does not run; `sys.argv` is set aside while it loads), which needs the
packages it imports at the top (torch, numpy, pandas, hydra-core, omegaconf, wandb: the
checkout's `uv sync`, or `pip install torch numpy pandas hydra-core wandb`).

What comes from the official code: the model class `Attention` (its parameters W, p, nu
and its forward pass `forward_with_scores`), the optimiser (`SGD` on [W, p] with the
config's step size as the learning rate: both updated from the same backward pass, i.e.
tokensel's joint mode) and the loss, which main.py writes inline in its training loop
as `torch.log(1.0 + torch.exp(-target * output)).mean()`: that loop lives inside the
hydra/wandb `main()` and cannot be called alone, so the adapter runs the same four lines
(zero_grad, forward, loss, backward, step) on the data of DATA_DIR (`tokensel data
--preset official-final`, joint mode) instead of the official data generator.

Conventions: the code's logits are x @ W @ p, so the code's W is the paper's W^T; the
adapter loads W(0)^T into it and records the paper's W (the code's W transposed back).
float32 as published by default; --float64 converts the model with `.double()` and
loads the data as float64.

Recorded at every K-th step (and the last), after t updates and before update t + 1:
p, q = W^T p (the code never forms q; the adapter computes W_code @ p in the run's dtype),
`scores` z (the code's own attention logits, captured at its softmax call), the
`attention` s and `output` f (what `forward_with_scores` returns), the loss, and
`grad_q` = dL/dq: the code's graph never has q as a node either, so the adapter takes
dL/dz from the code's own backward pass (a tensor hook on the softmax input) and
contracts it as X^T dL/dz in the run's dtype. W (d x d) is recorded every M-th step
(default: K; 0: never); when M differs from K it goes to its own file, EXT with `.W`
before the suffix (the format keeps one list of steps per file), judged separately.

--bug wrong-sign      gradient ascent (SGD with maximize=True): a deliberately wrong model.
--bug untransposed-w  W(0) loaded untransposed (forgetting that the code's W is the
                      paper's W^T): a deliberately wrong initial parameter.
"""

import argparse
import importlib.util
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
import torch

from numpy_reference import write_external  # the one writer of the format, next to this script


def import_official(path: Path):
    """Import the official `main.py` (PATH or PATH/main.py) without running its script
    part; returns the module."""
    main_py = path / "main.py" if path.is_dir() else path
    if not main_py.is_file():
        sys.exit(f"--official {path}: no main.py there (give your checkout of keitaroskmt/benign-attention)")
    spec = importlib.util.spec_from_file_location("benign_attention_main", main_py)
    module = importlib.util.module_from_spec(spec)
    saved_argv = sys.argv
    sys.argv = [str(main_py)]
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as e:
        sys.exit(
            f"importing {main_py} needs `{e.name}`, one of the packages it imports "
            "(run `uv sync` in the checkout, or `pip install torch numpy pandas hydra-core wandb`)"
        )
    finally:
        sys.argv = saved_argv
    for name in ("Attention", "SGD"):
        if not hasattr(module, name):
            sys.exit(f"{main_py} has no `{name}`: not the version this adapter was written for")
    return module


def checkout_commit(main_py_dir: Path) -> str:
    """The checkout's git commit, or '' when it is not a git checkout."""
    try:
        out = subprocess.run(
            ["git", "-C", str(main_py_dir), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


class SoftmaxInput(torch.overrides.TorchFunctionMode):
    """Within `with`, capture the input of the one softmax call of a forward pass (the
    code's attention logits z) and, once backward has run, dL/dz from the code's own
    graph. The call itself is passed through unchanged."""

    SOFTMAX = (torch.softmax, torch.nn.functional.softmax, torch.Tensor.softmax)

    def __init__(self):
        super().__init__()
        self.z = self.dz = None
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.SOFTMAX:
            self.calls += 1
            z = args[0]
            self.z = z.detach().clone()
            if z.requires_grad:
                z.register_hook(self._keep_grad)
        return func(*args, **(kwargs or {}))

    def _keep_grad(self, grad):
        self.dz = grad.detach().clone()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--official", type=Path, required=True, help="your checkout of keitaroskmt/benign-attention")
    ap.add_argument("--out", type=Path, required=True, help="external trajectory, .npz (or .json)")
    ap.add_argument("--float64", action="store_true", help="model.double() and float64 data")
    ap.add_argument("--bug", choices=["wrong-sign", "untransposed-w"])
    ap.add_argument("--steps", type=int, help="number of updates (default: the config's)")
    ap.add_argument("--every", type=int, default=1, help="record every K steps (and the last)")
    ap.add_argument("--w-every", type=int, help="record W every M steps (default: K; 0: never)")
    args = ap.parse_args()

    official = import_official(args.official)
    cfg = tomllib.loads((args.data_dir / "config.toml").read_text())
    if cfg.get("model", {}).get("kind", "token-selection") != "token-selection":
        sys.exit(f"official_adapter.py trains the binary token-selection model; the data's config has [model] kind = {cfg['model']['kind']!r}")
    if cfg.get("optimizer", {}).get("kind", "gd") != "gd":
        sys.exit(f"official_adapter.py takes constant gradient steps; the data's config has [optimizer] kind = {cfg['optimizer']['kind']!r}")
    if cfg.get("mode") != "joint":
        sys.exit(
            f"the official code trains W and p together (mode = 'joint'); the data's config has "
            f"mode = {cfg.get('mode', 'p')!r} (export with `tokensel data --preset official-final`)"
        )
    steps = cfg["steps"] if args.steps is None else args.steps
    if not 0 <= steps <= cfg["steps"] or args.every < 1:
        sys.exit(f"--steps must be in 0..{cfg['steps']} (the data's config) and --every >= 1")
    w_every = args.every if args.w_every is None else args.w_every
    if w_every < 0:
        sys.exit("--w-every must be >= 0")
    arr = lambda name: np.load(args.data_dir / f"{name}.npy")
    x_np, y_np, nu, p0 = arr("X_train"), arr("y_train"), arr("nu"), arr("p0")
    d = x_np.shape[2]
    w0 = arr("W0") if (args.data_dir / "W0.npy").exists() else np.eye(d)  # no W0.npy: W(0) = I
    w_steps = set() if w_every == 0 else {t for t in range(steps + 1) if t % w_every == 0 or t == steps}
    itemsize = 8 if args.float64 else 4
    if len(w_steps) * d * d * itemsize > 2 * 2**30:
        sys.exit(f"recording W ({d} x {d}) at {len(w_steps)} steps needs over 2 GiB: use --w-every M or --w-every 0")

    # The official model, as published (float32) or converted with .double()
    dtype = torch.float64 if args.float64 else torch.float32
    model = official.Attention(embed_dim=d)
    if args.float64:
        model = model.double()
    w_code = w0 if args.bug == "untransposed-w" else w0.T  # the code's W is the paper's W^T
    with torch.no_grad():
        model.W.copy_(torch.from_numpy(np.ascontiguousarray(w_code)))
        model.p.copy_(torch.from_numpy(p0).view(-1, 1))
        model.nu.copy_(torch.from_numpy(nu).view(-1, 1))
    x = torch.from_numpy(x_np).to(dtype)  # (n, T, d), like the official data tensor
    target = torch.from_numpy(y_np).to(dtype)
    optimizer = official.SGD([model.W, model.p], lr=cfg["step_size"], maximize=args.bug == "wrong-sign")

    def numpy(v):
        return v.detach().cpu().numpy().copy()

    names = ("p", "q", "scores", "attention", "output", "loss", "grad_q")
    rec = {k: [] for k in ("steps", *names)}
    w_in_main = w_every == args.every  # else W gets its own file and list of steps
    if w_in_main:
        rec["W"] = []
    rec_w = rec if w_in_main else {"steps": [], "W": []}
    capture = SoftmaxInput()
    t0 = time.perf_counter()
    recording = 0.0
    for t in range(steps + 1):
        # main.py's training step: zero_grad, forward, its loss, backward, step
        optimizer.zero_grad()
        capture.calls = 0
        with capture:
            output, attention_scores = model.forward_with_scores(x)
        loss = torch.log(1.0 + torch.exp(-target * output)).mean()
        loss.backward()
        if capture.calls != 1 or capture.dz is None:
            sys.exit(f"expected one softmax call with a gradient per forward pass, saw {capture.calls}")
        r0 = time.perf_counter()
        if t % args.every == 0 or t == steps:
            with torch.no_grad():
                values = {
                    "p": model.p.view(-1),
                    "q": (model.W @ model.p).view(-1),  # the paper's W^T p
                    "scores": capture.z,
                    "attention": attention_scores,
                    "output": output,
                    "grad_q": torch.einsum("nt,ntd->d", capture.dz, x),  # X^T dL/dz
                }
            rec["steps"].append(t)
            rec["loss"].append(loss.item())
            for k, v in values.items():
                rec[k].append(numpy(v))
        if t in w_steps:
            if not w_in_main:
                rec_w["steps"].append(t)
            rec_w["W"].append(numpy(model.W.T))  # the paper's W
        recording += time.perf_counter() - r0
        capture.dz = None
        if t < steps:
            optimizer.step()
    wall = time.perf_counter() - t0
    print(
        f"{steps} steps of the official model ({'float64' if args.float64 else 'float32'}, "
        f"{torch.get_num_threads()} threads) in {wall:.2f} s, of which recording {recording:.2f} s"
    )

    commit = checkout_commit(args.official if args.official.is_dir() else args.official.parent)
    name = (
        "keitaroskmt/benign-attention main.py"
        + (f" @{commit}" if commit else "")
        + f" (official_adapter.py{' --float64' if args.float64 else ''}"
        + (f" --bug {args.bug}" if args.bug else "")
        + ")"
    )
    dtype_name = "float64" if args.float64 else "float32"
    write_external(args.out, rec, dtype_name, name, cfg)
    if not w_in_main and rec_w["steps"]:
        w_out = args.out.with_name(f"{args.out.stem}.W{args.out.suffix}")
        write_external(w_out, rec_w, dtype_name, name, cfg)


if __name__ == "__main__":
    main()

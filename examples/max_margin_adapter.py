#!/usr/bin/env python3
"""Run the max-margin repository's own model on tokensel's data, for `tokensel judge`.

    python examples/max_margin_adapter.py DATA_DIR --mma PATH --out EXT.npz
        [--steps N] [--every K] [--float64] [--notebook-w]
    python examples/max_margin_adapter.py DATA_DIR --notebook {single,multi}
        [--steps N]     (writes DATA_DIR: a notebook's setting as supplied data)

PATH is your checkout of ucr-optml/max_margin_attention (Tarzanagh et al., "Max-margin
token selection in attention mechanism", NeurIPS 2023). Nothing of it is copied here:
its `MaxMarginTokenSelection/base.py` is imported as it is (importlib), which needs the
packages it imports at the top (torch, numpy, cvxopt, scikit-learn).

What comes from the repository: the model `PromptAttn` (a trainable prompt p, a head w,
query and key `nn.Identity` with `identity_W=True`, its default: the logits X p, the
output w^T X^T softmax(X p)), the optimiser and the step rule of its notebooks
(`single_input_converge.ipynb`, `multi_input_converge.ipynb`): `torch.optim.SGD` on
[model.prompt] only, and, for normalised GD, the notebooks' line
`model.prompt.grad /= (model.prompt.grad.norm() + eps)` before `optimizer.step()`, i.e.
p <- p - alpha g / (||g|| + eps), tokensel's `[optimizer] kind = "normalized-gd"` with
the same eps; with `kind = "gd"` (the notebooks' second, constant-step run) the line is
left out. The loss is the notebooks' `torch.log(1+torch.exp(-Y*model(X))).mean()`,
tokensel's logistic loss with labels +-1, written inline in their training loops (which
are notebook cells and cannot be called), so the adapter runs the same lines.

tokensel trains p with a fixed head nu (p-mode): the adapter loads p(0) into
`model.prompt` and nu into `model.w` and freezes w (`requires_grad_(False)`). The
notebooks freeze nothing but pass only [model.prompt] to SGD, so their w never moves
either: the trajectory is the same, the adapter only skips w's unused gradient.

The notebooks themselves build the model with `identity_W=False` and key = query =
diag(1, 1, 0), i.e. W = diag(1, 1, 0), and start from six given prompts. tokensel's
p-mode has W(0) = I (or Kaiming-uniform) and p(0) = 0 (or Gaussian), with no way to
supply another W(0) or p(0), so the notebook settings (--notebook) are judged with the
repository's default `identity_W=True` and p(0) = 0 (the third of the notebooks' six
prompts in both notebooks). `--notebook-w` runs the notebooks' diag(1, 1, 0) key and
query instead, to show what the judge says of it against tokensel's W = I.

--notebook single|multi writes DATA_DIR as a tokensel supplied data directory (needs
tokensel's Python bindings, docs/python.md; and torch, whose seeded generator the
multi-input notebook draws its tokens from): the notebook's tokens X, labels Y = +1 and
head v = e_3, built as the notebook's `data_generator` builds them (float32 tensors;
stored as float64, exactly), with the training set repeated as the required test set,
token 0 (the optimal one, gamma = 1) in group R and the others in I, and the config:
d = 3, T = 3 (single) or 7 (multi), p-mode, step size 0.1, normalised GD with the
notebook's eps (1e-9 single, 1e-12 multi), 1,000 steps (ITN) unless --steps. The single
notebook's `g_converge = True` (global convergence) setting is the one written.

Recorded at every K-th step (and the last), after t updates and before update t + 1:
p, q (= p with W = I; with --notebook-w, q = W^T p for W = diag(1, 1, 0)), `scores` z
(the code's own logits, captured at its softmax call), `attention` (the model's
`self.attention`), `output` (its forward pass), the loss, and `grad_q` = dL/dq, the
prompt's gradient from the code's own backward pass before the normalisation (W = I
only: with --notebook-w, q is not a node of the code's graph and grad_q is not recorded).
float32 as published by default; --float64 converts the model with `.double()` and
loads the data as float64.
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
from official_adapter import SoftmaxInput  # captures the code's logits at its softmax call

NOTEBOOK_W = np.diag([1.0, 1.0, 0.0])  # the notebooks' key = query weight: W = diag(1, 1, 0)


def import_base(path: Path):
    """Import the repository's MaxMarginTokenSelection/base.py (PATH a checkout, its
    MaxMarginTokenSelection directory, or base.py itself); returns the module."""
    for base in (path / "MaxMarginTokenSelection" / "base.py", path / "base.py", path):
        if base.is_file():
            break
    else:
        sys.exit(f"--mma {path}: no MaxMarginTokenSelection/base.py there (give your checkout of ucr-optml/max_margin_attention)")
    spec = importlib.util.spec_from_file_location("max_margin_base", base)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as e:
        sys.exit(f"importing {base} needs `{e.name}`, one of the packages it imports (pip install torch numpy cvxopt scikit-learn)")
    for name in ("PromptAttn", "p_svm_solver"):
        if not hasattr(module, name):
            sys.exit(f"{base} has no `{name}`: not the version this adapter was written for")
    return module, base


def checkout_commit(directory: Path) -> str:
    """The checkout's git commit, or '' when it is not a git checkout."""
    try:
        out = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def notebook_setting(which: str):
    """The tokens X (n, T, d), labels Y and head v of a notebook's `data_generator`, as
    its float32 tensors (a description of the setting, not the repository's code)."""
    if which == "single":
        # single_input_converge.ipynb, g_converge = True
        x = torch.tensor([[[-0.1, 1, 1], [1, 0, 0.9], [0, 0, 0.9]]])
        y = torch.tensor([1.0])
        v = torch.tensor([0.0, 0.0, 1.0])
        return x, y, v, 1e-9
    # multi_input_converge.ipynb: n = 3, T = 7, d = 3, seed 0, scores 1 and 0.5
    n, t, d = 3, 7, 3
    generator = torch.Generator()
    generator.manual_seed(0)
    shift = torch.tensor([[1, 0, 0], [-1, 1, 0], [-0.5, -0.5, 0]])
    x = torch.randn((n, t, d), generator=generator) * 0.2
    x[:, 0] += shift[0]
    x[:, 1:(t + 1) // 2] += shift[1]
    x[:, -(t - 1) // 2:] += shift[2]
    x[:, 0, -1] = 1.0
    x[:, 1:, -1] = 0.5
    return x, torch.ones(n), torch.tensor([0.0, 0.0, 1.0]), 1e-12


def write_notebook_data(out: Path, which: str, steps: int):
    """Write a notebook's setting as a tokensel supplied data directory."""
    try:
        import tokensel
    except ModuleNotFoundError:
        sys.exit("--notebook needs tokensel's Python bindings (README \"From Python\")")
    x, y, v, eps = notebook_setting(which)
    assert x.dtype == torch.float32  # the notebook's tensors; float64 holds them exactly
    x64 = x.numpy().astype(np.float64)
    n, t, d = x64.shape
    labels = y.numpy().astype(np.int8)
    cfg = tokensel.Config(
        d=d, n_train=n, n_test=n, eta=0.0, seed=0,
        layout={"tokens": t, "relevant": 1, "weak_same": 0, "weak_opposite": 0, "irrelevant": t - 1},
        mode="p", step_size=0.1, steps=steps,
        optimizer={"kind": "normalized-gd", "eps": eps},
        init={"p": "zero", "w": "identity"},
    )
    data = {
        "X_train": x64, "y_train": labels, "y_true_train": labels,
        "X_test": x64.copy(), "y_test": labels.copy(),
        "nu": v.numpy().astype(np.float64),
        "groups": np.array([0] + [3] * (t - 1), np.int8),
    }
    tokensel.write_data(out, cfg, data=data)
    print(f"wrote the {which}-input notebook setting (n = {n}, T = {t}, d = {d}, eps = {eps:g}, {steps} steps) to {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--mma", type=Path, help="your checkout of ucr-optml/max_margin_attention")
    ap.add_argument("--out", type=Path, help="external trajectory, .npz (or .json)")
    ap.add_argument("--float64", action="store_true", help="model.double() and float64 data")
    ap.add_argument("--steps", type=int, help="number of updates (default: the config's)")
    ap.add_argument("--every", type=int, default=1, help="record every K steps (and the last)")
    ap.add_argument("--notebook-w", action="store_true", help="the notebooks' key = query = diag(1, 1, 0) (identity_W=False)")
    ap.add_argument("--notebook", choices=["single", "multi"], help="write DATA_DIR: the notebook's setting as supplied data")
    args = ap.parse_args()

    if args.notebook:
        write_notebook_data(args.data_dir, args.notebook, 1000 if args.steps is None else args.steps)
        return
    if args.mma is None or args.out is None:
        sys.exit("--mma PATH and --out EXT are required (or --notebook to write data)")
    base, base_py = import_base(args.mma)
    cfg = tomllib.loads((args.data_dir / "config.toml").read_text())
    if cfg.get("model", {}).get("kind", "token-selection") != "token-selection":
        sys.exit(f"max_margin_adapter.py trains the binary token-selection model; the data's config has [model] kind = {cfg['model']['kind']!r}")
    if cfg.get("mode", "p") != "p":
        sys.exit(f"PromptAttn trains its prompt p with a fixed W (mode = 'p'); the data's config has mode = {cfg['mode']!r}")
    if (args.data_dir / "W0.npy").exists():
        sys.exit("the data has a dense W(0); PromptAttn's identity_W=True is W = I")
    opt = cfg.get("optimizer", {})
    kind, eps = opt.get("kind", "gd"), opt.get("eps", 0.0)
    if kind not in ("gd", "normalized-gd"):
        sys.exit(f"the notebooks take plain or normalised SGD steps; the data's config has [optimizer] kind = {kind!r}")
    steps = cfg["steps"] if args.steps is None else args.steps
    if not 0 <= steps <= cfg["steps"] or args.every < 1:
        sys.exit(f"--steps must be in 0..{cfg['steps']} (the data's config) and --every >= 1")
    arr = lambda name: np.load(args.data_dir / f"{name}.npy")
    x_np, y_np, nu, p0 = arr("X_train"), arr("y_train"), arr("nu"), arr("p0")
    d = x_np.shape[2]

    # The repository's model, as published (float32) or converted with .double()
    dtype = torch.float64 if args.float64 else torch.float32
    model = base.PromptAttn(d, identity_W=not args.notebook_w)
    if args.notebook_w:
        if d != 3:
            sys.exit("--notebook-w is the notebooks' 3 x 3 key and query")
        model.key.weight.data = torch.from_numpy(NOTEBOOK_W).float()
        model.query.weight.data = torch.from_numpy(NOTEBOOK_W).float()
    if args.float64:
        model = model.double()
    model.prompt.data = torch.from_numpy(p0).to(dtype)
    model.w.data = torch.from_numpy(nu).to(dtype)
    model.w.requires_grad_(False)  # tokensel's fixed head (the notebooks pass only the prompt to SGD)
    if args.notebook_w:
        for layer in (model.key, model.query):
            layer.weight.requires_grad_(False)
    x = torch.from_numpy(x_np).to(dtype)
    y = torch.from_numpy(y_np).to(dtype)
    optimizer = torch.optim.SGD([model.prompt], lr=cfg["step_size"])

    def numpy(v):
        return v.detach().cpu().numpy().copy()

    names = ("p", "q", "scores", "attention", "output", "loss") + (() if args.notebook_w else ("grad_q",))
    rec = {k: [] for k in ("steps", *names)}
    capture = SoftmaxInput()
    t0 = time.perf_counter()
    for t in range(steps + 1):
        # the notebooks' training step: zero_grad, loss, backward, (normalise), step
        optimizer.zero_grad()
        capture.calls = 0
        with capture:
            output = model(x)
        loss = torch.log(1 + torch.exp(-y * output))
        loss = loss.mean()
        loss.backward()
        if capture.calls != 1:
            sys.exit(f"expected one softmax call per forward pass, saw {capture.calls}")
        if t % args.every == 0 or t == steps:
            with torch.no_grad():
                if args.notebook_w:  # the paper's W = Wq^T Wk, q = W^T p
                    q = model.key.weight.T @ (model.query.weight @ model.prompt)
                else:
                    q = model.prompt
                values = {
                    "p": model.prompt,
                    "q": q,
                    "scores": capture.z.reshape(x.shape[0], x.shape[1]),
                    "attention": model.attention,
                    "output": output,
                }
                if not args.notebook_w:
                    values["grad_q"] = model.prompt.grad  # before the normalisation
            rec["steps"].append(t)
            rec["loss"].append(loss.item())
            for k, v in values.items():
                rec[k].append(numpy(v))
        if t < steps:
            if kind == "normalized-gd":
                model.prompt.grad /= (model.prompt.grad.norm() + eps)  # the notebooks' line
            optimizer.step()
    wall = time.perf_counter() - t0
    print(
        f"{steps} {kind} steps of PromptAttn ({'float64' if args.float64 else 'float32'}, "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}) in {wall:.2f} s"
    )

    commit = checkout_commit(base_py.parent)
    name = (
        "ucr-optml/max_margin_attention MaxMarginTokenSelection/base.py PromptAttn"
        + (f" @{commit}" if commit else "")
        + f" (max_margin_adapter.py{' --float64' if args.float64 else ''}{' --notebook-w' if args.notebook_w else ''})"
    )
    extra = {"optimizer": {"kind": kind, "eps": eps}} if kind != "gd" else {}
    write_external(args.out, rec, "float64" if args.float64 else "float32", name, cfg, extra)


if __name__ == "__main__":
    main()

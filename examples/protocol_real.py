#!/usr/bin/env python3
"""The fine-tuning protocol of the paper's Section I (SPEC section 16) on the bundled K = 10
data: scikit-learn's digits and MNIST-1D, tokens from a fixed backbone (the seeded
projection of examples/multiclass_real.py: a patch/segment of values next to a one-hot
position code, projected to d = 256, centred, scaled to an rms norm of 20, plus fixed N(0, I)
noise). Nothing is downloaded.

    python examples/protocol_real.py [--datasets digits,mnist1d] [--ns 20,200,1000]
        [--etas 0,0.2] [--sweep-etas 0.1,0.4,0.6] [--sweep-n 200] [--epochs 2000]
        [--seeds 42,314,2718] [--mode w] [--out protocol_real.png] [--json FILE]

Per data set the samples are split once (seed 0) into a test set (digits: 297 images;
MNIST-1D: its own 1,000 test sequences) and a pool (digits: the other 1,500; MNIST-1D: its
4,000 training sequences). `tokensel.protocol` then runs, per seed, the official protocol
with the official settings where they apply: a clean block of n_clean (digits 480, MNIST-1D
1,000; the official 10,000/3,000/200 do not fit these pools) on which the head is fitted for
300 epochs (AdamW lr 5e-5, batch 16, clip 1, linear decay), then the attention reset and
trained on a noisy block of n with the head fixed for `--epochs` epochs (official: 2,000) by
AdamW (lr 5e-5, batch 16, clip 1, linear decay). The attention trained is `--mode`: `w` (the
prompt p fixed, Gaussian, W from PyTorch's default Linear initialisation: the official code's
reset query/key, as one W = W_Q^T W_K), `joint` (the same start, both trained) or `p` (W = I,
p from 0: uniform attention at the start, so phase 1 fits the head on the mean token). Label noise: a coin per sample
(Bernoulli eta), each flipped label to a uniformly random other class (the official kernel).

It prints one row per (data, n, eta, seed) and the means over seeds, writes the reports as
JSON (`--json`) and draws the figure: test accuracy against eta at n = `--sweep-n`, and the
mean largest attention of the prompt's row against epochs.

What this is not: the paper's data and backbone (a pretrained ViT/BERT on eight data sets:
examples/features.py makes tokens from one where the hub is reachable), nor its attention
layer (no value projection, residual, MLP or LayerNorm, no head bias; the query is the
prompt p, not the first token's hidden state).
"""

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import tokensel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from multiclass_real import K, digits_tokens, embed, mnist1d_tokens  # noqa: E402

N_CLEAN = {"digits": 480, "mnist1d": 1000}
DIGITS_TEST = 297


def pool(name):
    """The pool (X, true y) and the test set of data set `name`, split once (seed 0)."""
    raw, y, n_train = digits_tokens() if name == "digits" else mnist1d_tokens()
    x = embed(raw, 1.0)
    if n_train is None:
        perm = np.random.default_rng(0).permutation(len(y))
        te, tr = perm[:DIGITS_TEST], perm[DIGITS_TEST:]
    else:
        tr, te = np.arange(n_train), np.arange(n_train, len(y))
    return {
        "X_train": np.ascontiguousarray(x[tr]), "y_train": y[tr],
        "X_test": np.ascontiguousarray(x[te]), "y_test": y[te],
    }


def config(arrays, name, n, eta, args):
    _, t, d = arrays["X_train"].shape
    steps = args.epochs * math.ceil(n / 16)
    return tokensel.Config.from_toml(f"""
d = {d}
n_train = {n}
n_test = {arrays["X_test"].shape[0]}
eta = {eta}
flips = "bernoulli"
mode = "{ {"w": "W", "p": "p", "joint": "joint"}[args.mode] }"
steps = {steps}
step_size = 5e-5
[layout]
tokens = {t}
relevant = 1
weak_same = 0
weak_opposite = 0
irrelevant = {t - 1}
[init]
p = "{ "zero" if args.mode == "p" else "gaussian" }"
w = "{ "identity" if args.mode == "p" else "kaiming_uniform" }"
[model]
kind = "multiclass"
classes = {K}
[optimizer]
kind = "adamw"
eps = 1e-8
schedule = "linear"
clip_norm = 1.0
batch = 16
[protocol]
n_clean = {N_CLEAN[name]}
seeds = [{", ".join(str(s) for s in args.seeds)}]
""")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default="digits,mnist1d")
    ap.add_argument("--ns", default="20,200,1000")
    ap.add_argument("--etas", default="0,0.2")
    ap.add_argument("--sweep-etas", default="0.1,0.4,0.6")
    ap.add_argument("--sweep-n", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=2000)
    ap.add_argument("--seeds", default="42,314,2718")
    ap.add_argument("--mode", choices=["w", "p", "joint"], default="w")
    ap.add_argument("--out", type=Path, default=Path("protocol_real.png"))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    args.seeds = [int(s) for s in args.seeds.split(",")]
    names = args.datasets.split(",")
    for n in names:
        if n not in N_CLEAN:
            ap.error(f"unknown data set {n!r} (digits, mnist1d)")
    ns = [int(v) for v in args.ns.split(",")]
    etas = [float(v) for v in args.etas.split(",")]
    sweep = [float(v) for v in args.sweep_etas.split(",")] if args.sweep_etas else []
    warnings.filterwarnings("ignore", category=tokensel.LabelFlipWarning)

    reports = []
    start = time.time()
    print(f"{'data':>8} {'n':>5} {'eta':>4} {'seed':>5} {'noisy':>6} {'head acc':>8} {'base test':>9} "
          f"{'train loss':>10} {'train acc':>9} {'noisy fit':>9} {'test acc':>8} {'max att':>7}")
    for name in names:
        arrays = pool(name)
        runs = [(n, eta) for n in ns for eta in etas]
        runs += [(args.sweep_n, eta) for eta in sweep if (args.sweep_n, eta) not in runs]
        for n, eta in runs:
            rep = tokensel.protocol(config(arrays, name, n, eta, args), data=arrays)
            reports.append({"data": name, "n": n, "eta": eta, "report": rep})
            for r in rep["rows"]:
                nf = r["noisy_fitted"]
                print(f"{name:>8} {n:>5} {eta:>4} {r['seed']:>5} {r['noisy']:>6} {r['head']['accuracy']:>8.3f} "
                      f"{r['baseline_test_accuracy']:>9.3f} {r['train_loss']:>10.3e} {r['train_accuracy']:>9.3f} "
                      f"{'-' if nf is None else f'{nf:.3f}':>9} {r['test_accuracy']:>8.3f} "
                      f"{r['attention'][-1]['mean_max_attention']:>7.3f}", flush=True)
    print(f"wall time {time.time() - start:.0f} s")
    print("\nmeans over seeds (+- sample sd); 'fits' = seeds whose training accuracy is 1:")
    for e in reports:
        rows = e["report"]["rows"]
        def ms(key):
            v = np.array([r[key] for r in rows], float)
            return f"{v.mean():.3f} +- {v.std(ddof=1) if len(v) > 1 else 0:.3f}"
        fits = sum(r["fits_noisy_labels"] for r in rows)
        print(f"{e['data']:>8} n {e['n']:>5} eta {e['eta']:<4} base test {ms('baseline_test_accuracy')}  "
              f"train loss {ms('train_loss')}  train acc {ms('train_accuracy')}  test {ms('test_accuracy')}  "
              f"fits {fits}/{len(rows)}")
    if args.json:
        args.json.write_text(json.dumps(reports))
    figure(reports, names, ns, args)


def figure(reports, names, ns, args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(names), figsize=(5.5 * len(names), 8), squeeze=False)
    for col, name in enumerate(names):
        ax = axes[0][col]
        sw = sorted((e for e in reports if e["data"] == name and e["n"] == args.sweep_n), key=lambda e: e["eta"])
        if sw:
            x = [e["eta"] for e in sw]
            for key, label in [("test_accuracy", "test (true labels)"), ("train_accuracy", "train (observed labels)"),
                               ("baseline_test_accuracy", "test after phase 1")]:
                v = np.array([[r[key] for r in e["report"]["rows"]] for e in sw])
                ax.errorbar(x, v.mean(axis=1), yerr=v.std(axis=1), marker="o", capsize=3, label=label)
            ax.set_xlabel("label noise eta")
            ax.set_ylabel("accuracy (mean +- sd over seeds)")
            ax.set_title(f"{name}: n = {args.sweep_n}")
            ax.legend(fontsize=8)
        ax = axes[1][col]
        for e in reports:
            if e["data"] != name or e["eta"] not in (0.0, 0.2):
                continue
            pts = e["report"]["rows"][0]["attention"]
            ax.plot([max(p["epoch"], 1e-2) for p in pts], [p["mean_max_attention"] for p in pts],
                    label=f"n = {e['n']}, eta = {e['eta']} (seed {e['report']['rows'][0]['seed']})")
        ax.set_xscale("log")
        ax.set_xlabel("epoch of phase 2")
        ax.set_ylabel("mean largest attention of the prompt's row")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"figure: {args.out}")


if __name__ == "__main__":
    main()

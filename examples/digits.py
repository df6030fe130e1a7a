#!/usr/bin/env python3
"""Real data through tokensel's trainer: scikit-learn's handwritten digits (1,797 8x8
images shipped inside the package; nothing is downloaded), two classes, label noise
injected by tokensel at rates eta over several seeds.

    python examples/digits.py [--out FIG.png] [--seeds 5] [--steps 3000] [--token-noise 1]

Tokens: each image is cut into 16 patches of 2x2 pixels; a token is the patch's 4 pixel
values (scaled to [0, 1]) next to a one-hot code of its position (16), mapped to d = 128
by a fixed Gaussian projection (seed 0). The head nu is the difference of the two
classes' mean tokens over the training set, scaled so that the head values <nu, x_t> of
the training tokens have standard deviation 1. The "relevant" position (group R) is the
patch whose class-mean head values differ most; every other position is irrelevant (I).
That grouping is this script's rule, not known truth: the selection metrics measure it.

For every eta and seed, tokensel draws a training set of n = 40 images and flips labels
by the config's flip rule (`exact`: ceil(eta n) labels), trains p by gradient descent
(W = I) and reports: training accuracy on the observed labels (did it fit the noise?),
the share of noisy samples fitted, and test accuracy on the held-out images of the two
classes (true labels). It prints a table and draws the figure.
"""

import argparse
import math
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

import tokensel

CLASSES = (3, 8)          # a pair that is not linearly trivial at 8x8
N_TRAIN, D, PATCH = 40, 256, 2
SIGNAL = 20.0            # rms token signal norm (the paper's ||mu||); noise N(0, I_D)


def tokens(images):
    """(m, 8, 8) images -> (m, T, 4 + T) raw tokens: patch pixels and position code."""
    m = images.shape[0]
    k = 8 // PATCH
    patches = images.reshape(m, k, PATCH, k, PATCH).transpose(0, 1, 3, 2, 4).reshape(m, k * k, PATCH * PATCH)
    pos = np.broadcast_to(np.eye(k * k), (m, k * k, k * k))
    return np.concatenate([patches / 16.0, pos], axis=2)


def data_set(seed, token_noise=1.0):
    """Train/test split of the two classes (train: N_TRAIN images drawn by `seed`), the
    projected tokens plus `token_noise` times fixed N(0, I) noise, labels (+1 for
    CLASSES[0]), nu and the groups."""
    digits = load_digits()
    keep = np.isin(digits.target, CLASSES)
    images, target = digits.images[keep], digits.target[keep]
    y = np.where(target == CLASSES[0], 1, -1).astype(np.int8)
    raw = tokens(images)
    proj = np.random.default_rng(0).standard_normal((raw.shape[2], D)) / math.sqrt(raw.shape[2])
    signal = raw @ proj
    signal -= signal.mean(axis=(0, 1))                    # centred: no common offset
    signal *= SIGNAL / np.sqrt((signal ** 2).sum(axis=2).mean())
    noise = np.random.default_rng(1).standard_normal(signal.shape)
    x = signal + token_noise * noise                      # (m, T, D), float64
    order = np.random.default_rng(1000 + seed).permutation(len(y))
    tr, te = order[:N_TRAIN], order[N_TRAIN:]
    mean_tok = x[tr].mean(axis=1)                         # (n, D)
    diff = mean_tok[y[tr] > 0].mean(axis=0) - mean_tok[y[tr] < 0].mean(axis=0)
    g = x[tr] @ diff
    nu = diff / g.std()
    g = x[tr] @ nu                                        # (n, T)
    sep = np.abs(g[y[tr] > 0].mean(axis=0) - g[y[tr] < 0].mean(axis=0))
    groups = ["I"] * x.shape[1]
    groups[int(np.argmax(sep))] = "R"
    arrays = {
        "X_train": np.ascontiguousarray(x[tr]), "y_train": y[tr],
        "X_test": np.ascontiguousarray(x[te]), "y_test": y[te],
        "nu": nu, "groups": groups,
    }
    return arrays


def config(arrays, eta, seed, steps, step_size):
    n, t, d = arrays["X_train"].shape
    return tokensel.Config(
        seed=seed, d=d, n_train=n, n_test=arrays["X_test"].shape[0], eta=eta, steps=steps,
        step_size=step_size, layout={"tokens": t, "relevant": 1, "weak_same": 0, "weak_opposite": 0, "irrelevant": t - 1},
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("digits.png"))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--step-size", type=float, default=1.0)
    ap.add_argument("--etas", type=str, default="0,0.1,0.2,0.3,0.4")
    ap.add_argument("--token-noise", type=float, default=1.0,
                    help="scale of the fixed N(0, I) noise added to every token (0: none)")
    args = ap.parse_args()
    if not (math.isfinite(args.token_noise) and args.token_noise >= 0):
        ap.error(f"--token-noise must be a finite number >= 0, not {args.token_noise}")
    etas = [float(e) for e in args.etas.split(",")]
    # tokensel flipping the supplied labels at rate eta is this example's design
    warnings.filterwarnings("ignore", category=tokensel.LabelFlipWarning)

    rows = []
    print(f"{'eta':>5} {'seed':>4} {'noisy':>5} {'train acc':>9} {'noisy fit':>9} {'test acc':>8} {'R clean':>7} {'R noisy':>7}")
    for eta in etas:
        for seed in range(args.seeds):
            arrays = data_set(seed, args.token_noise)
            r = tokensel.run(config(arrays, eta, seed, args.steps, args.step_size), data=arrays)
            s, cp, lab = r.summary, r.checkpoints, r.labels
            noisy = lab["y_train"] != lab["y_true_train"]
            fit = np.sign(cp["output"][-1]) == lab["y_train"]  # sign(f) = observed label
            sel = s["selection"]
            row = dict(
                eta=eta, seed=seed, n_noisy=int(noisy.sum()), train=s["train_accuracy"],
                noisy_fit=fit[noisy].mean() if noisy.any() else float("nan"),
                test=s["test_accuracy"],
                r_clean=sel["clean"]["R"] if sel["clean"] else float("nan"),
                r_noisy=sel["noisy"]["R"] if sel["noisy"] else float("nan"),
            )
            rows.append(row)
            print(f"{eta:>5} {seed:>4} {row['n_noisy']:>5} {row['train']:>9.3f} {row['noisy_fit']:>9.3f} "
                  f"{row['test']:>8.3f} {row['r_clean']:>7.3f} {row['r_noisy']:>7.3f}", flush=True)
    figure(rows, etas, args)


def figure(rows, etas, args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    for key, label, colour in (("train", "train accuracy (observed labels)", "C0"),
                               ("noisy_fit", "noisy samples fitted", "C3"),
                               ("test", "test accuracy (true labels)", "C2")):
        vals = [[r[key] for r in rows if r["eta"] == e] for e in etas]
        ax[0].plot(etas, [np.nanmedian(v) if not np.all(np.isnan(v)) else np.nan for v in vals], "o-", color=colour, label=label)
        for e, v in zip(etas, vals):
            ax[0].scatter([e] * len(v), v, s=8, color=colour, alpha=0.4)
    ax[0].set_xlabel("label-noise rate eta (injected by tokensel)")
    ax[0].set_ylabel("fraction")
    ax[0].set_ylim(-0.02, 1.02)
    ax[0].legend(fontsize=8, loc="lower left")
    ax[0].set_title(f"digits {CLASSES[0]} vs {CLASSES[1]}: n = {N_TRAIN}, d = {D}, {args.steps} steps", fontsize=9)
    for key, label, colour in (("r_clean", "clean samples", "C0"), ("r_noisy", "noisy samples", "C3")):
        vals = [[r[key] for r in rows if r["eta"] == e] for e in etas]
        ax[1].plot(etas, [np.nanmedian(v) if not np.all(np.isnan(v)) else np.nan for v in vals], "o-", color=colour, label=label)
    ax[1].set_xlabel("label-noise rate eta")
    ax[1].set_ylabel("share whose top token is the R patch")
    ax[1].set_ylim(-0.02, 1.02)
    ax[1].legend(fontsize=8)
    ax[1].set_title("token selection (R = the most class-separating patch)", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"figure written to {args.out} (medians over {args.seeds} seeds, dots: each seed)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Real data with K = 10 classes through tokensel's K-class model (SPEC section 14): scikit-
learn's handwritten digits (1,797 8x8 images) and MNIST-1D (the `mnist1d` package's 5,000
sequences of length 40, generated locally by `make_dataset(get_dataset_args())`; its
download path is never called). Both ship inside their packages: nothing is downloaded.

    python examples/multiclass_real.py [--datasets digits,mnist1d] [--seeds 5]
        [--etas 0,0.1,0.2,0.4] [--steps 4000] [--step-size 0.02] [--out multiclass.png]

Tokens: digits, each image cut into 16 patches of 2x2 pixels, a token the patch's 4 pixel
values (scaled to [0, 1]) next to a one-hot code of its position (16); MNIST-1D, each
sequence cut into 10 segments of 4 consecutive values, a token the segment's values next
to a one-hot code of its position (10). Raw tokens are mapped to d = 256 by a fixed
Gaussian projection (seed 0), centred and scaled to an rms norm of 20 (the paper's
||mu||), plus fixed N(0, I) noise per token (seed 1; `--token-noise` scales it).

Per seed, a class-balanced training set of n = 100 (10 per class) is drawn from the
training pool; the test set is every other image (digits: 1,697) or MNIST-1D's own 1,000
test sequences. The head nu (10, d): row c the mean token of the training samples of
true class c minus the mean over classes, scaled so that the head values <nu_c, x_t> of
the training tokens have standard deviation 1 (the paper's head is fixed from the true
class signals; this one from the true labels, before any noise). The "relevant" position
(group R) is the one whose head value favours the sample's own class most on average over
the training set; every other position is I (the script's rule, not known truth).

tokensel injects label noise at rate eta into the supplied (true) labels by the config's
flip rule (`exact`: ceil(eta n) labels, each to a uniformly random other class), trains p
(W = I) and the script reports per run: training accuracy on the observed labels, the
share of noisy samples fitted (their largest output is the observed, wrong, class), test
accuracy against the true labels (also at step 0, where p = 0 attends uniformly: the
head on the mean token), and the share of clean and noisy samples whose top token is the
R position. It prints a table, the medians per eta, and draws the figure.
"""

import argparse
import math
import time
import warnings
from pathlib import Path

import numpy as np

import tokensel

K, D, N_TRAIN = 10, 256, 100
SIGNAL = 20.0  # rms token signal norm (the paper's ||mu||); noise N(0, I_D)


def digits_tokens():
    """(1797, 16, 80) raw tokens and labels: 2x2 patches (4 values in [0, 1]) by position."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images, m = digits.images, digits.images.shape[0]
    patches = images.reshape(m, 4, 2, 4, 2).transpose(0, 1, 3, 2, 4).reshape(m, 16, 4) / 16.0
    return by_position(patches), digits.target.astype(np.int64), None


def by_position(values):
    """(m, T, v) values -> (m, T, T v + T) raw tokens: token t holds its values in the t-th
    block of T v coordinates (zeros elsewhere) next to a one-hot code of t, so that one
    linear head can weigh the values of every position differently."""
    m, t, v = values.shape
    eye = np.eye(t)
    blocks = (eye[None, :, :, None] * values[:, :, None, :]).reshape(m, t, t * v)
    return np.concatenate([blocks, np.broadcast_to(eye, (m, t, t))], axis=2)


def mnist1d_tokens():
    """(5000, 10, 50) raw tokens and labels: 10 segments of 4 values by position; the first
    4,000 are MNIST-1D's training split, the last 1,000 its test split."""
    from mnist1d.data import get_dataset_args, make_dataset

    state = np.random.get_state()  # make_dataset seeds NumPy's global generator
    ds = make_dataset(get_dataset_args())
    np.random.set_state(state)
    x = np.concatenate([ds["x"], ds["x_test"]])
    y = np.concatenate([ds["y"], ds["y_test"]]).astype(np.int64)
    m = x.shape[0]
    return by_position(x.reshape(m, 10, 4)), y, len(ds["y"])


def embed(raw, token_noise):
    """Raw tokens -> (m, T, D) float64: fixed projection, centred, scaled, plus noise."""
    proj = np.random.default_rng(0).standard_normal((raw.shape[2], D)) / math.sqrt(raw.shape[2])
    signal = raw @ proj
    signal -= signal.mean(axis=(0, 1))
    signal *= SIGNAL / np.sqrt((signal ** 2).sum(axis=2).mean())
    noise = np.random.default_rng(1).standard_normal(signal.shape)
    return signal + token_noise * noise


def data_set(x, y, n_pool, seed):
    """Arrays for tokensel: a class-balanced training set drawn by `seed` from the first
    `n_pool` samples (all when None), the test set (the rest, or the samples after the
    pool), the (K, D) head and the groups."""
    rng = np.random.default_rng(1000 + seed)
    pool = np.arange(len(y) if n_pool is None else n_pool)
    tr = np.concatenate([rng.choice(pool[y[pool] == c], N_TRAIN // K, replace=False) for c in range(K)])
    tr = rng.permutation(tr)
    te = np.setdiff1d(np.arange(len(y)), tr) if n_pool is None else np.arange(n_pool, len(y))
    mean_tok = x[tr].mean(axis=1)                                       # (n, D)
    means = np.stack([mean_tok[y[tr] == c].mean(axis=0) for c in range(K)])
    nu = means - means.mean(axis=0)                                     # (K, D)
    g = np.einsum("itd,cd->itc", x[tr], nu)
    nu /= g.std()
    g /= g.std()
    own = g[np.arange(len(tr)), :, y[tr]] - g.mean(axis=2)              # (n, T)
    groups = ["I"] * x.shape[1]
    groups[int(np.argmax(own.mean(axis=0)))] = "R"
    return {
        "X_train": np.ascontiguousarray(x[tr]), "y_train": y[tr],
        "X_test": np.ascontiguousarray(x[te]), "y_test": y[te],
        "nu": nu, "groups": groups,
    }


def config(arrays, eta, seed, steps, step_size):
    n, t, d = arrays["X_train"].shape
    return tokensel.Config(
        model="multiclass", classes=K, seed=seed, d=d, n_train=n, n_test=arrays["X_test"].shape[0],
        eta=eta, steps=steps, step_size=step_size,
        layout={"tokens": t, "relevant": 1, "weak_same": 0, "weak_opposite": 0, "irrelevant": t - 1},
    )


def measure(name, arrays, eta, seed, args):
    r = tokensel.run(config(arrays, eta, seed, args.steps, args.step_size), data=arrays)
    s, cp, lab = r.summary, r.checkpoints, r.labels
    noisy = lab["y_train"] != lab["y_true_train"]
    f = cp["outputs"][-1]                                               # (n, K)
    unique = (f == f.max(axis=1, keepdims=True)).sum(axis=1) == 1
    fit = (f.argmax(axis=1) == lab["y_train"]) & unique                 # observed class predicted
    sel = s["selection"]
    return dict(
        data=name, eta=eta, seed=seed, n_noisy=int(noisy.sum()), train=s["train_accuracy"],
        noisy_fit=fit[noisy].mean() if noisy.any() else float("nan"),
        test=s["test_accuracy"], test0=float(cp["test_accuracy"][0]),
        r_clean=sel["clean"]["R"] if sel["clean"] else float("nan"),
        r_noisy=sel["noisy"]["R"] if sel["noisy"] else float("nan"),
    )


def nanmedian(v):
    v = np.asarray(v, float)
    return float("nan") if np.all(np.isnan(v)) else float(np.nanmedian(v))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default="digits,mnist1d")
    ap.add_argument("--out", type=Path, default=Path("multiclass.png"))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--step-size", type=float, default=0.02)
    ap.add_argument("--etas", default="0,0.1,0.2,0.4")
    ap.add_argument("--token-noise", type=float, default=1.0,
                    help="scale of the fixed N(0, I) noise added to every token (0: none)")
    args = ap.parse_args()
    if not (math.isfinite(args.token_noise) and args.token_noise >= 0):
        ap.error(f"--token-noise must be a finite number >= 0, not {args.token_noise}")
    names = args.datasets.split(",")
    for n in names:
        if n not in ("digits", "mnist1d"):
            ap.error(f"unknown data set {n!r} (digits, mnist1d)")
    etas = [float(e) for e in args.etas.split(",")]
    # tokensel flipping the supplied labels at rate eta is this example's design
    warnings.filterwarnings("ignore", category=tokensel.LabelFlipWarning)

    rows = []
    start = time.process_time()
    print(f"{'data':>8} {'eta':>5} {'seed':>4} {'noisy':>5} {'train acc':>9} {'noisy fit':>9} {'test acc':>8} {'test0':>6} {'R clean':>7} {'R noisy':>7}")
    for name in names:
        raw, y, n_pool = digits_tokens() if name == "digits" else mnist1d_tokens()
        x = embed(raw, args.token_noise)
        for seed in range(args.seeds):
            arrays = data_set(x, y, n_pool, seed)
            for eta in etas:
                row = measure(name, arrays, eta, seed, args)
                rows.append(row)
                print(f"{name:>8} {eta:>5} {seed:>4} {row['n_noisy']:>5} {row['train']:>9.3f} {row['noisy_fit']:>9.3f} "
                      f"{row['test']:>8.3f} {row['test0']:>6.3f} {row['r_clean']:>7.3f} {row['r_noisy']:>7.3f}", flush=True)
    print(f"CPU time {time.process_time() - start:.0f} s")
    print("\nmedians over seeds (test accuracy: median (min-max)):")
    for name in names:
        for eta in etas:
            rs = [r for r in rows if r["data"] == name and r["eta"] == eta]
            t = [r["test"] for r in rs]
            print(f"{name:>8} eta {eta:<4} noisy {rs[0]['n_noisy']:>3}  train {nanmedian([r['train'] for r in rs]):.3f}  "
                  f"noisy fitted {nanmedian([r['noisy_fit'] for r in rs]):.3f}  test {np.median(t):.3f} "
                  f"({min(t):.3f}-{max(t):.3f})  test at step 0 {np.median([r['test0'] for r in rs]):.3f}  R clean {nanmedian([r['r_clean'] for r in rs]):.2f}  "
                  f"R noisy {nanmedian([r['r_noisy'] for r in rs]):.2f}")
    figure(rows, names, etas, args)


def figure(rows, names, etas, args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(names), 2, figsize=(10, 3.6 * len(names)), squeeze=False)
    titles = {"digits": "digits, 10 classes", "mnist1d": "MNIST-1D, 10 classes"}
    for ax, name in zip(axes, names):
        mine = [r for r in rows if r["data"] == name]
        for key, label, colour in (("train", "train accuracy (observed labels)", "C0"),
                                   ("noisy_fit", "noisy samples fitted", "C3"),
                                   ("test", "test accuracy (true labels)", "C2")):
            vals = [[r[key] for r in mine if r["eta"] == e] for e in etas]
            ax[0].plot(etas, [nanmedian(v) for v in vals], "o-", color=colour, label=label)
            for e, v in zip(etas, vals):
                ax[0].scatter([e] * len(v), v, s=8, color=colour, alpha=0.4)
        ax[0].axhline(1 / K, color="grey", lw=0.8, ls=":", label="chance (1/K)")
        ax[0].set_xlabel("label-noise rate eta (injected by tokensel)")
        ax[0].set_ylabel("fraction")
        ax[0].set_ylim(-0.02, 1.02)
        ax[0].legend(fontsize=7, loc="center left")
        ax[0].set_title(f"{titles[name]}: n = {N_TRAIN}, d = {D}, {args.steps} steps, step {args.step_size}", fontsize=9)
        for key, label, colour in (("r_clean", "clean samples", "C0"), ("r_noisy", "noisy samples", "C3")):
            vals = [[r[key] for r in mine if r["eta"] == e] for e in etas]
            ax[1].plot(etas, [nanmedian(v) for v in vals], "o-", color=colour, label=label)
            for e, v in zip(etas, vals):
                ax[1].scatter([e] * len(v), v, s=8, color=colour, alpha=0.4)
        ax[1].set_xlabel("label-noise rate eta")
        ax[1].set_ylabel("share whose top token is the R position")
        ax[1].set_ylim(-0.02, 1.02)
        ax[1].legend(fontsize=7)
        ax[1].set_title("token selection (R = the position favouring the own class most)", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"figure written to {args.out} (lines: medians over {args.seeds} seeds; dots: each seed)")


if __name__ == "__main__":
    main()

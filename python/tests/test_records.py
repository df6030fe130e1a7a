"""The checkpoint arrays are the record's leaves (one visit order, `io::record::visit`):
a K-class run's per-class metrics and the in-sequence prompt's shares are arrays, named
by their record paths, equal to the last checkpoint's record in the summary."""

import numpy as np

import tokensel

BASE = "d = 40\nn_train = 9\nn_test = 9\nmu_norm = 6.0\neta = 0.25\nsteps = 20\n"


def same(a, b):
    """Equal as numbers, NaN where the record holds null."""
    b = np.array([np.nan if x is None else x for x in np.atleast_1d(b)], dtype=float)
    np.testing.assert_array_equal(np.atleast_1d(a), b)


def test_k_class_arrays_hold_each_class():
    cfg = tokensel.Config.from_toml(
        BASE + '[model]\nkind = "multiclass"\nclasses = 3\n[layout]\ntokens = 9\nweak_opposite = 2\n'
    )
    r = tokensel.run(cfg)
    cp, k = r.checkpoints, len(r.checkpoints["step"])
    classes = r.summary["classes"]
    for name in ["train_accuracy", "test_accuracy", "selection_score"]:
        assert cp[f"classes_{name}"].shape == (k, 3)
        same(cp[f"classes_{name}"][-1], classes[name])
    for name in ["test_tie", "test_undecided"]:
        assert cp[f"classes_{name}"].shape == (k,)
        same(cp[f"classes_{name}"][-1], classes[name])
    names = ["R", "W_true", "W_observed", "W_other", "I", "tie", "undecided"]
    for s in ["clean", "noisy"]:
        assert cp[f"classes_selection_{s}"].shape == (k, 7)
        same(cp[f"classes_selection_{s}"][-1], [classes["selection"][s][n] for n in names])
    assert cp["outputs"].shape == (k, 9, 3)


def test_prompt_shares_are_arrays():
    cfg = tokensel.Config.from_toml(BASE + 'method = "direct"\n[model]\nprompt = "in-sequence"\n')
    r = tokensel.run(cfg)
    cp, k = r.checkpoints, len(r.checkpoints["step"])
    assert cp["prompt_attention"].shape == (k, 9) and cp["prompt_top"].dtype == bool
    for what in ["attention", "top"]:
        for s in ["clean", "noisy"]:
            assert cp[f"prompt_{what}_{s}"].shape == (k,)
            same(cp[f"prompt_{what}_{s}"][-1], r.summary["prompt"][what][s])
    # the per-sample attention's mean over the clean samples is the clean share
    y, yt = r.labels["y_train"], r.labels["y_true_train"]
    clean = y == yt
    np.testing.assert_allclose(cp["prompt_attention"][-1][clean].mean(), cp["prompt_attention_clean"][-1], rtol=1e-12)

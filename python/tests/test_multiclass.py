"""The K-class model from Python (SPEC section 14): the config shorthand, runs that equal the
command line's, K-class supplied data (class-index labels, a (K, d) head) and its refusals,
the K outputs per sample, and K = 2 against the binary model."""

import json

import numpy as np
import pytest

import tokensel
from tokensel import errors

LAYOUT3 = {"tokens": 8, "relevant": 1, "weak_same": 1, "weak_opposite": 2, "irrelevant": 4}


@pytest.fixture(scope="module")
def cfg3():
    """Three classes at a small size (one weakly relevant token per other class), eta 0.2."""
    return tokensel.Config(model="multiclass", classes=3, d=40, n_test=30, steps=200, layout=LAYOUT3)


def test_shorthand_is_the_model_section(cfg3):
    long = tokensel.Config(model={"kind": "multiclass", "classes": 3}, d=40, n_test=30, steps=200, layout=LAYOUT3)
    assert long == cfg3
    assert cfg3.model == {"kind": "multiclass", "classes": 3}
    assert tokensel.Config().model == {"kind": "token-selection", "classes": 2}
    assert 'kind = "multiclass"' in cfg3.to_toml() and "classes = 3" in cfg3.to_toml()
    # replace keeps the other key of the section
    assert cfg3.replace(classes=2, layout={"weak_opposite": 1, "irrelevant": 5}).model == {"kind": "multiclass", "classes": 2}
    assert cfg3.replace(model="multiclass").model["classes"] == 3
    with pytest.raises(errors.ConfigError, match="given twice"):
        tokensel.Config(model={"kind": "multiclass", "classes": 3}, classes=4)
    with pytest.raises(errors.ConfigError, match='set model.kind = "multiclass" for K classes'):
        tokensel.Config(classes=3)
    with pytest.raises(errors.ConfigError, match="weak_opposite must be a multiple of K - 1 = 2"):
        tokensel.Config(model="multiclass", classes=3)


def test_k_class_run_equals_the_command_line(cli, cfg3, tmp_path):
    """The same config from Python and from `tokensel run --config`: the same summary,
    digest included (every recorded number's bits)."""
    path = tmp_path / "k3.toml"
    path.write_text(cfg3.to_toml())
    out = cli("run", "--config", path, "--json", "--quiet")
    ours = tokensel.run(cfg3)
    assert json.loads(out.stdout) == ours.summary
    assert ours.summary["config"]["model"] == {"kind": "multiclass", "classes": 3}


def test_k_outputs_per_sample(cfg3):
    """`outputs` (k, n, K) holds the K outputs; `output` is the margin of the observed class
    (f_Y - max_{c != Y} f_c, the same f64 subtraction), and the final training accuracy is
    the share of samples whose unique largest output is their observed label."""
    r = tokensel.run(cfg3)
    cp, y = r.checkpoints, r.labels["y_train"]
    k, n = cp["output"].shape
    assert cp["outputs"].shape == (k, n, 3)
    f = cp["outputs"][-1]
    others = np.where(np.eye(3, dtype=bool)[y], -np.inf, f).max(axis=1)
    np.testing.assert_array_equal(cp["output"][-1], f[np.arange(n), y] - others)
    top = f.argmax(axis=1)
    unique = (f == f.max(axis=1, keepdims=True)).sum(axis=1) == 1
    assert r.summary["train_accuracy"] == np.mean((top == y) & unique)
    assert "outputs" not in tokensel.run(tokensel.Config(d=40, n_test=30, steps=20)).checkpoints


def test_k_class_data_arrays(cfg3):
    a = tokensel.data(cfg3)
    assert a["nu"].shape == (3, 40)
    assert a["y_train"].dtype == np.int8 and set(np.unique(a["y_true_train"])) <= {0, 1, 2}
    noisy = a["noisy_train"]
    assert noisy.sum() == int(np.ceil(0.2 * cfg3.n_train))
    assert np.all(a["y_train"][noisy] != a["y_true_train"][noisy])


@pytest.mark.parametrize("method", ["span", "direct"])
def test_k_class_data_fed_back_gives_the_same_bits(cfg3, method):
    """tokensel.data of a K-class config supplied back (labels as class indices, the (K, d)
    head): the generated run's digest in f64, at eta = 0 (the noise the data's) and at the
    config's own eta (the generator's flips). Not in f32: there the generated run forms
    the head from the signals in binary32 (mean of the signals, then the division, each
    rounded), a supplied head is its f64 value rounded once, and at K = 3 the two differ
    in the last bit of some entries (the digests differ, as this test's f32 twin shows)."""
    c = cfg3.replace(method=method)
    arrays = tokensel.data(c)
    ours = tokensel.run(c)
    assert tokensel.run(c, data=arrays).digest == ours.digest
    assert tokensel.run(c.replace(eta=0.0), data=arrays).digest == ours.digest
    assert tokensel.run(c, "f32", data=arrays).digest != tokensel.run(c, "f32").digest


def test_k_class_supplied_head_is_used(cfg3):
    """The model trains on the supplied head: the same tokens with nu doubled give other
    outputs (twice the generated ones at step 0, where the attention is uniform)."""
    arrays = tokensel.data(cfg3)
    ours = tokensel.run(cfg3.replace(eta=0.0), data=arrays)
    doubled = tokensel.run(cfg3.replace(eta=0.0), data={**arrays, "nu": 2 * arrays["nu"]})
    assert doubled.digest != ours.digest
    np.testing.assert_allclose(doubled.checkpoints["outputs"][0], 2 * ours.checkpoints["outputs"][0], rtol=1e-14)


def test_injected_k_class_noise_goes_to_other_classes(cfg3):
    """Without y_true_train the config's flip rule flips ceil(eta n) labels, each to another
    class, more than one target class used; eta = 0 keeps the labels."""
    a = tokensel.data(cfg3)
    clean = {k: a[k] for k in ("X_train", "X_test", "y_test", "nu")}
    clean["y_train"] = a["y_true_train"]
    with pytest.warns(tokensel.LabelFlipWarning):
        r = tokensel.run(cfg3.replace(eta=0.4, steps=5), data=clean)
    y, y_true = r.labels["y_train"], r.labels["y_true_train"]
    np.testing.assert_array_equal(y_true, a["y_true_train"])
    flipped = y != y_true
    assert flipped.sum() == 8 == r.summary["n_noisy"]
    assert set(np.unique((y - y_true)[flipped] % 3)) == {1, 2}
    r0 = tokensel.run(cfg3.replace(eta=0.0, steps=5), data=clean)
    np.testing.assert_array_equal(r0.labels["y_train"], a["y_true_train"])


def test_cli_runs_a_k_class_supplied_directory(cli, cfg3, tmp_path):
    """write_data of K-class arrays (noise injected by the config) is read back by `run
    --data DIR` as the same run: the same summary and digest as from Python; the manifest
    lists nu as (K, d) and the labels as int8 class indices."""
    a = tokensel.data(cfg3)
    clean = {k: a[k] for k in ("X_train", "X_test", "y_test", "nu")}
    clean["y_train"] = a["y_true_train"].astype(np.int64)
    clean["groups"] = ["R", "W_same", "W_opposite", "W_opposite", "I", "I", "I", "I"]
    with pytest.warns(tokensel.LabelFlipWarning):
        manifest = tokensel.write_data(tmp_path / "d", cfg3, data=clean)
        ours = tokensel.run(cfg3, data=clean)
    assert manifest["source"] == "supplied"
    assert manifest["arrays"]["nu"]["shape"] == [3, 40]
    assert manifest["arrays"]["y_train"]["dtype"] == "int8"
    y = np.load(tmp_path / "d" / "y_train.npy")
    np.testing.assert_array_equal(y, ours.labels["y_train"])
    out = cli("run", "--data", tmp_path / "d", "--json", "--quiet")
    assert json.loads(out.stdout) == ours.summary


def _refusal(change):
    def apply(a):
        a = {k: v.copy() for k, v in a.items()}
        change(a)
        return a
    return apply


@pytest.mark.parametrize(
    "change, kind, words",
    [
        (lambda a: a.update(y_train=a["y_train"].astype(np.float64)), errors.ConfigError,
         "`y_train`: expected class indices 0 to 2 (model.classes = 3): a 1-d array of integers, got dtype float64 (floats are not taken as class indices"),
        (lambda a: a["y_train"].__setitem__(3, 3), errors.ConfigError,
         "`y_train`: label 3 at index 3: the K-class model's labels are class indices 0 to 2 (model.classes = 3)"),
        (lambda a: a.update(y_test=np.where(a["y_test"] == 0, 1, -1)), errors.ConfigError,
         "(+1/-1 are the binary model's labels)"),
        (lambda a: a.update(y_train=a["y_train"].astype(np.int64) + 2**40), errors.ConfigError,
         f"label {2**40} at index 0"),
        (lambda a: a.update(y_train=a["y_train"] > 0), errors.ConfigError, "got dtype bool (booleans are not class indices)"),
        (lambda a: a.update(y_train=a["y_train"][:, None]), errors.ConfigError, "got shape (20, 1) (2 dimensions)"),
        (lambda a: a.update(y_true_train=np.full(20, 7, np.uint64)), errors.ConfigError,
         "`y_true_train`: label 7 at index 0: the K-class model's labels"),
        (lambda a: a.update(nu=a["nu"][0]), errors.MismatchError,
         "supplied `nu`: shape [40], the config gives (K, d) = (3, 40)"),
        (lambda a: a.update(nu=a["nu"][:2]), errors.MismatchError, "shape [2, 40]"),
        (lambda a: a.update(nu=np.tile(a["nu"][:1], (3, 1))), errors.MismatchError, "has 3 equal rows"),
        (lambda a: a["nu"].__setitem__((1, 2), np.nan), errors.MismatchError, "value at flat index 42 is not finite"),
    ],
)
def test_refuses_k_class_data_that_cannot_work(cfg3, change, kind, words):
    arrays = _refusal(change)(tokensel.data(cfg3))
    with pytest.raises(kind) as e:
        tokensel.run(cfg3.replace(eta=0.0, steps=5), data=arrays)
    assert words in str(e.value)


def test_binary_config_refuses_class_indices():
    cfg = tokensel.Config(d=40, n_test=30, steps=5, eta=0.0)
    a = tokensel.data(cfg)
    with pytest.raises(errors.ConfigError, match=r"label 0 at index \d+: labels are \+1 or -1"):
        tokensel.run(cfg, data={**a, "y_train": (a["y_train"] < 0).astype(np.int8)})


def test_two_classes_reproduce_the_binary_run():
    """K = 2 is the binary model (SPEC section 14: nu_0 = -nu_1 = nu / 2, the cross-entropy
    is log(1 + exp(-Y f)), class 0 is label +1): the same labels, noisy set and predictions,
    and losses within 1e-12 relative at every checkpoint. The bound is f64 rounding: the
    two models form the head, the loss and the gradient in different orders (the K-class
    head by the mean of the signals, the loss by a log-sum-exp, the token coefficients
    through h_t = sum_c gamma_c G_tc), each step rounds to ~1e-16 relative, and 300 steps
    of this run accumulate at most ~3e-14 of it (measured: the losses agree to the bit,
    the margins to 8e-16 of the largest |f|); 1e-12 leaves a margin above that, while a
    wrong head scale or sign changes the loss at the first update by O(1)."""
    binary = tokensel.Config(d=40, n_test=30, steps=300)
    two = binary.replace(model="multiclass", classes=2)
    b, m = tokensel.run(binary), tokensel.run(two)
    np.testing.assert_array_equal(m.labels["y_true_train"], np.where(b.labels["y_true_train"] > 0, 0, 1))
    np.testing.assert_array_equal(m.labels["y_train"], np.where(b.labels["y_train"] > 0, 0, 1))
    assert m.summary["n_noisy"] == b.summary["n_noisy"] > 0
    np.testing.assert_array_equal(m.checkpoints["step"], b.checkpoints["step"])
    lb, lm = b.checkpoints["train_loss"], m.checkpoints["train_loss"]
    assert np.all(np.abs(lm - lb) <= 1e-12 * np.abs(lb)), np.max(np.abs(lm - lb) / np.abs(lb))
    for key in ("train_accuracy", "test_accuracy"):
        np.testing.assert_array_equal(m.checkpoints[key], b.checkpoints[key])
    # the margin of the observed class is Y f
    yb = b.labels["y_train"].astype(float)
    scale = np.abs(b.checkpoints["output"]).max()
    assert np.abs(m.checkpoints["output"] - yb * b.checkpoints["output"]).max() <= 1e-12 * scale

"""The arrays tokensel generates for a config, passed back as supplied data under the same
config, are that config's run: label noise at eta > 0 (the generator's flips) is accepted;
labels that are not the config's flips are still refused."""

import numpy as np
import pytest

import tokensel
from tokensel import errors


@pytest.fixture(scope="module")
def cfg():
    """The balanced preset (eta = 0.2, p-mode, init.w = "identity") at a small size."""
    return tokensel.Config(d=40, n_test=30, steps=200)


@pytest.mark.parametrize("method", ["span", "direct"])
@pytest.mark.parametrize("arith", ["f64", "f32"])
def test_generated_data_at_its_own_eta_is_the_config_s_run(cfg, method, arith):
    """`run(cfg, data=data(cfg))` with eta > 0 gives `run(cfg)` bit for bit: the same
    digest, summary and labels (the supplied y_train is the generator's flips of
    y_true_train, drawn after the true labels in the TrainLabels stream)."""
    c = cfg.replace(method=method)
    assert c.eta > 0
    arrays = tokensel.data(c)
    ours = tokensel.run(c, arith)
    back = tokensel.run(c, arith, data=arrays)
    assert back.digest == ours.digest
    assert back.summary["n_noisy"] == ours.summary["n_noisy"] > 0
    for key in ("y_train", "y_true_train"):
        np.testing.assert_array_equal(back.labels[key], ours.labels[key])
        np.testing.assert_array_equal(back.labels[key], arrays[key])


@pytest.mark.parametrize("flips", ["exact", "bernoulli"])
def test_generated_data_at_its_own_eta_other_flip_rules(cfg, flips):
    c = cfg.replace(flips=flips, eta=0.3, steps=20)
    arrays = tokensel.data(c)
    assert tokensel.run(c, data=arrays).digest == tokensel.run(c).digest


def test_generated_data_with_other_labels_is_still_refused(cfg):
    """Labels that are not the config's flips (one flip moved to a clean sample) are
    refused at eta > 0, as are the generated labels under another seed's config."""
    arrays = tokensel.data(cfg)
    y = arrays["y_train"].copy()
    noisy = np.flatnonzero(arrays["noisy_train"])
    clean = np.flatnonzero(~arrays["noisy_train"])
    y[noisy[0]] *= -1
    y[clean[0]] *= -1
    moved = {**arrays, "y_train": y, "noisy_train": y != arrays["y_true_train"]}
    with pytest.raises(errors.ConfigError, match="y_train is not y_true_train with the config's flips"):
        tokensel.run(cfg.replace(steps=5), data=moved)
    with pytest.raises(errors.ConfigError, match="y_train is not y_true_train with the config's flips"):
        tokensel.run(cfg.replace(steps=5, seed=cfg.seed + 1), data=arrays)


def test_write_data_of_generated_arrays_reads_back_on_the_cli(cli, cfg, tmp_path):
    """The generated arrays at eta > 0 written as supplied data run on the command line to
    the config's own summary."""
    small = cfg.replace(steps=20)
    manifest = tokensel.write_data(tmp_path / "d", small, data=tokensel.data(small))
    assert manifest["source"] == "supplied"
    out = cli("run", "--data", tmp_path / "d", "--json", "--quiet")
    assert __import__("json").loads(out.stdout)["trajectory_digest"] == tokensel.run(small).digest

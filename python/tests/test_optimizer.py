"""Normalised gradient descent from Python (the `[optimizer]` section, README "Normalised
gradient descent"): the section as a keyword and an attribute, a run equal to the command
line's, and bad values refused with the field named."""

import json

import pytest

import tokensel
from tokensel import errors


def test_optimizer_section_from_python(cli, tmp_path):
    cfg = tokensel.Config(d=40, n_test=30, steps=300, step_size=0.1, optimizer={"kind": "normalized-gd", "eps": 1e-9})
    assert cfg.optimizer == {"kind": "normalized-gd", "eps": 1e-9}
    assert tokensel.Config().optimizer == {"kind": "gd", "eps": 0.0}
    assert "[optimizer]" in cfg.to_toml() and "[optimizer]" not in tokensel.Config().to_toml()
    path = tmp_path / "ngd.toml"
    path.write_text(cfg.to_toml())
    out = cli("run", "--config", path, "--json", "--quiet")
    ours = tokensel.run(cfg)
    assert json.loads(out.stdout) == ours.summary
    assert ours.summary["config"]["optimizer"] == {"kind": "normalized-gd", "eps": 1e-9}


def test_bad_optimizer_values_are_refused():
    with pytest.raises(errors.ConfigError, match="optimizer.eps"):
        tokensel.Config(optimizer={"kind": "normalized-gd", "eps": -1.0})
    with pytest.raises(errors.ConfigError, match="optimizer.eps"):
        tokensel.Config(optimizer={"kind": "gd", "eps": 1e-9})
    with pytest.raises(errors.ParseError, match="unknown variant `sgd`"):
        tokensel.Config(optimizer={"kind": "sgd"})
    with pytest.raises(errors.ConfigError, match="optimizer.beta1"):
        tokensel.Config(optimizer={"kind": "adam", "beta1": 1.0})
    with pytest.raises(errors.ConfigError, match="optimizer.batch"):
        tokensel.Config(optimizer={"kind": "adamw", "batch": 0})


def test_adamw_section_from_python(cli, tmp_path):
    # the keys a config leaves out are written with the kind's defaults
    cfg = tokensel.Config(
        d=40, n_train=10, n_test=30, steps=50, step_size=1e-3,
        optimizer={"kind": "adamw", "schedule": "linear", "clip_norm": 1.0, "batch": 4},
    )
    assert cfg.optimizer == {
        "kind": "adamw", "eps": 1e-8, "beta1": 0.9, "beta2": 0.999, "weight_decay": 0.0,
        "schedule": "linear", "clip_norm": 1.0, "batch": 4,
    }
    path = tmp_path / "adamw.toml"
    path.write_text(cfg.to_toml())
    out = cli("run", "--config", path, "--json", "--quiet")
    assert json.loads(out.stdout) == tokensel.run(cfg).summary


def test_compare_of_a_run_that_stops_warns_and_keeps_the_steps_before():
    # exact normalised GD: the f64 run stops at step 694 (its gradient's norm leaves
    # f64's range); the report covers steps 0-694 and says so
    cfg = tokensel.Config(
        d=60, n_train=6, n_test=20, mu_norm=6.0, eta=0.0, step_size=0.5, steps=800,
        method="span", optimizer={"kind": "normalized-gd", "eps": 0.0},
    )
    with pytest.warns(RuntimeWarning, match="compare stopped after step 694"):
        report = tokensel.compare(cfg, predictor=False)
    assert report["stopped"]["last_step"] == 694
    assert report["checkpoints"][-1]["step"] <= 694

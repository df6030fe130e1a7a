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
    with pytest.raises(errors.ParseError, match="unknown variant `adam`"):
        tokensel.Config(optimizer={"kind": "adam"})

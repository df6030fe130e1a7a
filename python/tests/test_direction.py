"""Direction tracking from Python (the `[direction]` section, README "The direction of a
run"): the section as a keyword and an attribute, the per-checkpoint arrays equal to the
command line's CSV, the limit in the summary, and bad sections refused with the field
named."""

import csv
import json

import numpy as np
import pytest

import tokensel
from tokensel import errors

SMALL = dict(d=60, n_train=6, n_test=20, mu_norm=6.0, eta=0.0, step_size=0.2, steps=200)


def test_direction_from_python_equals_the_command_line(cli, tmp_path):
    cfg = tokensel.Config(
        **SMALL, optimizer={"kind": "normalized-gd", "eps": 0.0}, direction={"pattern": "theorem"}
    )
    assert cfg.direction == {"pattern": "theorem"}
    assert tokensel.Config().direction is None
    path = tmp_path / "dir.toml"
    path.write_text(cfg.to_toml())
    out = tmp_path / "run"
    cli("run", "--config", path, "--quiet", "--out", out)
    ours = tokensel.run(cfg)
    rows = list(csv.DictReader(open(out / "trajectory.csv")))
    for name in [
        "direction_one_minus_corr",
        "direction_norm",
        "direction_margin",
        "direction_support_deviation",
        "direction_on_pattern",
    ]:
        want = np.array([float(r[name]) if r[name] else np.nan for r in rows])
        got = ours.checkpoints[name]
        assert got.shape == want.shape
        # the CSV writes the shortest text that reads back to the same f64
        assert np.array_equal(got, want, equal_nan=True), name
    assert np.isnan(ours.checkpoints["direction_one_minus_corr"][0])
    d = ours.summary["direction"]
    assert d["limit"]["pattern_choice"] == "theorem"
    assert d["limit"]["off_pattern_at_end"] == []
    assert d["last"]["one_minus_corr"] == ours.checkpoints["direction_one_minus_corr"][-1]
    assert len(d["limit"]["pattern"]) == 6
    traj = json.loads((out / "trajectory.json").read_text())
    assert traj["direction"]["verdict"] == "proved optimal"


def test_bad_direction_sections_are_refused():
    with pytest.raises(errors.ConfigError, match="direction.pattern"):
        tokensel.Config(**SMALL, direction={"pattern": "final"})
    with pytest.raises(errors.ConfigError, match="direction.pattern"):
        tokensel.Config(**SMALL, direction={"pattern": [0, 1]})
    with pytest.raises(errors.ParseError):
        tokensel.Config(**SMALL, direction={"patern": "theorem"})


def test_svm_from_python_equals_the_command_line(cli, tmp_path):
    cfg = tokensel.Config(**SMALL)
    path = tmp_path / "c.toml"
    path.write_text(cfg.to_toml())
    for pattern in ["optimal", "theorem"]:
        out = cli("svm", "--config", path, "--pattern", pattern, "--json")
        assert tokensel.svm(cfg, pattern) == json.loads(out.stdout)
    ours = tokensel.svm(cfg, "theorem")
    assert ours["verdict"] == "proved optimal"
    # the selected tokens as a given pattern: the same solution
    given = tokensel.svm(cfg, ours["selected"])
    assert given["verdict"] == "proved optimal" and given["norm2"] == ours["norm2"]
    with pytest.raises(errors.ConfigError, match="pattern"):
        tokensel.svm(cfg, "final")
    with pytest.raises(errors.ConfigError, match="pattern"):
        tokensel.svm(cfg, [0, 1])
    with pytest.raises(errors.ConfigError, match="model"):
        tokensel.svm(tokensel.Config(model={"kind": "multiclass", "classes": 3},
                                     layout={"tokens": 9, "weak_opposite": 2}))

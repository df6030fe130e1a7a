"""The extension gives the command line's bits: the arrays of `tokensel data` (NPY files),
the summary of `run --json` / `twin --json`, the TOML of `config`."""

import json

import numpy as np
import pytest

import tokensel


def write_config(tmp_path, cfg):
    path = tmp_path / "cfg.toml"
    path.write_text(cfg.to_toml())
    return path


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("which", ["small", "small_joint"])
def test_data_is_the_npy_export(cli, tmp_path, request, which):
    cfg = request.getfixturevalue(which)
    cli("data", "--config", write_config(tmp_path, cfg), "--out", tmp_path / "d")
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    ours = tokensel.data(cfg)
    assert sorted(ours) == sorted(manifest["arrays"])
    for name, a in ours.items():
        assert same_bits(a, np.load(tmp_path / "d" / f"{name}.npy")), name


def test_default_data_keys_and_shapes():
    d = tokensel.data(tokensel.Config(n_test=10))
    assert d["X_train"].shape == (20, 8, 2000) and d["X_test"].shape == (10, 8, 2000)
    assert "W0" not in d  # p-mode with W = I: the identity is not written


@pytest.mark.parametrize("method", ["span", "direct"])
def test_run_summary_is_run_json(cli, tmp_path, small, method):
    cfg = small.replace(method=method)
    out = cli("run", "--config", write_config(tmp_path, cfg), "--json", "--quiet")
    cli_summary = json.loads(out.stdout)
    r = tokensel.run(cfg)
    assert r.summary == cli_summary
    assert r.trainer["method"] == method
    # the checkpoints' arrays are the trajectory's numbers
    assert r.checkpoints["step"][-1] == cfg.steps
    assert r.checkpoints["train_loss"][-1] == cli_summary["train_loss"]
    assert r.checkpoints["test_accuracy"][-1] == cli_summary["test_accuracy"]


def test_checkpoints_are_the_trajectory_file(cli, tmp_path, small):
    cli("run", "--config", write_config(tmp_path, small), "--out", tmp_path / "t", "--quiet")
    traj = json.loads((tmp_path / "t" / "trajectory.json").read_text())
    cp = tokensel.run(small).checkpoints
    assert list(cp["step"]) == [c["step"] for c in traj["checkpoints"]]
    for k, c in enumerate(traj["checkpoints"]):
        for key in ("train_loss", "q_norm", "grad_norm"):
            assert cp[key][k] == c[key]
        assert list(cp["output"][k]) == [s["f"] for s in c["samples"]]
        assert list(cp["gap"][k]) == [s["gap"] for s in c["samples"]]
        assert list(cp["top"][k]) == [s["top"] for s in c["samples"]]
        assert [list(m) for m in cp["mass"][k]] == [
            [s["mass"][g] for g in ("R", "W_same", "W_opposite", "I")] for s in c["samples"]
        ]


def test_twin_summaries_are_twin_json(cli, tmp_path):
    cfg = tokensel.Config(d=20, n_test=10, steps=20)
    path = write_config(tmp_path, cfg)
    pred = json.loads(cli("twin", "--config", path, "--predictor", "--json", "--quiet").stdout)
    assert tokensel.run(cfg, "predictor").summary == pred
    mpfr = json.loads(cli("twin", "--config", path, "--prec", 80, "--json", "--quiet").stdout)
    assert tokensel.run(cfg, "mpfr", prec=80).summary == mpfr
    # the f64 trainer and its bit-exact predictor agree (the project's invariant)
    assert tokensel.run(cfg).summary["trajectory_digest"] == pred["trajectory_digest"]


def test_config_toml_round_trip(cli, tmp_path, small_joint):
    assert tokensel.Config.from_toml(small_joint.to_toml()) == small_joint
    printed = cli("config", "--config", write_config(tmp_path, small_joint)).stdout
    assert tokensel.Config.from_toml(printed) == small_joint
    assert small_joint.mode == "joint" and small_joint.to_dict()["d"] == 30

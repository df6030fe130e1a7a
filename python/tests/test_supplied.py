"""Your own tokens: data given as arrays run through the trainers, compare and judge."""

import numpy as np
import pytest

import tokensel
from tokensel import errors


@pytest.fixture(scope="module")
def cfg():
    return tokensel.Config(d=40, n_test=30, steps=200)


def test_generated_data_fed_back_gives_the_same_bits(cfg):
    """The arrays of tokensel.data, supplied with their noise (eta = 0: the noise is the
    data's), train to the same trajectory digest in f64, the f32 replay and both methods."""
    arrays = tokensel.data(cfg)
    for method in ("span", "direct"):
        c = cfg.replace(method=method)
        for arith in ("f64", "f32"):
            ours = tokensel.run(c, arith)
            back = tokensel.run(c.replace(eta=0.0), arith, data=arrays)
            assert back.digest == ours.digest, (method, arith)
            assert back.summary["n_noisy"] == ours.summary["n_noisy"] > 0


def test_injected_noise_uses_the_flip_rule(cfg):
    arrays = tokensel.data(cfg)
    clean = {k: arrays[k] for k in ("X_train", "X_test", "y_test", "nu")}
    clean["y_train"] = arrays["y_true_train"]
    for eta, flipped in ((0.0, 0), (0.2, 4), (0.4, 8)):
        r = tokensel.run(cfg.replace(eta=eta, steps=10), data=clean)
        assert r.summary["n_noisy"] == flipped


def test_groups_by_name_or_code(cfg):
    arrays = tokensel.data(cfg)
    by_name = tokensel.run(cfg.replace(eta=0.0, steps=10), data={**arrays, "groups": ["R", "W_same", "W_opposite"] + ["I"] * 5})
    by_code = tokensel.run(cfg.replace(eta=0.0, steps=10), data={**arrays, "groups": [0, 1, 2, 3, 3, 3, 3, 3]})
    assert by_name.digest == by_code.digest


def test_judge_and_compare_take_supplied_data(cfg):
    arrays = tokensel.data(cfg)
    c = cfg.replace(eta=0.0, steps=20)
    report = tokensel.compare(c, data=arrays, prec=128)
    assert report["predictor"]["bits_equal"]  # the predictor's invariant holds on supplied data
    r = tokensel.run(c, data=arrays)
    traj = {"steps": [0], "dtype": "float64", "output": r.checkpoints["output"][:1]}
    assert tokensel.judge(c.replace(steps=20), traj, data=arrays)["within_tolerance"]


@pytest.mark.parametrize(
    "change, kind, words",
    [
        (lambda a: a.update(X_train=a["X_train"][:, :, :-1]), errors.MismatchError, "X_train"),
        (lambda a: a["X_train"].__setitem__((0, 0, 0), np.inf), errors.MismatchError, "not finite"),
        (lambda a: a.update(nu=a["nu"][:-1]), errors.MismatchError, "nu"),
        (lambda a: a.update(nu=np.zeros_like(a["nu"])), errors.MismatchError, "zero"),
        (lambda a: a["y_train"].__setitem__(0, 3), errors.ConfigError, "label 3"),
        (lambda a: a.update(groups=["R"] * 7), errors.MismatchError, "groups"),
        (lambda a: a.update(groups=["X"] * 8), errors.ConfigError, "groups"),
        (lambda a: a.pop("X_test"), errors.ConfigError, "X_test"),
        (lambda a: a.update(X_valid=a["X_test"]), errors.ConfigError, "unknown key"),
        (lambda a: a.update(p0=a["p0"] + 1), errors.MismatchError, "p0[0] = 1e0, the config's is 0e0"),
        (lambda a: a.update(p0=a["p0"][:3]), errors.MismatchError, "`p0`: has 3 entries, the config's p(0) has d = 40"),
        (lambda a: a.update(noisy_train=~a["noisy_train"]), errors.MismatchError, "at sample 0"),
        (lambda a: a.update(noisy_train=a["noisy_train"][:2]), errors.MismatchError, "has 2 entries"),
        (lambda a: a.update(X_train=a["X_train"][0]), errors.ConfigError, "X_train"),
    ],
)
def test_refuses_what_cannot_work(cfg, change, kind, words):
    arrays = {k: v.copy() for k, v in tokensel.data(cfg).items()}
    change(arrays)
    with pytest.raises(kind) as e:
        tokensel.run(cfg.replace(eta=0.0, steps=5), data=arrays)
    assert words.lower() in str(e.value).lower()


def test_supplied_noise_is_the_data_s_or_the_config_s(cfg):
    """With both labels given, eta > 0 must reproduce them (the labels another seed's
    config generated are not this config's flips: refused; this config's own generated
    labels are accepted, test_supplied_roundtrip.py); eta = 0 takes any noise."""
    with pytest.raises(errors.ConfigError, match="y_train is not y_true_train with the config's flips"):
        tokensel.run(cfg.replace(steps=5), data=tokensel.data(cfg.replace(seed=cfg.seed + 1)))
    arrays = tokensel.data(cfg)
    clean = {k: arrays[k] for k in ("X_train", "X_test", "y_test", "nu")}
    injected = tokensel.run(cfg.replace(steps=5), data={**clean, "y_train": arrays["y_true_train"]})
    both = {**clean, "y_train": injected.labels["y_train"], "y_true_train": injected.labels["y_true_train"]}
    again = tokensel.run(cfg.replace(steps=5), data=both)
    assert again.digest == injected.digest


def write_config(tmp_path, cfg):
    path = tmp_path / "cfg.toml"
    path.write_text(cfg.to_toml())
    return path


def test_write_data_generated_is_the_cli_export(cli, cfg, tmp_path):
    cli("data", "--config", write_config(tmp_path, cfg), "--out", tmp_path / "a")
    tokensel.write_data(tmp_path / "b", cfg)
    for f in sorted((tmp_path / "a").iterdir()):
        assert f.read_bytes() == (tmp_path / "b" / f.name).read_bytes(), f.name


def test_cli_runs_a_supplied_directory(cli, cfg, tmp_path):
    """Your own tokens on the command line: written by write_data (noise injected by the
    config), read by run/twin/compare --data DIR and judge --data DIR, the same bits."""
    arrays = tokensel.data(cfg)
    clean = {k: arrays[k] for k in ("X_train", "X_test", "y_test", "nu")}
    clean["y_train"] = arrays["y_true_train"]
    clean["groups"] = ["R", "I", "I", "W_same", "W_opposite", "I", "I", "I"]
    manifest = tokensel.write_data(tmp_path / "d", cfg, data=clean)
    assert manifest["source"] == "supplied" and "groups" in manifest["arrays"]
    ours = tokensel.run(cfg, data=clean)
    out = cli("run", "--data", tmp_path / "d", "--json", "--quiet")
    assert __import__("json").loads(out.stdout) == ours.summary
    twin = cli("twin", "--data", tmp_path / "d", "--predictor", "--steps", 20, "--json", "--quiet")
    assert __import__("json").loads(twin.stdout) == tokensel.run(cfg.replace(steps=20), "predictor", data=clean).summary
    traj = {"steps": [0, 10], "dtype": "float64", "output": ours.checkpoints["output"][[0, 5]]}
    traj["steps"] = [int(s) for s in ours.checkpoints["step"][[0, 5]]]
    np.savez(tmp_path / "e.npz", header=np.frombuffer(b'{"format": "tokensel-external/2", "dtype": "float64"}', np.uint8),
             steps=np.array(traj["steps"]), output=traj["output"])
    j = cli("judge", tmp_path / "e.npz", "--data", tmp_path / "d", "--json", "--quiet", check=False)
    assert __import__("json").loads(j.stdout) == tokensel.judge(cfg, traj, data=clean)
    # a changed file is refused before any work
    x = np.load(tmp_path / "d" / "X_train.npy")
    x[0, 0, 0] += 1.0
    np.save(tmp_path / "d" / "X_train.npy", x)
    bad = cli("run", "--data", tmp_path / "d", "--json", "--quiet", check=False)
    assert bad.returncode == 2 and "SHA-256" in bad.stderr
    # --data replaces the config: --seed/--config conflict
    assert cli("run", "--data", tmp_path / "d", "--seed", 3, check=False).returncode == 2

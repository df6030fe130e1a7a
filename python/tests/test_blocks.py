"""Parameter blocks in Python's arrays (issue 41 items 1 and 6): ``data`` returns each
initial block of the run's query map by its declared name as ``<block>0`` (bit for bit
the NPY files of ``tokensel data``), ``run`` returns the final blocks by name, a data dict
may carry the factorised map's blocks (checked against the config), and ``data`` takes
exactly the configs the command line's ``data`` takes (one capability check)."""

import json

import numpy as np
import pytest

import tokensel
from tokensel import errors

D, M = 24, 3


def factorised(**kw):
    """A factorised config at a small size: m = 3, biases, the nn.Linear init, p fixed."""
    cfg = tokensel.Config.from_toml(
        f'd = {D}\nn_train = 6\nn_test = 5\nsteps = 12\nmode = "W"\n'
        '[init]\np = "gaussian"\np_scale = 0.2\nw = "identity"\n'
        f"[factorised]\nm = {M}\nbias = true\n"
    )
    return cfg.replace(**kw) if kw else cfg


def write_config(tmp_path, cfg, name="cfg.toml"):
    path = tmp_path / name
    path.write_text(cfg.to_toml())
    return path


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


SHAPES = {"W_Q": (M, D), "W_K": (M, D), "b_Q": (M,), "b_K": (M,), "p": (D,)}


def test_factorised_blocks_are_the_cli_export(cli, tmp_path):
    """``data`` of a factorised config holds W_Q0, W_K0 (m, d), b_Q0, b_K0 (m) and p0 (d),
    no W0, each bit for bit the CLI's NPY file (and the manifest lists the same arrays)."""
    c = factorised()
    ours = tokensel.data(c)
    assert {k: ours[k + "0"].shape for k in SHAPES} == SHAPES
    assert "W0" not in ours
    out = tmp_path / "d"
    cli("data", "--config", write_config(tmp_path, c), "--out", out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(ours) == sorted(manifest["arrays"])
    assert manifest["w0"] == "none"
    for name, a in ours.items():
        assert same_bits(a, np.load(out / f"{name}.npy")), name


def test_run_returns_the_blocks_by_name(cli, tmp_path):
    """``run`` returns the final blocks by their declared names and shapes; the run's
    digest is the CLI's; the recorded ||q|| of the last checkpoint is that of q = W_K^T
    (W_Q p + b_Q) formed in NumPy from the returned blocks, within the rounding bound of
    the two evaluations: each q_k is a sum of m + d products of f64 numbers (W_Q p + b_Q
    first, then W_K^T u), so |fl(q) - q| <= gamma_{m+d+1} (|W_K|^T (|W_Q| |p| + |b_Q|))
    entrywise for either evaluation (gamma_n = n u / (1 - n u), u = 2^-53), and the norm
    adds gamma_{d+1} |q|; twice the first bound covers both evaluations."""
    c = factorised()
    r = tokensel.run(c)
    assert {k: v.shape for k, v in r.blocks.items()} == SHAPES
    assert all(v.dtype == np.float64 for v in r.blocks.values())
    out = json.loads(cli("run", "--config", write_config(tmp_path, c), "--json", "--quiet").stdout)
    assert r.digest == out["trajectory_digest"]
    b = r.blocks
    # W_Q, W_K and b_Q moved from their initial values; p is fixed (train_p = false)
    init = tokensel.data(c)
    for name in ("W_Q", "W_K", "b_Q"):
        assert not np.array_equal(b[name], init[name + "0"]), name
    assert same_bits(b["p"], init["p0"])
    u = b["W_Q"] @ b["p"] + b["b_Q"]
    q = b["W_K"].T @ u
    assert r.checkpoints["step"][-1] == c.steps
    u_ = 2.0**-53
    gamma = lambda n: n * u_ / (1 - n * u_)
    mag = np.abs(b["W_K"]).T @ (np.abs(b["W_Q"]) @ np.abs(b["p"]) + np.abs(b["b_Q"]))
    bound = 2 * gamma(M + D + 1) * np.linalg.norm(mag) + 2 * gamma(D + 1) * np.linalg.norm(q)
    assert abs(np.linalg.norm(q) - r.checkpoints["q_norm"][-1]) <= bound


def test_run_blocks_of_the_linear_map():
    """The linear map's blocks by their names as ever: p alone in p-mode with W = I, W
    and p in joint mode (in both the direct and the span step)."""
    p_mode = tokensel.Config(d=20, n_train=4, n_test=4, steps=5)
    assert sorted(tokensel.run(p_mode).blocks) == ["p"]
    joint = tokensel.Config(
        d=20, n_train=4, n_test=4, steps=5, mode="joint", init={"w": "kaiming_uniform"}, step_size=1e-3
    )
    for method in ("direct", "span"):
        b = tokensel.run(joint.replace(method=method)).blocks
        assert {k: v.shape for k, v in b.items()} == {"W": (20, 20), "p": (20,)}, method


def test_supplied_factorised_blocks_are_checked():
    """A data dict may carry the factorised blocks as ``data`` returns them (the same
    run); one of another shape, or another value, is refused naming it; a W_Q0 given to
    a config without the factorised map is refused too."""
    c = factorised(eta=0.0)
    arrays = tokensel.data(c)
    assert tokensel.run(c, data=arrays).digest == tokensel.run(c).digest
    with pytest.raises(errors.MismatchError, match=r"W_K0`: shape \[2, 24\], the config declares block `W_K` of shape \[3, 24\]"):
        tokensel.run(c, data={**arrays, "W_K0": arrays["W_K0"][:2]})
    moved = arrays["b_Q0"].copy()
    moved[1] += 1.0
    with pytest.raises(errors.MismatchError, match=r"b_Q0.*entry 1"):
        tokensel.run(c, data={**arrays, "b_Q0": moved})
    plain = tokensel.Config(d=D, n_train=6, n_test=5, steps=5, eta=0.0)
    with pytest.raises(errors.MismatchError, match=r"W_Q0.*declares no block `W_Q`"):
        tokensel.run(plain, data={**tokensel.data(plain), "W_Q0": arrays["W_Q0"]})


BASE = "d = 20\nn_train = 6\nn_test = 4\nmu_norm = 6.0\nsteps = 5\n"

PARITY = {
    "factorised": factorised(),
    "k3": tokensel.Config.from_toml(
        BASE + '[model]\nkind = "multiclass"\nclasses = 3\n[layout]\ntokens = 9\nweak_opposite = 2\n'
    ),
    "minibatch": tokensel.Config.from_toml(BASE + '[optimizer]\nkind = "adam"\nbatch = 2\n'),
    "prompt": tokensel.Config.from_toml(BASE + 'method = "direct"\n[model]\nprompt = "in-sequence"\n'),
}


@pytest.mark.parametrize("name", sorted(PARITY))
def test_data_takes_what_the_cli_takes(cli, tmp_path, name):
    """Python's ``data`` and ``write_data`` accept a config exactly where ``tokensel data``
    does (exit code 0), and give the same files."""
    c = PARITY[name]
    proc = cli("data", "--config", write_config(tmp_path, c), "--out", tmp_path / "cli", check=False)
    try:
        arrays = tokensel.data(c)
        tokensel.write_data(tmp_path / "py", c)
        accepted = True
    except errors.TokenselError:
        accepted = False
    assert accepted == (proc.returncode == 0), proc.stderr
    if accepted:
        for name_, a in arrays.items():
            assert same_bits(a, np.load(tmp_path / "cli" / f"{name_}.npy")), name_
            assert same_bits(a, np.load(tmp_path / "py" / f"{name_}.npy")), name_

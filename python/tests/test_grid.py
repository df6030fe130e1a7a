"""Grids from Python (docs/python.md, "Grids from Python"): a `Config` pickles and deep-copies
to an equal config; `grid_cells` / `run_cell` / `grid_merge` write the bytes of `tokensel grid`
whichever pool runs the cells (a serial loop, joblib threads, joblib's loky processes), a
resumed cell is skipped and says so, the merge is byte-identical for any partition of the
cells, and bad input is refused with the binding's errors before any cell file is written."""

import copy
import json
import os
import pickle
from pathlib import Path

import pytest

import tokensel
from tokensel import errors

# 2 x 2 grid points x 2 seeds = 8 runs of 40 steps at d = 20 (milliseconds each): two axes,
# so the merge also renders the heat maps. eta = 0.4 at mu_norm = 2 leaves labels unfitted
# on some seeds, so the cells differ in their regime, not only in their numbers.
GRID = """
name = "tiny"
seeds = "0..2"
steps = 40
[config]
d = 20
n_test = 20
method = "span"
[axes]
mu_norm = [2, 20]
eta = [0.0, 0.4]
"""

MERGED = ["grid.csv", "summary.csv", "summary.json", "heatmap.svg", "heatmap.png"]


def tree(d: Path) -> dict[str, bytes]:
    """Every file under `d` (grid.json, cells/, merged/ without its set marker), by
    relative path, as bytes."""
    return {
        str(p.relative_to(d)): p.read_bytes()
        for p in sorted(d.rglob("*"))
        if p.is_file() and (p.parent.name != "merged" or p.name in MERGED)
    }


def configs():
    """Configs with every section the binding exposes: a preset, the K-class model with its
    layout, the factorised map with biases, an optimizer section with a schedule, a
    direction section, the protocol section, a dense random W(0) in joint mode."""
    layout3 = {"tokens": 8, "relevant": 1, "weak_same": 1, "weak_opposite": 2, "irrelevant": 4}
    return {
        "default": tokensel.Config(),
        "preset": tokensel.Config("official-final", steps=7, seed=2**63 - 1),
        "multiclass": tokensel.Config(model="multiclass", classes=3, d=40, layout=layout3, eta=0.15),
        "factorised": tokensel.Config.from_toml(
            'd = 12\nmode = "W"\n[init]\np = "gaussian"\np_scale = 0.2\nw = "identity"\n'
            "[factorised]\nm = 3\nbias = true\n"
        ),
        "adamw": tokensel.Config(
            step_size=1e-3,
            optimizer={"kind": "adamw", "schedule": "linear", "clip_norm": 1.0, "batch": 4},
        ),
        "normalized-gd": tokensel.Config(step_size=0.1, optimizer={"kind": "normalized-gd", "eps": 1e-9}),
        "direction": tokensel.Config(d=60, n_train=6, eta=0.0, direction={"pattern": "theorem"}),
        "protocol": tokensel.Config.from_toml(
            'n_train = 12\nd = 50\nflips = "bernoulli"\n[model]\nkind = "multiclass"\nclasses = 3\n'
            "[layout]\ntokens = 9\nrelevant = 1\nweak_same = 1\nweak_opposite = 2\nirrelevant = 5\n"
            '[optimizer]\nkind = "adamw"\nbatch = 4\n'
            "[protocol]\nn_clean = 18\nhead_epochs = 5\nseeds = [42, 314]\n"
        ),
        "joint": tokensel.Config(d=30, mode="joint", init={"w": "kaiming_uniform"}, step_size=1e-3,
                                 mu_norm=0.1 + 0.2, rho=1 / 3),
    }


@pytest.mark.parametrize("name", list(configs()))
def test_config_pickles_and_deep_copies_equal(name):
    cfg = configs()[name]
    # the section the config is about is in its TOML (else the test would not cover it)
    section = {"multiclass": "[model]", "factorised": "[factorised]", "adamw": "[optimizer]",
               "normalized-gd": "[optimizer]", "direction": "[direction]", "protocol": "[protocol]"}
    assert section.get(name, "") in cfg.to_toml()
    other = tokensel.Config(seed=cfg.seed + 1 if cfg.seed < 2**63 - 1 else 0)
    assert other != cfg  # equality can fail: it compares the configs
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(cfg, protocol))
        assert back == cfg and back.to_toml() == cfg.to_toml(), protocol
        assert type(back) is tokensel.Config
    deep = copy.deepcopy(cfg)
    assert deep == cfg and deep.to_toml() == cfg.to_toml()
    # inside containers, as a pool ships arguments
    assert pickle.loads(pickle.dumps({"c": [cfg, cfg]}))["c"][1] == cfg
    assert copy.copy(cfg) == cfg


def test_a_pickled_config_that_does_not_validate_raises_the_bindings_error():
    # a state edited to an invalid value (eta = 1) and one that is not a config at all
    state = tokensel.Config().__reduce__()
    ctor, (text,) = state
    assert "eta = 0.2" in text
    with pytest.raises(errors.ConfigError, match="eta"):
        ctor(text.replace("eta = 0.2", "eta = 1.0"))
    with pytest.raises(errors.ParseError, match="pickled config"):
        ctor(text.replace("eta = 0.2", "eta = 0.2\nbogus = 1"))
    with pytest.raises(errors.ParseError, match="pickled config"):
        pickle.loads(pickle.dumps(tokensel.Config()).replace(b"eta = 0.2", b"eta = [0]"))


def test_grid_cells_are_small_picklable_and_in_the_clis_order():
    cells = tokensel.grid_cells(GRID)
    assert [c.index for c in cells] == list(range(8))
    # the axes in the grid's order (a TOML table's keys sorted, as grid.json has them), the
    # first axis outermost, seeds innermost
    assert list(cells[0].point) == ["eta", "mu_norm"]
    assert [(c.point["eta"], c.point["mu_norm"], c.seed) for c in cells[:3]] == [
        (0.0, 2.0, 0),
        (0.0, 2.0, 1),
        (0.0, 20.0, 0),
    ]
    assert len({c.hash for c in cells}) == 8
    assert pickle.loads(pickle.dumps(cells)) == cells
    assert len(pickle.dumps(cells[0])) < 400


def run_serial(spec, out):
    return [tokensel.run_cell(spec, c, out) for c in tokensel.grid_cells(spec)]


def test_serial_joblib_threads_loky_and_the_cli_write_the_same_bytes(cli, tmp_path):
    if os.environ.get("TOKENSEL_REQUIRE_JOBLIB"):
        import joblib  # .ci/run installs it: a missing joblib fails there
    else:
        joblib = pytest.importorskip("joblib")
    spec_file = tmp_path / "tiny.toml"
    spec_file.write_text(GRID)

    serial = tmp_path / "serial"
    runs = run_serial(GRID, serial)
    assert all(r.ran and r.failed is None for r in runs)
    summary = tokensel.grid_merge(serial)
    assert (summary["runs_ok"], summary["runs_missing"]) == (8, 0)
    assert "wrote" not in str(summary) and "mu_norm" in str(summary)

    out_cli = tmp_path / "cli"
    done = cli("grid", "--grid", spec_file, "--out", out_cli, "--quiet", "--json")
    expected = tree(out_cli)
    assert len([k for k in expected if k.startswith("cells/")]) == 8
    assert set(MERGED) <= {k.split("/")[-1] for k in expected}
    assert tree(serial) == expected
    assert tokensel.grid_merge(serial) == json.loads(done.stdout)

    for backend, spec in [("threading", GRID), ("loky", spec_file)]:
        out = tmp_path / backend
        cells = tokensel.grid_cells(spec)
        results = joblib.Parallel(n_jobs=2, backend=backend)(
            joblib.delayed(tokensel.run_cell)(spec, c, out) for c in cells
        )
        assert [r.index for r in results] == list(range(8)) and all(r.ran for r in results)
        tokensel.grid_merge(out)
        assert tree(out) == expected, backend

    # a second pass skips every cell (resumable) and writes nothing new
    again = run_serial(GRID, serial)
    assert not any(r.ran for r in again)
    assert tree(serial) == expected


def test_any_partition_merges_to_the_same_bytes(cli, tmp_path):
    cells = tokensel.grid_cells(GRID)
    whole = tmp_path / "whole"
    run_serial(GRID, whole)
    tokensel.grid_merge(whole)
    # cells 5 and 2 by index, then a partial merge (exit 1 in the CLI: a warning here),
    # then the rest in another order, some run twice
    part = tmp_path / "part"
    for i in (5, 2):
        assert tokensel.run_cell(GRID, i, part).ran
    with pytest.warns(RuntimeWarning, match="6 runs have no cell file yet"):
        partial = tokensel.grid_merge(part)
    assert partial["runs_missing"] == 6
    assert cli("grid", "merge", part, check=False).returncode == 1
    for c in reversed(cells):
        r = tokensel.run_cell(GRID, c, part)
        assert r.ran == (c.index not in (2, 5)), c.index
    tokensel.grid_merge(part)
    assert tree(part) == tree(whole)
    # the CLI's shards into the same directory find the cells done
    shard = cli("grid", "--grid", _write(tmp_path, GRID), "--out", part, "--shard", "2/3", "--quiet")
    assert "shard 2/3" in shard.stdout and "ran 0 of 3 runs (3 already done)" in shard.stderr
    assert tree(part) == tree(whole)


def _write(tmp_path, text):
    p = tmp_path / "grid.toml"
    p.write_text(text)
    return p


def test_a_failed_cell_is_recorded_as_the_cli_records_it(cli, tmp_path):
    # normalised GD past f64's range stops the run: a failed cell, the grid goes on
    spec = GRID.replace('method = "span"', 'step_size = 1e300\n[config.optimizer]\nkind = "normalized-gd"')
    spec = spec.replace('mu_norm = [2, 20]\neta = [0.0, 0.4]', "mu_norm = [2]")
    cells = tokensel.grid_cells(spec)
    results = [tokensel.run_cell(spec, c, tmp_path / "py") for c in cells]
    if not any(r.failed for r in results):
        pytest.skip("this config did not stop: nothing to compare")
    summary = tokensel.grid_merge(tmp_path / "py")
    assert summary["runs_failed"] == sum(1 for r in results if r.failed)
    cli("grid", "--grid", _write(tmp_path, spec), "--out", tmp_path / "cli", "--quiet")
    assert tree(tmp_path / "py") == tree(tmp_path / "cli")


def test_refusals_before_any_work(tmp_path):
    out = tmp_path / "out"
    cells = tokensel.grid_cells(GRID)
    # a bad axis value, an unknown key, a malformed TOML, an unknown preset, too many runs
    with pytest.raises(errors.ConfigError, match="eta"):
        tokensel.grid_cells(GRID.replace("eta = [0.0, 0.4]", "eta = [0.0, 1.5]"))
    with pytest.raises(errors.ParseError, match="not a config key"):
        tokensel.grid_cells(GRID.replace("eta = [0.0, 0.4]", "etaa = [0.0]"))
    with pytest.raises(errors.ParseError):
        tokensel.grid_cells(GRID + "\n[axes\n")
    with pytest.raises(errors.ConfigError, match="unknown preset"):
        tokensel.grid_cells("heatmap-v9")
    with pytest.raises(errors.RefusedError, match="100000"):
        tokensel.grid_cells(GRID.replace("eta = [0.0, 0.4]", 'eta = "0:0.5:1e-5"'))
    # a missing grid file; a file path given as str; a spec of the wrong type
    with pytest.raises(errors.TokenselIOError):
        tokensel.grid_cells(tmp_path / "missing.toml")
    path = _write(tmp_path, GRID)
    with pytest.raises(errors.ConfigError, match="pathlib.Path"):
        tokensel.grid_cells(str(path))
    assert tokensel.grid_cells(path) == cells
    with pytest.raises(errors.ConfigError, match="spec"):
        tokensel.grid_cells(42)
    # a cell of another grid, an index out of range, a bad cell or directory argument
    other = tokensel.grid_cells(GRID.replace("steps = 40", "steps = 41"))
    with pytest.raises(errors.MismatchError, match="another grid"):
        tokensel.run_cell(GRID, other[3], out)
    with pytest.raises(errors.MismatchError, match="8 cells"):
        tokensel.run_cell(GRID, 8, out)
    with pytest.raises(errors.ConfigError, match="cell"):
        tokensel.run_cell(GRID, -1, out)
    with pytest.raises(errors.ConfigError, match="cell"):
        tokensel.run_cell(GRID, "3", out)
    with pytest.raises(errors.ConfigError, match="out_dir"):
        tokensel.run_cell(GRID, 0, None)
    assert not out.exists(), "nothing was written"
    # a directory holding another grid; a directory that is not a grid's
    tokensel.run_cell(GRID, 0, out)
    with pytest.raises(errors.MismatchError, match="another grid"):
        tokensel.run_cell(GRID.replace("steps = 40", "steps = 41"), 0, out)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(errors.PathError, match="no grid.json"):
        tokensel.run_cell(GRID, 0, foreign)
    with pytest.raises(errors.PathError, match="no grid.json"):
        tokensel.grid_merge(foreign)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]

"""`tokensel.protocol` (docs/protocol.md): the binding's report
is the command line's, bit for bit; a pool given as arrays is used as given (its blocks
drawn from it); bad pools are refused before any work; and examples/protocol_real.py runs
end to end at small sizes where scikit-learn and matplotlib are installed."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tokensel

ROOT = Path(__file__).resolve().parents[2]

SMALL = """
n_train = 12
n_test = 40
d = 50
eta = 0.2
flips = "bernoulli"
steps = 20
step_size = 5e-3
[model]
kind = "multiclass"
classes = 3
[layout]
tokens = 9
relevant = 1
weak_same = 1
weak_opposite = 2
irrelevant = 5
[optimizer]
kind = "adamw"
schedule = "linear"
clip_norm = 1.0
batch = 4
[protocol]
n_clean = 18
head_epochs = 5
seeds = [42, 314]
"""


def pool_config(n):
    """The protocol's config without its section, at n training samples: the pool's."""
    return tokensel.Config.from_toml(SMALL.split("[protocol]")[0].replace("n_train = 12", f"n_train = {n}"))


def test_binding_report_is_the_command_lines(cli, tmp_path):
    cfg_path = tmp_path / "p.toml"
    cfg_path.write_text(SMALL)
    out = cli("protocol", "--config", cfg_path, "--json", "--quiet")
    assert tokensel.protocol(tokensel.Config.from_toml(SMALL)) == json.loads(out.stdout)


def test_a_pool_of_arrays_gives_the_supplied_source_and_rows_per_seed():
    cfg = tokensel.Config.from_toml(SMALL.replace("eta = 0.2", "eta = 0"))
    d = tokensel.data(pool_config(30))
    pool = {k: d[k] for k in ("X_train", "X_test", "y_test")}
    pool["y_train"] = d["y_true_train"]
    rep = tokensel.protocol(cfg, data=pool)
    assert rep["source"] == "supplied"
    assert [r["seed"] for r in rep["rows"]] == [42, 314]
    for r in rep["rows"]:
        assert r["noisy"] == 0 and r["noisy_fitted"] is None
        assert r["fits_noisy_labels"] == (r["train_accuracy"] == 1.0)


def test_bad_pools_are_refused():
    cfg = tokensel.Config.from_toml(SMALL)
    d = tokensel.data(pool_config(20))
    pool = {"X_train": d["X_train"], "y_train": d["y_true_train"], "X_test": d["X_test"], "y_test": d["y_test"]}
    with pytest.raises(tokensel.errors.MismatchError, match="n_clean \\+ n_train"):
        tokensel.protocol(cfg, data=pool)
    bad = dict(pool, X_train=np.where(np.arange(pool["X_train"].size).reshape(pool["X_train"].shape) == 7, np.nan, pool["X_train"]))
    with pytest.raises(tokensel.errors.ConfigError, match="not finite"):
        tokensel.protocol(cfg, data=bad)
    with pytest.raises(tokensel.errors.ConfigError, match="unknown key"):
        tokensel.protocol(cfg, data=dict(pool, bogus=1))
    with pytest.raises(tokensel.errors.ConfigError, match="protocol"):
        tokensel.protocol(tokensel.Config())


def test_example_runs_at_small_sizes(tmp_path):
    for m in ("sklearn", "matplotlib"):
        pytest.importorskip(m, reason=f"examples/protocol_real.py needs {m} (not installed in CI)")
    out = tmp_path / "p.png"
    j = tmp_path / "p.json"
    r = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "protocol_real.py"), "--datasets", "digits",
         "--ns", "20", "--etas", "0.2", "--sweep-etas", "", "--epochs", "3", "--seeds", "42",
         "--mode", "p", "--out", str(out), "--json", str(j)],
        capture_output=True, text=True,
    )
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 0
    rep = json.loads(j.read_text())
    assert rep[0]["n"] == 20 and rep[0]["report"]["rows"][0]["seed"] == 42
    assert "fits 0/1" in r.stdout or "fits 1/1" in r.stdout

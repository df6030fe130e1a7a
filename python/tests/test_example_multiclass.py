"""examples/multiclass_real.py (K = 10 real data) at small sizes: it runs end to end on both
data sets and draws its figure, and MNIST-1D is generated locally (its download path never
called). Needs scikit-learn, mnist1d and matplotlib, which CI does not install: skipped
there, with the reason."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "multiclass_real.py"


def needs(*modules):
    for m in modules:
        pytest.importorskip(m, reason=f"examples/multiclass_real.py needs {m} (not installed in CI)")


def test_mnist1d_is_generated_locally(monkeypatch):
    """The example's MNIST-1D tokens come from make_dataset: with every HTTP call failing,
    the 5,000 sequences (4,000 training, 1,000 test) are still made; NumPy's global
    generator (which make_dataset seeds) is left as it was."""
    needs("mnist1d", "sklearn")
    import numpy as np
    import requests

    def no_network(*a, **k):
        raise AssertionError("the example called the network")

    monkeypatch.setattr(requests, "get", no_network)
    monkeypatch.setattr(requests.Session, "request", no_network)
    spec = importlib.util.spec_from_file_location("multiclass_real", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    raw, y, n_pool = mod.mnist1d_tokens()
    assert np.array_equal(np.random.get_state()[1], before)
    assert raw.shape == (5000, 10, 50) and n_pool == 4000
    assert sorted(set(y.tolist())) == list(range(10))
    # token t: its 4 values in block t, zeros in the other blocks, and the position code e_t
    assert np.array_equal(raw[:, :, 40:], np.broadcast_to(np.eye(10), (5000, 10, 10)))
    blocks = raw[:, :, :40].reshape(5000, 10, 10, 4)
    off = ~np.eye(10, dtype=bool)
    assert np.all(blocks[:, off] == 0) and np.any(blocks[:, ~off] != 0)


def test_example_runs_on_both_data_sets(tmp_path):
    """One seed, two noise rates, a few steps: a row per run with ceil(eta n) noisy labels
    (0 and 40 of n = 100), the medians, and a PNG figure."""
    needs("sklearn", "mnist1d", "matplotlib")
    fig = tmp_path / "fig.png"
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--seeds", "1", "--steps", "20", "--etas", "0,0.4", "--out", str(fig)],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.split()[:1] in (["digits"], ["mnist1d"])]
    runs = [r for r in rows if len(r) == 10]
    assert [(r[0], r[1], r[3]) for r in runs] == [
        ("digits", "0.0", "0"), ("digits", "0.4", "40"), ("mnist1d", "0.0", "0"), ("mnist1d", "0.4", "40")
    ]
    for r in runs:
        assert all(0.0 <= float(v) <= 1.0 for v in (r[4], r[6], r[7])), r
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

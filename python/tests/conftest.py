"""Shared fixtures: the tokensel command line (for bit-identity against the CLI) and small
configs at which every code path under test runs in seconds."""

import os
import subprocess
from pathlib import Path

import pytest

import tokensel

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cli():
    """Run the `tokensel` binary (TOKENSEL_BIN, or the workspace's debug build) and return
    its completed process; a missing binary fails (the CLI is what the tests compare with)."""
    path = os.environ.get("TOKENSEL_BIN") or str(ROOT / "target" / "debug" / "tokensel")
    if not Path(path).is_file():
        pytest.fail(f"no tokensel binary at {path}: run `cargo build` or set TOKENSEL_BIN")

    def run(*args, check=True):
        return subprocess.run([path, *map(str, args)], capture_output=True, text=True, check=check)

    return run


@pytest.fixture
def small():
    """The balanced preset at d = 50 with 40 test samples (p-mode, W = I)."""
    return tokensel.Config(d=50, n_test=40, steps=300)


@pytest.fixture
def small_joint():
    """Joint mode with a dense random W(0) (W0.npy is exported)."""
    return tokensel.Config(
        d=30, n_test=20, steps=50, mode="joint", init={"w": "kaiming_uniform"}, step_size=1e-3
    )

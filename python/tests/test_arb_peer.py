"""examples/arb_peer.py when a tokensel command fails or is killed partway through: one
line on stderr naming the command, a nonzero exit status, no Python traceback."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("flint", reason="examples/arb_peer.py needs python-flint")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "arb_peer.py"


def fake_tokensel(tmp_path, body):
    """A `tokensel` that answers --version as tokensel and runs the shell `body` for any
    other command (its arguments in "$@")."""
    exe = tmp_path / "tokensel"
    exe.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "tokensel 0.0.0-fake"; exit 0; fi\n'
        f"{body}\n"
    )
    exe.chmod(0o755)
    return exe


def peer(exe, *args):
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--tokensel", str(exe), "--warm", "0", "--steps", "20", *args],
        capture_output=True, text=True, timeout=600,
    )


def assert_one_line(out, *words):
    assert out.returncode != 0
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("arb_peer.py: "), lines[0]
    for w in words:
        assert w in lines[0], lines[0]
    assert out.stdout == ""


def test_data_killed(tmp_path):
    out = peer(fake_tokensel(tmp_path, "kill -9 $$"))
    assert_one_line(out, "`tokensel data`", "killed by SIGKILL")
    assert out.returncode == 1


def test_data_fails(tmp_path):
    out = peer(fake_tokensel(tmp_path, 'echo "working" >&2; echo "error: disk full" >&2; exit 3'))
    assert_one_line(out, "`tokensel data`", "exit status 3", "error: disk full")


def test_data_writes_nothing(tmp_path):
    out = peer(fake_tokensel(tmp_path, "exit 0"))
    assert_one_line(out, "`tokensel data` did not write a readable data set")


@pytest.fixture
def real_tokensel(cli):
    """The binary the `cli` fixture runs (TOKENSEL_BIN or the workspace's debug build)."""
    return os.environ.get("TOKENSEL_BIN") or str(ROOT / "target" / "debug" / "tokensel")


@pytest.mark.parametrize(
    "cost, words",
    [
        ("kill -9 $$", ("`tokensel cost`", "killed by SIGKILL")),
        ('echo "{\\"rows\\": [" ; exit 0', ("`tokensel cost --json` printed no cost report",)),
    ],
)
def test_cost_fails_after_the_peer_ran(tmp_path, real_tokensel, cost, words):
    """`tokensel data` works (the real binary), the peer times its steps, then `tokensel
    cost` is killed or prints a truncated report."""
    body = f'if [ "$1" = "data" ]; then exec "{real_tokensel}" "$@"; fi\n{cost}'
    out = peer(fake_tokensel(tmp_path, body))
    assert_one_line(out, *words)
    assert out.returncode == 1

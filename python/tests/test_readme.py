"""The user guide's "From Python" (docs/python.md): its notebook example runs as written and says
what it prints; in "Grids from Python" the joblib recipe (every block fenced ```python) runs
and prints what the text says, and the cluster recipes (fenced ```python notest: submitit and
Ray, not installed here) are not run."""

import contextlib
import io
import os
import re

import pytest

from conftest import ROOT


def test_readme_notebook_example_runs():
    text = (ROOT / "docs" / "python.md").read_text()
    section = text.split("# From Python", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/python.md", "exec"), {})
    lines = out.getvalue().splitlines()
    # the NumPy run agrees with the twin and departs from no candidate; the certificate
    # decides everything, with the proved tie at step 0
    assert lines[-2] == "True None", lines
    assert lines[-1] == "True 0", lines


def test_grid_recipes_joblib_runs_and_prints_what_the_text_says(tmp_path, monkeypatch):
    if not os.environ.get("TOKENSEL_REQUIRE_JOBLIB"):
        pytest.importorskip("joblib")
    text = (ROOT / "docs" / "python.md").read_text()
    section = text.split("\n## Grids from Python\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(python[^\n]*)\n(.*?)```", section, re.S)
    assert [info for info, _ in blocks] == ["python", "python notest", "python notest"]
    assert "submitit" in blocks[1][1] and "ray.remote" in blocks[2][1]
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(blocks[0][1], "docs/python.md", "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines == ["threading 8 ran, 0 skipped", "loky 0 ran, 8 skipped", "8 runs ok, 0 missing"]
    for line in lines:
        assert f"`{line}`" in section, line
    assert len(list((tmp_path / "grid-py" / "cells").iterdir())) == 8

"""README "From Python": its notebook example runs as written and says what it prints."""

import contextlib
import io
import re

from conftest import ROOT


def test_readme_notebook_example_runs():
    text = (ROOT / "README.md").read_text()
    section = text.split("## From Python", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines[-1] == "True []", lines  # the NumPy run agrees with the twin: no findings

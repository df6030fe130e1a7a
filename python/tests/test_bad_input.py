"""Bad input raises a tokensel.errors class (a ValueError for input) with the library's
message, before any work; it never crashes the interpreter."""

import subprocess
import sys

import numpy as np
import pytest

import tokensel
from tokensel import errors

SMALL = dict(d=10, n_test=5, steps=3)


@pytest.mark.parametrize(
    "make, kind, words",
    [
        (lambda: tokensel.Config(eta=1.5), errors.ConfigError, "`eta`"),
        (lambda: tokensel.Config(d=0), errors.ConfigError, "`d`"),
        (lambda: tokensel.Config(eta=float("nan")), errors.ConfigError, "JSON"),
        (lambda: tokensel.Config(steps=-1), errors.ParseError, "steps"),
        (lambda: tokensel.Config(nope=1), errors.ParseError, "unknown field `nope`"),
        (lambda: tokensel.Config(layout={"tokens": 3}), errors.ConfigError, "layout"),
        (lambda: tokensel.Config(mode="q"), errors.ParseError, "unknown variant"),
        (lambda: tokensel.Config(preset="nope"), errors.ConfigError, "preset"),
        (lambda: tokensel.Config.from_toml("d = ["), errors.ParseError, "toml"),
        (lambda: tokensel.run(tokensel.Config(**SMALL), "f16"), errors.ConfigError, "arithmetic"),
        (lambda: tokensel.run(tokensel.Config(**SMALL), "mpfr", prec=10), errors.ConfigError, "prec"),
        (lambda: tokensel.run(tokensel.Config(**SMALL), "f64", prec=80), errors.ConfigError, "prec"),
        (lambda: tokensel.run(tokensel.Config(d=10**8, n_train=10**4)), errors.RefusedError, "refused"),
        (lambda: tokensel.compare(tokensel.Config(**SMALL), tol=-1.0), errors.ConfigError, "tol"),
        (lambda: tokensel.compare(tokensel.Config(**SMALL), twin_method="x"), errors.ConfigError, "twin_method"),
    ],
)
def test_bad_input_raises(make, kind, words):
    with pytest.raises(kind) as e:
        make()
    assert isinstance(e.value, ValueError)
    assert words.lower() in str(e.value).lower()


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda: tokensel.svm(tokensel.Config(**SMALL), None), "`pattern`"),
        (lambda: tokensel.svm(tokensel.Config(**SMALL), 3), "`pattern`"),
        (lambda: tokensel.run(tokensel.Config(**SMALL), "f16"), "`arithmetic`"),
        (lambda: tokensel.run(tokensel.Config(**SMALL), "mpfr", prec=10), "`prec`"),
        (lambda: tokensel.compare(tokensel.Config(**SMALL), tol=-1.0), "`tol`"),
        (lambda: tokensel.run(tokensel.Config(**SMALL), data=3), "`data`"),
        # issue 40: keyword arguments and patterns the library checks said "invalid config"
        (lambda: tokensel.compare(tokensel.Config(**SMALL), twin_method="x"), "`twin_method`"),
        (lambda: tokensel.svm(tokensel.Config(**SMALL), [0]), "`pattern`"),
    ],
)
def test_bad_arguments_name_the_argument(make, name):
    """A function argument of the wrong type or value (``svm(cfg, None)`` raised a bare
    TypeError, issue 40) is a ConfigError naming the argument, and says "invalid
    argument", not "invalid config": it is not a config key."""
    with pytest.raises(errors.ConfigError) as e:
        make()
    message = str(e.value)
    assert name in message and "invalid argument" in message, message
    assert "invalid config" not in message, message


def trajectory(**changes):
    cfg = tokensel.Config(**SMALL)
    t = {"steps": [0, 1], "dtype": "float64", "p": np.zeros((2, 10)), "loss": [0.7, 0.7]}
    t.update(changes)
    return cfg, {k: v for k, v in t.items() if v is not None}


@pytest.mark.parametrize(
    "changes, kind, words",
    [
        (dict(dtype=None), errors.ParseError, "dtype"),
        (dict(dtype="float16"), errors.ParseError, "dtype"),
        (dict(steps=None), errors.ParseError, "steps"),
        (dict(steps=[1, 0]), errors.ParseError, "increase"),
        (dict(steps=[-1, 0]), errors.ParseError, "steps"),
        (dict(steps=[0.5, 1]), errors.ParseError, "steps"),
        (dict(steps=[0, 99]), errors.MismatchError, "step 99"),
        (dict(z=np.zeros((2, 10))), errors.ParseError, "unknown key `z`"),
        (dict(p=np.zeros((2, 11))), errors.MismatchError, "`p`"),
        (dict(p=np.zeros((3, 10))), errors.ParseError, "3 entries for 2 steps"),
        (dict(p=np.float64(1.0)), errors.ParseError, "0-dimensional"),
        (dict(p=np.array(["a", "b"])), errors.ParseError, "float array"),
        (dict(config={"step_size": 0.5}), errors.MismatchError, "step_size"),
        (dict(config={"nope": 1}), errors.MismatchError, "nope"),
        (dict(format="tokensel-external/9"), errors.ParseError, "format"),
    ],
)
def test_bad_trajectory_dict_raises(changes, kind, words):
    """Errors in the trajectory dict are trajectory errors (ParseError, "external
    trajectory"), not config errors (issue 27)."""
    cfg, t = trajectory(**changes)
    with pytest.raises(kind) as e:
        tokensel.judge(cfg, t)
    assert words.lower() in str(e.value).lower()
    if kind is errors.ParseError:
        assert "external trajectory" in str(e.value) and "invalid config" not in str(e.value)


def test_non_finite_external_values_are_judged_not_raised():
    cfg, t = trajectory(p=np.full((2, 10), np.nan))
    report = tokensel.judge(cfg, t)
    assert not report["within_tolerance"]


def test_a_diverging_run_stops_with_non_finite_error():
    with pytest.raises(errors.NonFiniteError) as e:
        tokensel.run(
            tokensel.Config(d=10, n_test=5, steps=50, step_size=1e308, mode="joint", method="direct")
        )
    assert "non-finite q at step 2" in str(e.value)


def test_labels_are_exactly_plus_or_minus_one():
    """Supplied labels are read as numbers and must be exactly +1 or -1: 1.9 or 0.5 is
    refused (never truncated to an int8), and the message names the value given."""
    cfg = tokensel.Config(d=20, n_train=4, n_test=10, steps=10)
    a = tokensel.data(cfg)
    d = {k: a[k] for k in ("X_train", "y_train", "X_test", "y_test", "nu")}
    for key, bad, shown in [("y_train", a["y_train"] * 1.9, "1.9"), ("y_test", a["y_test"] * 0.5, "0.5")]:
        with pytest.raises(errors.ConfigError) as e:
            tokensel.run(cfg, data=dict(d, **{key: bad}))
        assert key in str(e.value) and shown in str(e.value)
    tokensel.run(cfg, data=dict(d, y_train=a["y_train"].astype(np.float64)))


def test_ctrl_c_during_a_run_raises_keyboard_interrupt_not_a_panic(tmp_path):
    """A SIGINT while the library computes (GIL released) is raised as KeyboardInterrupt
    when the call returns, never as a Rust panic from the NumPy conversion."""
    script = tmp_path / "interrupt.py"
    script.write_text(
        "import os, signal, threading, tokensel\n"
        "cfg = tokensel.Config(d=20, n_train=4, n_test=10, steps=1500000)\n"
        "threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
        "tokensel.run(cfg)\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert out.returncode != 0
    assert "KeyboardInterrupt" in out.stderr, out.stderr
    assert "panicked" not in out.stderr and "PanicException" not in out.stderr, out.stderr

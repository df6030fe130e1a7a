"""certify and compare's enclosure from Python: the same certificate as `tokensel certify
--json` (the same JSON, key for key and value for value), and bad options refused before
any work."""

import json

import pytest

import tokensel
from tokensel import errors


def test_certificate_is_the_clis(small, cli, tmp_path):
    cfg = small.replace(steps=100)
    cert = tokensel.certify(cfg)
    assert cert["format"] == "tokensel-certificate/2"
    assert cert["decided"] is True
    # step 0 is a proved tie (p = 0), not an undecided decision
    assert cert["ties"]["first"] == 0
    path = tmp_path / "c.toml"
    path.write_text(cfg.to_toml())
    out = cli("certify", "--config", path, "--json", "--quiet")
    assert json.loads(out.stdout) == cert


def test_compare_measures_against_the_enclosure(small):
    report = tokensel.compare(small.replace(steps=50), prec=128, certify=128, predictor_steps=None)
    assert report["enclosure"] is not None
    assert report["predictor"]["steps"] == 50
    assert report["predictor"]["bits_equal"] is True


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda c: tokensel.certify(c, method="x"), "method"),
        (lambda c: tokensel.certify(c, prec=1), ""),
        (lambda c: tokensel.compare(c, certify=1), ""),
    ],
)
def test_bad_options_raise(small, call, field):
    with pytest.raises(errors.InvalidInputError) as e:
        call(small)
    assert field in str(e.value)

"""A W0 in supplied data is checked against the W(0) the config implies: numpy.eye(d) where
that is the identity (p-mode with init.w = "identity" keeps no matrix, and tokensel.data
gives none), any other matrix refused with the entry that differs."""

import numpy as np
import pytest

import tokensel
from tokensel import errors


@pytest.fixture(scope="module")
def cfg():
    """The balanced preset (p-mode, init.w = "identity") at a small size."""
    return tokensel.Config(d=40, n_test=30, steps=200)


def test_identity_w0_is_accepted_where_the_config_implies_it(cfg):
    """p-mode with init.w = "identity" keeps no W(0) (tokensel.data gives none), but W is
    the identity: numpy.eye(d) is what the config implies, in any float or integer dtype."""
    c = cfg.replace(eta=0.0, steps=20)
    arrays = tokensel.data(c)
    assert "W0" not in arrays
    plain = tokensel.run(c, data=arrays)
    for w0 in (np.eye(c.d), np.eye(c.d, dtype=np.float32), np.eye(c.d, dtype=np.int64), np.asfortranarray(np.eye(c.d))):
        assert tokensel.run(c, data={**arrays, "W0": w0}).digest == plain.digest


@pytest.mark.parametrize("mode", ["W", "joint"])
def test_identity_w0_in_a_dense_mode(cfg, mode):
    """W-mode and joint mode with init.w = "identity": tokensel.data gives W0 = I, and
    numpy.eye(d) is accepted too."""
    c = cfg.replace(eta=0.0, steps=10, mode=mode, init={"p": "gaussian", "w": "identity"})
    arrays = tokensel.data(c)
    np.testing.assert_array_equal(arrays["W0"], np.eye(c.d))
    assert tokensel.run(c, data={**arrays, "W0": np.eye(c.d)}).digest == tokensel.run(c, data=arrays).digest


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda d: np.eye(d) * 2, "W0[0, 0] = 2e0"),
        (lambda d: np.eye(d) + np.eye(d, k=1) * 1e-300, "W0[0, 1] = 1e-300"),
        (lambda d: np.full((d, d), np.nan), "W0[0, 0] = NaN"),
        (lambda d: np.eye(d + 1), "shape [41, 41], the config gives (d, d) = (40, 40)"),
    ],
)
def test_w0_other_than_the_identity_is_refused(cfg, make, words):
    c = cfg.replace(eta=0.0, steps=5)
    arrays = tokensel.data(c)
    with pytest.raises(errors.MismatchError) as e:
        tokensel.run(c, data={**arrays, "W0": make(c.d)})
    message = str(e.value)
    assert "supplied `W0`" in message and words in message
    if "shape" not in words:
        assert 'the identity (init.w = "identity")' in message


def test_identity_w0_is_refused_where_the_config_draws_w0(small_joint):
    """A config with init.w = "kaiming_uniform" implies its drawn W(0), not the identity."""
    arrays = tokensel.data(small_joint.replace(eta=0.0))
    with pytest.raises(errors.MismatchError, match="kaiming_uniform") as e:
        tokensel.run(small_joint.replace(eta=0.0, steps=5), data={**arrays, "W0": np.eye(small_joint.d)})
    assert "supplied `W0`" in str(e.value)
    assert tokensel.run(small_joint.replace(eta=0.0, steps=5), data=arrays).summary

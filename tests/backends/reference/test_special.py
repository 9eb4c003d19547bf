"""erf and erfc against Python's math module, over the whole float64 range."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from lowbit.backends.reference.special import SWITCH, erf, erfc

RNG = np.random.default_rng(3)
POINTS = np.concatenate([
    np.linspace(-8, 8, 40001),
    RNG.standard_normal(20000) * 3,
    10.0 ** RNG.uniform(-320, 3, 20000) * RNG.choice([-1.0, 1.0], 20000),
    [SWITCH, -SWITCH, np.nextafter(SWITCH, 0), np.nextafter(-SWITCH, 0), 5e-324, -5e-324],
])  # fmt: skip


def _relative_error(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| / |exact|, where a subnormal result may be off by its one-ulp
    granularity (2 * 5e-324): such numbers carry few significant bits."""
    scale = np.where(exact == 0, 1.0, np.abs(exact))
    return np.maximum(np.abs(got - exact) - 1e-323, 0) / scale


def test_erf_relative_error_is_a_few_float64_ulps_everywhere():
    exact = np.array([math.erf(v) for v in POINTS])
    assert _relative_error(erf(POINTS), exact).max() < 1e-13


def test_erfc_is_accurate_where_gelu_uses_it():
    exact = np.array([math.erfc(v) for v in POINTS])
    err = _relative_error(erfc(POINTS), exact)
    # Below SWITCH, 1 - erf loses up to ~3.5 digits as erfc falls to 4e-4; still far beyond
    # float32 precision. Above it, the continued fraction is accurate to float64 ulps.
    assert err[POINTS < SWITCH].max() < 1e-11
    assert err[POINTS >= SWITCH].max() < 1e-13


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_erf_is_odd_bounded_and_matches_math(x):
    got = float(erf(np.array(x))[()])
    assert -1.0 <= got <= 1.0
    assert got == -float(erf(np.array(-x))[()])
    assert math.isclose(got, math.erf(x), rel_tol=1e-13, abs_tol=1e-323)


def test_special_values_and_signed_zero():
    got = erf(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0]))
    assert np.isnan(got[0])
    np.testing.assert_array_equal(got[1:], [1.0, -1.0, 0.0, 0.0])
    assert np.signbit(got[4]) and not np.signbit(got[3])
    np.testing.assert_array_equal(erfc(np.array([np.inf, -np.inf, 30.0])), [0.0, 2.0, 0.0])
    assert np.isnan(erfc(np.array([np.nan]))[0])


def test_shapes_are_kept():
    assert erf(np.zeros((2, 0, 3))).shape == (2, 0, 3)
    assert erf(np.array(0.5)).shape == ()
    assert erfc(np.ones((4, 1))).shape == (4, 1)

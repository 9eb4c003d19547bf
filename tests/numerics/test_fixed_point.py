"""Integer requantization: error bounds against exact rescaling, edges, ties and refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowbit.numerics import fixed_point as fp
from lowbit.numerics.fixed_point import INT32_MAX, INT32_MIN

OUTPUTS = [(-128, 127, 8), (0, 255, 8), (-32768, 32767, 16)]
EXTREMES = np.array([INT32_MIN, INT32_MIN + 1, -(2**30), -1, 0, 1, 2**30, INT32_MAX - 1, INT32_MAX])


def _encode(M, method, bits):
    return fp.encode(M, method, output_bits=bits)


def _exact(acc, M, zp, qmin, qmax):
    """The real result clamp(acc * M + zp): no rounding at all."""
    return np.clip(np.asarray(acc, dtype=np.float64) * M + zp, qmin, qmax)


@st.composite
def requant_cases(draw):
    M = math.ldexp(draw(st.floats(0.5, 1.0, exclude_max=True)), draw(st.integers(-40, 40)))
    qmin, qmax, bits = draw(st.sampled_from(OUTPUTS))
    zp = draw(st.integers(qmin, qmax))
    targets = draw(st.lists(st.floats(qmin - zp - 3, qmax - zp + 3), min_size=1, max_size=40))
    near = np.clip(np.rint(np.array(targets) / M), INT32_MIN, INT32_MAX).astype(np.int64)
    wide = draw(st.lists(st.integers(INT32_MIN, INT32_MAX), max_size=20))
    acc = np.concatenate([near, np.array(wide, dtype=np.int64), EXTREMES])
    return M, acc, zp, qmin, qmax, bits


@pytest.mark.parametrize("method", fp.METHODS)
@settings(max_examples=300, deadline=None)
@given(case=requant_cases())
def test_within_proven_bound_of_exact_rescaling(method, case):
    M, acc, zp, qmin, qmax, bits = case
    params = _encode(M, method, bits)
    got = fp.requantize(acc, params, zp, qmin, qmax)
    assert got.dtype == np.int64 and np.all((got >= qmin) & (got <= qmax))
    exact = _exact(acc, M, zp, qmin, qmax)
    assert np.all(np.abs(got - exact) <= fp.error_bound(params, acc) + 1e-9)
    documented = fp.Q31_MAX_ERROR if method == fp.Q31 else fp.PRESCALE_MAX_ERROR[bits]
    inside = (exact > qmin) & (exact < qmax)
    assert np.all(np.abs(got - exact)[inside] <= documented)


@settings(max_examples=200, deadline=None)
@given(case=requant_cases())
def test_q31_is_gemmlowp_bit_for_bit(case):
    """Our floor-based expression equals gemmlowp's SaturatingRoundingDoublingHighMul (nudge,
    truncating division) followed by RoundingDivideByPOT (mask and threshold)."""
    M, acc, *_ = case
    params = fp.encode(M, fp.Q31)
    m, left, right = int(params.multiplier), int(params.left_shift), int(params.right_shift)
    acc = acc[np.abs(acc.astype(object) * (1 << left)) <= INT32_MAX]
    got = fp.requantize(acc, params, 0, -(2**29), 2**29)
    for x, y in zip(acc.tolist(), got.tolist(), strict=True):
        ab = x * (1 << left) * m
        nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
        high = int((ab + nudge) / (1 << 31)) if abs(ab) < 2**52 else _trunc_div(ab + nudge, 2**31)
        mask = (1 << right) - 1
        threshold = (mask >> 1) + (1 if high < 0 else 0)
        want = (high >> right) + (1 if (high & mask) > threshold else 0)
        assert y == max(-(2**29), min(2**29, want))


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // b
    return q if a >= 0 else -q


@pytest.mark.parametrize("method", fp.METHODS)
@pytest.mark.parametrize("M", [1e-6, 3.3e-7, 1e-9, 2.0**-32, 2.0**-32 * 1.5, 1e-12, 5e-324])
def test_tiny_multipliers(method, M):
    params = fp.encode(M, method)
    acc = np.concatenate([EXTREMES, np.arange(-1000, 1000) * 999_983])
    got = fp.requantize(acc, params, 3, -128, 127)
    want = fp.requantize_reference(acc, M, 3, -128, 127)
    assert np.all(np.abs(got - want) <= 1)
    if M < fp.TINY_M:
        np.testing.assert_array_equal(got, 3)
        np.testing.assert_array_equal(want, 3)
        assert np.all(params.effective_multiplier() == 0)


@pytest.mark.parametrize("method", fp.METHODS)
@pytest.mark.parametrize("M", [100.0, 255.9, 256.0, 1e3, 2.0**20, 1e9, 2.0**31, 1e30])
def test_huge_multipliers_saturate_every_nonzero_accumulator(method, M):
    acc = np.concatenate([EXTREMES, np.arange(-300, 301)])
    got = fp.requantize(acc, fp.encode(M, method), -5, -128, 127)
    want = fp.requantize_reference(acc, M, -5, -128, 127)
    np.testing.assert_array_equal(got, want)
    if M >= 256:
        np.testing.assert_array_equal(got, np.where(acc > 0, 127, np.where(acc < 0, -128, -5)))


@pytest.mark.parametrize("method", fp.METHODS)
@pytest.mark.parametrize("M", [1e-4, 1e-3, 0.3, 0.75, 1.0, 1.5, 99.0])
@pytest.mark.parametrize("qmin,qmax,bits", OUTPUTS)
def test_saturated_accumulators(method, M, qmin, qmax, bits):
    acc = np.array([INT32_MIN, INT32_MIN + 1, INT32_MAX - 1, INT32_MAX])
    got = fp.requantize(acc, _encode(M, method, bits), 0 if qmin else 7, qmin, qmax)
    np.testing.assert_array_equal(got, [qmin, qmin, qmax, qmax])


@pytest.mark.parametrize("k", range(-31, 8))
def test_powers_of_two(k):
    """2**k is encoded exactly, so results are the exact product rounded by each method's ties
    rule: prescale rounds once, half toward +inf; q31 rounds x/2 half up in the high multiply,
    then (for k < -1) that by 2**-(k+1) half away from zero."""
    M = 2.0**k
    ties = (2 * np.arange(-40, 41) + 1) << max(-k - 1, 0)
    acc = np.concatenate([np.arange(-2000, 2001), EXTREMES, ties[np.abs(ties) <= INT32_MAX]])
    for method in fp.METHODS:
        assert fp.encode(M, method, output_bits=16).effective_multiplier() == M
    real = acc.astype(np.float64) * M
    prescale = fp.requantize(acc, fp.encode(M, fp.PRESCALE, output_bits=16), 0, -32768, 32767)
    np.testing.assert_array_equal(prescale, np.clip(np.floor(real + 0.5), -32768, 32767))
    if k >= -1:
        want = np.floor(real + 0.5)
    else:
        high = np.floor(acc / 2 + 0.5)
        want = np.sign(high) * np.floor(np.abs(high) * 2.0 ** (k + 1) + 0.5)
    q31 = fp.requantize(acc, fp.encode(M, fp.Q31), 0, -32768, 32767)
    np.testing.assert_array_equal(q31, np.clip(want, -32768, 32767))


def test_q31_ties():
    # M = 1/2: a single rounding in the high multiply, ties toward +infinity.
    half = fp.encode(0.5, fp.Q31)
    assert int(half.right_shift) == 0
    np.testing.assert_array_equal(
        fp.requantize(np.array([-5, -3, -1, 1, 3, 5]), half), [-2, -1, 0, 1, 2, 3]
    )
    # M = 1/8: the high multiply gives an exact half in the shift's units, rounded away from 0.
    eighth = fp.encode(0.125, fp.Q31)
    assert int(eighth.right_shift) == 2
    np.testing.assert_array_equal(fp.requantize(np.array([-12, -4, 4, 12]), eighth),
                                  [-2, -1, 1, 2])
    # Double rounding: 0.3 * 1 = 0.3 goes to 1 (0.6 -> 1 in the high multiply, 0.5 -> 1).
    np.testing.assert_array_equal(fp.requantize(np.array([-1, 1]), fp.encode(0.3, fp.Q31)),
                                  [-1, 1])


def test_prescale_ties_round_toward_plus_infinity():
    params = fp.encode(0.25, fp.PRESCALE)
    np.testing.assert_array_equal(
        fp.requantize(np.array([-6, -2, 2, 6]), params), [-1, 0, 1, 2]
    )


def test_reference_rounds_half_to_even_exactly():
    np.testing.assert_array_equal(
        fp.requantize_reference(np.array([-3, -1, 1, 3, 5]), 0.5), [-2, 0, 0, 2, 2]
    )
    # float64 rounds this product to exactly 17330.5, a tie that rint sends to 17330; the exact
    # product lies just above it.
    x, M = 162546655, 0.00010661861974335923
    assert x * M == 17330.5
    got = fp.requantize_reference(np.array([x, -x]), M, 0, -32768, 32767)
    np.testing.assert_array_equal(got, [17331, -17331])


@pytest.mark.parametrize("method", fp.METHODS)
def test_negative_accumulators(method):
    M = 0.0123456
    acc = np.arange(1, 20_000, 7)
    params = fp.encode(M, method)
    pos = fp.requantize(acc, params, 0, -128, 127)
    neg = fp.requantize(-acc, params, 0, -128, 127)
    for x, y in ((acc, pos), (-acc, neg)):
        assert np.all(np.abs(y - _exact(x, M, 0, -128, 127)) <= fp.error_bound(params, x))
    inside = pos < 127
    assert np.all(np.abs(pos + neg)[inside] <= 1)
    assert np.mean(pos[inside] + neg[inside] != 0) < 0.01
    assert np.all(neg[~inside] <= -127)


@pytest.mark.parametrize("method", fp.METHODS)
def test_per_channel_matches_per_tensor(method):
    rng = np.random.default_rng(1)
    M = np.array([1e-5, 0.02, 0.4, 3.0])
    acc = rng.integers(-(2**20), 2**20, (2, 4, 5))
    zp = np.array([0, -3, 5, 127])
    got = fp.requantize(acc, fp.encode(M, method), zp, -128, 127, axis=1)
    for c in range(4):
        alone = fp.requantize(acc[:, c], fp.encode(M[c], method), zp[c], -128, 127)
        np.testing.assert_array_equal(got[:, c], alone)
    np.testing.assert_array_equal(
        fp.requantize_reference(acc, M, zp, -128, 127, axis=1)[:, 2],
        fp.requantize_reference(acc[:, 2], M[2], zp[2], -128, 127),
    )


@settings(max_examples=200, deadline=None)
@given(log2m=st.floats(-32, 16), bits=st.sampled_from([8, 16]))
def test_prescale_intermediates_fit_int32(log2m, bits):
    p = fp.encode(2.0**log2m, fp.PRESCALE, output_bits=bits)
    assert 0 <= int(p.pre) <= 31 and 1 <= int(p.post) <= 30 - bits
    assert 1 <= int(p.scale) <= fp.PRESCALE_MAX_SCALE
    assert int(p.clip) <= INT32_MAX >> int(p.pre) or int(p.clip) * int(p.scale) < 2**31
    for t in (-int(p.clip), int(p.clip)):
        assert INT32_MIN <= t * int(p.scale) + (1 << (int(p.post) - 1)) <= INT32_MAX
    reach = (int(p.clip) * int(p.scale) + (1 << (int(p.post) - 1))) >> int(p.post)
    assert reach >= 2**bits


@pytest.mark.parametrize("M", [0, 0.0, -1.0, -1e-9, float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("method", fp.METHODS)
def test_invalid_multiplier_refused(M, method):
    with pytest.raises(ValueError, match="finite and positive"):
        fp.encode(M, method)
    with pytest.raises(ValueError, match="finite and positive"):
        fp.requantize_reference(np.array([1]), M)


def test_invalid_multiplier_in_a_channel_refused():
    with pytest.raises(ValueError, match="finite and positive"):
        fp.encode([0.5, 0.0, 0.25])
    with pytest.raises(ValueError, match="positive real"):
        fp.encode("half")


def test_unknown_method_lists_valid_ones():
    with pytest.raises(ValueError, match="q31, prescale"):
        fp.encode(0.5, "float")


def test_default_method_is_chosen_by_output_width():
    assert fp.encode(0.5).method == fp.default_method(8) == fp.PRESCALE
    assert fp.encode(0.5, output_bits=16).method == fp.default_method(16) == fp.Q31


def test_requantize_refuses_what_it_cannot_do_exactly():
    prescale8 = fp.encode(0.5, fp.PRESCALE, output_bits=8)
    with pytest.raises(ValueError, match="larger output_bits"):
        fp.requantize(np.array([1]), prescale8, 0, -32768, 32767)
    with pytest.raises(ValueError, match="M >= 1"):
        fp.requantize(np.array([1]), fp.encode(3.0, fp.Q31), 0, INT32_MIN, INT32_MAX)
    wide = fp.requantize(np.array([INT32_MAX]), fp.encode(0.75, fp.Q31), 0, INT32_MIN, INT32_MAX)
    assert wide == fp.requantize_reference(np.array([INT32_MAX]), 0.75, 0, INT32_MIN, INT32_MAX)
    with pytest.raises(ValueError, match="int32"):
        fp.requantize(np.array([2**31]), prescale8)
    with pytest.raises(ValueError, match="integers"):
        fp.requantize(np.array([1.5]), prescale8)
    with pytest.raises(ValueError, match="zero point"):
        fp.requantize(np.array([1]), prescale8, 200, -128, 127)
    with pytest.raises(ValueError, match="output_bits"):
        fp.encode(0.5, fp.PRESCALE, output_bits=30)

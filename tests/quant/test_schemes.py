"""Schemes: exact zero, valid scales on degenerate ranges, per-channel, bias parameters."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lowbit.ir import dtypes
from lowbit.ir.types import TensorType
from lowbit.quant import schemes
from lowbit.quant.schemes import MIN_SCALE, SCHEMES, quant_params

DTYPES = [dtypes.INT8, dtypes.UINT8, dtypes.INT16]
finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=32)


def dequant(q, p):
    return p.scale.astype(np.float64) * (np.asarray(q, np.float64) - p.zero_point)


def quant(x, p, dtype, qmin=None, qmax=None):
    lo = dtype.qmin if qmin is None else qmin
    hi = dtype.qmax if qmax is None else qmax
    return np.clip(np.round(x / p.scale.astype(np.float64) + p.zero_point), lo, hi)


@settings(max_examples=200, deadline=None)
@given(finite, finite, st.sampled_from(DTYPES), st.booleans())
def test_asymmetric_represents_zero_exactly_and_covers_the_range(a, b, dtype, reduce):
    lo, hi = min(a, b), max(a, b)
    p = quant_params(lo, hi, dtype, "asymmetric", reduce_range=reduce)
    qmin, qmax = schemes.integer_range(dtype, reduce)
    zp = int(p.zero_point)
    assert qmin <= zp <= qmax and p.zero_point.dtype == np.int64
    assert dequant(zp, p) == 0.0
    TensorType(dtype, (4,), p)  # a valid type: zero point in range
    s = float(p.scale)
    assert np.isfinite(s) and s > 0
    if hi > lo:
        # the nudged range still covers [lo, hi] up to half a step at each end
        assert dequant(qmin, p) <= min(lo, 0) + s / 2 + 1e-6 * abs(lo)
        assert dequant(qmax, p) >= max(hi, 0) - s / 2 - 1e-6 * abs(hi)


@settings(max_examples=100, deadline=None)
@given(finite, finite, st.sampled_from(DTYPES), st.sampled_from(SCHEMES))
def test_every_scheme_gives_valid_params(a, b, dtype, scheme):
    lo, hi = min(a, b), max(a, b)
    p = quant_params(lo, hi, dtype, scheme)
    assert np.isfinite(p.scale) and p.scale > 0
    TensorType(dtype, (3,), p)
    assert dequant(p.zero_point, p) == 0.0


def test_symmetric_zero_points_and_scales():
    p = quant_params(-0.5, 2.54, dtypes.INT8, "symmetric")
    assert int(p.zero_point) == 0 and float(p.scale) == pytest.approx(2.54 / 127)
    p = quant_params(-0.5, 2.54, dtypes.UINT8, "symmetric")
    assert int(p.zero_point) == 128 and float(p.scale) == pytest.approx(2.54 / 127)
    p = quant_params(-3.0, 1.0, dtypes.INT16, "symmetric")
    assert int(p.zero_point) == 0 and float(p.scale) == pytest.approx(3.0 / 32767)
    p = quant_params(-3.0, 1.0, dtypes.INT8, "symmetric", reduce_range=True)
    assert float(p.scale) == pytest.approx(3.0 / 63)


def test_symmetric_uint8_uses_the_whole_unsigned_range_for_non_negative_tensors():
    assert schemes.storage_dtype("symmetric_uint8", dtypes.INT8, nonnegative=True) == dtypes.UINT8
    assert schemes.storage_dtype("symmetric_uint8", dtypes.INT8, nonnegative=False) == dtypes.INT8
    assert schemes.storage_dtype("symmetric", dtypes.INT8, nonnegative=True) == dtypes.INT8
    p = quant_params(0.0, 6.0, dtypes.UINT8, "symmetric_uint8")
    assert int(p.zero_point) == 0 and float(p.scale) == pytest.approx(6.0 / 255)
    p = quant_params(-1.0, 6.0, dtypes.INT8, "symmetric_uint8")
    assert int(p.zero_point) == 0 and float(p.scale) == pytest.approx(6.0 / 127)


def test_calibration_grid_matches_the_scheme():
    assert schemes.calibration_grid("asymmetric", dtypes.UINT8, False) == (False, 255)
    assert schemes.calibration_grid("symmetric", dtypes.INT8, False) == (True, 127)
    assert schemes.calibration_grid("symmetric", dtypes.UINT8, False) == (True, 127)
    assert schemes.calibration_grid("symmetric_uint8", dtypes.UINT8, True) == (True, 255)
    assert schemes.calibration_grid("power_of_2", dtypes.INT16, False) == (True, 32767)
    assert schemes.calibration_grid("asymmetric", dtypes.INT8, False, reduce_range=True) == (
        False, 127)


@settings(max_examples=100, deadline=None)
@given(st.floats(1e-30, 1e30), st.sampled_from([dtypes.INT8, dtypes.INT16]))
def test_power_of_2_scale(t, dtype):
    p = quant_params(-t, t / 2, dtype, "power_of_2")
    s = float(p.scale)
    mantissa, _ = np.frexp(s)
    assert mantissa == 0.5
    sym = float(quant_params(-t, t / 2, dtype, "symmetric").scale)
    assert sym <= s < 2 * sym * (1 + 1e-6)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_range_gets_scale_one(scheme, dtype):
    p = quant_params(0.0, 0.0, dtype, scheme)
    assert float(p.scale) == 1.0
    assert dequant(p.zero_point, p) == 0.0


@pytest.mark.parametrize("scheme", SCHEMES)
def test_all_zero_channel_takes_the_finest_other_scale(scheme):
    lo = np.array([-1.0, 0.0, -0.1, 0.0])
    hi = np.array([1.0, 0.0, 0.2, 0.0])
    p = quant_params(lo, hi, dtypes.INT8, scheme, axis=0)
    assert p.axis == 0 and p.channels == 4
    assert np.all(np.isfinite(p.scale)) and np.all(p.scale > 0)
    assert p.scale[1] == p.scale[3] == p.scale[[0, 2]].min()
    weights = np.zeros((4, 3))
    weights[0] = [-1.0, 0.5, 1.0]
    weights[2] = [-0.1, 0.0, 0.2]
    q = np.clip(np.round(weights / p.scale[:, None].astype(np.float64)
                         + p.zero_point[:, None]), -128, 127)
    assert np.all(q[[1, 3]] == p.zero_point[[1, 3], None])  # zero channels stay exactly zero


def test_all_channels_zero_gives_scale_one():
    p = quant_params(np.zeros(3), np.zeros(3), dtypes.INT8, "symmetric", axis=1)
    np.testing.assert_array_equal(p.scale, [1.0, 1.0, 1.0])


def test_tiny_range_is_floored():
    p = quant_params(0.0, 1e-35, dtypes.INT8, "asymmetric")
    assert float(p.scale) == np.float32(MIN_SCALE)
    assert np.isfinite(np.float32(p.scale) * np.float32(p.scale))
    assert np.float32(p.scale) * np.float32(p.scale) >= np.finfo(np.float32).tiny


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(finite, finite), min_size=1, max_size=6), st.sampled_from(SCHEMES))
def test_per_channel_matches_per_tensor_channel_by_channel(ranges, scheme):
    lo = np.array([min(a, b) for a, b in ranges])
    hi = np.array([max(a, b) for a, b in ranges])
    assume(np.all(hi - lo > 0) or scheme == "asymmetric")
    assume(np.all(np.maximum(np.abs(lo), np.abs(hi)) > 0))
    if scheme == "symmetric_uint8":
        return  # uint8 choice depends on every channel together
    per_channel = quant_params(lo, hi, dtypes.INT8, scheme, axis=0)
    for i in range(len(ranges)):
        if max(hi[i], 0) - min(lo[i], 0) == 0:
            continue
        single = quant_params(lo[i], hi[i], dtypes.INT8, scheme)
        assert per_channel.scale[i] == single.scale
        assert per_channel.zero_point[i] == single.zero_point


def test_round_trip_error_is_within_half_a_step():
    rng = np.random.default_rng(0)
    x = rng.uniform(-0.7, 3.1, size=10_000)
    for scheme in SCHEMES:
        p = quant_params(x.min(), x.max(), dtypes.INT8, scheme)
        err = np.abs(dequant(quant(x, p, dtypes.INT8), p) - x)
        assert err.max() <= float(p.scale) / 2 * (1 + 1e-6), scheme


def test_bias_params():
    p = schemes.bias_params(0.02, 0.005)
    assert p.per_tensor and int(p.zero_point) == 0
    assert float(p.scale) == np.float32(0.02 * 0.005)
    p = schemes.bias_params(np.float32(0.5), np.array([0.1, 0.25], np.float32))
    assert p.axis == 0 and list(p.zero_point) == [0, 0]
    np.testing.assert_allclose(p.scale, [0.05, 0.125])
    TensorType(dtypes.INT32, (2,), p)


def test_weight_scale_is_raised_so_bias_never_saturates():
    s_in = 1e-3
    s_w = np.array([1e-4, 1e-4], np.float32)
    bias = np.array([1.0, 5e5])  # 5e5 / (1e-3 * 1e-4) = 5e12: far beyond int32
    fitted = schemes.fit_weight_scale_for_bias(bias, s_in, s_w)
    assert fitted[0] == s_w[0] and fitted[1] > s_w[1]
    q = np.round(bias / (np.float64(s_in) * fitted.astype(np.float64)))
    assert np.all(np.abs(q) <= schemes.BIAS_LIMIT)
    scalar = schemes.fit_weight_scale_for_bias(bias, s_in, np.float32(1e-4))
    assert scalar.ndim == 0 and scalar == fitted[1]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown quantization scheme 'affine'"):
        quant_params(0.0, 1.0, dtypes.INT8, "affine")
    with pytest.raises(ValueError, match="lo > hi"):
        quant_params(1.0, 0.0, dtypes.INT8)
    with pytest.raises(ValueError, match="finite"):
        quant_params(0.0, np.inf, dtypes.INT8)
    with pytest.raises(ValueError, match="int32 is for biases"):
        quant_params(0.0, 1.0, dtypes.INT32)
    with pytest.raises(ValueError, match="axis"):
        quant_params(np.zeros(2), np.ones(2), dtypes.INT8)

"""TensorType and QuantParams: validation, immutability, equality."""

from __future__ import annotations

import numpy as np
import pytest

from lowbit.ir import QuantParams, TensorType, dtypes


def test_per_tensor_params_are_scalars():
    q = QuantParams(0.5, 3)
    assert q.per_tensor and q.channels == 1
    assert q.scale.dtype == np.float32 and q.scale.shape == ()
    assert int(q.zero_point) == 3


def test_per_axis_params_broadcast_scalar_zero_point():
    q = QuantParams([0.1, 0.2, 0.4], 0, axis=0)
    assert not q.per_tensor and q.channels == 3
    np.testing.assert_array_equal(q.zero_point, [0, 0, 0])


@pytest.mark.parametrize("scale", [0.0, -1.0, float("inf"), float("nan")])
def test_invalid_scale_refused(scale):
    with pytest.raises(ValueError, match="scale"):
        QuantParams(scale, 0)


def test_fractional_zero_point_refused():
    with pytest.raises(ValueError, match="integral"):
        QuantParams(1.0, 0.5)


def test_mismatched_per_axis_lengths_refused():
    with pytest.raises(ValueError, match="equal length"):
        QuantParams([0.1, 0.2], [0, 0, 0], axis=0)


def test_params_are_immutable():
    q = QuantParams([0.1, 0.2], 0, axis=1)
    with pytest.raises(ValueError):
        q.scale[0] = 5.0
    with pytest.raises(AttributeError):
        q.axis = 0  # type: ignore[misc]


def test_quant_is_part_of_type_equality_and_hash():
    a = TensorType(dtypes.INT8, (4, 8), QuantParams(0.1, -3))
    b = TensorType(dtypes.INT8, (4, 8), QuantParams(0.1, -3))
    c = TensorType(dtypes.INT8, (4, 8), QuantParams(0.1, -2))
    d = TensorType(dtypes.INT8, (4, 8))
    assert a == b and hash(a) == hash(b)
    assert a != c and a != d
    assert len({a, b, c, d}) == 3


def test_per_channel_count_must_match_dimension():
    with pytest.raises(ValueError, match="per-channel"):
        TensorType(dtypes.INT8, (4, 8), QuantParams([0.1, 0.2], 0, axis=0))
    TensorType(dtypes.INT8, ("n", 2), QuantParams([0.1, 0.2], 0, axis=1))


def test_zero_point_must_fit_dtype():
    with pytest.raises(ValueError, match="outside"):
        TensorType(dtypes.INT8, (2,), QuantParams(0.1, 200))
    TensorType(dtypes.UINT8, (2,), QuantParams(0.1, 200))


def test_quant_needs_integer_dtype():
    with pytest.raises(ValueError, match="integer"):
        TensorType(dtypes.FLOAT32, (2,), QuantParams(0.1, 0))


def test_shapes_accept_symbolic_and_unknown_dims():
    t = TensorType(dtypes.FLOAT32, ("batch", None, 3))
    assert t.rank == 3 and not t.is_static and t.numel is None
    assert TensorType(dtypes.FLOAT32, None).rank is None
    assert TensorType(dtypes.FLOAT32, (2, 3)).numel == 6
    with pytest.raises(ValueError):
        TensorType(dtypes.FLOAT32, (-1, 3))


def test_real_range():
    q = QuantParams(0.0255, -128)
    lo, hi = q.real_range(dtypes.INT8)
    assert lo == 0.0
    assert hi == pytest.approx(255 * np.float32(0.0255))


def test_dtype_lookups_round_trip():
    for d in dtypes.ALL:
        assert dtypes.from_onnx(d.onnx_code) is d
        assert dtypes.from_name(d.name) is d
        assert dtypes.from_name(d.short) is d
        assert dtypes.from_numpy(d.np_dtype) is d
    assert (dtypes.INT8.qmin, dtypes.INT8.qmax) == (-128, 127)
    assert (dtypes.UINT4.qmin, dtypes.UINT4.qmax) == (0, 15)
    assert (dtypes.INT16.qmin, dtypes.INT16.qmax) == (-32768, 32767)
    with pytest.raises(ValueError, match="unknown dtype"):
        dtypes.from_name("int7")

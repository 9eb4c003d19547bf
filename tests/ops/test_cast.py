"""Cast and CastLike: refusals, the ONNX conversion rules, agreement with ONNX Runtime."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper
from ort_compare import one_node_model, run_both, run_lowbit, run_ort

from lowbit.errors import ModelError, UnsupportedError

T = TensorProto
RNG = np.random.default_rng(5)
VALUES = np.concatenate([
    RNG.standard_normal(40) * 3, RNG.standard_normal(20) * 500,
    [0, -0.0, 0.5, 1.5, 2.5, -2.5, 1e6, -1e6, 1e-7, 448, 464, 57344, 61440, 65504, 70000,
     np.nan, np.inf, -np.inf],
]).astype(np.float32)  # fmt: skip


def _cast(x, to, **attrs):
    return run_lowbit(one_node_model("Cast", {"x": x}, {"to": to, **attrs}), {"x": x})[0]


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def test_string_and_float8e8m0_targets_are_refused_clearly():
    x = np.zeros(3, np.float32)
    with pytest.raises(UnsupportedError, match="casts to string are not supported"):
        _cast(x, T.STRING)
    with pytest.raises(UnsupportedError, match="FLOAT8E8M0"):
        _cast(x, T.FLOAT8E8M0)


def test_bad_saturate_and_round_mode_are_refused():
    x = np.zeros(3, np.float32)
    with pytest.raises(ModelError, match=r"saturate.* allowed: 0 or 1"):
        _cast(x, T.FLOAT8E4M3FN, saturate=3)
    model = one_node_model("Cast", {"x": x}, {"to": T.FLOAT, "round_mode": "sideways"},
                           opset=25)
    with pytest.raises(ModelError, match=r"round_mode.*one of 'up', 'down', 'nearest'"):
        run_lowbit(model, {"x": x})


def test_round_mode_is_not_written_on_nodes_that_lack_it():
    from lowbit.frontends.onnx_import import import_model

    graph = import_model(one_node_model("Cast", {"x": VALUES}, {"to": T.FLOAT16}))
    (node,) = [n for n in graph.nodes if n.op_type == "Cast"]
    assert "round_mode" not in node.attrs and node.attrs["saturate"] == 1


@pytest.mark.parametrize("source", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("to", [T.FLOAT, T.FLOAT16, T.DOUBLE, T.BOOL, T.INT8, T.UINT8, T.INT32,
                                T.INT64, T.UINT16])
def test_numpy_targets_match_onnxruntime(source, to):
    with np.errstate(over="ignore"):
        x = VALUES.astype(source)
    if to not in (T.FLOAT, T.FLOAT16, T.DOUBLE, T.BOOL):  # in range: the rest is undefined
        x = np.trunc(x[np.isfinite(x) & (np.abs(x) < 100)] * 1.3).astype(source)
        if to in (T.UINT8, T.UINT16):
            x = np.abs(x)
    got, expected = run_both("Cast", {"x": x}, {"to": to})
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("to", [T.INT8, T.UINT8, T.INT16, T.INT32, T.UINT32, T.FLOAT,
                                T.FLOAT16, T.BOOL])
def test_integer_sources_match_onnxruntime(to):
    x = np.array([0, 1, -1, 127, 128, -129, 255, 300, -300, 70000, 2**31 - 1, -(2**31)],
                 np.int64)
    got, expected = run_both("Cast", {"x": x}, {"to": to})
    np.testing.assert_array_equal(got, expected)


def _ort_via_float(x: np.ndarray, to: int, saturate: int) -> np.ndarray:
    """ONNX Runtime's Cast to `to`, read back through a second Cast to float32 (its Python API
    cannot return ml_dtypes arrays)."""
    nodes = [helper.make_node("Cast", ["x"], ["t"], to=to, saturate=saturate),
             helper.make_node("Cast", ["t"], ["y"], to=T.FLOAT)]
    source = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", source, x.shape)],
                              [helper.make_tensor_value_info("y", T.FLOAT, x.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return run_ort(model, {"x": x})[0]


@pytest.mark.parametrize("source", [np.float32, np.float16, np.float64, np.int32, np.uint8])
@pytest.mark.parametrize("to", [T.BFLOAT16, T.FLOAT8E4M3FN, T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2,
                                T.FLOAT8E5M2FNUZ])
def test_narrow_float_targets_match_onnxruntime_when_saturating(source, to):
    with np.errstate(all="ignore"):
        x = VALUES.astype(source)
    got = _cast(x, to).astype(np.float32)
    expected = _ort_via_float(x, to, 1)
    np.testing.assert_array_equal(got, expected)


def test_float8_saturation_follows_the_onnx_tables():
    x = np.array([1e6, -1e6, np.inf, -np.inf, np.nan, 460.0, 500.0, 61440.0], np.float32)
    e4 = _cast(x, T.FLOAT8E4M3FN).astype(np.float32)
    np.testing.assert_array_equal(e4, [448, -448, 448, -448, np.nan, 448, 448, 448])
    e4 = _cast(x, T.FLOAT8E4M3FN, saturate=0).astype(np.float32)
    np.testing.assert_array_equal(e4, [np.nan] * 5 + [448, np.nan, np.nan])
    e5 = _cast(x, T.FLOAT8E5M2, saturate=0).astype(np.float32)
    np.testing.assert_array_equal(e5, [np.inf, -np.inf, np.inf, -np.inf, np.nan, 448, 512,
                                       np.inf])
    uz = _cast(np.array([-0.0, np.inf], np.float32), T.FLOAT8E4M3FNUZ, saturate=0)
    assert _bits(uz)[0] == 0 and np.isnan(uz.astype(np.float32)[1])


def test_sub_byte_integers_truncate_and_wrap():
    x = np.array([7.9, -8.9, 8.0, -9.0, 15.0, 16.0, -0.5], np.float32)
    np.testing.assert_array_equal(_cast(x, T.INT4).astype(np.int8), [7, -8, -8, 7, -1, 0, 0])
    np.testing.assert_array_equal(_cast(x, T.UINT2).astype(np.int8), [3, 0, 0, 3, 3, 0, 0])
    i4 = np.array([-8, -1, 0, 7], np.int8).astype(ml_dtypes.int4)
    np.testing.assert_array_equal(_cast(i4, T.UINT4).astype(np.int8), [8, 15, 0, 7])
    np.testing.assert_array_equal(_cast(i4, T.INT2).astype(np.int8), [0, -1, 0, -1])
    np.testing.assert_array_equal(_cast(i4, T.FLOAT), [-8, -1, 0, 7])


def test_integer_sources_to_int4_match_onnxruntime():
    x = np.arange(-40, 40, dtype=np.int32)
    got = _cast(x, T.INT4).astype(np.float32)
    np.testing.assert_array_equal(got, _ort_via_float(x, T.INT4, 1))


def test_bool_conversions():
    x = np.array([0.0, -0.0, 0.1, np.nan, -np.inf], np.float32)
    np.testing.assert_array_equal(_cast(x, T.BOOL), [False, False, True, True, True])
    b = np.array([True, False])
    np.testing.assert_array_equal(_cast(b, T.BFLOAT16).astype(np.float32), [1, 0])
    np.testing.assert_array_equal(_cast(b, T.INT64), [1, 0])
    f8 = np.array([0, 2], np.float32).astype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(_cast(f8, T.BOOL), [False, True])


def test_castlike_takes_the_dtype_of_its_second_input():
    x = VALUES
    like = np.zeros((2, 2), np.float16)
    got, expected = run_both("CastLike", {"x": x, "like": like})
    assert got.dtype == np.float16 and got.shape == x.shape
    np.testing.assert_array_equal(got, expected)
    f8 = np.zeros(1, ml_dtypes.float8_e5m2)
    inputs = {"x": x, "like": f8}
    got = run_lowbit(one_node_model("CastLike", inputs, {"saturate": 0}), inputs)[0]
    np.testing.assert_array_equal(_bits(got), _bits(x.astype(ml_dtypes.float8_e5m2)))


def test_same_dtype_cast_returns_the_input_values():
    got = _cast(VALUES, T.FLOAT)
    np.testing.assert_array_equal(_bits(got), _bits(VALUES))

"""ONNX's quantized-operator family: exact kernels, quantized result types, refusals, and
agreement with ONNX Runtime.

The integer kernels are checked against independent straightforward int64 computations (loops
over windows, broadcast products summed in int64) on random tensors, and against ONNX Runtime
on random one-node models. Where ONNX Runtime 1.32 itself departs from the ONNX spec, lowbit
follows the spec and the tests below pin lowbit's behaviour:

- uint8 x int8 products (MatMulInteger, QLinearMatMul, QLinearConv; ConvInteger with int8 x and
  uint8 w) on x86 CPUs without VNNI: MLAS multiplies with `vpmaddubsw`, which saturates the sum
  of each pair of adjacent products to int16, so results are wrong once |a*b + a'*b'| > 32767.
  The agreement tests draw such int8 operands from [-64, 63], where no pair can saturate.
- QuantizeLinear with float16 x and scale divides in float32; the spec divides in the scale's
  type (float16 here).
- QuantizeLinear to float8e4m3fn with saturate=0 saturates anyway (the spec gives NaN).
- ConvInteger with int8 x and uint8 w: besides the saturation, positions that read padding
  come out wrong. ConvInteger refuses per-channel weight zero points; QLinearConv needs them
  all equal.
The ONNX reference implementation (not ONNX Runtime) takes y_scale = 1/255 for an all-zero
DynamicQuantizeLinear input; ONNX Runtime and lowbit take 1.
"""

from __future__ import annotations

import os
import tempfile

import ml_dtypes
import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from ort_compare import run_lowbit, run_ort

import lowbit
from lowbit.errors import LowbitError, ModelError, UnsupportedError
from lowbit.frontends.onnx_import import import_model
from lowbit.ir import dtypes
from lowbit.passes import canonicalize
from realmodels import calibration_reader

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
EIGHT_BIT = [np.uint8, np.int8]


# -- model building ----------------------------------------------------------------------------
def build(op: str, args: list[tuple[str, np.ndarray | None]], attrs: dict | None = None, *,
          feeds: tuple[str, ...] = ("x",), n_outputs: int = 1, opset: int = 21
          ) -> onnx.ModelProto:
    """A one-node model: `args` in input order ('' names an omitted input); names in `feeds`
    are graph inputs, the rest initializers."""
    names = [n for n, _ in args]
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_outputs)], **(attrs or {}))
    inputs, inits = [], []
    for name, value in args:
        if not name:
            continue
        if name in feeds:
            inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape))
        else:
            inits.append(numpy_helper.from_array(np.asarray(value), name))
    outputs = [helper.make_value_info(f"y{i}", onnx.TypeProto()) for i in range(n_outputs)]
    graph = helper.make_graph([node], "one_node", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def both(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> tuple[list, list]:
    return run_lowbit(model, feed), run_ort(model, feed)


def graph_of(model: onnx.ModelProto):
    return canonicalize(import_model(model, source="test"))


def wrap32(a: np.ndarray) -> np.ndarray:
    return (((a.astype(np.int64) + 2**31) % 2**32) - 2**31).astype(np.int32)


# -- independent references --------------------------------------------------------------------
def ref_matmul(a, b, az, bz) -> np.ndarray:
    """(a - az) @ (b - bz) by broadcasting products and summing over k in int64."""
    ac = a.astype(np.int64) - az
    bc = b.astype(np.int64) - bz
    return (ac[..., :, :, None] * bc[..., None, :, :]).sum(axis=-2)


def ref_conv2d(x, w, xz, wz, pads, strides, dilations, group) -> np.ndarray:
    """Naive grouped 2-D convolution in int64: x padded with its zero point, window by window."""
    n, _, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.int64), [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])],
                constant_values=int(xz))
    wc = w.astype(np.int64) - np.asarray(wz, np.int64).reshape(-1, 1, 1, 1)
    oh = (h + pads[0] + pads[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    out = np.zeros((n, m, oh, ow), np.int64)
    mg = m // group
    for oc in range(m):
        g = oc // mg
        for i in range(oh):
            for j in range(ow):
                r0, c0 = i * strides[0], j * strides[1]
                win = xp[:, g * cg:(g + 1) * cg, r0:r0 + dilations[0] * (kh - 1) + 1:dilations[0],
                         c0:c0 + dilations[1] * (kw - 1) + 1:dilations[1]]
                out[:, oc, i, j] = ((win - int(xz)) * wc[oc]).sum(axis=(1, 2, 3))
    return out


def ref_requantize(acc, multiplier, zero, dtype) -> np.ndarray:
    """round_half_even(float32(acc) * M) + z, saturated (ONNX Runtime's requantization)."""
    info = np.iinfo(dtype)
    v = acc.astype(np.float32) * np.float32(multiplier)
    return np.clip(np.rint(v.astype(np.float64)) + int(zero), info.min, info.max).astype(dtype)


# -- strategies --------------------------------------------------------------------------------
def codes(draw, dtype, shape, lo=None, hi=None) -> np.ndarray:
    info = np.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    seed = draw(st.integers(0, 2**32 - 1))
    return np.random.default_rng(seed).integers(lo, hi + 1, shape).astype(dtype)


def scalar(dtype, value) -> np.ndarray:
    return np.array(value, dtype)


scales = st.floats(2.0**-14, 10.0, width=32)


@st.composite
def matmul_case(draw, ort_safe: bool = False):
    ta, tb = draw(st.sampled_from(EIGHT_BIT)), draw(st.sampled_from(EIGHT_BIT))
    batch = draw(st.sampled_from([(), (2,), (2, 1)]))
    m, k, n = draw(st.integers(1, 5)), draw(st.integers(1, 70)), draw(st.integers(1, 6))
    b_batch = batch[-1:] if batch and draw(st.booleans()) else ()
    hi = 63 if ort_safe and ta == np.uint8 and tb == np.int8 else None
    lo = -64 if hi is not None else None
    a = codes(draw, ta, (*batch, m, k))
    b = codes(draw, tb, (*b_batch, k, n), lo, hi)
    return a, b


# -- MatMulInteger -------------------------------------------------------------------------------
@SETTINGS
@given(matmul_case(), st.data())
def test_matmul_integer_is_exact(case, data):
    a, b = case
    ta, tb = a.dtype.type, b.dtype.type
    az = codes(data.draw, ta, data.draw(st.sampled_from([(), (1,), (a.shape[-2],)])))
    bz = codes(data.draw, tb, data.draw(st.sampled_from([(), (b.shape[-1],)])))
    model = build("MatMulInteger", [("x", a), ("b", b), ("az", az), ("bz", bz)])
    (got,) = run_lowbit(model, {"x": a})
    az_b = az.astype(np.int64).reshape(-1, 1) if az.ndim == 1 else az.astype(np.int64)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, wrap32(ref_matmul(a, b, az_b, bz.astype(np.int64))))


def test_matmul_integer_zero_points_per_row_and_column_nd():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (2, 3, 4)).astype(np.uint8)
    b = rng.integers(-128, 128, (2, 4, 5)).astype(np.int8)
    az = rng.integers(0, 256, (2, 3, 1)).astype(np.uint8)
    bz = rng.integers(-128, 128, (2, 1, 5)).astype(np.int8)
    (got,) = run_lowbit(build("MatMulInteger", [("x", a), ("b", b), ("az", az), ("bz", bz)]),
                        {"x": a})
    np.testing.assert_array_equal(got, ref_matmul(a, b, az.astype(np.int64),
                                                  bz.astype(np.int64)))


def test_int32_accumulation_wraps_like_onnxruntime():
    k = 40000
    a = np.full((1, k), 255, np.uint8)
    b = np.full((k, 1), 255, np.uint8)
    model = build("MatMulInteger", [("x", a), ("b", b)])
    ours, theirs = both(model, {"x": a})
    exact = k * 255 * 255
    assert exact > 2**31
    assert int(ours[0][0, 0]) == exact - 2**32 == int(theirs[0][0, 0])


@SETTINGS
@given(matmul_case(ort_safe=True), st.data())
def test_matmul_integer_matches_onnxruntime(case, data):
    a, b = case
    az = codes(data.draw, a.dtype.type, ())
    per_col = b.ndim == 2 and data.draw(st.booleans())
    bz = codes(data.draw, b.dtype.type, (b.shape[-1],) if per_col else ())
    ours, theirs = both(build("MatMulInteger", [("x", a), ("b", b), ("az", az), ("bz", bz)]),
                        {"x": a})
    np.testing.assert_array_equal(ours[0], theirs[0])


# -- QLinearMatMul -------------------------------------------------------------------------------
def qlinear_matmul_args(a, b, a_s, a_z, b_s, b_z, y_s, y_z):
    return [("x", a), ("as", a_s), ("az", a_z), ("b", b), ("bs", b_s), ("bz", b_z), ("ys", y_s),
            ("yz", y_z)]


@SETTINGS
@given(matmul_case(), st.data())
def test_qlinear_matmul_is_exact(case, data):
    a, b = case
    ty = data.draw(st.sampled_from(EIGHT_BIT))
    per_col = data.draw(st.booleans()) and b.ndim == 2
    b_shape = (b.shape[-1],) if per_col else ()
    a_s = np.array(data.draw(scales), np.float32)
    b_s = np.array(data.draw(st.lists(scales, min_size=b.shape[-1], max_size=b.shape[-1])),
                   np.float32)[:b.shape[-1] if per_col else 1].reshape(b_shape)
    y_s = np.array(data.draw(scales), np.float32)
    a_z, b_z = codes(data.draw, a.dtype.type, ()), codes(data.draw, b.dtype.type, b_shape)
    y_z = codes(data.draw, ty, ())
    model = build("QLinearMatMul", qlinear_matmul_args(a, b, a_s, a_z, b_s, b_z, y_s, y_z))
    (got,) = run_lowbit(model, {"x": a})
    acc = wrap32(ref_matmul(a, b, a_z.astype(np.int64), b_z.astype(np.int64)))
    multiplier = (a_s * b_s) / y_s
    assert got.dtype == ty
    np.testing.assert_array_equal(got, ref_requantize(acc, multiplier, y_z, ty))


@SETTINGS
@given(matmul_case(ort_safe=True), st.data())
def test_qlinear_matmul_matches_onnxruntime(case, data):
    a, b = case
    # ONNX Runtime implements uint8 x (uint8 | int8) -> uint8 and int8 x int8 -> int8.
    ty = a.dtype.type
    if a.dtype == np.int8 and b.dtype == np.uint8:
        b = (b.astype(np.int16) - 128).astype(np.int8)
    per_col = data.draw(st.booleans()) and b.ndim == 2
    n = b.shape[-1]
    b_s = np.array(data.draw(st.lists(scales, min_size=n, max_size=n)), np.float32)
    b_s = b_s if per_col else b_s[:1].reshape(())
    b_z = codes(data.draw, b.dtype.type, ())
    args = qlinear_matmul_args(a, b, np.array(data.draw(scales), np.float32),
                               codes(data.draw, a.dtype.type, ()), b_s, b_z,
                               np.array(data.draw(scales), np.float32), codes(data.draw, ty, ()))
    ours, theirs = both(build("QLinearMatMul", args), {"x": a})
    np.testing.assert_array_equal(ours[0], theirs[0])


def test_qlinear_matmul_per_row_a_parameters():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (3, 4)).astype(np.uint8)
    b = rng.integers(0, 256, (4, 2)).astype(np.uint8)
    a_s = np.array([0.1, 0.2, 0.3], np.float32)
    a_z = np.array([1, 2, 3], np.uint8)
    b_s, b_z = np.float32(0.05), np.uint8(100)
    y_s, y_z = np.float32(0.7), np.uint8(128)
    model = build("QLinearMatMul", qlinear_matmul_args(a, b, a_s, a_z, b_s, b_z, y_s, y_z))
    (got,) = run_lowbit(model, {"x": a})
    acc = ref_matmul(a, b, a_z.astype(np.int64).reshape(3, 1), np.int64(100))
    want = ref_requantize(acc, ((a_s * b_s) / y_s).reshape(3, 1), 128, np.uint8)
    np.testing.assert_array_equal(got, want)


def test_requantization_ties_round_half_to_even_like_onnxruntime():
    # M = 0.5 and odd accumulators put every result exactly halfway between two integers.
    a = np.arange(-7, 8, dtype=np.int8).reshape(15, 1)
    b = np.ones((1, 1), np.int8)
    half, one, zero = np.float32(0.5), np.float32(1), np.int8(0)
    mm = build("QLinearMatMul", qlinear_matmul_args(a, b, half, zero, one, zero, one, zero))
    ours, theirs = both(mm, {"x": a})
    np.testing.assert_array_equal(ours[0].ravel(), np.rint(np.arange(-7, 8) / 2))
    np.testing.assert_array_equal(ours[0], theirs[0])
    x = a.reshape(1, 15, 1, 1)
    w = np.ones((1, 15, 1, 1), np.int8)
    conv = build("QLinearConv", qlinear_conv_args(x, w, np.array([2], np.int32), half, zero,
                                                  one, zero, one, zero))
    ours, theirs = both(conv, {"x": x})
    assert int(ours[0].ravel()[0]) == 1 == int(theirs[0].ravel()[0])  # (0 + 2) * 0.5
    conv_odd = build("QLinearConv", qlinear_conv_args(x, w, np.array([5], np.int32), half, zero,
                                                      one, zero, one, zero))
    ours, theirs = both(conv_odd, {"x": x})
    assert int(ours[0].ravel()[0]) == 2 == int(theirs[0].ravel()[0])  # 2.5 -> 2


def test_qlinear_matmul_float8_is_refused():
    a = np.zeros((2, 2), ml_dtypes.float8_e4m3fn)
    one = np.float32(1)
    z = np.zeros((), ml_dtypes.float8_e4m3fn)
    model = build("QLinearMatMul", qlinear_matmul_args(a, a, one, z, one, z, one, z), feeds=())
    with pytest.raises(UnsupportedError, match="float8 QLinearMatMul is not supported"):
        graph_of(model)


# -- ConvInteger and QLinearConv -----------------------------------------------------------------
@st.composite
def conv_case(draw, ort_safe: bool = False):
    tx, tw = draw(st.sampled_from(EIGHT_BIT)), draw(st.sampled_from(EIGHT_BIT))
    group = draw(st.sampled_from([1, 2]))
    cg, mg = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dil = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    strides = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    pads = [draw(st.integers(0, 2)) for _ in range(4)]
    h = draw(st.integers(dil[0] * (kh - 1) + 1, 7))
    w = draw(st.integers(dil[1] * (kw - 1) + 1, 7))
    x = codes(draw, tx, (draw(st.integers(1, 2)), cg * group, h, w))
    if ort_safe and tx == np.int8:
        tw = np.int8  # ONNX Runtime's ConvInteger gets int8 x with uint8 w wrong, see above
    # ONNX Runtime saturates uint8 x int8 pair products: keep the int8 weights in [-64, 63].
    safe = ort_safe and tx != tw
    wt = codes(draw, tw, (mg * group, cg, kh, kw), -64 if safe else None, 63 if safe else None)
    attrs = {"group": group, "pads": pads, "strides": strides, "dilations": dil}
    return x, wt, attrs


@SETTINGS
@given(conv_case(), st.data())
def test_conv_integer_is_exact(case, data):
    x, w, attrs = case
    xz = codes(data.draw, x.dtype.type, ())
    wz = codes(data.draw, w.dtype.type, data.draw(st.sampled_from([(), (w.shape[0],)])))
    model = build("ConvInteger", [("x", x), ("w", w), ("xz", xz), ("wz", wz)], attrs)
    (got,) = run_lowbit(model, {"x": x})
    want = ref_conv2d(x, w, xz, wz, attrs["pads"], attrs["strides"], attrs["dilations"],
                      attrs["group"])
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


@SETTINGS
@given(conv_case(ort_safe=True), st.data())
def test_conv_integer_matches_onnxruntime(case, data):
    x, w, attrs = case
    xz = codes(data.draw, x.dtype.type, ())
    wz = codes(data.draw, w.dtype.type, ())
    model = build("ConvInteger", [("x", x), ("w", w), ("xz", xz), ("wz", wz)], attrs)
    ours, theirs = both(model, {"x": x})
    np.testing.assert_array_equal(ours[0], theirs[0])


def qlinear_conv_args(x, w, bias, x_s, x_z, w_s, w_z, y_s, y_z):
    args = [("x", x), ("xs", x_s), ("xz", x_z), ("w", w), ("ws", w_s), ("wz", w_z),
            ("ys", y_s), ("yz", y_z)]
    return args + ([("bias", bias)] if bias is not None else [])


@SETTINGS
@given(conv_case(), st.data())
def test_qlinear_conv_is_exact(case, data):
    x, w, attrs = case
    m = w.shape[0]
    ty = data.draw(st.sampled_from(EIGHT_BIT))
    per_channel = data.draw(st.booleans())
    w_s = np.array(data.draw(st.lists(scales, min_size=m, max_size=m)), np.float32)
    w_s = w_s if per_channel else w_s[:1].reshape(())
    w_z = codes(data.draw, w.dtype.type, (m,) if per_channel else ())
    bias = codes(data.draw, np.int32, (m,), -(2**20), 2**20) if data.draw(st.booleans()) \
        else None
    x_s, y_s = np.array(data.draw(scales), np.float32), np.array(data.draw(scales), np.float32)
    x_z, y_z = codes(data.draw, x.dtype.type, ()), codes(data.draw, ty, ())
    model = build("QLinearConv", qlinear_conv_args(x, w, bias, x_s, x_z, w_s, w_z, y_s, y_z),
                  attrs)
    (got,) = run_lowbit(model, {"x": x})
    acc = ref_conv2d(x, w, x_z, w_z, attrs["pads"], attrs["strides"], attrs["dilations"],
                     attrs["group"])
    if bias is not None:
        acc = acc + bias.astype(np.int64).reshape(1, -1, 1, 1)
    multiplier = ((x_s * w_s) / y_s).reshape((1, -1, 1, 1) if per_channel else ())
    np.testing.assert_array_equal(got, ref_requantize(wrap32(acc), multiplier, y_z, ty))


@SETTINGS
@given(conv_case(ort_safe=True), st.data())
def test_qlinear_conv_matches_onnxruntime(case, data):
    x, w, attrs = case
    m = w.shape[0]
    per_channel = data.draw(st.booleans())
    w_s = np.array(data.draw(st.lists(scales, min_size=m, max_size=m)), np.float32)
    w_s = w_s if per_channel else w_s[:1].reshape(())
    w_z = np.full((m,) if per_channel else (), codes(data.draw, w.dtype.type, ()), w.dtype)
    bias = codes(data.draw, np.int32, (m,), -(2**16), 2**16)
    args = qlinear_conv_args(x, w, bias, np.array(data.draw(scales), np.float32),
                             codes(data.draw, x.dtype.type, ()), w_s, w_z,
                             np.array(data.draw(scales), np.float32),
                             codes(data.draw, x.dtype.type, ()))
    ours, theirs = both(build("QLinearConv", args, attrs), {"x": x})
    np.testing.assert_array_equal(ours[0], theirs[0])


def test_qlinear_conv_refuses_bad_bias_and_channel_counts():
    x = np.zeros((1, 2, 3, 3), np.uint8)
    w = np.zeros((4, 2, 1, 1), np.uint8)
    one, zero = np.float32(1), np.uint8(0)
    bad_bias = qlinear_conv_args(x, w, np.zeros(3, np.int32), one, zero, one, zero, one, zero)
    with pytest.raises(ModelError, match="3 elements for 4 output channels"):
        graph_of(build("QLinearConv", bad_bias))
    bad_scale = qlinear_conv_args(x, w, None, one, zero, np.ones(3, np.float32), zero, one,
                                  zero)
    with pytest.raises(ModelError, match="3 elements for 4 output channels"):
        graph_of(build("QLinearConv", bad_scale))
    vector_x_scale = qlinear_conv_args(x, w, None, np.ones(2, np.float32), zero, one, zero,
                                       one, zero)
    with pytest.raises(ModelError, match="must be a scalar or a 1-element vector"):
        graph_of(build("QLinearConv", vector_x_scale))


def test_conv_integer_pads_with_the_input_zero_point():
    x = np.full((1, 1, 2, 2), 7, np.uint8)
    w = np.ones((1, 1, 3, 3), np.uint8)
    model = build("ConvInteger", [("x", x), ("w", w), ("xz", np.uint8(7))], {"pads": [1] * 4})
    ours, theirs = both(model, {"x": x})
    np.testing.assert_array_equal(ours[0], np.zeros((1, 1, 2, 2), np.int32))
    np.testing.assert_array_equal(ours[0], theirs[0])


# -- QuantizeLinear / DequantizeLinear -----------------------------------------------------------
INT_TYPES = [np.uint8, np.int8, np.uint16, np.int16, ml_dtypes.int4, ml_dtypes.uint4,
             ml_dtypes.int2, ml_dtypes.uint2]
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1e10, -1e10,
                    0.0, -0.0], np.float32)


def ref_quantize(x, scale, zero, dtype) -> np.ndarray:
    """Element by element: Python's round() (half to even) of the float32 quotient."""
    info = dtypes.from_numpy(np.dtype(dtype))
    out = []
    for v, s, z in zip(*np.broadcast_arrays(x, scale, zero), strict=True):
        with np.errstate(all="ignore"):
            q = float(np.float32(v) / np.float32(s))
        if np.isnan(q):
            out.append(info.qmin)
            continue
        r = q if np.isinf(q) else round(q)
        out.append(min(max(r + int(z), info.qmin), info.qmax))
    return np.array(out, np.int64).reshape(np.shape(x)).astype(dtype)


@SETTINGS
@given(st.sampled_from(INT_TYPES), st.data())
def test_quantize_linear_per_axis_matches_the_formula(dtype, data):
    info = dtypes.from_numpy(np.dtype(dtype))
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = np.concatenate([SPECIAL, (rng.standard_normal(35) * 40).astype(np.float32)])
    x = x.reshape(4, 12).astype(np.float32)
    scale = np.array(data.draw(st.lists(scales, min_size=12, max_size=12)), np.float32)
    zero = rng.integers(info.qmin, info.qmax + 1, 12).astype(dtype)
    model = build("QuantizeLinear", [("x", x), ("s", scale), ("z", zero)], {"axis": -1})
    (got,) = run_lowbit(model, {"x": x})
    want = ref_quantize(x.ravel(), np.tile(scale, 4), np.tile(zero.astype(np.int64), 4), dtype)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got.astype(np.int64), want.reshape(4, 12).astype(np.int64))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_dequantize_match_onnxruntime(dtype):
    rng = np.random.default_rng(1)
    x = np.concatenate([SPECIAL, (rng.standard_normal(2000) * 3000).astype(np.float32)])
    info = np.iinfo(dtype)
    zero = np.array(rng.integers(info.min, info.max + 1), dtype)
    q_model = build("QuantizeLinear", [("x", x), ("s", np.float32(0.37)), ("z", zero)])
    ours, theirs = both(q_model, {"x": x})
    np.testing.assert_array_equal(ours[0], theirs[0])
    codes_ = ours[0]
    dq_model = build("DequantizeLinear", [("x", codes_), ("s", np.float32(0.37)), ("z", zero)])
    ours, theirs = both(dq_model, {"x": codes_})
    np.testing.assert_array_equal(ours[0].view(np.uint32), theirs[0].view(np.uint32))


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, ml_dtypes.uint4])
def test_four_bit_quantize_dequantize_match_onnxruntime(dtype):
    # ONNX Runtime's Python API cannot return 4-bit tensors: compare the round trip.
    rng = np.random.default_rng(2)
    x = np.concatenate([SPECIAL, (rng.standard_normal(47) * 20).astype(np.float32)])
    x = x.reshape(3, 20)
    scale = np.array([0.5, 3.0, 37.0], np.float32)
    zero = np.array([1, 2, 3], dtype)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=0),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=0)]
    graph = helper.make_graph(
        nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_value_info("y", onnx.TypeProto())],
        [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zero, "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    model = onnx.shape_inference.infer_shapes(model)
    ours, theirs = both(model, {"x": x})
    np.testing.assert_array_equal(ours[0].view(np.uint32), theirs[0].view(np.uint32))


def test_blocked_quantization_matches_onnxruntime_with_a_short_last_block():
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((4, 7)) * 10).astype(np.float32)
    scale = (np.abs(rng.standard_normal((4, 2))) + 0.1).astype(np.float32)
    zero = rng.integers(0, 256, (4, 2)).astype(np.uint8)
    attrs = {"axis": 1, "block_size": 4}
    ours, theirs = both(build("QuantizeLinear", [("x", x), ("s", scale), ("z", zero)], attrs),
                        {"x": x})
    np.testing.assert_array_equal(ours[0], theirs[0])
    expanded = np.repeat(scale, 4, axis=1)[:, :7]
    np.testing.assert_array_equal(
        ours[0], ref_quantize(x.ravel(), expanded.ravel(),
                              np.repeat(zero, 4, axis=1)[:, :7].ravel(), np.uint8).reshape(4, 7))


def test_dequantize_int32_and_int16_exactly():
    x = np.array([2**31 - 1, -(2**31), 16777217, -3], np.int32)
    (got,) = run_lowbit(build("DequantizeLinear", [("x", x), ("s", np.float32(0.5))]), {"x": x})
    np.testing.assert_array_equal(got, (x.astype(np.float64).astype(np.float32) * 0.5))
    y = np.array([-32768, 32767, 5], np.int16)
    model = build("DequantizeLinear", [("x", y), ("s", np.float32(0.25)), ("z", np.int16(-7))])
    (got,) = run_lowbit(model, {"x": y})
    np.testing.assert_array_equal(got, np.array([-32761, 32774, 12], np.float32) * 0.25)


def test_float16_quantize_divides_in_the_scale_type():
    # ONNX Runtime divides in float32 here (see the module docstring); the spec and lowbit
    # divide in float16.
    x = np.array([100.1, 57.3, -99.9, 180.7], np.float16)
    s = np.float16(0.7)
    (got,) = run_lowbit(build("QuantizeLinear", [("x", x), ("s", s), ("z", np.uint8(128))]),
                        {"x": x})
    want = np.clip(np.rint((x / s).astype(np.float64)) + 128, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(got, want)
    p32 = build("QuantizeLinear", [("x", x), ("s", s), ("z", np.uint8(128))],
                {"precision": TensorProto.FLOAT}, opset=23)
    (wide,) = run_lowbit(p32, {"x": x})
    want32 = np.rint(x.astype(np.float32) / np.float32(s)).astype(np.float64) + 128
    np.testing.assert_array_equal(wide, np.clip(want32, 0, 255).astype(np.uint8))


def test_float16_dequantize_rounds_once_like_onnxruntime():
    # The spec's wording would round x - z to float16 before multiplying; ONNX Runtime and the
    # ONNX reference multiply in float32 and round once, and so does lowbit.
    rng = np.random.default_rng(6)
    x = rng.integers(-32768, 32768, 3000).astype(np.int16)
    s = np.array(0.3, np.float16)
    model = build("DequantizeLinear", [("x", x), ("s", s), ("z", np.int16(7))])
    ours, theirs = both(model, {"x": x})
    want = ((x.astype(np.int64) - 7).astype(np.float32) * np.float32(s)).astype(np.float16)
    assert ours[0].dtype == np.float16
    np.testing.assert_array_equal(ours[0].view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(ours[0].view(np.uint16), theirs[0].view(np.uint16))


def test_float8_saturation_follows_the_spec():
    x = np.array([1.0, 600.0, -600.0, 1e9, -0.0, np.nan], np.float32)
    zero = np.zeros((), ml_dtypes.float8_e4m3fn)
    args = [("x", x), ("s", np.float32(1.0)), ("z", zero)]
    (sat,) = run_lowbit(build("QuantizeLinear", args), {"x": x})
    np.testing.assert_array_equal(sat[:4].astype(np.float32), [1, 448, -448, 448])
    assert np.signbit(sat[4].astype(np.float32)) and np.isnan(sat[5].astype(np.float32))
    (raw,) = run_lowbit(build("QuantizeLinear", args, {"saturate": 0}), {"x": x})
    assert raw[0].astype(np.float32) == 1 and np.isnan(raw[1:4].astype(np.float32)).all()
    e5m2 = [("x", x), ("s", np.float32(1.0)), ("z", np.zeros((), ml_dtypes.float8_e5m2))]
    (inf,) = run_lowbit(build("QuantizeLinear", e5m2, {"saturate": 0}), {"x": x})
    assert inf[3].astype(np.float32) == np.inf and inf[1].astype(np.float32) == 640


def test_output_dtype_without_zero_point():
    x = np.array([-3.0, 70000.0], np.float32)
    model = build("QuantizeLinear", [("x", x), ("s", np.float32(1.0))],
                  {"output_dtype": TensorProto.INT16})
    (got,) = run_lowbit(model, {"x": x})
    assert got.dtype == np.int16 and list(got) == [-3, 32767]
    (default,) = run_lowbit(build("QuantizeLinear", [("x", x), ("s", np.float32(1.0))]),
                            {"x": x})
    assert default.dtype == np.uint8 and list(default) == [0, 255]


@pytest.mark.parametrize(("attrs", "scale", "zero", "message"), [
    ({"output_dtype": TensorProto.INT8}, np.float32(1), np.uint8(0), "differs from the zero"),
    ({}, np.ones((2, 2), np.float32), None, "needs block_size"),
    ({"axis": 1, "block_size": 4}, np.ones((4, 3), np.float32), None, "does not fit x"),
    ({"axis": 1}, np.ones(5, np.float32), None, "5 elements but dimension 1"),
    ({"axis": 3}, np.ones(6, np.float32), None, "axis 3 is out of range"),
    ({}, np.ones(6, np.float32), np.zeros(5, np.uint8), "differs from scale shape"),
    ({"saturate": 2}, np.float32(1), None, r"saturate.* allowed: 0 or 1"),
    ({"block_size": -1}, np.float32(1), None, "block_size must be positive"),
])
def test_bad_quantize_parameters_are_refused(attrs, scale, zero, message):
    x = np.zeros((4, 6), np.float32)
    args = [("x", x), ("s", scale)] + ([("z", zero)] if zero is not None else [])
    node = helper.make_node("QuantizeLinear", [n for n, _ in args], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_value_info("y", onnx.TypeProto())],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in args[1:]])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(ModelError, match=message):
        graph_of(model)


def test_nonzero_float_zero_points_are_refused():
    x = np.zeros(3, np.float32)
    zero = np.ones((), ml_dtypes.float8_e4m3fn)
    with pytest.raises(UnsupportedError, match="zero point must be 0"):
        graph_of(build("QuantizeLinear", [("x", x), ("s", np.float32(1)), ("z", zero)]))
    codes_ = np.zeros(3, ml_dtypes.float8_e4m3fn)
    with pytest.raises(UnsupportedError, match="zero point must be 0"):
        graph_of(build("DequantizeLinear", [("x", codes_), ("s", np.float32(1)), ("z", zero)],
                       feeds=()))


# -- quantized types -----------------------------------------------------------------------------
def _value(graph, name):
    return graph.value_map()[name]


def test_quantize_linear_results_carry_quant_params():
    x = np.zeros((1, 3, 2, 2), np.float32)
    per_axis = build("QuantizeLinear", [("x", x), ("s", np.array([0.5, 0.25, 2], np.float32)),
                                        ("z", np.array([1, 2, 3], np.int8))], {"axis": 1})
    t = _value(graph_of(per_axis), "y0").type
    assert t.dtype == dtypes.INT8 and t.quant is not None and t.quant.axis == 1
    np.testing.assert_array_equal(t.quant.scale, [0.5, 0.25, 2])
    np.testing.assert_array_equal(t.quant.zero_point, [1, 2, 3])
    negative_axis = build("QuantizeLinear", [("x", x), ("s", np.ones(2, np.float32))],
                          {"axis": -1})
    assert _value(graph_of(negative_axis), "y0").type.quant.axis == 3
    per_tensor = build("QuantizeLinear", [("x", x), ("s", np.float32(0.1)),
                                          ("z", np.array([7], np.uint8))])
    q = _value(graph_of(per_tensor), "y0").type.quant
    assert q.per_tensor and float(q.scale) == np.float32(0.1) and int(q.zero_point) == 7
    (dq,) = [n for n in graph_of(build("DequantizeLinear", [("x", np.zeros(3, np.uint8)),
                                                            ("s", np.float32(2))])).nodes
             if n.op_type == "DequantizeLinear"]
    assert dq.output.type.quant is None and dq.output.type.dtype == dtypes.FLOAT32


def test_quant_params_only_where_they_are_constant_and_representable():
    x = np.zeros((2, 4), np.float32)
    runtime_scale = build("QuantizeLinear", [("x", x), ("s", np.float32(1))], feeds=("x", "s"))
    blocked = build("QuantizeLinear", [("x", x), ("s", np.ones((2, 2), np.float32))],
                    {"axis": 1, "block_size": 2})
    float8 = build("QuantizeLinear", [("x", x), ("s", np.float32(1)),
                                      ("z", np.zeros((), ml_dtypes.float8_e5m2))])
    zero_scale = build("QuantizeLinear", [("x", x), ("s", np.float32(0))])
    for model in (runtime_scale, blocked, float8, zero_scale):
        assert _value(graph_of(model), "y0").type.quant is None


def test_qlinear_results_carry_output_quant_params():
    a = np.zeros((2, 3), np.uint8)
    one = np.float32(1)
    model = build("QLinearMatMul", qlinear_matmul_args(a, a.T.copy(), one, np.uint8(0), one,
                                                       np.uint8(0), np.float32(0.5),
                                                       np.uint8(9)))
    q = _value(graph_of(model), "y0").type.quant
    assert float(q.scale) == 0.5 and int(q.zero_point) == 9


def _chain(op: str, extra: list, attrs: dict | None = None) -> onnx.ModelProto:
    """QuantizeLinear -> op on int8 codes -> DequantizeLinear."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s"),
             numpy_helper.from_array(np.array(10, np.int8), "z")]
    inits += [numpy_helper.from_array(v, n) for n, v in extra]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node(op, ["q", *[n for n, _ in extra]], ["r"], **(attrs or {})),
             helper.make_node("DequantizeLinear", ["r", "s", "z"], ["y"])]
    graph = helper.make_graph(nodes, "chain", [x], [helper.make_value_info("y", onnx.TypeProto())],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize(("op", "extra", "attrs"), [
    ("Relu", [], None),
    ("Clip", [("lo", np.array(0, np.int8)), ("hi", np.array(15, np.int8))], None),
    ("Add", [("q2", np.array(3, np.int8))], None),
    ("Neg", [], None),
    ("Transpose", [], {"perm": [1, 0]}),
])
def test_integer_ops_on_quantized_results_keep_their_onnx_meaning(op, extra, attrs):
    model = _chain(op, extra, attrs)
    x = np.random.default_rng(9).standard_normal((2, 3)).astype(np.float32) * 3
    ours, theirs = both(model, {"x": x})
    np.testing.assert_array_equal(ours[0], theirs[0])


def test_quantized_annotations_export_as_plain_onnx():
    model = _chain("Transpose", [], {"perm": [1, 0]})
    graph = graph_of(model)
    assert any(v.type is not None and v.type.quant is not None for v in graph.values())
    x = np.random.default_rng(10).standard_normal((2, 3)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.onnx")
        lowbit.save(graph, path)
        reloaded = onnx.load(path)
    assert [n.op_type for n in reloaded.graph.node] == ["QuantizeLinear", "Transpose",
                                                        "DequantizeLinear"]
    np.testing.assert_array_equal(run_ort(reloaded, {"x": x})[0], run_ort(model, {"x": x})[0])


# -- DynamicQuantizeLinear -----------------------------------------------------------------------
def ref_dynamic(x: np.ndarray) -> tuple[np.ndarray, np.float32, np.uint8]:
    f = np.float32
    lo = f(min(float(np.nanmin(x, initial=0.0)), 0.0))
    hi = f(max(float(np.nanmax(x, initial=0.0)), 0.0))
    scale = f(1) if hi == lo else f(hi - lo) / f(255)
    zero = round(min(max(float(f(0) - lo / scale), 0.0), 255.0))
    y = ref_quantize(x.ravel(), np.full(x.size, scale), np.full(x.size, zero), np.uint8)
    return y.reshape(x.shape), scale, np.uint8(zero)


@SETTINGS
@given(st.lists(st.floats(-1e4, 1e4, width=32, allow_subnormal=False)
                | st.sampled_from([np.nan, 0.0]), min_size=0, max_size=30),
       st.sampled_from([1.0, 1e-3, 1e3]))
def test_dynamic_quantize_linear_matches_the_formula_and_onnxruntime(values, factor):
    x = (np.array(values, np.float32) * np.float32(factor)).astype(np.float32)
    model = build("DynamicQuantizeLinear", [("x", x)], n_outputs=3)
    ours, theirs = both(model, {"x": x})
    y, scale, zero = ref_dynamic(x)
    np.testing.assert_array_equal(ours[0], y)
    assert ours[1].dtype == np.float32 and ours[1].shape == () and ours[1] == scale
    assert ours[2].dtype == np.uint8 and ours[2] == zero
    if not np.isnan(x).any():  # ONNX Runtime's min/max of NaN depends on its position
        for a, b in zip(ours, theirs, strict=True):
            np.testing.assert_array_equal(a, b)


def test_dynamic_quantize_linear_of_zeros_uses_scale_one():
    x = np.zeros((2, 2), np.float32)
    y, scale, zero = run_lowbit(build("DynamicQuantizeLinear", [("x", x)], n_outputs=3),
                                {"x": x})
    assert scale == 1.0 and zero == 0 and not y.any()


def test_unknown_dtype_inputs_are_refused():
    a = np.zeros((2, 2), np.int16)
    with pytest.raises(LowbitError, match="accepts int8, uint8"):
        graph_of(build("MatMulInteger", [("x", a), ("b", a)]))


# -- models quantized by ONNX Runtime's own tools -------------------------------------------------
def _float_cnn(rng: np.random.Generator) -> onnx.ModelProto:
    def init(name, a):
        return numpy_helper.from_array(np.asarray(a, np.float32), name)

    inits = [init("w1", rng.standard_normal((8, 3, 3, 3)) * 0.3),
             init("b1", rng.standard_normal(8) * 0.1),
             init("w2", rng.standard_normal((8, 8, 3, 3)) * 0.2),
             init("b2", rng.standard_normal(8) * 0.1),
             init("wm", rng.standard_normal((8 * 4 * 4, 10)) * 0.1),
             numpy_helper.from_array(np.array([1, -1], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1],
                              strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Reshape", ["r2", "shape"], ["f"]),
             helper.make_node("MatMul", ["f", "wm"], ["y"])]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("form", ["qoperator", "qdq", "dynamic"])
def test_models_quantized_by_onnxruntime_agree_with_it(form):
    from onnxruntime.quantization import (
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    rng = np.random.default_rng(11)
    batches = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(12)]

    with tempfile.TemporaryDirectory() as tmp:
        source, path = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "quantized.onnx")
        onnx.save(_float_cnn(rng), source)
        if form == "dynamic":
            quantize_dynamic(source, path, weight_type=QuantType.QUInt8)
        else:
            # reduce_range keeps int8 weights in [-64, 63], where ONNX Runtime's uint8 x int8
            # products cannot saturate (see the module docstring).
            quantize_static(source, path, calibration_reader([{"x": b} for b in batches[:8]]),
                            per_channel=True, reduce_range=True,
                            quant_format=QuantFormat.QOperator if form == "qoperator"
                            else QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                            weight_type=QuantType.QInt8)
        model = onnx.load(path)
        graph = lowbit.load(path)
    ops = {n.op_type for n in model.graph.node}
    assert ops >= {"qoperator": {"QLinearConv", "QLinearMatMul", "QuantizeLinear"},
                   "qdq": {"QuantizeLinear", "DequantizeLinear"},
                   "dynamic": {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger"}}[form]
    for x in batches[8:]:
        ours = lowbit.run(graph, {"x": x})["y"]
        theirs = run_ort(model, {"x": x})[0]
        if form == "qdq":  # float Conv/MatMul between the Q/DQ pairs: one output step apart
            step = float(numpy_helper.to_array(
                next(i for i in model.graph.initializer if i.name == "y_scale")))
            assert np.abs(ours - theirs).max() <= step * 1.001
        else:
            np.testing.assert_array_equal(ours, theirs)

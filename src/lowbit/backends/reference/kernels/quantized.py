"""Reference kernels of ONNX's quantized-operator family (rules in lowbit.ops.quantized).

Integer arithmetic is exact: operands are widened to int64, products are summed exactly (float64
BLAS only while every partial sum stays below 2**53, else int64), and an int32 accumulator wraps
around on overflow in two's complement, as the ONNX specs allow ("accumulation may overflow if
and only if in 32 bits") and ONNX Runtime does.

Rounding is round-half-to-even everywhere (numpy `rint`). Float steps are done in the precision
named below, each rounded to nearest even, so every result is reproducible bit for bit.

QLinearConv and QLinearMatMul requantize like ONNX Runtime's MLAS kernels:

    M   = float32(float32(s_in * s_w) / s_out)                  (per output channel / column)
    v   = float32(acc) * M                                       (float32 product)
    y   = clamp(round_half_even(v), qmin - z_out, qmax - z_out) + z_out

with NaN (only from NaN or infinite scales) giving qmin. Scales of float16/bfloat16 (allowed by
QLinearMatMul-21) are widened to float32 first, which is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowbit.backends.reference.kernels import Inputs, integer_params, kernel, params
from lowbit.backends.reference.kernels.cast import convert
from lowbit.backends.reference.windows import conv_nd
from lowbit.errors import KernelError
from lowbit.ir import dtypes
from lowbit.ir.graph import Node
from lowbit.numerics.arith import float32_multiplier
from lowbit.ops.conv_geometry import window_from_attrs
from lowbit.ops.quantized import (
    FLOAT_CODES,
    Layout,
    dequantize_output_dtype,
    param_layout,
    precision_dtype,
    quantize_output_dtype,
)

INT32_WRAP = 1 << 32


def wrap_int32(acc: np.ndarray) -> np.ndarray:
    """Exact int64 values reduced to int32 by two's complement wrap-around (as int64)."""
    acc = np.asarray(acc, np.int64)
    return ((acc + (1 << 31)) & (INT32_WRAP - 1)) - (1 << 31)


def exact_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy.matmul of integer arrays, exactly, as int64."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    k = a.shape[-1]
    bound = float(np.abs(a).max(initial=0)) * float(np.abs(b).max(initial=0)) * k
    if bound < 2.0**53:
        return np.rint(np.matmul(a.astype(np.float64), b.astype(np.float64))).astype(np.int64)
    return np.matmul(a, b)


def _int64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.int64)


def expand_param(value: np.ndarray, shape: tuple[int, ...], layout: Layout) -> np.ndarray:
    """A scale or zero point laid out by `layout`, broadcastable against x of `shape`."""
    if layout.kind == "tensor":
        return value.reshape(())
    assert layout.axis is not None
    if layout.kind == "axis":
        dims = [1] * len(shape)
        dims[layout.axis] = value.size
        return value.reshape(dims)
    full = np.repeat(value, layout.block_size, axis=layout.axis)
    return np.take(full, np.arange(shape[layout.axis]), axis=layout.axis)


def _layout(node: Node, x: np.ndarray, scale: np.ndarray, zero: np.ndarray | None) -> Layout:
    return param_layout(node, x.shape, scale.shape, None if zero is None else zero.shape,
                        int(node.attrs["axis"]), int(node.attrs["block_size"]))


def _float_zero_point(node: Node, zero: np.ndarray | None) -> None:
    if zero is not None and np.any(zero.astype(np.float32) != 0):
        raise KernelError(f"{node.describe()}: a float zero point must be 0")


@kernel("QuantizeLinear")
def quantize_linear(node, inputs):
    """q = x / y_scale in the precision dtype p (the `precision` attribute, else y_scale's
    dtype; x and y_scale are first converted to p), rounded to nearest even.
    Integer results: y = clamp(rint(q) + y_zero_point, qmin, qmax), NaN giving qmin (as ONNX
    Runtime's MLAS and the ONNX reference do). Float results (zero point 0): y = convert(q),
    round-to-nearest-even, saturating to the largest finite value when `saturate` (always for
    float4e2m1), else overflowing to NaN/inf as the ONNX Cast table says (ONNX Runtime 1.32
    saturates float8e4m3fn regardless). float8 keeps the sign of -0 (as ONNX Runtime and the
    ONNX reference); float4e2m1 adds the zero point as the spec's formula says, turning -0 into
    +0 (as the ONNX reference and its conformance case)."""
    x, scale, zero = (list(inputs) + [None])[:3]
    zero_type = None if zero is None else dtypes.from_numpy(zero.dtype)
    out = quantize_output_dtype(node, zero_type)
    p = precision_dtype(node, dtypes.from_numpy(scale.dtype)).np_dtype
    layout = _layout(node, x, scale, zero)
    s = expand_param(scale, x.shape, layout).astype(p)
    with np.errstate(all="ignore"):
        q = x.astype(p) / s
    if out in FLOAT_CODES:
        _float_zero_point(node, zero)
        if zero is not None and out == dtypes.FLOAT4E2M1:
            with np.errstate(all="ignore"):
                q = q + expand_param(zero, x.shape, layout).astype(p)
        return [convert(np.asarray(q), out.np_dtype, bool(node.attrs["saturate"]))]
    r = np.array(np.rint(q), np.float64)  # an array even for a 0-d x (np.rint gives a scalar)
    r[np.isnan(r)] = -np.inf
    if zero is not None:
        r = r + expand_param(_int64(zero), x.shape, layout)
    y = np.clip(r, out.qmin, out.qmax).astype(np.int64)
    return [y.astype(out.np_dtype)]


@kernel("DequantizeLinear")
def dequantize_linear(node, inputs):
    """y = T(float32(x - x_zero_point) * float32(x_scale)), T the result dtype (`output_dtype`,
    else x_scale's): integer x - x_zero_point is exact (int64) before its conversion to
    float32; float8/float4 x (zero point 0) converts to float32 exactly. The product is rounded
    to float32, then once more to T when T is narrower. ONNX Runtime and the ONNX reference
    compute so; the spec's "the output type determines the precision of the multiplication"
    would round x - x_zero_point to float16 first, which for |x - x_zero_point| > 2048 differs."""
    x, scale, zero = (list(inputs) + [None])[:3]
    out = dequantize_output_dtype(node, dtypes.from_numpy(scale.dtype)).np_dtype
    layout = _layout(node, x, scale, zero)
    s = expand_param(scale, x.shape, layout).astype(np.float32)
    if dtypes.from_numpy(x.dtype).is_float:
        _float_zero_point(node, zero)
        centred = x.astype(np.float32)
    else:
        d = _int64(x)
        if zero is not None:
            d = d - expand_param(_int64(zero), x.shape, layout)
        centred = d.astype(np.float32)
    with np.errstate(all="ignore"):
        return [np.asarray(centred * s, np.float32).astype(out)]


@kernel("DynamicQuantizeLinear")
def dynamic_quantize_linear(node, inputs):
    """uint8 parameters from x's range, as ONNX Runtime computes them (float32 throughout):

        lo = min(min(x), 0), hi = max(max(x), 0)     (NaN elements ignored; empty x: 0, 0)
        y_scale = 1 if hi == lo else (hi - lo) / 255
        y_zero_point = round_half_even(clamp(0 - lo / y_scale, 0, 255))
        y = clamp(round_half_even(x / y_scale) + y_zero_point, 0, 255), NaN giving 0

    The ONNX spec's formula divides by zero for an all-zero x (the ONNX reference then uses
    y_scale = 1/255); lowbit follows ONNX Runtime's 1."""
    (x,) = inputs
    finite = x[~np.isnan(x)]
    lo = np.float32(min(float(finite.min(initial=0.0)), 0.0))
    hi = np.float32(max(float(finite.max(initial=0.0)), 0.0))
    with np.errstate(all="ignore"):
        scale = np.float32(1.0) if hi == lo else np.float32(hi - lo) / np.float32(255)
        zero_f = np.float32(0) - lo / scale
        zero = np.rint(np.clip(zero_f, np.float32(0), np.float32(255)))
        q = np.rint(x / scale).astype(np.float64)
    q[np.isnan(q)] = -np.inf
    y = np.clip(q + float(zero), 0, 255).astype(np.uint8)
    return [y, np.array(scale, np.float32), np.array(zero, np.uint8)]


def requantize(acc: np.ndarray, multiplier: np.ndarray, zero: int, dtype: np.dtype
               ) -> np.ndarray:
    """`clamp(rint(float32(acc) * M), qmin - z, qmax - z) + z` in float32 (see the module
    docstring); `acc` holds int32 values, `multiplier` float32 broadcastable to it."""
    info = np.iinfo(dtype)
    lo, hi = float(info.min - zero), float(info.max - zero)
    with np.errstate(all="ignore"):
        v = acc.astype(np.float32) * multiplier.astype(np.float32)
    v = np.asarray(v, np.float64)
    v[np.isnan(v)] = lo
    y = np.rint(np.clip(v, lo, hi)).astype(np.int64) + zero
    return y.astype(dtype)


@dataclass(frozen=True, eq=False)
class QLinearParams:
    """ONNX Runtime's float32 requantization of an int32 accumulator (module docstring):

        y = clamp(rint(float32(acc) * multiplier), qmin - output_zero, qmax - output_zero)
            + output_zero                                         quantized output
        y = float32(acc) * multiplier                              float output (QGemm only)

    `multiplier` = float32(float32(float32(alpha * s_x) * s_w) / s_y) (`arith.
    float32_multiplier`), shaped to broadcast against the accumulator; `output_zero` and
    `output_dtype` are None for a float output."""

    multiplier: np.ndarray
    output_zero: int | None
    output_dtype: np.dtype | None


def _scalar(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).reshape(())


def _conv_acc(node: Node, x: np.ndarray, w: np.ndarray, x_zero: np.ndarray | None,
              w_zero: np.ndarray | None) -> np.ndarray:
    """conv(x - x_zero, w - w_zero) exactly (int64), padding with 0 after centring."""
    xc = _int64(x)
    if x_zero is not None:
        xc = xc - _int64(_scalar(x_zero))
    wc = _int64(w)
    if w_zero is not None:
        wz = _int64(w_zero).reshape(-1)
        wc = wc - (wz.reshape((-1,) + (1,) * (w.ndim - 1)) if wz.size > 1 else wz[0])
    window = window_from_attrs(node, w.shape[2:], x.ndim - 2)
    return conv_nd(xc, wc, window, int(node.attrs["group"]))


@kernel("ConvInteger")
def conv_integer(node, inputs):
    """y = wrap_int32(conv(x - x_zero_point, w - w_zero_point)), summed exactly; padded
    positions contribute 0 (x_zero_point before centring)."""
    x, w, x_zero, w_zero = (list(inputs) + [None, None])[:4]
    return [wrap_int32(_conv_acc(node, x, w, x_zero, w_zero)).astype(np.int32)]


@params("QLinearConv", typed=False)
def qlinear_conv_params(node: Node, inputs: Inputs) -> QLinearParams:
    """`QLinearParams` of QLinearConv: M[m] = x_scale * w_scale[m] / y_scale along the output
    channels (axis 1)."""
    x, x_scale, _, _, w_scale, _, y_scale, y_zero = inputs[:8]
    m = float32_multiplier(_scalar(x_scale), np.asarray(w_scale).reshape(-1), y_scale)
    channel = (1, -1) + (1,) * (x.ndim - 2)
    m = m.reshape(channel) if m.size > 1 else m.reshape(())
    return QLinearParams(m, int(_scalar(y_zero)), y_zero.dtype)


@kernel("QLinearConv")
def qlinear_conv(node, inputs):
    """acc = wrap_int32(conv(x - x_zero_point, w - w_zero_point) + B) per output channel m;
    y = requantize(acc, M[m] = x_scale * w_scale[m] / y_scale) (module docstring)."""
    x, _, x_zero, w, _, w_zero, _, _, bias = (list(inputs) + [None])[:9]
    p = integer_params(node, inputs)
    acc = _conv_acc(node, x, w, x_zero, w_zero)
    if bias is not None:
        acc = acc + _int64(bias).reshape((1, -1) + (1,) * (acc.ndim - 2))
    return [requantize(wrap_int32(acc), p.multiplier, p.output_zero, p.output_dtype)]


def _row_param(p: np.ndarray) -> np.ndarray:
    """A's per-row parameter as a column ([M] -> [M, 1]); N-D ones already are."""
    p = np.asarray(p)
    if p.size == 1:
        return p.reshape(())
    return p.reshape(-1, 1) if p.ndim == 1 else p


def _col_param(p: np.ndarray) -> np.ndarray:
    p = np.asarray(p)
    return p.reshape(()) if p.size == 1 else p


def _matmul_acc(a: np.ndarray, b: np.ndarray, a_zero: np.ndarray | None,
                b_zero: np.ndarray | None) -> np.ndarray:
    ac = _int64(a) if a_zero is None else _int64(a) - _int64(_row_param(a_zero))
    bc = _int64(b) if b_zero is None else _int64(b) - _int64(_col_param(b_zero))
    return exact_matmul(ac, bc)


@kernel("MatMulInteger")
def matmul_integer(node, inputs):
    """Y = wrap_int32((A - a_zero_point) @ (B - b_zero_point)), summed exactly; a_zero_point
    per tensor or per row of A, b_zero_point per tensor or per column of B."""
    a, b, a_zero, b_zero = (list(inputs) + [None, None])[:4]
    return [wrap_int32(_matmul_acc(a, b, a_zero, b_zero)).astype(np.int32)]


@params("QLinearMatMul", typed=False)
def qlinear_matmul_params(node: Node, inputs: Inputs) -> QLinearParams:
    """`QLinearParams` of QLinearMatMul: M[r, c] = a_scale[r] * b_scale[c] / y_scale (per
    tensor, per row of A, per column of B)."""
    _, a_scale, _, _, b_scale, _, y_scale, y_zero = inputs
    m = float32_multiplier(_row_param(a_scale), _col_param(b_scale), y_scale)
    return QLinearParams(m, int(_scalar(y_zero)), y_zero.dtype)


@kernel("QLinearMatMul")
def qlinear_matmul(node, inputs):
    """acc = wrap_int32((a - a_zero_point) @ (b - b_zero_point));
    y = requantize(acc, M[r, c] = a_scale[r] * b_scale[c] / y_scale) (module docstring)."""
    a, _, a_zero, b, _, b_zero, _, _ = inputs
    p = integer_params(node, inputs)
    acc = wrap_int32(_matmul_acc(a, b, a_zero, b_zero))
    return [requantize(acc, p.multiplier, p.output_zero, p.output_dtype)]

"""Reference kernels of ONNX Runtime's QLinear element-wise, pooling and activation ops (see
`lowbit.ops.ort_qlinear`). All arithmetic on real values is float32, as ONNX Runtime's reference
formulas; `_quantize` is its QuantizeLinear: saturate(round_half_even(v / scale) + zero)."""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.kernels import kernel
from lowbit.backends.reference.kernels.quantized import _scalar, requantize

F = np.float32


def _zero(zero) -> int:
    """A zero point's value; 0 when the optional input is absent."""
    return 0 if zero is None else int(_scalar(zero))


def _real(x, scale, zero) -> np.ndarray:
    """float32(scale * (x - zero))."""
    with np.errstate(all="ignore"):
        return F(_scalar(scale)) * (np.asarray(x).astype(np.int32) - _zero(zero)).astype(F)


def _quantize(v: np.ndarray, scale, zero, dtype: np.dtype) -> np.ndarray:
    """saturate(round_half_even(float32(v / scale)) + zero) in `dtype`."""
    z = _zero(zero)
    info = np.iinfo(dtype)
    with np.errstate(all="ignore"):
        q = (np.asarray(v, F) / F(_scalar(scale))).astype(np.float64)
    q[np.isnan(q)] = 0.0
    return np.clip(np.rint(q) + z, info.min, info.max).astype(dtype)


@kernel("QLinearAdd", "com.microsoft")
def qlinear_add(node, inputs):
    """C = _quantize(A_scale (A - A_zp) + B_scale (B - B_zp), C_scale, C_zp), broadcast."""
    a, sa, za, b, sb, zb, sc, zc = (list(inputs) + [None] * 8)[:8]
    return [_quantize(_real(a, sa, za) + _real(b, sb, zb), sc, zc, np.asarray(a).dtype)]


@kernel("QLinearMul", "com.microsoft")
def qlinear_mul(node, inputs):
    """C = requantize((A - A_zp) * (B - B_zp), M) with M = float32(float32(A_scale * B_scale) /
    C_scale): clamp(rint(float32(product) * M), qmin - C_zp, qmax - C_zp) + C_zp, broadcast
    (the integer product is exact in float32: at most 255^2)."""
    a, sa, za, b, sb, zb, sc, zc = (list(inputs) + [None] * 8)[:8]
    product = (np.asarray(a).astype(np.int64) - _zero(za)) * \
        (np.asarray(b).astype(np.int64) - _zero(zb))
    with np.errstate(all="ignore"):
        m = F(F(F(_scalar(sa)) * F(_scalar(sb))) / F(_scalar(sc)))
    return [requantize(product, np.asarray(m), _zero(zc), np.asarray(a).dtype)]


def _table(node, inputs, f) -> np.ndarray:
    """The 256-entry table y[code] = _quantize(f(X_scale (code - X_zp)), Y_scale, Y_zp),
    looked up at X's codes."""
    x, sx, zx, sy, zy = (list(inputs) + [None] * 5)[:5]
    dtype = np.asarray(x).dtype
    codes = np.arange(np.iinfo(dtype).min, np.iinfo(dtype).max + 1).astype(dtype)
    with np.errstate(all="ignore"):
        table = _quantize(f(_real(codes, sx, zx)).astype(F), sy, zy, dtype)
    return table[np.asarray(x).astype(np.int64) - int(np.iinfo(dtype).min)]


@kernel("QLinearSigmoid", "com.microsoft")
def qlinear_sigmoid(node, inputs):
    """Y = table(sigmoid), sigmoid(v) = 1 / (1 + exp(-v)) in float32 (`_table`)."""
    return [_table(node, inputs, lambda v: F(1) / (F(1) + np.exp(-v)))]


@kernel("QLinearLeakyRelu", "com.microsoft")
def qlinear_leaky_relu(node, inputs):
    """Y = table(v >= 0 ? v : alpha v) in float32 (`_table`)."""
    alpha = F(node.attrs["alpha"])
    return [_table(node, inputs, lambda v: np.where(v >= 0, v, alpha * v))]


@kernel("QLinearGlobalAveragePool", "com.microsoft")
def qlinear_global_average_pool(node, inputs):
    """acc = sum over the image of (X - x_zp), exact; y = requantize(acc, M) with
    M = float32(x_scale / float32(y_scale * image size)): clamp(rint(float32(acc) * M),
    qmin - y_zp, qmax - y_zp) + y_zp."""
    x, sx, zx, sy, zy = inputs
    x = np.asarray(x)
    last = node.attrs["channels_last"]
    spatial = tuple(range(1, x.ndim - 1)) if last else tuple(range(2, x.ndim))
    size = int(np.prod([x.shape[i] for i in spatial]))
    acc = (x.astype(np.int64) - _zero(zx)).sum(axis=spatial, keepdims=True)
    m = F(F(_scalar(sx)) / F(F(_scalar(sy)) * F(size)))
    return [requantize(acc, np.asarray(m), _zero(zy), x.dtype)]


@kernel("QLinearConcat", "com.microsoft")
def qlinear_concat(node, inputs):
    """Each input x requantized to Y's parameters, _quantize(x_scale (x - x_zp), Y_scale, Y_zp)
    (a copy where its parameters are Y's), then concatenated over `axis`."""
    sy, zy = inputs[0], inputs[1]
    dtype = np.asarray(zy).dtype
    parts = []
    for i in range(2, len(inputs), 3):
        x, sx, zx = inputs[i:i + 3]
        same = F(_scalar(sx)) == F(_scalar(sy)) and _zero(zx) == _zero(zy)
        parts.append(np.asarray(x) if same else _quantize(_real(x, sx, zx), sy, zy, dtype))
    return [np.concatenate(parts, axis=node.attrs["axis"])]

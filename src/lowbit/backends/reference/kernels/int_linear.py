"""Integer kernels of Conv, Gemm and MatMul on quantized types.

With x, w the input and weight codes, z_x, z_w their zero points (per output channel for w)
and b the int32 bias (zero point 0, scale s_x * s_w):

    acc[c] = sum((x - z_x) * (w[c] - z_w[c])) + b[c]          exact, saturated to int32
    y[c]   = saturate(requantize(acc[c], M[c] = s_x * s_w[c] / s_y) + z_y)

clamped to the output range narrowed by a fused Relu/Clip. A float output type (a graph
output computed by this node) is dequantized straight from the accumulator instead,
`y[c] = float32(acc[c]) * float32(s_x * s_w[c])`, with no integer rounding of the result.
Padding (Conv) adds x = z_x, i.e. 0 after centring. Wide operands (16-bit activations with
16-bit weights) can exceed int32: the accumulator is then shifted right by the static
r = max(0, ceil(log2(bound)) - 31), with bound = K * 2**bits_x * 2**(bits_w - 1) + max|b|,
rounding half up, and M becomes M * 2**r. `requantize` is `lowbit.numerics.fixed_point`'s integer
expression in the node's encoding.
"""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.kernels import kernel
from lowbit.backends.reference.windows import conv_nd
from lowbit.errors import KernelError
from lowbit.numerics import arith
from lowbit.ops.conv_geometry import window_from_attrs


def narrow_accumulator(acc: np.ndarray, k: int, tx, tw, bias: np.ndarray | None, M):
    """(acc, M) with acc shifted into int32 where its static bound needs it (see the module
    docstring); unchanged for 8-bit operands."""
    bound = k * (1 << tx.dtype.bits) * (1 << (tw.dtype.bits - 1))
    if bias is not None and bias.size:
        bound += int(np.abs(bias.astype(np.int64)).max())
    r = max(0, int(bound).bit_length() - 31)
    if r == 0:
        return acc, M
    return (acc + (1 << (r - 1))) >> r, np.asarray(M, np.float64) * float(1 << r)


def _finish(node, acc: np.ndarray, M, out, axis: int | None, scale) -> np.ndarray:
    """Requantize `acc` into the quantized output type, or dequantize it for a float one."""
    if out.quant is None:
        s = np.asarray(scale, np.float64)
        if s.ndim and axis is not None:
            shape = [1] * acc.ndim
            shape[axis] = -1
            s = s.reshape(shape)
        return (acc.astype(np.float64) * s).astype(out.dtype.np_dtype)
    return arith.requantize(node, acc, M, out, axis=axis)


def _types(node, n: int) -> list:
    types = [v.type if v is not None else None for v in node.inputs]
    return (types + [None] * n)[:n]


def _add_bias(node, acc: np.ndarray, bias: np.ndarray | None, bias_type, expected_scale,
              axis: int) -> np.ndarray:
    if bias is None:
        return acc
    if not arith.bias_scale_matches(bias_type, expected_scale):
        raise KernelError(f"{node.describe()}: the int32 bias must have zero point 0 and scale "
                          f"s_in * s_w; requantize it")
    b = bias.astype(np.int64).reshape(-1)
    shape = [1] * acc.ndim
    shape[axis] = -1
    return acc + (b.reshape(shape) if b.size > 1 else b[0])


def _weight_axis_scale(w_type, channel_axis_of_w: int) -> np.ndarray:
    q = w_type.quant
    if q.axis is None:
        return q.scale.astype(np.float64)
    if q.axis % len(w_type.shape) != channel_axis_of_w % len(w_type.shape):
        raise KernelError(f"per-channel weights must run along the output-channel axis "
                          f"{channel_axis_of_w}, not {q.axis}")
    return q.scale.astype(np.float64)


@kernel("Conv", quantized=True)
def conv(node, inputs):
    x, w, b = (list(inputs) + [None])[:3]
    tx, tw, tb = _types(node, 3)
    out = node.outputs[0].type
    window = window_from_attrs(node, w.shape[2:], x.ndim - 2)
    acc = conv_nd(arith.centred(x, tx), arith.centred(w, tw), window, int(node.attrs["group"]))
    s_w = _weight_axis_scale(tw, 0)
    s_in = arith.scale_of(tx)
    acc = _add_bias(node, acc, b, tb, s_in * s_w, 1)
    k = int(np.prod(w.shape[1:]))
    if out.quant is None:
        return [_finish(node, acc, None, out, 1 if s_w.ndim else None, s_in * s_w)]
    acc, M = narrow_accumulator(acc, k, tx, tw, b, s_in * s_w / arith.scale_of(out))
    return [_finish(node, acc, M, out, 1 if s_w.ndim else None, s_in * s_w)]


@kernel("Gemm", quantized=True)
def gemm(node, inputs):
    a, bmat, c = (list(inputs) + [None])[:3]
    ta, tb, tc = _types(node, 3)
    out = node.outputs[0].type
    if float(node.attrs["alpha"]) != 1.0 or (c is not None and float(node.attrs["beta"]) != 1.0):
        raise KernelError(f"{node.describe()}: quantized Gemm needs alpha = beta = 1 (fold them "
                          f"into the constants before quantizing)")
    xa = arith.centred(a, ta)
    xb = arith.centred(bmat, tb)
    if node.attrs["transA"]:
        xa = xa.T
    trans_b = bool(node.attrs["transB"])
    if trans_b:
        xb = xb.T
    acc = matmul_exact(xa, xb)
    s_w = _weight_axis_scale(tb, 0 if trans_b else 1)
    s_in = arith.scale_of(ta)
    acc = _add_bias(node, acc, c, tc, s_in * s_w, 1)
    if out.quant is None:
        return [_finish(node, acc, None, out, 1 if s_w.ndim else None, s_in * s_w)]
    acc, M = narrow_accumulator(acc, xa.shape[-1], ta, tb, c, s_in * s_w / arith.scale_of(out))
    return [_finish(node, acc, M, out, 1 if s_w.ndim else None, s_in * s_w)]


@kernel("MatMul", quantized=True)
def matmul(node, inputs):
    a, bmat = inputs
    ta, tb = _types(node, 2)
    out = node.outputs[0].type
    if ta.quant.axis is not None:
        raise KernelError(f"{node.describe()}: the left operand of a quantized MatMul must be "
                          f"quantized per tensor")
    acc = matmul_exact(arith.centred(a, ta), arith.centred(bmat, tb))
    s_w = _weight_axis_scale(tb, -1)
    axis = acc.ndim - 1 if s_w.ndim else None
    if out.quant is None:
        return [_finish(node, acc, None, out, axis, arith.scale_of(ta) * s_w)]
    M = arith.scale_of(ta) * s_w / arith.scale_of(out)
    acc, M = narrow_accumulator(acc, a.shape[-1], ta, tb, None, M)
    return [_finish(node, acc, M, out, axis, None)]


def matmul_exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact integer matmul of int64 operands (float64 BLAS is exact below 2**53; the operands
    here are at most 17-bit and K < 2**19, so every partial sum is)."""
    k = a.shape[-1]
    bound = float(np.abs(a).max(initial=0)) * float(np.abs(b).max(initial=0)) * k
    if bound < 2.0**53:
        return np.rint(np.matmul(a.astype(np.float64), b.astype(np.float64))).astype(np.int64)
    return np.matmul(a, b)

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
expression in the node's encoding. Every parameter (zero points, r, the encoded M, the clamp
bounds) comes from `lowbit.backends.kernel_params.linear_params`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowbit.backends.reference.kernels import Inputs, integer_params, kernel, params
from lowbit.backends.reference.windows import conv_nd
from lowbit.errors import KernelError
from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.numerics import arith
from lowbit.numerics.arith import Requant
from lowbit.ops.conv_geometry import window_from_attrs
from lowbit.ops.product import ProductGeometry, product_of


@dataclass(frozen=True, eq=False)
class LinearParams:
    """A product on quantized operands, x the data codes, w the weight codes (as rows [N, K]:
    `ProductGeometry.weight_matrix`), b the int32 bias codes (zero point 0, scale s_x * s_w):

        acc[n] = sum_k (x[k] - input_zero) * (w[n, k] - weight_zero[n]) + b[n]     exact
               = sum_k x[k] * (w[n, k] - weight_zero[n]) + b[n] - input_zero * weight_sums[n]

    (the second form, TFLite's zero-point correction, pads a Conv's input with input_zero).
    Integer output (`requant` set): with `shift` r > 0 (wide operands, below) the accumulator is
    first narrowed, `acc = (acc + 2**(r - 1)) >> r`, then `y[n] = requant.apply(acc[n])`, i.e.
    `clamp(requantize(saturate_int32(acc), M[n] = s_x * s_w[n] / s_y * 2**r) + z_y, qmin,
    qmax)`. Float output (`requant` None, a graph output computed by this node):
    `y[n] = float32(float64(acc[n]) * dequantize_scale[n])`, dequantize_scale = s_x * s_w[n],
    with neither narrowing nor saturation.

    r = max(0, bit_length(bound) - 31), bound = K * 2**bits_x * 2**(bits_w - 1) + max|b|: 0 for
    8-bit operands, 1 or more when 16-bit activations meet 16-bit weights.
    Per-channel arrays run along `channel_axis` of the accumulator (None: all per tensor) and
    along `weight_channel_axis` of the weight."""

    input_zero: int
    weight_zero: np.ndarray
    """z_w, int64: 0-d (per tensor) or [N] (per output channel)."""
    weight_sums: np.ndarray
    """sum over K of (w - weight_zero) per output channel, int64 (a batched MatMul B: [..., N])."""
    reduction_size: int
    """K, the products summed into one accumulator."""
    shift: int
    """r, the accumulator narrowing shift (0 unless the operands are wide)."""
    requant: Requant | None
    dequantize_scale: np.ndarray | None
    """s_x * s_w (float64, 0-d or [N]) for a float output, else None."""
    channel_axis: int | None
    weight_channel_axis: int | None


def narrowing_shift(k: int, tx: TensorType, tw: TensorType, bias: np.ndarray | None) -> int:
    """r of `LinearParams`: how far the accumulator's static bound exceeds int32."""
    bound = k * (1 << tx.dtype.bits) * (1 << (tw.dtype.bits - 1))
    if bias is not None and bias.size:
        bound += int(np.abs(bias.astype(np.int64)).max())
    return max(0, int(bound).bit_length() - 31)


def _weight_scale(node: Node, tw: TensorType, geometry: ProductGeometry) -> np.ndarray:
    """s_w, per tensor or along the weight's output-channel axis (KernelError otherwise)."""
    q = tw.quant
    if q.axis is not None:
        rank = len(tw.shape)
        want = geometry.weight_channel_axis
        if want is None or q.axis % rank != want % rank:
            raise KernelError(f"{node.describe()}: per-channel weights must run along the "
                              f"output-channel axis {want}, not {q.axis}")
    return q.scale.astype(np.float64)


def _weight_zero(tw: TensorType) -> np.ndarray:
    return tw.quant.zero_point.astype(np.int64)


def weight_sums(w: np.ndarray, zero: np.ndarray, geometry: ProductGeometry) -> np.ndarray:
    """sum over K of (w - zero) per output channel (int64), `zero` along the weight's
    output-channel axis."""
    centred = np.asarray(w, np.int64)
    if zero.ndim and geometry.weight_channel_axis is not None:
        shape = [1] * centred.ndim
        shape[geometry.weight_channel_axis] = -1
        centred = centred - zero.reshape(shape)
    else:
        centred = centred - zero
    axes = geometry.weight_reduction_axes
    return centred.sum(axis=tuple(a % centred.ndim for a in axes)) if axes else centred


@params("Conv", "Gemm", "MatMul")
def linear_params(node: Node, inputs: Inputs) -> LinearParams:
    """`LinearParams` of a quantized Conv, Gemm or MatMul for its kernel's inputs."""
    geometry = product_of(node)
    assert geometry is not None
    types = [v.type if v is not None else None for v in node.inputs]
    tx, tw = types[geometry.data_input], types[geometry.weight_input]
    at = geometry.bias_input
    tb = types[at] if at is not None and at < len(types) else None
    bias = inputs[at] if tb is not None and at < len(inputs) else None
    out = node.outputs[0].type
    if float(node.attrs.get("alpha", 1.0)) != 1.0 or (
            bias is not None and float(node.attrs.get("beta", 1.0)) != 1.0):
        raise KernelError(f"{node.describe()}: quantized {node.op_type} needs alpha = beta = 1 "
                          f"(fold them into the constants before quantizing)")
    if tx.quant.axis is not None:
        raise KernelError(f"{node.describe()}: the data operand of a quantized "
                          f"{node.op_type} must be quantized per tensor")
    s_w = _weight_scale(node, tw, geometry)
    s_in = arith.scale_of(tx)
    if bias is not None and not arith.bias_scale_matches(tb, s_in * s_w):
        raise KernelError(f"{node.describe()}: the int32 bias must have zero point 0 and scale "
                          f"s_in * s_w; requantize it")
    w = inputs[geometry.weight_input]
    k = int(geometry.reduction_size(w.shape))
    zero = _weight_zero(tw)
    per_channel = s_w.ndim > 0
    axis = geometry.output_channel_axis if per_channel else None
    common = {"input_zero": int(arith.zero_of(tx)), "weight_zero": zero,
              "weight_sums": weight_sums(w, zero, geometry), "reduction_size": k,
              "channel_axis": axis,
              "weight_channel_axis": geometry.weight_channel_axis if per_channel else None}
    if out.quant is None:
        return LinearParams(**common, shift=0, requant=None, dequantize_scale=s_in * s_w)
    r = narrowing_shift(k, tx, tw, bias)
    M = s_in * s_w / arith.scale_of(out)
    if r:
        M = np.asarray(M, np.float64) * float(1 << r)
    return LinearParams(**common, shift=r, requant=arith.output_requant(node, M, out, axis=axis),
                        dequantize_scale=None)


# -- kernels ------------------------------------------------------------------------------------


def _along(a: np.ndarray, axis: int | None, ndim: int) -> np.ndarray:
    """A 0-d or 1-D per-channel array shaped to broadcast along `axis` of an ndim-D array."""
    if a.ndim == 0 or axis is None:
        return a
    shape = [1] * ndim
    shape[axis] = -1
    return a.reshape(shape)


def _weight(w: np.ndarray, p: LinearParams) -> np.ndarray:
    """w - z_w (int64), z_w along the weight's output-channel axis."""
    return w.astype(np.int64) - _along(p.weight_zero, p.weight_channel_axis, w.ndim)


def _add_bias(acc: np.ndarray, bias: np.ndarray | None, axis: int) -> np.ndarray:
    if bias is None:
        return acc
    b = bias.astype(np.int64).reshape(-1)
    shape = [1] * acc.ndim
    shape[axis] = -1
    return acc + (b.reshape(shape) if b.size > 1 else b[0])


def _finish(acc: np.ndarray, p: LinearParams, out_dtype: np.dtype) -> np.ndarray:
    """The result from the exact accumulator (`LinearParams`)."""
    if p.requant is None:
        s = _along(np.asarray(p.dequantize_scale, np.float64), p.channel_axis, acc.ndim)
        return (acc.astype(np.float64) * s).astype(out_dtype)
    if p.shift:
        acc = (acc + (1 << (p.shift - 1))) >> p.shift
    return p.requant.apply(acc)


def _bias(node, inputs) -> np.ndarray | None:
    at = product_of(node).bias_input
    return inputs[at] if at is not None and at < len(inputs) else None


@kernel("Conv", quantized=True)
def conv(node, inputs):
    p = integer_params(node, inputs)
    x, w = inputs[0], inputs[1]
    window = window_from_attrs(node, w.shape[2:], x.ndim - 2)
    acc = conv_nd(x.astype(np.int64) - p.input_zero, _weight(w, p), window,
                  int(node.attrs["group"]))
    acc = _add_bias(acc, _bias(node, inputs), 1)
    return [_finish(acc, p, node.outputs[0].type.dtype.np_dtype)]


@kernel("Gemm", quantized=True)
def gemm(node, inputs):
    p = integer_params(node, inputs)
    xa, xb = product_of(node).operands(inputs[0].astype(np.int64) - p.input_zero,
                                       _weight(inputs[1], p))
    acc = _add_bias(matmul_exact(xa, xb), _bias(node, inputs), 1)
    return [_finish(acc, p, node.outputs[0].type.dtype.np_dtype)]


@kernel("MatMul", quantized=True)
def matmul(node, inputs):
    p = integer_params(node, inputs)
    acc = matmul_exact(inputs[0].astype(np.int64) - p.input_zero, _weight(inputs[1], p))
    return [_finish(acc, p, node.outputs[0].type.dtype.np_dtype)]


def matmul_exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact integer matmul of int64 operands (float64 BLAS is exact below 2**53; the operands
    here are at most 17-bit and K < 2**19, so every partial sum is)."""
    k = a.shape[-1]
    bound = float(np.abs(a).max(initial=0)) * float(np.abs(b).max(initial=0)) * k
    if bound < 2.0**53:
        return np.rint(np.matmul(a.astype(np.float64), b.astype(np.float64))).astype(np.int64)
    return np.matmul(a, b)

"""Integer kernel parameters of quantized nodes, for the C kernels.

Each function derives what one reference kernel computes with (backends/reference/kernels/
int_*.py), through the same lowbit.numerics.arith and fixed_point functions and the reference's
own helpers (`accumulator_shift`, `alignment`), so both backends share one definition of every
multiplier, shift, zero point and bound. (Issue 23 moves these derivations next to each op;
this module then calls them.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowbit.backends.reference.kernels import int_combine, int_linear
from lowbit.errors import KernelError
from lowbit.ir.attrs import FUSED_CLIP
from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.numerics import arith, fixed_point
from lowbit.numerics.fixed_point import RequantParams


@dataclass
class Requant:
    """A requantization into `out`: parameters (per channel or per tensor), the output zero
    point(s) and the clamp bounds (in codes of the output dtype)."""

    params: RequantParams
    zero_point: np.ndarray
    qmin: int
    qmax: int


def requant(node: Node, M, out: TensorType, bounds: tuple[int, int] | None = None) -> Requant:
    """`arith.requantize`'s parameters: encode(M) in the node's encoding, the output zero point
    and the output bounds narrowed by a fused clip."""
    qmin, qmax = bounds if bounds is not None else arith.output_bounds(node, out)
    return Requant(arith.encode(node, M, out), arith.zero_of(out), qmin, qmax)


@dataclass
class Product:
    """A quantized Conv/Gemm/MatMul: acc = sum (x - zx)(w - zw) + bias, then `requant` (a
    quantized output; `narrow_shift` first shifts a wide accumulator into int32) or
    float32(acc * scale) clamped to `clip` (a float output)."""

    x_zero: int
    w_zero: np.ndarray  # per output channel
    bias: np.ndarray | None  # int64 per output channel
    scale: np.ndarray  # s_x * s_w per output channel (float64)
    requant: Requant | None
    narrow_shift: int
    clip: tuple[float, float]


def product(node: Node, x: TensorType, w: TensorType, bias_value, channels: int,
            w_channel_axis: int, k: int, out: TensorType) -> Product:
    """Parameters of a quantized product with `channels` output channels along
    `w_channel_axis` of the weight and reduction size k (int_linear.conv/gemm/matmul)."""
    if x.quant is None or not x.quant.per_tensor:
        raise KernelError(f"{node.describe()}: the input must be quantized per tensor")
    s_w = int_linear._weight_axis_scale(w, w_channel_axis)
    s_in = arith.scale_of(x)
    bias = None
    if bias_value is not None:
        bias_type = bias_value.type
        if not arith.bias_scale_matches(bias_type, s_in * s_w):
            raise KernelError(f"{node.describe()}: the int32 bias must have zero point 0 and "
                              f"scale s_in * s_w; requantize it")
        b = np.asarray(bias_value.const_value, np.int64).reshape(-1)
        bias = np.broadcast_to(b, (channels,)).copy()
    scale = np.broadcast_to(np.asarray(s_in * s_w, np.float64), (channels,)).copy()
    w_zero = np.broadcast_to(arith.zero_of(w).reshape(-1) if w.quant.axis is not None else
                             arith.zero_of(w), (channels,)).astype(np.int64)
    clip = tuple(node.attrs.get(FUSED_CLIP) or (-np.inf, np.inf))
    x_zero = int(arith.zero_of(x))
    if out.quant is None:
        return Product(x_zero, w_zero, bias, scale, None, 0, clip)  # type: ignore[arg-type]
    bias_arr = None if bias_value is None else np.asarray(bias_value.const_value)
    shift = int_linear.accumulator_shift(k, x, w, bias_arr)
    M = s_in * s_w / arith.scale_of(out)
    if shift:
        M = np.asarray(M, np.float64) * float(1 << shift)
    return Product(x_zero, w_zero, bias, scale, requant(node, M, out), shift,
                   clip)  # type: ignore[arg-type]


@dataclass
class AddSub:
    """int_combine.add/sub: a_i = q31((q_i - z_i) << shift, p_i); y = requant(a_1 +- a_2)."""

    shift: int
    zero: tuple[int, int]
    align: list[fixed_point.Q31Params]
    out: Requant


def add_sub(node: Node) -> AddSub:
    shift, align, factor = int_combine.alignment(node)
    out = node.outputs[0].type
    zeros = tuple(int(arith.zero_of(v.type)) for v in node.inputs[:2])
    return AddSub(shift, zeros, align,  # type: ignore[arg-type]
                  requant(node, factor / float(arith.scale_of(out)), out))


def mul(node: Node) -> tuple[tuple[int, int], Requant]:
    """int_combine.mul: y = requant((q_1 - z_1)(q_2 - z_2), s_1 s_2 / s_y)."""
    t1, t2 = node.inputs[0].type, node.inputs[1].type
    for t in (t1, t2):
        int_combine._per_tensor(node, t)
    out = node.outputs[0].type
    M = float(arith.scale_of(t1)) * float(arith.scale_of(t2)) / float(arith.scale_of(out))
    return (int(arith.zero_of(t1)), int(arith.zero_of(t2))), requant(node, M, out)


def average(node: Node, counts) -> list[Requant]:
    """int_pool._average: for each element count n, requant(acc, s_x / (s_y n))."""
    tx, out = node.inputs[0].type, node.outputs[0].type
    if tx.quant is None or not tx.quant.per_tensor:
        raise KernelError(f"{node.describe()}: the input must be quantized per tensor")
    base = float(arith.scale_of(tx)) / float(arith.scale_of(out))
    return [requant(node, base / float(n), out) for n in counts]


def rescale(node: Node, src: TensorType, out: TensorType,
            bounds: tuple[int, int] | None = None) -> Requant:
    """requantize(q - z_src, s_src / s_out) (Requantize, Concat inputs, Relu/Clip with a new
    output type)."""
    M = arith.scale_of(src) / arith.scale_of(out)
    return requant(node, M, out, bounds)

"""Integer kernels of Add, Sub, Mul and Concat on quantized types (the RESCALE rule).

Add / Sub (as TFLite does, in int32): with d_i = (q_i - z_i) << L (L = 20 for 8-bit inputs,
12 for 16-bit) and s = 2 * max(s_1, s_2),

    a_i = requantize_q31(d_i, s_i / s)                       |a_i| < 2**28
    y   = saturate(requantize(a_1 +/- a_2, s / (2**L * s_y)) + z_y)

Mul: `y = saturate(requantize((q_1 - z_1) * (q_2 - z_2), s_1 * s_2 / s_y) + z_y)`; the product
fits int32 for 8-bit operands and for symmetric 16-bit ones.

Concat: each input whose type differs from the output's is requantized,
`y_i = saturate(requantize(q_i - z_i, s_i / s_y) + z_y)`; others are copied.

Operands broadcast by numpy's rules; results are clamped to the output range narrowed by a
fused Relu/Clip. The parameters (zero points, L, the encoded factors, the clamp bounds) come
from `lowbit.backends.kernel_params.combine`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowbit.backends.reference.kernels import Inputs, integer_params, kernel, params
from lowbit.errors import KernelError
from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.numerics import arith, fixed_point
from lowbit.numerics.arith import Requant
from lowbit.numerics.fixed_point import INT32_MAX, INT32_MIN, Q31Params


def per_tensor(node: Node, t: TensorType | None) -> None:
    if t is None or t.quant is None or not t.quant.per_tensor:
        raise KernelError(f"{node.describe()}: operands must be quantized per tensor")


@dataclass(frozen=True, eq=False)
class AddParams:
    """Add / Sub (as TFLite does, in int32), for i = 1, 2:

        d_i = (q_i - input_zeros[i]) << shift                            |d_i| < 2**29
        a_i = requantize_q31(d_i, aligners[i])  (zero point 0, saturated to int32)
        y   = requant.apply(a_1 + a_2)   (Add)      requant.apply(a_1 - a_2)   (Sub)

    shift L = 20 for 8-bit inputs, 12 for 16-bit ones (`arith.ADD_SHIFT`); the aligners
    encode s_i / s with s = 2 * max(s_1, s_2) = `common_scale` in q31 (|a_i| < 2**28), and
    requant M = s / (2**L * s_y) (clamped to the output range narrowed by a fused clip)."""

    input_zeros: tuple[int, int]
    shift: int
    common_scale: float
    aligners: tuple[Q31Params, Q31Params]
    requant: Requant


@params("Add", "Sub")
def add_params(node: Node, inputs: Inputs) -> AddParams:
    """`AddParams` of a quantized Add or Sub."""
    t1, t2 = node.inputs[0].type, node.inputs[1].type
    for t in (t1, t2):
        per_tensor(node, t)
    shift = arith.ADD_SHIFT[8 if max(t1.dtype.bits, t2.dtype.bits) <= 8 else 16]
    s1, s2 = float(arith.scale_of(t1)), float(arith.scale_of(t2))
    big = 2.0 * max(s1, s2)
    aligners = tuple(fixed_point.encode(s / big, fixed_point.Q31) for s in (s1, s2))
    out = node.outputs[0].type
    factor = big / (2.0**shift)
    return AddParams((int(arith.zero_of(t1)), int(arith.zero_of(t2))), shift, big,
                     aligners,  # type: ignore[arg-type]
                     arith.output_requant(node, factor / float(arith.scale_of(out)), out))


@dataclass(frozen=True, eq=False)
class MulParams:
    """Mul: `y = requant.apply((q_1 - input_zeros[0]) * (q_2 - input_zeros[1]))`, M =
    s_1 * s_2 / s_y; the product fits int32 for 8-bit operands and for symmetric 16-bit
    ones."""

    input_zeros: tuple[int, int]
    requant: Requant


@params("Mul")
def mul_params(node: Node, inputs: Inputs) -> MulParams:
    """`MulParams` of a quantized Mul."""
    t1, t2 = node.inputs[0].type, node.inputs[1].type
    for t in (t1, t2):
        per_tensor(node, t)
    out = node.outputs[0].type
    M = float(arith.scale_of(t1)) * float(arith.scale_of(t2)) / float(arith.scale_of(out))
    return MulParams((int(arith.zero_of(t1)), int(arith.zero_of(t2))),
                     arith.output_requant(node, M, out))


@dataclass(frozen=True, eq=False)
class ConcatParams:
    """Concat: input i is copied when `rescales[i]` is None (its type is the output's), else
    `y_i = rescales[i].apply(q_i - input_zeros[i])`, M_i = s_i / s_y, clamped to the output
    dtype's range (a Concat fuses no clip)."""

    input_zeros: tuple[int | None, ...]
    rescales: tuple[Requant | None, ...]


@params("Concat")
def concat_params(node: Node, inputs: Inputs) -> ConcatParams:
    """`ConcatParams` of a quantized Concat."""
    out = node.outputs[0].type
    per_tensor(node, out)
    zeros: list[int | None] = []
    rescales: list[Requant | None] = []
    for value in node.inputs:
        t = value.type
        if t.dtype == out.dtype and t.quant == out.quant:
            zeros.append(None)
            rescales.append(None)
            continue
        per_tensor(node, t)
        M = float(arith.scale_of(t)) / float(arith.scale_of(out))
        zeros.append(int(arith.zero_of(t)))
        rescales.append(arith.output_requant(node, M, out,
                                             bounds=(out.dtype.qmin, out.dtype.qmax)))
    return ConcatParams(tuple(zeros), tuple(rescales))



# -- kernels ------------------------------------------------------------------------------------


def _aligned(p, inputs) -> list[np.ndarray]:
    """Both operands as `a_i` of the module docstring."""
    return [fixed_point.requantize((q.astype(np.int64) - z) << p.shift, aligner, 0, INT32_MIN,
                                   INT32_MAX)
            for q, z, aligner in zip(inputs[:2], p.input_zeros, p.aligners, strict=True)]


@kernel("Add", quantized=True)
def add(node, inputs):
    p = integer_params(node, inputs)
    a1, a2 = _aligned(p, inputs)
    return [p.requant.apply(a1 + a2)]


@kernel("Sub", quantized=True)
def sub(node, inputs):
    p = integer_params(node, inputs)
    a1, a2 = _aligned(p, inputs)
    return [p.requant.apply(a1 - a2)]


@kernel("Mul", quantized=True)
def mul(node, inputs):
    p = integer_params(node, inputs)
    z1, z2 = p.input_zeros
    return [p.requant.apply((inputs[0].astype(np.int64) - z1) * (inputs[1].astype(np.int64) - z2))]


@kernel("Concat", quantized=True)
def concat(node, inputs):
    p = integer_params(node, inputs)
    parts = [q if rescale is None else rescale.apply(q.astype(np.int64) - z)
             for q, z, rescale in zip(inputs, p.input_zeros, p.rescales, strict=True)]
    return [np.concatenate(parts, axis=int(node.attrs["axis"]))]

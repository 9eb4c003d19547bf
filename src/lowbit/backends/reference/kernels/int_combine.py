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
fused Relu/Clip.
"""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.kernels import kernel
from lowbit.errors import KernelError
from lowbit.numerics import arith, fixed_point
from lowbit.numerics.fixed_point import INT32_MAX, INT32_MIN


def _per_tensor(node, t) -> None:
    if t.quant is None or not t.quant.per_tensor:
        raise KernelError(f"{node.describe()}: operands must be quantized per tensor")


def _aligned(node, inputs):
    """Both operands as `a_i` of the module docstring, and the output factor."""
    t1, t2 = node.inputs[0].type, node.inputs[1].type
    for t in (t1, t2):
        _per_tensor(node, t)
    shift = arith.ADD_SHIFT[8 if max(t1.dtype.bits, t2.dtype.bits) <= 8 else 16]
    s1, s2 = float(arith.scale_of(t1)), float(arith.scale_of(t2))
    big = 2.0 * max(s1, s2)
    parts = []
    for q, t, s in ((inputs[0], t1, s1), (inputs[1], t2, s2)):
        d = arith.centred(q, t) << shift
        params = fixed_point.encode(s / big, fixed_point.Q31)
        parts.append(fixed_point.requantize(d, params, 0, INT32_MIN, INT32_MAX))
    return parts, big / (2.0**shift)


@kernel("Add", quantized=True)
def add(node, inputs):
    (a1, a2), factor = _aligned(node, inputs)
    out = node.outputs[0].type
    return [arith.requantize(node, a1 + a2, factor / float(arith.scale_of(out)), out)]


@kernel("Sub", quantized=True)
def sub(node, inputs):
    (a1, a2), factor = _aligned(node, inputs)
    out = node.outputs[0].type
    return [arith.requantize(node, a1 - a2, factor / float(arith.scale_of(out)), out)]


@kernel("Mul", quantized=True)
def mul(node, inputs):
    t1, t2 = node.inputs[0].type, node.inputs[1].type
    for t in (t1, t2):
        _per_tensor(node, t)
    out = node.outputs[0].type
    acc = arith.centred(inputs[0], t1) * arith.centred(inputs[1], t2)
    M = float(arith.scale_of(t1)) * float(arith.scale_of(t2)) / float(arith.scale_of(out))
    return [arith.requantize(node, acc, M, out)]


@kernel("Concat", quantized=True)
def concat(node, inputs):
    out = node.outputs[0].type
    _per_tensor(node, out)
    parts = []
    for value, q in zip(node.inputs, inputs, strict=True):
        t = value.type
        if t.dtype == out.dtype and t.quant == out.quant:
            parts.append(q)
            continue
        _per_tensor(node, t)
        M = float(arith.scale_of(t)) / float(arith.scale_of(out))
        parts.append(arith.requantize(node, arith.centred(q, t), M, out,
                                      bounds=(out.dtype.qmin, out.dtype.qmax)))
    return [np.concatenate(parts, axis=int(node.attrs["axis"]))]

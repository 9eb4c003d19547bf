"""Integer kernels of activations on quantized types.

Relu and Clip are clamps (KEEP rule): with the output typed like the input,
`y = max(q, z)` and `y = clamp(q, z + ceil(lo / s), z + floor(hi / s))`; if the output type
differs, the input is first requantized, `requantize(q - z_x, s_x / s_y) + z_y`, and clamped at
the same real bounds.

Every op whose quantization rule is TABLE (Sigmoid, Tanh, HardSwish, Gelu, Exp, ...) is a lookup
table over all input codes, built by `lowbit.numerics.arith.lookup_table` from the op's own float
kernel: `y = table[q - qmin]` with
`table[i] = saturate(round_half_even(f(s_x * (qmin + i - z_x)) / s_y) + z_y)` — 256 entries for
8-bit inputs, 65536 for 16-bit ones. The parameters come from `relu_params`, `clip_params`
(`ClampParams`) and `table_params` (`TableParams`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lowbit.backends.reference.kernels import Inputs, get_kernel, integer_params, kernel, params
from lowbit.ir.graph import Node
from lowbit.numerics import arith
from lowbit.numerics.arith import Requant
from lowbit.ops.registry import TABLE, all_ops


@dataclass(frozen=True, eq=False)
class ClampParams:
    """Relu / Clip on codes:

        v = q                                      when `rescale` is None (same types)
        v = rescale.apply(q - input_zero)          else, M = s_x / s_y, saturated to the dtype
        y = clamp(v, qmin, qmax)

    qmin = z + ceil(lo / s), qmax = z + floor(hi / s) with the output's s, z (1e-9 of slack
    each way), limited to the dtype's range; qmax >= qmin. `input_zero` is int64, 0-d or
    per channel along the input type's axis."""

    input_zero: np.ndarray
    rescale: Requant | None
    qmin: int
    qmax: int


def _same_type(a, b) -> bool:
    return a.dtype == b.dtype and a.quant == b.quant


def clamp_bounds(node: Node, lo: float, hi: float) -> ClampParams:
    """`ClampParams` of a Relu/Clip node clamping at the real bounds [lo, hi]."""
    tx, out = node.inputs[0].type, node.outputs[0].type
    rescale = None
    if not _same_type(tx, out):
        M = arith.scale_of(tx) / arith.scale_of(out)
        rescale = arith.output_requant(node, M, out, bounds=(out.dtype.qmin, out.dtype.qmax))
    s, z = float(arith.scale_of(out)), int(arith.zero_of(out))
    qlo = out.dtype.qmin if math.isinf(lo) else max(out.dtype.qmin, z + math.ceil(lo / s - 1e-9))
    qhi = out.dtype.qmax if math.isinf(hi) else min(out.dtype.qmax, z + math.floor(hi / s + 1e-9))
    return ClampParams(arith.zero_of(tx), rescale, int(qlo), int(max(qlo, qhi)))


@params("Relu")
def relu_params(node: Node, inputs: Inputs) -> ClampParams:
    """`ClampParams` of a quantized Relu: [0, inf)."""
    return clamp_bounds(node, 0.0, math.inf)


@params("Clip")
def clip_params(node: Node, inputs: Inputs) -> ClampParams:
    """`ClampParams` of a quantized Clip: its min and max inputs (absent: unbounded)."""
    lo = -math.inf if len(inputs) < 2 or inputs[1] is None else float(inputs[1])
    hi = math.inf if len(inputs) < 3 or inputs[2] is None else float(inputs[2])
    return clamp_bounds(node, lo, hi)


@dataclass(frozen=True, eq=False)
class TableParams:
    """A TABLE op on codes: `y = table[q - offset]`, offset the input dtype's qmin, with
    `table[i] = saturate(round_half_even(f(s_x * (offset + i - z_x)) / s_y) + z_y)` for the op's
    float kernel f (`arith.lookup_table`): 256 entries (8-bit inputs) or 65536 (16-bit), in
    the output dtype."""

    table: np.ndarray
    offset: int


_TABLES: dict[tuple, np.ndarray] = {}


def table_params(node: Node, inputs: Inputs) -> TableParams:
    """`TableParams` of a TABLE-rule node for its current input and output types (cached)."""
    tx, out = node.inputs[0].type, node.outputs[0].type
    key = (id(node), node.op_type, tx, out, repr(sorted(node.attrs.items())))
    table = _TABLES.get(key)
    if table is None:
        float_kernel = get_kernel(node.op_type, node.domain)
        table = arith.lookup_table(lambda real: float_kernel(node, [real])[0], tx, out)
        if len(_TABLES) > 4096:
            _TABLES.clear()
        _TABLES[key] = table
    return TableParams(table, int(tx.dtype.qmin))


# -- kernels ------------------------------------------------------------------------------------


def _clamp(node, inputs):
    p = integer_params(node, inputs)
    q = inputs[0]
    out = node.outputs[0].type
    if p.rescale is not None:
        zero = p.input_zero
        axis = node.inputs[0].type.quant.axis
        if zero.ndim and axis is not None:
            shape = [1] * q.ndim
            shape[axis] = zero.size
            zero = zero.reshape(shape)
        q = p.rescale.apply(q.astype(np.int64) - zero)
    return [np.clip(q, p.qmin, p.qmax).astype(out.dtype.np_dtype)]


kernel("Relu", quantized=True)(_clamp)
kernel("Clip", quantized=True)(_clamp)


def _table_kernel(node, inputs):
    p = integer_params(node, inputs)
    return [p.table[inputs[0].astype(np.int64) - p.offset]]


for (_domain, _op_type), _op in all_ops().items():
    if _op.quant_rule == TABLE:
        kernel(_op_type, _domain, quantized=True)(_table_kernel)
        params(_op_type, domain=_domain)(table_params)

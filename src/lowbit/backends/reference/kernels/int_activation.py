"""Integer kernels of activations on quantized types.

Relu and Clip are clamps (KEEP rule): with the output typed like the input,
`y = max(q, z)` and `y = clamp(q, z + ceil(lo / s), z + floor(hi / s))`; if the output type
differs, the input is first requantized, `requantize(q - z_x, s_x / s_y) + z_y`, and clamped at
the same real bounds.

Every op whose quantization rule is TABLE (Sigmoid, Tanh, HardSwish, Gelu, Exp, ...) is a lookup
table over all input codes, built by `lowbit.numerics.arith.lookup_table` from the op's own float
kernel: `y = table[q - qmin]` with
`table[i] = saturate(round_half_even(f(s_x * (qmin + i - z_x)) / s_y) + z_y)` — 256 entries for
8-bit inputs, 65536 for 16-bit ones.
"""

from __future__ import annotations

import math

import numpy as np

from lowbit.backends.reference.kernels import get_kernel, kernel
from lowbit.numerics import arith
from lowbit.ops.registry import TABLE, all_ops


def _same_type(a, b) -> bool:
    return a.dtype == b.dtype and a.quant == b.quant


def _clamp(node, q: np.ndarray, lo: float, hi: float) -> np.ndarray:
    tx, out = node.inputs[0].type, node.outputs[0].type
    if _same_type(tx, out):
        y = q
    else:
        M = arith.scale_of(tx) / arith.scale_of(out)
        y = arith.requantize(node, arith.centred(q, tx), M, out,
                             bounds=(out.dtype.qmin, out.dtype.qmax))
    s, z = float(arith.scale_of(out)), int(arith.zero_of(out))
    qlo = out.dtype.qmin if math.isinf(lo) else max(out.dtype.qmin, z + math.ceil(lo / s - 1e-9))
    qhi = out.dtype.qmax if math.isinf(hi) else min(out.dtype.qmax, z + math.floor(hi / s + 1e-9))
    return np.clip(y, qlo, max(qlo, qhi)).astype(out.dtype.np_dtype)


@kernel("Relu", quantized=True)
def relu(node, inputs):
    return [_clamp(node, inputs[0], 0.0, math.inf)]


@kernel("Clip", quantized=True)
def clip(node, inputs):
    lo = -math.inf if len(inputs) < 2 or inputs[1] is None else float(inputs[1])
    hi = math.inf if len(inputs) < 3 or inputs[2] is None else float(inputs[2])
    return [_clamp(node, inputs[0], lo, hi)]


_TABLES: dict[tuple, np.ndarray] = {}


def table_for(node) -> np.ndarray:
    """The lookup table of a TABLE-rule node for its current input and output types."""
    tx, out = node.inputs[0].type, node.outputs[0].type
    key = (id(node), node.op_type, tx, out, repr(sorted(node.attrs.items())))
    table = _TABLES.get(key)
    if table is None:
        float_kernel = get_kernel(node.op_type, node.domain)
        table = arith.lookup_table(lambda real: float_kernel(node, [real])[0], tx, out)
        if len(_TABLES) > 4096:
            _TABLES.clear()
        _TABLES[key] = table
    return table


def _table_kernel(node, inputs):
    tx = node.inputs[0].type
    return [table_for(node)[inputs[0].astype(np.int64) - tx.dtype.qmin]]


for (_domain, _op_type), _op in all_ops().items():
    if _op.quant_rule == TABLE:
        kernel(_op_type, _domain, quantized=True)(_table_kernel)

"""Integer kernels of activations on quantized types.

Relu and Clip are clamps (KEEP rule): with the output typed like the input,
`y = max(q, z)` and `y = clamp(q, z + ceil(lo / s), z + floor(hi / s))`; if the output type
differs, the input is first requantized, `requantize(q - z_x, s_x / s_y) + z_y`, and clamped at
the same real bounds.

Every op whose quantization rule is TABLE (Sigmoid, Tanh, HardSwish, Gelu, Exp, ...) is a lookup
table over all input codes, built by `lowbit.numerics.arith.lookup_table` from the op's own float
kernel: `y = table[q - qmin]` with
`table[i] = saturate(round_half_even(f(s_x * (qmin + i - z_x)) / s_y) + z_y)` — 256 entries for
8-bit inputs, 65536 for 16-bit ones. HardSwish (with the scalar Mul and Add the quantizer may
have folded into it) is instead defined by a float32 formula on its codes (`HardSwishParams`),
which the cpu backend computes in a product's epilogue; its table holds that formula's codes.
The parameters come from `relu_params`, `clip_params` (`ClampParams`), `table_params`
(`TableParams`) and `hard_swish_params` (`HardSwishParams`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lowbit.backends.reference.kernels import Inputs, get_kernel, integer_params, kernel, params
from lowbit.ir.attrs import AFFINE
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


@dataclass(frozen=True, eq=False)
class HardSwishParams(TableParams):
    """A quantized HardSwish, Y = a * X * max(0, min(1, X / 6 + 1/2)) + b with [a, b] its
    `affine` attribute (default [1, 0]), on codes in float32 arithmetic, each operation rounded
    to nearest even in this order (no fused multiply-add):

        v = float32(q - z_x)                               (exact: |q - z_x| < 2**24)
        t = min(max(v * c1 + 0.5, 0), 1)                   c1 = float32(s_x / 6)
        u = (v * t) * c2 + c3                              c2 = float32(a * s_x / s_y)
                                                           c3 = float32(b / s_y)
        y = round_half_even(clamp(u, qmin - z_y, qmax - z_y)) + z_y
                                                    (qmin, qmax: the output dtype's bounds)

    (`hard_swish_codes`). `table` holds y for every input code (the TableParams form, which the
    reference and 8-bit-input kernels look up); the cpu backend computes the formula itself
    after a product's 16-bit result (one table gather cost more than these float operations)."""

    z_x: int
    c1: np.float32
    c2: np.float32
    c3: np.float32
    z_y: int
    qmin: int
    qmax: int


def hard_swish_codes(p: HardSwishParams, q: np.ndarray) -> np.ndarray:
    """The output codes (int64) of a quantized HardSwish for input codes `q` (the formula of
    `HardSwishParams`, in float32)."""
    v = (np.asarray(q, np.int64) - p.z_x).astype(np.float32)
    t = np.minimum(np.maximum(v * p.c1 + np.float32(0.5), np.float32(0)), np.float32(1))
    u = (v * t) * p.c2 + p.c3
    u = np.clip(u, np.float32(p.qmin - p.z_y), np.float32(p.qmax - p.z_y))
    return np.rint(u).astype(np.int64) + p.z_y


def hard_swish_params(node: Node, inputs: Inputs) -> HardSwishParams:
    """`HardSwishParams` of a quantized HardSwish for its current input and output types."""
    tx, out = node.inputs[0].type, node.outputs[0].type
    a, b = node.attrs.get(AFFINE) or (1.0, 0.0)
    s_x, s_y = float(arith.scale_of(tx)), float(arith.scale_of(out))
    fields = dict(offset=int(tx.dtype.qmin), z_x=int(arith.zero_of(tx)),
                  c1=np.float32(s_x / 6), c2=np.float32(a * s_x / s_y), c3=np.float32(b / s_y),
                  z_y=int(arith.zero_of(out)), qmin=int(out.dtype.qmin), qmax=int(out.dtype.qmax))
    key = ("HardSwish", tx, out, a, b)
    table = _TABLES.get(key)
    if table is None:
        codes = np.arange(tx.dtype.qmin, tx.dtype.qmax + 1)
        draft = HardSwishParams(np.zeros(0, out.dtype.np_dtype), **fields)
        table = hard_swish_codes(draft, codes).astype(out.dtype.np_dtype)
        if len(_TABLES) > 4096:
            _TABLES.clear()
        _TABLES[key] = table
    return HardSwishParams(table, **fields)


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
        params(_op_type, domain=_domain)(
            hard_swish_params if (_domain, _op_type) == ("", "HardSwish") else table_params)

"""A cheaper exact form of the 8-bit quantized Add / Sub: a table for one operand.

int_combine's Add of two 8-bit per-tensor operands (`AddParams`) costs three q31 or prescale
requantizations per element (each operand aligned, then the sum requantized). Its result is a
function of the two stored codes alone, 65536 pairs. The operand of the larger scale is
aligned by exactly 1/2 (a shift), so the result is nearly affine in that operand's code. At
compile time we look for integers k (8 <= k <= 14), c (|c| < 2**15) and a table P of 256
entries with, for every stored code pair (t, u) (t: the tabled operand, u: the other),

    y(t, u) = clamp((P[t] + c * u) >> k, lo, hi)                    (arithmetic shift: floor)

equal to the reference's stored output code. For given (k, c) each P[t] is admissible in an
interval (floor's bounds from every u whose result is not clamped, one side for the clamped
ones), so P[t] = its lower end when no interval is empty. The runtime splits P[t] = Q[t] 2**k
+ R[t] (0 <= R < 2**k, Q int16) and computes Q[t] + ((R[t] + c * u) >> k), the same integer,
in 16-bit lanes. c starts at the real ratio s_u / s_y * 2**k (negated for Sub's second
operand) and is nudged by a few units; both operands are tried as t. Every pair is checked
once more with the final integers; none found: None, and the runtime keeps its expressions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowbit.backends.cpu import params
from lowbit.backends.cpu.codegen.lower import stored_dtype
from lowbit.backends.reference.kernels import int_combine
from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.numerics import arith

NUDGES = (0, -1, 1, -2, 2)
SHIFTS = range(14, 7, -1)


@dataclass(frozen=True)
class LinearAdd:
    """`clamp(q[t] + ((r[t] + c * u) >> shift), lo, hi)` on stored codes (module docstring);
    t = inputs[1]'s code when `swap`, else inputs[0]'s; `table` = q (256) then r (256)."""

    swap: bool
    c: int
    shift: int
    lo: int
    hi: int
    table: np.ndarray


def _stored_shift(t: TensorType) -> int:
    return 128 if stored_dtype(t)[1] else 0


def _eight_bit(t: TensorType | None) -> bool:
    return t is not None and t.quant is not None and t.quant.per_tensor and t.dtype.bits == 8


def reference_table(node: Node) -> tuple[np.ndarray, int, int]:
    """The reference's stored output code of every stored code pair, [256, 256] int64 (row:
    inputs[0]'s code), by the reference kernel itself, and the stored clamp bounds (lo, hi)."""
    t1, t2, out = node.inputs[0].type, node.inputs[1].type, node.outputs[0].type
    stored = np.arange(256, dtype=np.int64)
    codes = [(stored - _stored_shift(t)).astype(t.dtype.np_dtype) for t in (t1, t2)]
    kernel = int_combine.sub if node.op_type == "Sub" else int_combine.add
    so = _stored_shift(out)
    y = kernel(node, [codes[0][:, None], codes[1][None, :]])[0].astype(np.int64) + so
    rq = params.of(node).requant
    return y, rq.qmin + so, rq.qmax + so


def _fit(y: np.ndarray, lo: int, hi: int, c: int, k: int) -> np.ndarray | None:
    """P of the module docstring for rows t of `y` ([t, u]) and (c, k), or None."""
    cu = c * np.arange(256, dtype=np.int64)[None, :]
    small, big = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    low = np.where(y > lo, (y << k) - cu, small).max(axis=1)
    high = np.where(y < hi, ((y + 1) << k) - 1 - cu, big).min(axis=1)
    if np.any(low > high):
        return None
    p = np.where(low == small, np.minimum(high, 0), low)  # a row clamped low throughout
    p = np.where((low == small) & (high == big), 0, p)
    q = p >> k
    if q.min() < -(2**15) or q.max() >= 2**15:
        return None
    if not np.array_equal(np.clip((p[:, None] + cu) >> k, lo, hi), y):
        return None
    return p


def linear_add(node: Node) -> LinearAdd | None:
    """The exact table form of quantized Add/Sub `node` (module docstring), or None when the
    operands or the result are not 8-bit per tensor or no such integers exist."""
    if node.op_type not in ("Add", "Sub") or len(node.inputs) != 2:
        return None
    t1, t2, out = node.inputs[0].type, node.inputs[1].type, node.outputs[0].type
    if not all(_eight_bit(t) for t in (t1, t2, out)):
        return None
    y, lo, hi = reference_table(node)
    so = float(arith.scale_of(out))
    ratios = (float(arith.scale_of(t1)) / so,
              float(arith.scale_of(t2)) / so * (-1.0 if node.op_type == "Sub" else 1.0))
    # the operand of the larger scale (aligned exactly) first as u
    order = (0, 1) if abs(ratios[1]) >= abs(ratios[0]) else (1, 0)
    for swap in (bool(order[0]), bool(order[1])):
        rows = y.T if swap else y
        r_u = ratios[0] if swap else ratios[1]
        for k in SHIFTS:
            c0 = round(r_u * 2.0**k)
            for dc in NUDGES:
                c = c0 + dc
                if abs(c) >= 2**15:
                    continue
                p = _fit(rows, lo, hi, c, k)
                if p is not None:
                    table = np.concatenate([p >> k, p & ((1 << k) - 1)]).astype(np.int16)
                    return LinearAdd(swap, c, k, lo, hi, table)
    return None

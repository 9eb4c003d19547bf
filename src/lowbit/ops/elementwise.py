"""Elementwise ops over inputs broadcast together numpy-style: arithmetic, bitwise, comparison
and logic ops, and Where.

Integer arithmetic wraps around in the operands' width (two's complement), as ONNX Runtime's
does; ONNX leaves overflow undefined.
"""

from __future__ import annotations

from typing import ClassVar

from lowbit.ir import dtypes as dt
from lowbit.ir.dtypes import DType
from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.ops.elementwise_rules import (
    BOOL,
    FLOATS,
    INTS,
    NUMERIC,
    broadcast,
    check_dtype,
    known_types,
    same_dtype,
)
from lowbit.ops.registry import REQUIRED, RESCALE, Attr, OpDef, fail, flag, register


class Broadcasting(OpDef):
    """Inputs of one dtype from `allowed`, broadcast together; the output has their dtype, or
    `result` when set (bool for comparisons)."""

    allowed: ClassVar[frozenset[DType]] = NUMERIC
    result: ClassVar[DType | None] = None

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = known_types(node, in_types)
        present = [t for t in types if t is not None]
        if not present:
            raise fail(node, f"{node.op_type} needs at least one input")
        for i, t in enumerate(types):
            if t is not None:
                check_dtype(node, i, t, self.allowed)
        dtype = same_dtype(node, types, range(len(types)))
        return [TensorType(self.result or dtype, broadcast(node, present))]


class Binary(Broadcasting):
    inputs = ("A", "B")
    outputs = ("C",)


class Variadic(Broadcasting):
    inputs = ("data_0*",)
    outputs = ("result",)


# -- arithmetic -----------------------------------------------------------------------------------
@register
class Add(Binary):
    """C = A + B."""

    op_type = "Add"
    quant_rule = RESCALE
    fusable = True


@register
class Sub(Binary):
    """C = A - B."""

    op_type = "Sub"
    quant_rule = RESCALE


@register
class Mul(Binary):
    """C = A * B."""

    op_type = "Mul"
    quant_rule = RESCALE


@register
class Div(Binary):
    """C = A / B. Integer division truncates toward zero (-7 / 2 = -3); an integer division by
    zero is refused when it happens."""

    op_type = "Div"


@register
class Mod(Binary):
    """With fmod=0, C = A - floor(A / B) * B (the sign of B, like Python's %); with fmod=1,
    C = A - trunc(A / B) * B (the sign of A, like C's fmod). Float special cases follow ONNX
    (x mod 0 and inf mod y are NaN). An integer modulo by zero is refused when it happens."""

    op_type = "Mod"
    attrs: ClassVar[dict[str, Attr]] = {"fmod": flag(0)}


@register
class Pow(OpDef):
    """Z = X ** Y, with the dtype of X. Float X: computed in X's precision. Integer X with an
    integer Y >= 0: exact with wrap-around; with Y < 0: the truncated 1 / X**-Y (so 0 unless
    |X| = 1). Integer X with a float Y: computed in float64, truncated toward zero."""

    op_type = "Pow"
    inputs = ("X", "Y")
    outputs = ("Z",)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x, y = known_types(node, in_types)
        assert x is not None and y is not None
        check_dtype(node, 0, x, FLOATS | {dt.INT32, dt.INT64})
        check_dtype(node, 1, y, NUMERIC)
        return [TensorType(x.dtype, broadcast(node, [x, y]))]


@register
class Max(Variadic):
    """Elementwise maximum of all inputs; NaN if any is NaN."""

    op_type = "Max"


@register
class Min(Variadic):
    """Elementwise minimum of all inputs; NaN if any is NaN."""

    op_type = "Min"


@register
class Sum(Variadic):
    """Elementwise sum of all inputs, added left to right."""

    op_type = "Sum"
    allowed = FLOATS


@register
class Mean(Variadic):
    """Elementwise mean of all inputs: their sum divided by their count."""

    op_type = "Mean"
    allowed = FLOATS


# -- bitwise --------------------------------------------------------------------------------------
@register
class BitShift(Binary):
    """Z = X << Y or X >> Y. Right shifts of signed types are arithmetic. A shift by Y < 0 or
    Y >= the bit width gives 0, or -1 for a right shift of a negative X."""

    op_type = "BitShift"
    inputs = ("X", "Y")
    outputs = ("Z",)
    allowed = INTS
    attrs: ClassVar[dict[str, Attr]] = {"direction": Attr("string", REQUIRED)}

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        if node.attrs["direction"] not in ("LEFT", "RIGHT"):
            raise fail(node, f"direction must be LEFT or RIGHT, got {node.attrs['direction']!r}")


@register
class BitwiseAnd(Binary):
    """C = A & B."""

    op_type = "BitwiseAnd"
    allowed = INTS


@register
class BitwiseOr(Binary):
    """C = A | B."""

    op_type = "BitwiseOr"
    allowed = INTS


@register
class BitwiseXor(Binary):
    """C = A ^ B."""

    op_type = "BitwiseXor"
    allowed = INTS


@register
class BitwiseNot(Broadcasting):
    """Y = ~X (every bit flipped)."""

    op_type = "BitwiseNot"
    inputs = ("X",)
    allowed = INTS


# -- comparison and logic -------------------------------------------------------------------------
@register
class Equal(Binary):
    """C = (A == B); NaN equals nothing."""

    op_type = "Equal"
    allowed = NUMERIC | BOOL
    result = dt.BOOL


@register
class Less(Binary):
    """C = (A < B)."""

    op_type = "Less"
    result = dt.BOOL


@register
class LessOrEqual(Binary):
    """C = (A <= B)."""

    op_type = "LessOrEqual"
    result = dt.BOOL


@register
class Greater(Binary):
    """C = (A > B)."""

    op_type = "Greater"
    result = dt.BOOL


@register
class GreaterOrEqual(Binary):
    """C = (A >= B)."""

    op_type = "GreaterOrEqual"
    result = dt.BOOL


@register
class And(Binary):
    """C = A and B."""

    op_type = "And"
    allowed = BOOL


@register
class Or(Binary):
    """C = A or B."""

    op_type = "Or"
    allowed = BOOL


@register
class Xor(Binary):
    """C = A xor B."""

    op_type = "Xor"
    allowed = BOOL


@register
class Not(Broadcasting):
    """Y = not X."""

    op_type = "Not"
    inputs = ("X",)
    allowed = BOOL


@register
class Where(OpDef):
    """output = X where condition else Y, all three broadcast together."""

    op_type = "Where"
    inputs = ("condition", "X", "Y")
    outputs = ("output",)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        cond, x, y = known_types(node, in_types)
        assert cond is not None and x is not None and y is not None
        check_dtype(node, 0, cond, BOOL)
        check_dtype(node, 1, x, NUMERIC | BOOL)
        dtype = same_dtype(node, in_types, (1, 2))
        return [TensorType(dtype, broadcast(node, [cond, x, y]))]

"""Elementwise math of one input: Y has X's shape (and dtype, except IsNaN/IsInf: bool).

Float16 and bfloat16 are computed in float32 and rounded back once.
"""

from __future__ import annotations

from typing import ClassVar

from lowbit.ir import dtypes as dt
from lowbit.ir.dtypes import DType
from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.ops.elementwise_rules import (
    FLOAT8,
    FLOATS,
    NUMERIC,
    SIGNED_INTS,
    check_dtype,
    known_types,
)
from lowbit.ops.registry import TABLE, Attr, OpDef, flag, register


class Unary(OpDef):
    """One input of a dtype from `allowed`; the output has its shape and dtype (or `result`)."""

    inputs = ("X",)
    allowed: ClassVar[frozenset[DType]] = FLOATS
    result: ClassVar[DType | None] = None
    quant_rule = TABLE

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        (x,) = known_types(node, in_types)
        assert x is not None
        check_dtype(node, 0, x, self.allowed)
        return [TensorType(self.result or x.dtype, x.shape)]


@register
class Abs(Unary):
    """Y = |X|; for signed integers the most negative value maps to itself (wrap-around)."""

    op_type = "Abs"
    allowed = NUMERIC


@register
class Neg(Unary):
    """Y = -X; for signed integers the most negative value maps to itself (wrap-around)."""

    op_type = "Neg"
    allowed = FLOATS | SIGNED_INTS


@register
class Sign(Unary):
    """Y = -1, 0 or 1 by the sign of X (NaN stays NaN)."""

    op_type = "Sign"
    allowed = NUMERIC


@register
class Sqrt(Unary):
    """Y = sqrt(X); NaN for X < 0."""

    op_type = "Sqrt"


@register
class Exp(Unary):
    """Y = e ** X."""

    op_type = "Exp"


@register
class Log(Unary):
    """Y = ln(X); -inf at 0, NaN for X < 0."""

    op_type = "Log"


@register
class Reciprocal(Unary):
    """Y = 1 / X."""

    op_type = "Reciprocal"


@register
class Erf(Unary):
    """Y = erf(X) = 2/sqrt(pi) * integral of exp(-t^2) from 0 to X (computed in float64)."""

    op_type = "Erf"


@register
class Floor(Unary):
    """Y = the largest integer <= X."""

    op_type = "Floor"


@register
class Ceil(Unary):
    """Y = the smallest integer >= X."""

    op_type = "Ceil"


@register
class Round(Unary):
    """Y = X rounded to the nearest integer, halves to even (2.5 -> 2, -1.5 -> -2)."""

    op_type = "Round"


@register
class Sin(Unary):
    """Y = sin(X)."""

    op_type = "Sin"


@register
class Cos(Unary):
    """Y = cos(X)."""

    op_type = "Cos"


@register
class Tan(Unary):
    """Y = tan(X)."""

    op_type = "Tan"


@register
class Asin(Unary):
    """Y = asin(X); NaN outside [-1, 1]."""

    op_type = "Asin"


@register
class Acos(Unary):
    """Y = acos(X); NaN outside [-1, 1]."""

    op_type = "Acos"


@register
class Atan(Unary):
    """Y = atan(X)."""

    op_type = "Atan"


@register
class Sinh(Unary):
    """Y = sinh(X)."""

    op_type = "Sinh"


@register
class Cosh(Unary):
    """Y = cosh(X)."""

    op_type = "Cosh"


@register
class Asinh(Unary):
    """Y = asinh(X)."""

    op_type = "Asinh"


@register
class Acosh(Unary):
    """Y = acosh(X); NaN below 1."""

    op_type = "Acosh"


@register
class Atanh(Unary):
    """Y = atanh(X); NaN outside [-1, 1]."""

    op_type = "Atanh"


@register
class IsNaN(Unary):
    """Y = whether X is NaN."""

    op_type = "IsNaN"
    allowed = FLOATS | FLOAT8
    result = dt.BOOL


@register
class IsInf(Unary):
    """Y = whether X is +inf (if detect_positive) or -inf (if detect_negative)."""

    op_type = "IsInf"
    allowed = FLOATS | FLOAT8
    result = dt.BOOL
    attrs: ClassVar[dict[str, Attr]] = {
        "detect_negative": flag(1),
        "detect_positive": flag(1),
    }

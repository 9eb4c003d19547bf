"""Activation functions: elementwise, Y has X's shape and dtype.

Float attributes are float32 in ONNX; their defaults here are the float32 values, so float64
inputs see the same constants ONNX Runtime uses. Float16 and bfloat16 are computed in float32
and rounded back once.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from lowbit.ir import dtypes as dt
from lowbit.ir.attrs import AFFINE
from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.ops.elementwise_rules import (
    FLOATS,
    NUMERIC,
    SIGNED_INTS,
    broadcast_to,
    check_dtype,
    known_types,
    same_dtype,
)
from lowbit.ops.registry import KEEP, Attr, OpDef, fail, register
from lowbit.ops.unary import Unary


def _f32(value: float) -> float:
    """`value` rounded to float32, as an ONNX float attribute holds it."""
    return float(np.float32(value))


@register
class Relu(Unary):
    """Y = max(X, 0)."""

    op_type = "Relu"
    quant_rule = KEEP
    allowed = FLOATS | SIGNED_INTS


@register
class LeakyRelu(Unary):
    """Y = X if X >= 0 else alpha * X."""

    op_type = "LeakyRelu"
    attrs: ClassVar[dict[str, Attr]] = {"alpha": Attr("float", _f32(0.01))}


@register
class PRelu(OpDef):
    """Y = X if X >= 0 else slope * X, with slope broadcast to X's shape (unidirectionally)."""

    op_type = "PRelu"
    inputs = ("X", "slope")

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x, slope = known_types(node, in_types)
        assert x is not None and slope is not None
        check_dtype(node, 0, x, FLOATS | {dt.INT32, dt.INT64, dt.UINT32, dt.UINT64})
        same_dtype(node, in_types, (0, 1))
        return [TensorType(x.dtype, broadcast_to(node, x.shape, slope, "slope"))]


@register
class Clip(OpDef):
    """output = min(max(input, min), max); so every element is `max` when min > max. Omitted
    bounds do not clamp. min and max are scalars (any one-element tensor is accepted)."""

    op_type = "Clip"
    quant_rule = KEEP
    inputs = ("input", "min?", "max?")
    outputs = ("output",)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = known_types(node, in_types)
        x = types[0]
        assert x is not None
        check_dtype(node, 0, x, NUMERIC)
        same_dtype(node, types, range(len(types)))
        for i, bound in enumerate(types[1:], start=1):
            if bound is not None and bound.numel not in (None, 1):
                raise fail(node, f"{'min' if i == 1 else 'max'} must be a scalar, got shape "
                                 f"{bound.shape}")
        return [TensorType(x.dtype, x.shape)]


@register
class Sigmoid(Unary):
    """Y = 1 / (1 + exp(-X))."""

    op_type = "Sigmoid"


@register
class HardSigmoid(Unary):
    """Y = max(0, min(1, alpha * X + beta))."""

    op_type = "HardSigmoid"
    attrs: ClassVar[dict[str, Attr]] = {
        "alpha": Attr("float", _f32(0.2)),
        "beta": Attr("float", 0.5),
    }


@register
class HardSwish(Unary):
    """Y = X * max(0, min(1, X / 6 + 0.5)); with lowbit's own `affine = [a, b]` (a scalar Mul
    and Add the quantizer folded in, `lowbit.ir.attrs.AFFINE`), Y = a * that + b."""

    op_type = "HardSwish"
    attrs: ClassVar[dict[str, Attr]] = {AFFINE: Attr("floats")}


@register
class Tanh(Unary):
    """Y = tanh(X)."""

    op_type = "Tanh"


@register
class Gelu(Unary):
    """approximate="none": Y = X / 2 * (1 + erf(X / sqrt(2)));
    approximate="tanh": Y = X / 2 * (1 + tanh(sqrt(2 / pi) * (X + 0.044715 * X^3)))."""

    op_type = "Gelu"
    attrs: ClassVar[dict[str, Attr]] = {"approximate": Attr("string", "none")}

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        if node.attrs["approximate"] not in ("none", "tanh"):
            raise fail(node, f"approximate must be 'none' or 'tanh', got "
                             f"{node.attrs['approximate']!r}")


@register
class Elu(Unary):
    """Y = X if X >= 0 else alpha * (exp(X) - 1)."""

    op_type = "Elu"
    attrs: ClassVar[dict[str, Attr]] = {"alpha": Attr("float", 1.0)}


@register
class Selu(Unary):
    """Y = gamma * X if X > 0 else gamma * alpha * (exp(X) - 1)."""

    op_type = "Selu"
    attrs: ClassVar[dict[str, Attr]] = {
        "alpha": Attr("float", _f32(1.6732632423543772848170429916717)),
        "gamma": Attr("float", _f32(1.0507009873554804934193349852946)),
    }


@register
class Celu(Unary):
    """Y = max(0, X) + min(0, alpha * (exp(X / alpha) - 1))."""

    op_type = "Celu"
    attrs: ClassVar[dict[str, Attr]] = {"alpha": Attr("float", 1.0)}

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        if node.attrs["alpha"] == 0:
            raise fail(node, "alpha must not be 0 (Celu divides by it)")


@register
class Softplus(Unary):
    """Y = ln(1 + exp(X)), computed without overflow for large X."""

    op_type = "Softplus"


@register
class Softsign(Unary):
    """Y = X / (1 + |X|)."""

    op_type = "Softsign"


@register
class Mish(Unary):
    """Y = X * tanh(softplus(X))."""

    op_type = "Mish"


@register
class Swish(Unary):
    """Y = X * sigmoid(alpha * X)."""

    op_type = "Swish"
    attrs: ClassVar[dict[str, Attr]] = {"alpha": Attr("float", 1.0)}


@register
class ThresholdedRelu(Unary):
    """Y = X if X > alpha else 0."""

    op_type = "ThresholdedRelu"
    attrs: ClassVar[dict[str, Attr]] = {"alpha": Attr("float", 1.0)}


@register
class Shrink(Unary):
    """Y = X + bias if X < -lambd, X - bias if X > lambd, else 0. Integer X: computed in
    float64 and truncated toward zero into X's dtype."""

    op_type = "Shrink"
    allowed = NUMERIC - {dt.BFLOAT16}
    attrs: ClassVar[dict[str, Attr]] = {"bias": Attr("float", 0.0), "lambd": Attr("float", 0.5)}

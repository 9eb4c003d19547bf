"""Cast and CastLike: convert every element to another dtype.

Rules (ONNX Cast-25 on numeric types; the ONNX reference implementation agrees bit for bit):
- float -> float: round to nearest even; out of range gives +-inf, except for float8 targets:
  with saturate=1 (the default) out-of-range values and infinities clamp to the largest finite
  value; with saturate=0 a value whose rounding exceeds it becomes NaN (inf for float8e5m2),
  as the ONNX table says (ONNX Runtime 1.32 differs there: 448 for e4m3fn, NaN for e5m2).
  float4e2m1 has no inf or NaN: it always clamps, and NaN becomes -0.
- float -> integer: truncate toward zero. Out of range is undefined in ONNX; lowbit gives
  numpy's result, and int4/uint4/int2/uint2 wrap around (ONNX Runtime rounds half away from
  zero for 4-bit targets instead of truncating).
- integer -> integer: keep the low bits (two's complement wrap-around).
- anything -> bool: nonzero (NaN included) is true. bool -> number: 1 or 0.
String tensors are not supported (lowbit has none); neither are float8e8m0 and float6 types.
"""

from __future__ import annotations

from typing import ClassVar

from onnx import TensorProto

from lowbit.errors import UnsupportedError
from lowbit.ir import dtypes
from lowbit.ir.dtypes import DType
from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.ops.elementwise_rules import known_types
from lowbit.ops.registry import REQUIRED, Attr, OpDef, flag, register

ROUND_MODES = ("up", "down", "nearest")


def target_dtype(node: Node, code: int) -> DType:
    """The lowbit dtype of ONNX element type `code`, or a refusal naming the node."""
    if code == TensorProto.STRING:
        raise UnsupportedError(f"{node.describe()}: casts to string are not supported (lowbit "
                               "has no string tensors); do string processing outside the model")
    try:
        return dtypes.from_onnx(code)
    except ValueError as exc:
        supported = ", ".join(d.name for d in dtypes.ALL)
        raise UnsupportedError(f"{node.describe()}: cannot cast: {exc}; supported: {supported}"
                               ) from None


class _CastBase(OpDef):
    # round_mode (Cast-24+) only affects float8e8m0, which lowbit does not support: it is
    # checked when present but not filled in, so exports at opset 21 stay valid.
    attrs: ClassVar[dict[str, Attr]] = {"saturate": flag(1),
                                        "round_mode": Attr("string", choices=ROUND_MODES)}


@register
class Cast(_CastBase):
    """output = input converted to the dtype `to` (see the module docstring for the rules)."""

    op_type = "Cast"
    inputs = ("input",)
    outputs = ("output",)
    attrs: ClassVar[dict[str, Attr]] = {**_CastBase.attrs, "to": Attr("int", REQUIRED)}

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        super().check(node, in_types)
        target_dtype(node, node.attrs["to"])

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        (x,) = known_types(node, in_types)
        assert x is not None
        return [TensorType(target_dtype(node, node.attrs["to"]), x.shape)]


@register
class CastLike(_CastBase):
    """output = input converted to the dtype of target_type (whose values are not read)."""

    op_type = "CastLike"
    inputs = ("input", "target_type")
    outputs = ("output",)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x, like = known_types(node, in_types)
        assert x is not None and like is not None
        return [TensorType(like.dtype, x.shape)]

"""Shape ops and generators: Shape, Size, ConstantOfShape, Range, EyeLike.

Shape and Size read only their input's shape, so the constant folder replaces them (or the
parts of them that are static) by constants. Generators whose output size depends on input
values (ConstantOfShape, Range) have a static shape when those values are known before run time
(`shape_values.symbolic_value`), a symbolic one when they come from symbolic dims, and unknown
dims otherwise.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from lowbit.ir import dtypes as dt
from lowbit.ir.graph import Node
from lowbit.ir.types import Dim, TensorType
from lowbit.ops.cast import target_dtype
from lowbit.ops.elementwise_rules import FLOATS, check_dtype, known_types, same_dtype
from lowbit.ops.registry import Attr, OpDef, fail, register
from lowbit.ops.shape_values import symbolic_value
from lowbit.ops.tensor_rules import check_index_dtype

INT64 = frozenset({dt.INT64})


def shape_slice(rank: int, start: int, end: int | None) -> tuple[int, int]:
    """Shape's [start, end) after negative values count from the end and both are clamped to
    [0, rank]."""
    end = rank if end is None else end
    start = min(rank, max(0, start + rank if start < 0 else start))
    end = min(rank, max(0, end + rank if end < 0 else end))
    return start, max(start, end)


@register
class Shape(OpDef):
    """shape = the input's dimensions start..end-1 as a 1-D int64 tensor (start and end count
    from the back when negative and are clamped to [0, rank])."""

    op_type = "Shape"
    inputs = ("data",)
    outputs = ("shape",)
    attrs: ClassVar[dict[str, Attr]] = {"start": Attr("int", 0), "end": Attr("int")}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        (x,) = known_types(node, in_types)
        assert x is not None
        if x.shape is None:
            return [TensorType(dt.INT64, (None,))]
        start, end = shape_slice(len(x.shape), node.attrs["start"], node.attrs.get("end"))
        return [TensorType(dt.INT64, (end - start,))]


@register
class Size(OpDef):
    """size = the number of elements of the input, as an int64 scalar."""

    op_type = "Size"
    inputs = ("data",)
    outputs = ("size",)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        known_types(node, in_types)
        return [TensorType(dt.INT64, ())]


def shape_from_input(node: Node, index: int, what: str = "shape") -> tuple[Dim, ...] | None:
    """The dims held by the 1-D int64 shape input `index`, as far as they are known before run
    time; None when even their number is not known. Negative known sizes are refused."""
    dims = symbolic_value(node.inputs[index])
    if dims is None:
        return None
    for d in dims:
        if isinstance(d, int) and d < 0:
            raise fail(node, f"{what} {list(dims)} has a negative size")
    return dims


@register
class ConstantOfShape(OpDef):
    """output = a tensor of the given shape filled with `value` (a one-element tensor whose
    dtype is the output's; float32 0 by default)."""

    op_type = "ConstantOfShape"
    inputs = ("input",)
    outputs = ("output",)
    attrs: ClassVar[dict[str, Attr]] = {"value": Attr("tensor")}

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        value = node.attrs.get("value")
        if value is not None and value.size != 1:
            raise fail(node, f"value must hold one element, got shape {value.shape}")

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        (shape_type,) = known_types(node, in_types)
        check_index_dtype(node, 0, shape_type, INT64)
        value = node.attrs.get("value")
        dtype = dt.FLOAT32 if value is None else dt.from_numpy(value.dtype)
        return [TensorType(dtype, shape_from_input(node, 0))]


@register
class Range(OpDef):
    """output = [start, start + delta, start + 2 * delta, ...] up to limit (exclusive):
    max(ceil((limit - start) / delta), 0) elements, element i computed as start + i * delta
    (exactly for integers; in float64 for float32/float64; in float32 for float16/bfloat16,
    or float64 with stash_type=11)."""

    op_type = "Range"
    inputs = ("start", "limit", "delta")
    outputs = ("output",)
    # stash_type is new in version 27: read when present, not filled in, so that exports at
    # older opsets stay valid.
    attrs: ClassVar[dict[str, Attr]] = {"stash_type": Attr("int")}
    allowed = FLOATS | {dt.INT16, dt.INT32, dt.INT64}

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        if node.attrs.get("stash_type", 1) not in (1, 11):
            raise fail(node, f"stash_type must be 1 (float) or 11 (double), got "
                             f"{node.attrs['stash_type']}")

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = known_types(node, in_types)
        for i, t in enumerate(types):
            assert t is not None
            check_dtype(node, i, t, frozenset(self.allowed))
            if t.rank not in (None, 0) and t.numel != 1:
                raise fail(node, f"input {i} must be a scalar, got shape {t.shape}")
        dtype = same_dtype(node, types, range(3))
        return [TensorType(dtype, (range_length(node),))]


def _scalar(node: Node, index: int) -> float | int | Dim:
    v = node.inputs[index]
    array = v.const_value
    if array is not None:
        x = array.reshape(-1)[0]
        return int(x) if array.dtype.kind in "iu" else float(x)
    values = symbolic_value(v)
    return None if values is None or len(values) != 1 else values[0]


def range_length(node: Node) -> Dim:
    """Number of elements of a Range node: static when its inputs are, `limit` for
    Range(0, limit, 1) of a symbolic limit, else unknown."""
    start, limit, delta = (_scalar(node, i) for i in range(3))
    if all(isinstance(x, (int, float)) for x in (start, limit, delta)):
        if delta == 0:
            raise fail(node, "delta must not be 0")
        return range_count(start, limit, delta)  # type: ignore[arg-type]
    if start == 0 and delta == 1 and isinstance(limit, str):
        return limit
    return None


def range_count(start: float, limit: float, delta: float) -> int:
    if all(isinstance(x, int) for x in (start, limit, delta)):
        return max(-((start - limit) // delta), 0)  # type: ignore[operator]
    return max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)


@register
class EyeLike(OpDef):
    """output = a matrix of the input's (2-D) shape with ones on diagonal k (0 the main one,
    positive above, negative below) and zeros elsewhere; dtype `dtype`, or the input's."""

    op_type = "EyeLike"
    inputs = ("input",)
    outputs = ("output",)
    attrs: ClassVar[dict[str, Attr]] = {"dtype": Attr("int"), "k": Attr("int", 0)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        (x,) = known_types(node, in_types)
        assert x is not None
        if x.rank not in (None, 2):
            raise fail(node, f"input must be 2-D, got rank {x.rank}")
        code = node.attrs.get("dtype")
        dtype = x.dtype if code is None else target_dtype(node, code)
        return [TensorType(dtype, (None, None) if x.shape is None else x.shape)]

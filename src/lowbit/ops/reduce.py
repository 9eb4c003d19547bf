"""Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/SumSquare/LogSum/LogSumExp (axes as an
optional int64 input, ONNX versions 13-20) and ArgMax/ArgMin (axis attribute).

Without axes (or with an empty axes tensor) every axis is reduced, unless
noop_with_empty_axes = 1, which makes the op an identity. With keepdims the reduced axes stay
as size 1. A reduction over an empty set gives the operation's identity: 0 for sums, 1 for
products, -inf (floats) or the dtype's minimum for ReduceMax, +inf or the maximum for
ReduceMin, -inf for the logarithmic ones, NaN for a float mean.

Integer sums, products and sums of squares wrap around in the input's width; an integer mean
is the exact sum divided by the count, truncated toward zero; integer ReduceL2 is the float64
square root of the float64 sum of squares, truncated toward zero.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from lowbit.ir import dtypes as dt
from lowbit.ir.dtypes import DType
from lowbit.ir.graph import Node
from lowbit.ir.types import Dim, TensorType
from lowbit.ops.common import normalize_axis
from lowbit.ops.elementwise_rules import BOOL, FLOATS, check_dtype, known_types
from lowbit.ops.registry import KEEP, RESCALE, SELECTS, Attr, OpDef, fail, flag, register

WIDE_NUMERIC = FLOATS | {dt.INT32, dt.INT64, dt.UINT32, dt.UINT64}
ORDERED = WIDE_NUMERIC | {dt.INT8, dt.UINT8} | BOOL
ARG_TYPES = FLOATS | {dt.INT8, dt.INT16, dt.INT32, dt.INT64, dt.UINT8, dt.UINT16, dt.UINT32,
                      dt.UINT64}


def reduce_axes(node: Node, rank: int, axes: np.ndarray | None) -> tuple[int, ...] | None:
    """The sorted axes a Reduce node reduces for constant `axes` (None when absent or empty:
    all axes, or none with noop_with_empty_axes); refuses repeated or out-of-range axes."""
    if axes is None or axes.size == 0:
        return None
    if axes.ndim != 1:
        raise fail(node, f"axes must be 1-D, got shape {axes.shape}")
    out = sorted(normalize_axis(node, int(a), rank) for a in axes)
    if len(set(out)) != len(out):
        raise fail(node, f"axes {axes.tolist()} repeat an axis")
    return tuple(out)


class Reduce(OpDef):
    """A reduction whose input dtype is in `allowed`; the output has the input's dtype."""

    inputs = ("data", "axes?")
    outputs = ("reduced",)
    attrs = {"keepdims": flag(1), "noop_with_empty_axes": flag(0)}
    allowed: ClassVar[frozenset[DType]] = WIDE_NUMERIC
    min_version = 18

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = known_types(node, in_types)
        x = types[0]
        assert x is not None
        check_dtype(node, 0, x, self.allowed)
        axes_t = types[1] if len(types) > 1 else None
        if axes_t is not None:
            check_dtype(node, 1, axes_t, frozenset({dt.INT64}))
        return [TensorType(x.dtype, self._shape(node, x.shape))]

    def _shape(self, node: Node, shape: tuple[Dim, ...] | None) -> tuple[Dim, ...] | None:
        keep = bool(node.attrs.get("keepdims", 1))
        axes_v = node.input_or_none(1)
        if shape is None:
            return None
        rank = len(shape)
        if axes_v is not None and axes_v.const_value is None:
            return (None,) * rank if keep else None
        axes = reduce_axes(node, rank, axes_v.const_value if axes_v is not None else None)
        if axes is None:
            if node.attrs.get("noop_with_empty_axes", 0):
                return shape
            axes = tuple(range(rank))
        if keep:
            return tuple(1 if a in axes else d for a, d in enumerate(shape))
        return tuple(d for a, d in enumerate(shape) if a not in axes)


@register
class ReduceSum(Reduce):
    """Sum."""

    op_type = "ReduceSum"
    min_version = 13


@register
class ReduceMean(Reduce):
    """Arithmetic mean."""

    op_type = "ReduceMean"
    quant_rule = RESCALE


@register
class ReduceMax(Reduce):
    """Maximum (logical or for bool); exact in every dtype."""

    op_type = "ReduceMax"
    allowed = ORDERED
    quant_rule = KEEP
    moves_data = SELECTS


@register
class ReduceMin(Reduce):
    """Minimum (logical and for bool); exact in every dtype."""

    op_type = "ReduceMin"
    allowed = ORDERED
    quant_rule = KEEP
    moves_data = SELECTS


@register
class ReduceProd(Reduce):
    """Product."""

    op_type = "ReduceProd"


@register
class ReduceL1(Reduce):
    """Sum of absolute values."""

    op_type = "ReduceL1"


@register
class ReduceL2(Reduce):
    """Square root of the sum of squares."""

    op_type = "ReduceL2"


@register
class ReduceSumSquare(Reduce):
    """Sum of squares."""

    op_type = "ReduceSumSquare"


@register
class ReduceLogSum(Reduce):
    """Natural logarithm of the sum."""

    op_type = "ReduceLogSum"
    allowed = FLOATS


@register
class ReduceLogSumExp(Reduce):
    """log(sum(exp(X))), computed as m + log(sum(exp(X - m))) with m the maximum."""

    op_type = "ReduceLogSumExp"
    allowed = FLOATS


class ArgReduce(OpDef):
    """Index (int64) of the first extreme value along `axis`, or the last one with
    select_last_index = 1."""

    inputs = ("data",)
    outputs = ("reduced",)
    attrs = {"axis": Attr("int", 0), "keepdims": flag(1),
             "select_last_index": flag(0)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        (x,) = known_types(node, in_types)
        assert x is not None
        check_dtype(node, 0, x, ARG_TYPES)
        if x.shape is None:
            return [TensorType(dt.INT64, None)]
        if not x.shape:
            raise fail(node, "the input must have rank 1 or more")
        axis = normalize_axis(node, int(node.attrs.get("axis", 0)), len(x.shape))
        if x.shape[axis] == 0:
            raise fail(node, f"axis {axis} is empty: there is no extreme value to index")
        if node.attrs.get("keepdims", 1):
            shape = tuple(1 if a == axis else d for a, d in enumerate(x.shape))
        else:
            shape = tuple(d for a, d in enumerate(x.shape) if a != axis)
        return [TensorType(dt.INT64, shape)]


@register
class ArgMax(ArgReduce):
    """Position of the maximum along `axis` (NaN counts as the maximum)."""

    op_type = "ArgMax"


@register
class ArgMin(ArgReduce):
    """Position of the minimum along `axis` (NaN counts as the minimum)."""

    op_type = "ArgMin"

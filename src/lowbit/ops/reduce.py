"""Reductions (ReduceMean, ReduceSum, ReduceMax, ...) with `axes` as an optional input, and
ArgMax / ArgMin."""

from __future__ import annotations

from lowbit.ir import dtypes
from lowbit.ir.graph import Node
from lowbit.ir.types import Dim, TensorType
from lowbit.ops.common import normalize_axis
from lowbit.ops.elementwise_rules import BOOL, FLOATS, INTS, check_dtype, known_types
from lowbit.ops.registry import KEEP, RESCALE, Attr, OpDef, const_input, fail, register


def reduced_axes(node: Node, rank: int) -> tuple[int, ...] | None:
    """The reduced axes (sorted, non-negative); () for a no-op; None when not constant."""
    if node.input_or_none(1) is None:
        return () if node.attrs.get("noop_with_empty_axes") else tuple(range(rank))
    axes = const_input(node, 1)
    if axes is None:
        return None
    axes = [int(a) for a in axes.reshape(-1)]
    if not axes:
        return () if node.attrs.get("noop_with_empty_axes") else tuple(range(rank))
    normal = sorted({normalize_axis(node, a, rank) for a in axes})
    if len(normal) != len(axes):
        raise fail(node, f"axes {axes} repeat an axis")
    return tuple(normal)


def reduced_shape(shape: tuple[Dim, ...], axes: tuple[int, ...], keepdims: bool
                  ) -> tuple[Dim, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


class _Reduce(OpDef):
    inputs = ("data", "axes?")
    outputs = ("reduced",)
    attrs = {"keepdims": Attr("int", 1), "noop_with_empty_axes": Attr("int", 0)}
    min_version = 18
    allowed = FLOATS | INTS

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x = known_types(node, in_types)[0]
        assert x is not None
        check_dtype(node, 0, x, self.allowed)
        if x.shape is None:
            return [TensorType(x.dtype, None)]
        axes = reduced_axes(node, len(x.shape))
        keep = bool(node.attrs["keepdims"])
        if axes is None:
            return [TensorType(x.dtype, (None,) * len(x.shape) if keep else None)]
        if not axes:
            return [TensorType(x.dtype, x.shape)]
        return [TensorType(x.dtype, reduced_shape(x.shape, axes, keep))]


def _reduce(name: str, doc: str, rule: str | None = None, allowed=FLOATS | INTS,
            since: int = 18):
    cls = type(name, (_Reduce,), {"op_type": name, "__doc__": doc, "quant_rule": rule,
                                  "allowed": allowed, "min_version": since})
    return register(cls)


ReduceMean = _reduce("ReduceMean", "Mean over `axes`.", RESCALE)
ReduceSum = _reduce("ReduceSum", "Sum over `axes`.", since=13)
ReduceMax = _reduce("ReduceMax", "Maximum over `axes` (-inf / the lowest value when empty).",
                    KEEP, FLOATS | INTS | BOOL)
ReduceMin = _reduce("ReduceMin", "Minimum over `axes` (+inf / the highest value when empty).",
                    KEEP, FLOATS | INTS | BOOL)
ReduceProd = _reduce("ReduceProd", "Product over `axes`.")
ReduceL1 = _reduce("ReduceL1", "Sum of absolute values over `axes`.")
ReduceL2 = _reduce("ReduceL2", "Square root of the sum of squares over `axes`.")
ReduceSumSquare = _reduce("ReduceSumSquare", "Sum of squares over `axes`.")
ReduceLogSum = _reduce("ReduceLogSum", "log of the sum over `axes`.")
ReduceLogSumExp = _reduce("ReduceLogSumExp", "log(sum(exp(x))) over `axes`, computed stably.")


class _Arg(OpDef):
    inputs = ("data",)
    outputs = ("reduced",)
    attrs = {"axis": Attr("int", 0), "keepdims": Attr("int", 1),
             "select_last_index": Attr("int", 0)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x = known_types(node, in_types)[0]
        assert x is not None
        check_dtype(node, 0, x, FLOATS | INTS)
        if x.shape is None:
            return [TensorType(dtypes.INT64, None)]
        axis = normalize_axis(node, int(node.attrs["axis"]), len(x.shape))
        return [TensorType(dtypes.INT64, reduced_shape(x.shape, (axis,),
                                                       bool(node.attrs["keepdims"])))]


@register
class ArgMax(_Arg):
    """Index of the first (or last, with select_last_index) maximum along `axis`."""

    op_type = "ArgMax"


@register
class ArgMin(_Arg):
    """Index of the first (or last, with select_last_index) minimum along `axis`."""

    op_type = "ArgMin"

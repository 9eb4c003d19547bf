"""Softmax, LogSoftmax and Hardmax along one axis (ONNX version 13: the axis alone, not the
flattened trailing axes of older versions). Y has X's shape and dtype."""

from __future__ import annotations

from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.ops.common import normalize_axis
from lowbit.ops.elementwise_rules import FLOATS, check_dtype, known_types
from lowbit.ops.registry import Attr, OpDef, register


class AlongAxis(OpDef):
    """One float input normalized along `axis` (default -1); the output has its type."""

    inputs = ("input",)
    outputs = ("output",)
    attrs = {"axis": Attr("int", -1)}
    min_version = 13

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        (x,) = known_types(node, in_types)
        assert x is not None
        check_dtype(node, 0, x, FLOATS)
        if x.shape is not None:
            normalize_axis(node, int(node.attrs.get("axis", -1)), max(len(x.shape), 1))
        return [TensorType(x.dtype, x.shape)]


@register
class Softmax(AlongAxis):
    """Y = exp(X - max) / sum(exp(X - max)) along `axis`."""

    op_type = "Softmax"


@register
class LogSoftmax(AlongAxis):
    """Y = (X - max) - log(sum(exp(X - max))) along `axis`."""

    op_type = "LogSoftmax"


@register
class Hardmax(AlongAxis):
    """Y = 1 at the first maximum along `axis`, 0 elsewhere."""

    op_type = "Hardmax"

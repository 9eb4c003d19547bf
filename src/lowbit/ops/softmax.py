"""Softmax, LogSoftmax and Hardmax along one axis (opset 13 semantics: not flattened)."""

from __future__ import annotations

from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.ops.common import normalize_axis
from lowbit.ops.elementwise_rules import FLOATS, check_dtype, known_types
from lowbit.ops.registry import Attr, OpDef, register


class _AlongAxis(OpDef):
    inputs = ("input",)
    outputs = ("output",)
    attrs = {"axis": Attr("int", -1)}
    min_version = 13

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x = known_types(node, in_types)[0]
        assert x is not None
        check_dtype(node, 0, x, FLOATS)
        if x.shape is not None:
            normalize_axis(node, int(node.attrs["axis"]), len(x.shape))
        return [TensorType(x.dtype, x.shape)]


@register
class Softmax(_AlongAxis):
    """y = exp(x - max) / sum(exp(x - max)) along `axis`."""

    op_type = "Softmax"


@register
class LogSoftmax(_AlongAxis):
    """y = x - max - log(sum(exp(x - max))) along `axis`."""

    op_type = "LogSoftmax"


@register
class Hardmax(_AlongAxis):
    """1 at the first maximum along `axis`, 0 elsewhere."""

    op_type = "Hardmax"

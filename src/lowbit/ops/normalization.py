"""Normalizations: BatchNormalization (inference), LayerNormalization, InstanceNormalization."""

from __future__ import annotations

from lowbit.ir import dtypes
from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.ops.common import normalize_axis
from lowbit.ops.elementwise_rules import FLOATS, check_dtype, known_types
from lowbit.ops.registry import Attr, OpDef, fail, register


@register
class BatchNormalization(OpDef):
    """Inference mode: Y = (X - mean) / sqrt(var + epsilon) * scale + B, per channel (axis 1).
    Training mode is refused."""

    op_type = "BatchNormalization"
    inputs = ("X", "scale", "B", "input_mean", "input_var")
    outputs = ("Y", "running_mean?", "running_var?")
    attrs = {"epsilon": Attr("float", 1e-5), "momentum": Attr("float", 0.9),
             "training_mode": Attr("int", 0)}
    min_version = 14

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        if node.attrs.get("training_mode"):
            raise fail(node, "training mode is not supported; export the model in eval mode")
        if len(node.outputs) > 1:
            raise fail(node, "running statistics outputs exist only in training mode")

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        self.check(node, in_types)
        x = known_types(node, in_types)[0]
        assert x is not None
        check_dtype(node, 0, x, FLOATS)
        return [TensorType(x.dtype, x.shape)]


@register
class LayerNormalization(OpDef):
    """Over the axes from `axis` to the last: Y = (X - mean) / sqrt(var + epsilon) * Scale + B,
    with the biased variance, computed in float32 (stash_type 1) or float64; optional outputs
    Mean and InvStdDev keep the reduced axes as size 1."""

    op_type = "LayerNormalization"
    inputs = ("X", "Scale", "B?")
    outputs = ("Y", "Mean?", "InvStdDev?")
    attrs = {"axis": Attr("int", -1), "epsilon": Attr("float", 1e-5),
             "stash_type": Attr("int", 1)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x = known_types(node, in_types)[0]
        assert x is not None
        check_dtype(node, 0, x, FLOATS)
        out = [TensorType(x.dtype, x.shape)]
        if x.shape is None:
            stats = TensorType(_stash(node), None)
        else:
            axis = normalize_axis(node, int(node.attrs["axis"]), len(x.shape))
            stats = TensorType(_stash(node), x.shape[:axis] + (1,) * (len(x.shape) - axis))
        return out + [stats, stats]


def _stash(node: Node) -> dtypes.DType:
    stash = int(node.attrs.get("stash_type", 1))
    if stash not in (1, 11):
        raise fail(node, f"stash_type {stash} is not supported (1 = float32, 11 = float64)")
    return dtypes.FLOAT32 if stash == 1 else dtypes.FLOAT64


@register
class InstanceNormalization(OpDef):
    """Per sample and channel over the spatial axes: y = scale * (x - mean) /
    sqrt(var + epsilon) + B."""

    op_type = "InstanceNormalization"
    inputs = ("input", "scale", "B")
    outputs = ("output",)
    attrs = {"epsilon": Attr("float", 1e-5)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x = known_types(node, in_types)[0]
        assert x is not None
        check_dtype(node, 0, x, FLOATS)
        return [TensorType(x.dtype, x.shape)]

"""Identity-like ops: Identity, and Dropout in inference mode."""

from __future__ import annotations

from lowbit.ir import dtypes
from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.ops.registry import KEEP, REARRANGES, Attr, OpDef, fail, register


@register
class Identity(OpDef):
    """Y = X."""

    op_type = "Identity"
    quant_rule = KEEP
    moves_data = REARRANGES
    inputs = ("input",)
    outputs = ("output",)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        assert in_types[0] is not None
        return [in_types[0]]


@register
class Dropout(OpDef):
    """Inference-mode dropout: output = data, mask = all true. Training mode is refused."""

    op_type = "Dropout"
    inputs = ("data", "ratio?", "training_mode?")
    outputs = ("output", "mask?")
    attrs = {"seed": Attr("int")}
    min_version = 12

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        training = node.input_or_none(2)
        if training is not None:
            value = training.const_value
            if value is None or bool(value):
                raise fail(node, "training mode is not supported; export the model in eval mode")

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        data = in_types[0]
        assert data is not None
        return [data.with_quant(data.quant), TensorType(dtypes.BOOL, data.shape)]

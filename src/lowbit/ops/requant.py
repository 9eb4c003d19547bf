"""lowbit's own conversions between float and quantized tensors (domain "lowbit").

Their parameters are the quantization parameters of the tensor types involved, never attributes:
a Quantize node's output type says what it produces (set by the quantizer, like every quantized
result type), and Dequantize and Requantize read their input's type.

    Quantize:    q = saturate(round_half_even(x / scale) + zero_point)     (x / scale in float32)
    Dequantize:  x = float32(q - zero_point) * scale
    Requantize:  q' = saturate(requantize(q - zero_point, M = scale / scale') + zero_point')

Requantize is integer-only: M is applied by `lowbit.numerics.fixed_point` in the encoding named by
the node's `requant` attribute (the default for the output width when absent).
"""

from __future__ import annotations

from lowbit.ir import dtypes
from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.ops.registry import QUANT_DOMAIN, REQUANT, Attr, OpDef, fail, register


def _declared_output(node: Node, in_type: TensorType) -> TensorType:
    out = node.outputs[0].type
    if out is None or out.quant is None:
        raise fail(node, "needs a quantized output type (set by the quantizer); none is declared")
    return TensorType(out.dtype, in_type.shape, out.quant)


def _quantized_input(node: Node, in_type: TensorType | None) -> TensorType:
    if in_type is None or in_type.quant is None:
        raise fail(node, "input must have a quantized type")
    return in_type


@register
class Quantize(OpDef):
    """Float to quantized integers, `q = saturate(round_half_even(x / scale) + zero_point)`,
    per tensor or per channel as the output type says."""

    op_type = "Quantize"
    domain = QUANT_DOMAIN
    inputs = ("x",)
    outputs = ("y",)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x = in_types[0]
        if x is None or not x.dtype.is_float:
            raise fail(node, "input must be a float tensor")
        return [_declared_output(node, x)]


@register
class Dequantize(OpDef):
    """Quantized integers to float32, `x = (q - zero_point) * scale`."""

    op_type = "Dequantize"
    domain = QUANT_DOMAIN
    inputs = ("q",)
    outputs = ("x",)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        q = _quantized_input(node, in_types[0])
        return [TensorType(dtypes.FLOAT32, q.shape)]


@register
class Requantize(OpDef):
    """Quantized to quantized with other parameters, in integers only:
    `q' = saturate(requantize(q - zero_point, scale / scale') + zero_point')`."""

    op_type = "Requantize"
    domain = QUANT_DOMAIN
    inputs = ("q",)
    outputs = ("y",)
    attrs = {REQUANT: Attr("string")}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        q = _quantized_input(node, in_types[0])
        out = _declared_output(node, q)
        if (q.quant.axis is not None or out.quant.axis is not None) and \
                q.quant.axis != out.quant.axis and not out.quant.per_tensor:
            raise fail(node, "per-channel requantization must keep the channel axis")
        return [out]

"""Ops: one module per family, each op an `OpDef` registered by op type.

`infer_node` computes a node's output types from its inputs' types; `infer_graph` does it for
every node in order.
"""

from __future__ import annotations

from lowbit.errors import ModelError
from lowbit.ir import dtypes
from lowbit.ir.graph import Graph, Node
from lowbit.ir.types import TensorType
from lowbit.ops.registry import (
    COMPUTE,
    KEEP,
    REQUIRED,
    Attr,
    OpDef,
    all_ops,
    const_input,
    fail,
    get,
    lookup,
    register,
    supported_ops,
)

__all__ = [
    "REQUIRED",
    "Attr",
    "OpDef",
    "all_ops",
    "const_input",
    "fail",
    "get",
    "infer_graph",
    "infer_node",
    "lookup",
    "register",
    "supported_ops",
]


def infer_node(node: Node) -> list[TensorType]:
    """Compute and return the output types of `node` (does not assign them)."""
    if node.op_type == "Constant":
        return [node.output.type] if node.output.type is not None else []
    op = get(node.op_type, node.domain)
    in_types = [v.type if v is not None else None for v in node.inputs]
    quantized = op.quant_rule is not None and any(t is not None and t.quant is not None
                                                  for t in in_types)
    if quantized and op.quant_rule != KEEP:
        in_types = [_float_view(t) for t in in_types]
    try:
        out = op.infer(node, in_types)
    except ModelError:
        raise
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise ModelError(f"{node.describe()}: cannot infer output types: {exc}") from exc
    if len(out) < len(node.outputs):
        raise ModelError(
            f"{node.describe()}: inferred {len(out)} output types for {len(node.outputs)} outputs"
        )
    out = out[: len(node.outputs)]
    if quantized:
        out = [_quantized_result(node, op, v, t) for v, t in zip(node.outputs, out, strict=False)]
    return out


def _float_view(t: TensorType | None) -> TensorType | None:
    """What an op sees of a quantized operand when inferring shapes: the float tensor it stands
    for (ops infer shapes; quantized result types come from the quantizer or the KEEP rule)."""
    if t is None or t.quant is None:
        return t
    return TensorType(dtypes.FLOAT32, t.shape)


def _quantized_result(node: Node, op: OpDef, value, inferred: TensorType) -> TensorType:
    """The result type of a quantized node: the declared quantized type with the inferred
    shape; for KEEP ops, what the op inferred, or else the input's parameters."""
    declared = value.type
    if declared is not None and declared.quant is not None:
        return TensorType(declared.dtype, inferred.shape, declared.quant)
    if op.quant_rule == COMPUTE and declared is not None and declared.dtype == inferred.dtype:
        return inferred  # a float result straight from the integer accumulator
    if inferred.quant is not None:
        return inferred
    source = node.inputs[0].type if node.inputs and node.inputs[0] is not None else None
    if op.quant_rule == KEEP and source is not None and source.quant is not None and \
            inferred.dtype == source.dtype:
        if source.quant.per_tensor or source.shape == inferred.shape:
            return TensorType(source.dtype, inferred.shape, source.quant)
        raise ModelError(f"{node.describe()}: cannot carry per-channel parameters (axis "
                         f"{source.quant.axis}) through a shape change; quantize per tensor")
    if not inferred.dtype.is_float:
        return inferred
    raise ModelError(f"{node.describe()}: output '{value.name}' of a quantized node has no "
                     f"quantized type")


def infer_graph(graph: Graph, keep_quant: bool = True) -> None:
    """Assign inferred types to every node output, in order.

    Where a value already has a type, inferred unknown dims are filled from it, and with
    `keep_quant` its quantization parameters are kept (ops infer dtype and shape only).
    """
    for node in graph.nodes:
        if node.op_type == "Constant":
            continue
        for value, t in zip(node.outputs, infer_node(node), strict=False):
            value.type = merge_types(value.type, t, keep_quant)


def merge_types(old: TensorType | None, new: TensorType, keep_quant: bool = True) -> TensorType:
    """`new`, with unknown dims taken from `old` and, with `keep_quant`, `old`'s quant params.

    A quantized result type is chosen by the quantizer, not inferred: where `old` is quantized
    and both are integer types, `old`'s dtype and parameters are kept (ops infer the shape).
    """
    if old is None:
        return new
    shape = new.shape
    if shape is None:
        shape = old.shape
    elif old.shape is not None and len(old.shape) == len(shape):
        shape = tuple(n if n is not None else o for n, o in zip(shape, old.shape, strict=True))
    if keep_quant and old.quant is not None and old.dtype.is_integer and new.dtype.is_integer:
        return TensorType(old.dtype, shape, old.quant)
    keep = keep_quant and old.quant is not None and old.dtype == new.dtype
    quant = old.quant if keep else new.quant
    return TensorType(new.dtype, shape, quant)

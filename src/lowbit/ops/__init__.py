"""Ops: one module per family, each op an `OpDef` registered by op type.

`infer_node` computes a node's output types from its inputs' types; `infer_graph` does it for
every node in order.
"""

from __future__ import annotations

from lowbit.errors import ModelError
from lowbit.ir.graph import Graph, Node
from lowbit.ir.types import TensorType
from lowbit.ops.registry import (
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
    return out[: len(node.outputs)]


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
    """`new`, with unknown dims taken from `old` and, with `keep_quant`, `old`'s quant params."""
    if old is None:
        return new
    shape = new.shape
    if shape is None:
        shape = old.shape
    elif old.shape is not None and len(old.shape) == len(shape):
        shape = tuple(n if n is not None else o for n, o in zip(shape, old.shape, strict=True))
    quant = old.quant if keep_quant and old.dtype == new.dtype else new.quant
    return TensorType(new.dtype, shape, quant)

"""Passes over quantized graphs: Quantize/Dequantize simplification."""

from __future__ import annotations

from lowbit.ir.dead_code import eliminate_dead_code
from lowbit.ir.graph import Graph, Node
from lowbit.ops.registry import QUANT_DOMAIN


def _is(node: Node | None, op_type: str) -> bool:
    return node is not None and node.domain == QUANT_DOMAIN and node.op_type == op_type


def simplify_quantize(graph: Graph) -> Graph:
    """Remove conversions that cancel and merge those that chain:

    - Dequantize(Quantize(x)) -> x (the float value is used directly: no rounding);
    - Quantize(Dequantize(q)) -> q when the types match, else Requantize(q);
    - Requantize(Requantize(q)) -> one Requantize, or q when the types match;
    - a Requantize to its input's own type -> its input.

    Guarantees: graph outputs keep their values; what remains computes the same integers,
    except that a removed Dequantize(Quantize(x)) no longer rounds x.
    """
    while _simplify_once(graph, integer_first=True) or _simplify_once(graph, False):
        graph = eliminate_dead_code(graph)
    return eliminate_dead_code(graph)


def _simplify_once(graph: Graph, integer_first: bool) -> bool:
    """Apply one rewrite; integer-side rewrites (Q(DQ), Requantize chains) before the float-side
    DQ(Q(x)) -> x, so integer paths keep their integers. True if something changed."""
    for node in graph.nodes:
        if node.domain != QUANT_DOMAIN:
            continue
        src, out = node.inputs[0], node.outputs[0]
        inner = src.producer if src is not None else None
        replacement = None
        if integer_first:
            if (_is(node, "Quantize") and _is(inner, "Dequantize")) or \
                    (_is(node, "Requantize") and _is(inner, "Requantize")):
                origin = inner.inputs[0]
                if origin.type != out.type:
                    node.op_type = "Requantize"
                    node.inputs[0] = origin
                    return True
                replacement = origin
            elif _is(node, "Requantize") and src.type == out.type:
                replacement = src
        elif _is(node, "Dequantize") and _is(inner, "Quantize"):
            replacement = inner.inputs[0]
        if replacement is not None and out not in graph.outputs and any(
                out in n.inputs for n in graph.nodes):
            graph.replace_all_uses(out, replacement)
            return True
    return False

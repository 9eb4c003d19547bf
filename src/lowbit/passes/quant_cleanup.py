"""Passes over quantized graphs: Quantize/Dequantize simplification and late constant folding."""

from __future__ import annotations

from lowbit.backends.reference.kernels.requant import quantize as _quantize_kernel
from lowbit.ir.graph import CONSTANT, Graph, Node
from lowbit.ops.registry import QUANT_DOMAIN
from lowbit.passes.dead_code import eliminate_dead_code


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


def fold_quantized_constants(graph: Graph) -> Graph:
    """Replace Quantize(Constant) by an integer Constant of the quantized type (the late fold of
    delayed quantization: until here, passes and backends see the float weights).

    Guarantees: the folded constant equals what the Quantize node would compute at run time.
    """
    for i, node in enumerate(graph.nodes):
        if not _is(node, "Quantize") or not node.inputs[0].is_constant:
            continue
        (array,) = _quantize_kernel(node, [node.inputs[0].const_value])
        array = array.copy()
        array.setflags(write=False)
        graph.nodes[i] = Node(CONSTANT, [], [node.output], {"value": array}, node.name)
    return eliminate_dead_code(graph)

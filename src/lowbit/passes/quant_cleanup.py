"""Passes over quantized graphs: Quantize/Dequantize simplification, and the scalar Mul and
Add after a HardSwish folded into it."""

from __future__ import annotations

import numpy as np

from lowbit.ir.attrs import AFFINE, FUSED_CLIP
from lowbit.ir.dead_code import eliminate_dead_code
from lowbit.ir.graph import Graph, Node, Value
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


def _per_tensor(v: Value | None) -> bool:
    return v is not None and v.type is not None and v.type.quant is not None and \
        v.type.quant.per_tensor


def _scalar_step(node: Node, x: Value) -> tuple[float, float] | None:
    """(k, c) when quantized `node` computes k * x + c from `x` and a one-element quantized
    constant (a Mul or an Add, with the constant's real value), else None."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in ("Mul", "Add") or \
            len(node.inputs) != 2 or node.inputs.count(x) != 1 or FUSED_CLIP in node.attrs or \
            not _per_tensor(node.outputs[0]):
        return None
    real = _scalar_constant(node.inputs[1 - node.inputs.index(x)])
    if real is None:
        return None
    return (real, 0.0) if node.op_type == "Mul" else (1.0, real)


def _scalar_constant(v: Value) -> float | None:
    """The real value of a one-element constant operand of a quantized node: a Quantize of a
    float constant (the float value itself, as the quantizer leaves it until
    `fold_quantized_constants`) or quantized codes (dequantized); else None."""
    source = v.producer
    if _is(source, "Quantize") and source.inputs[0].is_constant:
        value = np.asarray(source.inputs[0].const_value)
        return float(value.reshape(-1)[0]) if value.size == 1 else None
    if not v.is_constant or not _per_tensor(v) or np.size(v.const_value) != 1:
        return None
    q = v.type.quant
    code = int(np.asarray(v.const_value).reshape(-1)[0])
    return float(q.scale.reshape(-1)[0]) * (code - int(q.zero_point.reshape(-1)[0]))


def fold_hard_swish_affine(graph: Graph) -> Graph:
    """Fold the quantized Muls and Adds of one-element constants that follow a quantized
    HardSwish (PP-LCNet's "learnable affine block": HardSwish, Mul by a scalar, Add of a
    scalar), each reading only the previous one's result, into the HardSwish's `affine`
    attribute: the chain becomes Y = a * HardSwish(X) + b, with a and b the constants' real
    values, computed with one rounding to the last node's output type
    (`int_activation.HardSwishParams`) instead of one per node. A DEFINITION: the codes
    differ from the unfolded chain's (they are closer to the float chain's). Per-tensor types
    only; a value read twice, or a graph output, ends the chain. Returns the graph."""
    users = graph.users()
    dead: list[Node] = []
    for node in graph.nodes:
        if node.op_type != "HardSwish" or node.domain not in ("", "ai.onnx") or \
                not _per_tensor(node.inputs[0]) or not _per_tensor(node.outputs[0]):
            continue
        a, b = node.attrs.get(AFFINE) or (1.0, 0.0)
        cur = node.outputs[0]
        folded: list[Node] = []
        while cur not in graph.outputs and len(users.get(cur, [])) == 1:
            nxt = users[cur][0][0]
            step = _scalar_step(nxt, cur)
            if step is None:
                break
            k, c = step
            a, b = a * k, b * k + c
            folded.append(nxt)
            cur = nxt.outputs[0]
        if not folded:
            continue
        node.attrs[AFFINE] = [float(a), float(b)]
        node.outputs[0] = cur
        cur.producer = node
        dead.extend(folded)
    if not dead:
        return graph
    graph.remove_nodes(dead)
    return eliminate_dead_code(graph)

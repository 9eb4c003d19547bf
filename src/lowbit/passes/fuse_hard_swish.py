"""HardSwish spelled out in elementwise ops becomes one HardSwish node.

Exporters without a HardSwish op (Paddle2ONNX, older PyTorch opsets, TensorFlow converters)
write x * relu6(x + 3) / 6 as Add, Clip, Mul and Div. Quantized op by op, that is three roundings
of the result in 8 bits and a float product; as one HardSwish it is one lookup table.
"""

from __future__ import annotations

import numpy as np

from lowbit.ir.graph import Graph, Node, Value
from lowbit.ops.registry import FUSED_CLIP


def _scalar(v: Value | None) -> float | None:
    c = v.const_value if v is not None else None
    if c is None or c.size != 1:
        return None
    return float(np.asarray(c, dtype=np.float64).reshape(()))


def _is(v: Value | None, number: float) -> bool:
    c = _scalar(v)
    return c is not None and abs(c - number) <= 1e-6 * abs(number)


class _Matcher:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.users = graph.users()
        self.outputs = set(graph.outputs)

    def private(self, v: Value | None) -> Node | None:
        """The producer of `v` when one node reads `v` and it is no graph output."""
        if v is None or v.producer is None or v in self.outputs:
            return None
        return v.producer if len(self.users.get(v, [])) == 1 else None

    def relu6_plus_3(self, v: Value) -> tuple[Value, list[Node]] | None:
        """(x, nodes) when v = clip(x + 3, 0, 6): an Add with a fused [0, 6] clamp, or a Clip
        with bounds 0 and 6 of an Add."""
        node = self.private(v)
        if node is None:
            return None
        nodes = [node]
        if node.op_type == "Clip":
            if not (_is(node.input_or_none(1), 0.0) and _is(node.input_or_none(2), 6.0)):
                return None
            node = self.private(node.inputs[0])
            if node is None or FUSED_CLIP in node.attrs:
                return None
            nodes.append(node)
        elif node.attrs.get(FUSED_CLIP) != [0.0, 6.0]:
            return None
        if node.op_type != "Add" or len(node.inputs) != 2:
            return None
        a, b = node.inputs
        x = a if _is(b, 3.0) else b if _is(a, 3.0) else None
        return (x, nodes) if x is not None else None

    def gate(self, v: Value) -> tuple[Value, list[Node]] | None:
        """(x, nodes) when v = relu6(x + 3) / 6: Div by 6 or Mul by 1/6 of relu6(x + 3), or
        HardSigmoid(x) with alpha 1/6 and beta 1/2."""
        node = self.private(v)
        if node is None:
            return None
        if node.op_type == "HardSigmoid":
            alpha = float(node.attrs.get("alpha", 0.2))
            beta = float(node.attrs.get("beta", 0.5))
            if abs(alpha - 1 / 6) <= 1e-6 and abs(beta - 0.5) <= 1e-6:
                return node.inputs[0], [node]
            return None
        scaled = self._scaled_by_sixth(node)
        if scaled is None:
            return None
        found = self.relu6_plus_3(scaled)
        return (found[0], [node, *found[1]]) if found is not None else None

    @staticmethod
    def _scaled_by_sixth(node: Node) -> Value | None:
        """u when `node` computes u / 6 (Div by 6, or Mul by 1/6)."""
        if len(node.inputs) != 2 or FUSED_CLIP in node.attrs:
            return None
        a, b = node.inputs
        if node.op_type == "Div" and _is(b, 6.0):
            return a
        if node.op_type == "Mul":
            return a if _is(b, 1 / 6) else b if _is(a, 1 / 6) else None
        return None

    def hard_swish(self, node: Node) -> tuple[Value, list[Node]] | None:
        """(x, nodes to remove) when `node` computes x * relu6(x + 3) / 6 in one of the
        spellings: (x * r) / 6, x * (r / 6), x * HardSigmoid(x)."""
        if node.op_type not in ("Mul", "Div") or FUSED_CLIP in node.attrs:
            return None
        inner = self._scaled_by_sixth(node)
        if inner is not None:  # (x * relu6(x + 3)) / 6
            product = self.private(inner)
            if product is None or product.op_type != "Mul" or FUSED_CLIP in product.attrs:
                return None
            for x, r in (product.inputs, product.inputs[::-1]):
                found = self.relu6_plus_3(r)
                if found is not None and found[0] is x:
                    return x, [product, *found[1]]
            return None
        if node.op_type != "Mul" or len(node.inputs) != 2:
            return None
        for x, g in (node.inputs, node.inputs[::-1]):
            found = self.gate(g) if x is not None and g is not None else None
            if found is not None and found[0] is x:
                return x, found[1]
        return None


def fuse_hard_swish(graph: Graph) -> Graph:
    """Replace x * relu6(x + 3) / 6, spelled (x * relu6(x + 3)) / 6, x * (relu6(x + 3) / 6) or
    x * HardSigmoid(x, alpha=1/6, beta=1/2), by HardSwish(x), where relu6(x + 3) is a Clip(0, 6)
    of x + 3 or an Add with a fused [0, 6] clamp, and every intermediate value is read only
    inside the pattern. Guarantees: the last node becomes HardSwish and keeps its output value
    (name and readers); results equal the spelled-out form up to float rounding.
    """
    m = _Matcher(graph)
    dead: list[Node] = []
    taken: set[int] = set()
    for node in graph.nodes:
        found = m.hard_swish(node)
        if found is None or id(node) in taken or any(id(n) in taken for n in found[1]):
            continue
        x, inner = found
        node.op_type, node.inputs, node.attrs, node.domain = "HardSwish", [x], {}, ""
        taken.update(id(n) for n in (node, *inner))
        dead.extend(inner)
    graph.remove_nodes(dead)
    return graph

"""Control-flow rewrites used by constant folding: an If whose condition is constant becomes
its branch, and constants a body reads through its node move into the body."""

from __future__ import annotations

from lowbit.ir.graph import CONSTANT, Graph, Node, Value
from lowbit.ops import merge_types


def sink_constant_captures(graph: Graph, node: Node) -> None:
    """Captured inputs of a control-flow node that are constants are copied into each body as
    Constant nodes (sharing the array), so that inside the body they are constants too; the
    node then no longer passes them."""
    if not node.captures:
        return
    first = len(node.inputs) - node.captures
    keep = []
    for k, outer in enumerate(node.inputs[first:]):
        if outer is None or not outer.is_constant:
            keep.append(k)
            continue
        for _, sub in node.subgraphs():
            inner = sub.implicit[k]
            clone = Node(CONSTANT, [], [inner], {"value": outer.const_value},
                         graph.unique_node_name(f"{inner.name}_const"))
            inner.type = outer.type
            sub.nodes.insert(0, clone)
    if len(keep) == node.captures:
        return
    node.inputs = node.inputs[:first] + [node.inputs[first + k] for k in keep]
    for _, sub in node.subgraphs():
        sub.implicit = [sub.implicit[k] for k in keep]


def inline_if(graph: Graph, node: Node) -> list[Node] | None:
    """The nodes replacing an If whose condition is a constant: its chosen branch, reading the
    node's captured inputs, writing the node's outputs (whose names it takes, so graph outputs
    keep theirs), or None when the condition is not constant."""
    if node.op_type != "If" or node.domain or not node.inputs:
        return None
    cond = node.inputs[0]
    if cond is None or cond.const_value is None or cond.const_value.size != 1:
        return None
    branch: Graph = node.attrs["then_branch" if bool(cond.const_value.reshape(-1)[0])
                               else "else_branch"]
    first = len(node.inputs) - node.captures
    mapping: dict[Value, Value] = {
        inner: outer for inner, outer in zip(branch.implicit, node.inputs[first:], strict=True)
        if outer is not None}
    names = {v.name: v for v in graph.values()}
    nodes: list[Node] = []
    for n in branch.nodes:
        if n.op_type == CONSTANT and n.output.name in names:
            same = names[n.output.name]
            if same.is_constant and same.const_value is n.attrs["value"]:
                mapping[n.output] = same  # the copy of an outer constant: read the original
                continue
            n.output.name = graph.unique_name(n.output.name)
        n.inputs = [mapping.get(v, v) if v is not None else None for v in n.inputs]
        nodes.append(n)
    produced = {v for n in nodes for v in n.outputs}
    taken: set[Value] = set()
    for out, inner in zip(node.outputs, branch.outputs, strict=True):
        inner = mapping.get(inner, inner)
        if inner in produced and inner not in taken:
            taken.add(inner)
            inner.name = out.name
            if out.type is not None:
                inner.type = merge_types(out.type, inner.type) if inner.type is not None \
                    else out.type
            graph.replace_all_uses(out, inner)
        else:  # an outer value or a value given twice: pass it through
            nodes.append(Node("Identity", [inner], [out], {},
                              graph.unique_node_name(f"{node.name}_{out.name}")))
    return nodes

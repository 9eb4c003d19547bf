"""Dead-code elimination: a Graph -> Graph function every pass, exporter and backend uses."""

from __future__ import annotations

from lowbit.ir.graph import Graph, Node


def eliminate_dead_code(graph: Graph) -> Graph:
    """Remove every node none of whose outputs reaches a graph output, in subgraphs too, and
    the implicit values (with their node inputs) that no subgraph of a node reads any more.

    Guarantees: graph inputs and outputs are unchanged; surviving nodes keep their order.
    """
    live = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(v in live for v in node.outputs):
            for _, sub in node.subgraphs():
                eliminate_dead_code(sub)
            drop_unread_captures(node)
            kept.append(node)
            live.update(v for v in node.inputs if v is not None)
    graph.nodes = kept[::-1]
    return graph


def drop_unread_captures(node: Node) -> None:
    """Remove the captures of a control-flow node that none of its subgraphs reads."""
    subs = [sub for _, sub in node.subgraphs()]
    if not subs or not node.captures:
        return
    read = [set() for _ in subs]
    for r, sub in zip(read, subs, strict=True):
        r.update(v for n, _ in sub.walk() for v in n.inputs if v is not None)
        r.update(sub.outputs)
    keep = [k for k in range(node.captures)
            if any(sub.implicit[k] in r for sub, r in zip(subs, read, strict=True))]
    if len(keep) == node.captures:
        return
    first = len(node.inputs) - node.captures
    node.inputs = node.inputs[:first] + [node.inputs[first + k] for k in keep]
    for sub in subs:
        sub.implicit = [sub.implicit[k] for k in keep]

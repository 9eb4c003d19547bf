"""Dead-code elimination: a Graph -> Graph function every pass, exporter and backend uses."""

from __future__ import annotations

from lowbit.ir.graph import Graph


def eliminate_dead_code(graph: Graph) -> Graph:
    """Remove every node none of whose outputs reaches a graph output.

    Guarantees: graph inputs and outputs are unchanged; surviving nodes keep their order.
    """
    live = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(v in live for v in node.outputs):
            kept.append(node)
            live.update(v for v in node.inputs if v is not None)
    graph.nodes = kept[::-1]
    return graph

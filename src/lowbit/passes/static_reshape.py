"""Reshape targets computed at run time become constants where symbolic shapes allow it."""

from __future__ import annotations

import numpy as np

from lowbit.ir.dead_code import eliminate_dead_code
from lowbit.ir.graph import Graph
from lowbit.ops.shape_values import symbolic_value


def constant_reshape_targets(graph: Graph) -> Graph:
    """Give each Reshape whose target shape is computed (Shape -> Gather -> Concat ...) a
    constant target when every element is known: a static size stays, a symbolic size equal to
    the input's dimension at the same position becomes 0 ("copy", allowzero = 0), and at most one
    other element becomes -1 (inferred). The shape sub-graph then dies.

    Guarantees: the Reshape computes the same result for every input size; graphs with dynamic
    batch and sequence dims come out free of shape arithmetic.
    """
    changed = False
    for node in graph.nodes:
        if node.op_type != "Reshape" or node.attrs.get("allowzero"):
            continue
        target = node.input_or_none(1)
        data = node.inputs[0]
        if target is None or target.is_constant or data.type is None or data.type.shape is None:
            continue
        elements = symbolic_value(target)
        if elements is None:
            continue
        resolved: list[int] = []
        for i, d in enumerate(elements):
            if isinstance(d, int) and d != 0:
                resolved.append(d)
            elif isinstance(d, str) and i < len(data.type.shape) and data.type.shape[i] == d:
                resolved.append(0)
            else:
                resolved.append(-1)
        if resolved.count(-1) > 1:
            continue
        node.inputs[1] = graph.add_constant(np.asarray(resolved, np.int64),
                                            f"{node.name}_shape", before=node)
        changed = True
    return eliminate_dead_code(graph) if changed else graph

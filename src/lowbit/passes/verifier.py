"""IR invariants, checked after every pass in tests and with `--debug`.

A graph is valid when: every value has a unique name and a single producer (single assignment);
nodes are in topological order, so every input is a graph input or the output of an earlier
node (no dangling inputs, no cycles); graph outputs are produced; Constant nodes hold a
read-only array matching their output type; and, with `check_types`, every node's recorded
output types agree with what its op infers from its input types. Subgraphs are verified the
same way, each closed: its nodes read only its inputs, its implicit values (one per trailing
input of its node, as many for every subgraph of the node) and its own nodes' outputs.
"""

from __future__ import annotations

import numpy as np

from lowbit.errors import VerifyError
from lowbit.ir.graph import CONSTANT, Graph, Value
from lowbit.ir.types import TensorType
from lowbit.ops import infer_node


def _dims_agree(a: TensorType, b: TensorType) -> bool:
    if a.shape is None or b.shape is None:
        return True
    if len(a.shape) != len(b.shape):
        return False
    return all(x == y for x, y in zip(a.shape, b.shape, strict=True)
               if isinstance(x, int) and isinstance(y, int))


def verify(graph: Graph, check_types: bool = True, scope: str = "") -> None:
    """Raise VerifyError describing the first broken invariant (in a subgraph, prefixed with
    its scope)."""
    try:
        _verify(graph, check_types)
    except VerifyError as exc:
        if scope:
            raise VerifyError(f"in {scope}: {exc}") from exc
        raise


def _verify(graph: Graph, check_types: bool) -> None:
    names: dict[str, str] = {}
    defined: set[Value] = set()

    def define(v: Value, where: str) -> None:
        if v in defined:
            raise VerifyError(f"value '{v.name}' is assigned twice ({where})")
        if v.name in names:
            raise VerifyError(f"name '{v.name}' is used by two values ({names[v.name]} and "
                              f"{where})")
        names[v.name] = where
        defined.add(v)

    for v in graph.inputs + graph.implicit:
        if v.producer is not None:
            raise VerifyError(f"graph input '{v.name}' has a producer")
        if v.type is None:
            raise VerifyError(f"graph input '{v.name}' has no type")
        define(v, "graph input")
    node_names: set[str] = set()
    for node in graph.nodes:
        if not node.name or node.name in node_names:
            raise VerifyError(f"node name '{node.name}' ({node.op_type}) is empty or repeated")
        node_names.add(node.name)
        for i, v in enumerate(node.inputs):
            if v is not None and v not in defined:
                state = "comes later (not topologically ordered)" if any(
                    v in n.outputs for n in graph.nodes) else "is produced by nothing"
                raise VerifyError(f"{node.describe()} input {i} '{v.name}' {state}")
        for v in node.outputs:
            if v.producer is not node:
                raise VerifyError(f"{node.describe()} output '{v.name}' names another producer")
            define(v, node.describe())
        if node.op_type == CONSTANT:
            _verify_constant(node)
        for attr, sub in node.subgraphs():
            if len(sub.implicit) != node.captures or node.captures > len(node.inputs):
                raise VerifyError(f"{node.describe()}: subgraph '{attr}' has "
                                  f"{len(sub.implicit)} implicit values for {node.captures} "
                                  f"captured inputs")
            verify(sub, check_types=False, scope=f"{node.describe()} {attr}")
    for v in graph.outputs:
        if v not in defined:
            raise VerifyError(f"graph output '{v.name}' is produced by nothing")
    if check_types:
        _verify_types(graph)


def _verify_constant(node) -> None:
    value = node.attrs.get("value")
    if not isinstance(value, np.ndarray):
        raise VerifyError(f"{node.describe()} has no array value")
    if value.flags.writeable:
        raise VerifyError(f"{node.describe()} holds a writeable array (constants are read-only)")
    t = node.output.type
    if t is None or t.dtype.np_dtype != value.dtype or t.shape != tuple(value.shape):
        raise VerifyError(f"{node.describe()}: type {t} does not match its array "
                          f"{value.dtype}{list(value.shape)}")


def _verify_types(graph: Graph) -> None:
    for node in graph.nodes:
        if node.op_type == CONSTANT:
            continue
        inferred = infer_node(node)
        for v, t in zip(node.outputs, inferred, strict=False):
            if v.type is None:
                raise VerifyError(f"{node.describe()} output '{v.name}' has no type")
            chosen = v.type.quant is not None and v.type.dtype.is_integer and t.dtype.is_integer
            if (v.type.dtype != t.dtype and not chosen) or not _dims_agree(v.type, t):
                raise VerifyError(f"{node.describe()} output '{v.name}' is typed {v.type} but "
                                  f"its op infers {t}")

"""Resuming runs: a graph that changes a few nodes of a graph already run on the same batches
computes only what depends on the change (`Interpreter(known=...)`).

`RecordedRun(reference, batches)` runs `reference` on each batch and keeps every value it
computes; `RecordedRun.run(candidate, i)` runs `candidate` on batch i, taking the values it
shares with `reference` from the record. Which values are shared:

A value of `candidate` is shared with `reference` when the node computing it is the same
computation: a node of the same name, op type, domain and attributes (a Constant's array the
same object or equal, dtype and all), reading shared values (or graph inputs of the same name
and type) at the same positions, with outputs of the same names and types (quantization
parameters included). Graph inputs of the same name and type are shared. Every value computed
from shared values only is then bit for bit the one the reference run produced, since the
reference interpreter is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from lowbit.backends.lowering import fold_quantized_constants, has_quantized_constants
from lowbit.backends.reference.interpreter import Interpreter
from lowbit.ir.graph import CONSTANT, Graph, Node, Value

DEFAULT_MAX_BYTES = 1 << 30
"""Memory a record may take: EfficientNet-Lite0 computes about 25 MB of values per image."""


class RecordedRun:
    """Every value `reference` computes on each of `batches`, by name (module docstring), for
    as many batches as `max_bytes` holds."""

    def __init__(self, reference: Graph, batches: Sequence[Mapping[str, np.ndarray]],
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.reference = _lowered(reference)
        self.batches = list(batches)
        self.values: list[dict[str, np.ndarray]] = []
        self.outputs_of: list[list[np.ndarray]] = []
        """The reference's outputs on each batch."""
        self.recorded = 0
        """Batches whose values are all kept: the first ones, as many as `max_bytes` holds;
        the others run in full."""
        interpreter = Interpreter(self.reference, observers=[self._record])
        held = 0
        for batch in self.batches:
            self._current: dict[str, np.ndarray] = {v.name: np.asarray(batch[v.name])
                                                    for v in self.reference.inputs}
            result = interpreter(batch)
            self.outputs_of.append([result[v.name] for v in self.reference.outputs])
            size = sum(a.nbytes for a in self._current.values())
            if len(self.values) == len(self.outputs_of) - 1 and held + size <= max_bytes:
                self.values.append(self._current)
                held += size
        self.recorded = len(self.values)
        del self._current

    def _record(self, node: Node, outputs) -> None:
        for v, a in zip(node.outputs, outputs, strict=False):
            self._current[v.name] = a

    def runner(self, candidate: Graph) -> Callable[[int], list[np.ndarray]]:
        """A function running `candidate` on batch i (its outputs in graph-output order),
        resuming from the record."""
        graph = _lowered(candidate)
        given = frontier(graph, shared_values(graph, self.reference))
        resuming = Interpreter(graph, known=given)
        full: list[Interpreter] = []

        def run(index: int) -> list[np.ndarray]:
            if index < self.recorded:
                record = self.values[index]
                result = resuming(self.batches[index], {v: record[v.name] for v in given})
            else:
                if not full:
                    full.append(Interpreter(graph))
                result = full[0](self.batches[index])
            return [result[v.name] for v in graph.outputs]

        return run


def _lowered(graph: Graph) -> Graph:
    """The graph as the reference backend runs it (Quantize(constant) folded, on a copy)."""
    return fold_quantized_constants(graph.copy()) if has_quantized_constants(graph) else graph


def shared_values(candidate: Graph, reference: Graph) -> dict[Value, str]:
    """The values of `candidate` that `reference` computes the same way (module docstring),
    mapped to their names (which are also their names in `reference`)."""
    ref_nodes = reference.node_map()
    ref_inputs = {v.name: v for v in reference.inputs}
    shared: dict[Value, str] = {}
    for v in candidate.inputs:
        r = ref_inputs.get(v.name)
        if r is not None and r.type == v.type:
            shared[v] = v.name
    for node in candidate.nodes:
        other = ref_nodes.get(node.name)
        if other is not None and _same_node(node, other, shared):
            for v in node.outputs:
                shared[v] = v.name
    return shared


def frontier(candidate: Graph, shared: Mapping[Value, str]) -> list[Value]:
    """The shared values that a node computing something new reads, and the shared graph
    outputs: all a run of `candidate` needs from the reference run."""
    needed: dict[Value, None] = {}
    for node in candidate.nodes:
        if node.op_type == CONSTANT or all(v in shared for v in node.outputs):
            continue
        for v in node.inputs:
            if v is not None and v in shared and not v.is_constant:
                needed[v] = None
    for v in candidate.outputs:
        if v in shared:
            needed[v] = None
    return list(needed)


def _same_node(node: Node, other: Node, shared: Mapping[Value, str]) -> bool:
    if (node.op_type, node.domain) != (other.op_type, other.domain) or \
            len(node.inputs) != len(other.inputs) or len(node.outputs) != len(other.outputs):
        return False
    for a, b in zip(node.inputs, other.inputs, strict=True):
        if (a is None) != (b is None):
            return False
        if a is not None and (shared.get(a) != b.name):
            return False
    for a, b in zip(node.outputs, other.outputs, strict=True):
        if a.name != b.name or a.type != b.type:
            return False
    return _same_attrs(node.attrs, other.attrs)


def _same_attrs(a: Mapping, b: Mapping) -> bool:
    return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)


def _same(x, y) -> bool:
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        if x is y:
            return True
        return isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and \
            x.dtype == y.dtype and x.shape == y.shape and bool(np.array_equal(x, y))
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        return len(x) == len(y) and all(_same(p, q) for p, q in zip(x, y, strict=True))
    if isinstance(x, Graph) or isinstance(y, Graph):
        return x is y
    return type(x) is type(y) and x == y

"""Checks before a run: the model's shapes for the actual inputs, and the memory they need.

A model imported with symbolic dimensions (a batch `N`) can still contradict itself once `N`
is known: a Gemm with transA=1 whose K is the batch size, a Flatten on the wrong axis. And a
small file can describe intermediate values larger than the machine's memory. `preflight`
infers every value's type from the input arrays' shapes with the ops' own inference, so such a
model is refused naming the node, and adds up the bytes of the values alive at each step (the
interpreter frees a value after its last reader), refusing a run whose peak exceeds the
memory available, with the figures, before anything is allocated.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from lowbit.errors import InputError, LowbitError, ModelError
from lowbit.ir.graph import CONSTANT, Graph, Value
from lowbit.ir.types import TensorType

MEMORY_FRACTION = 0.8
"""A run may plan at most this share of the available memory for its values (kernels need
scratch space on top: im2col columns, float64 accumulators)."""


def available_memory() -> int:
    """Bytes of memory available to a new allocation (MemAvailable on Linux; else free pages)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def format_bytes(n: float) -> str:
    for unit, div in (("TB", 1 << 40), ("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{int(n)} B"


def specialize(graph: Graph, arrays: Sequence[np.ndarray]) -> Graph:
    """A copy of `graph` whose value types are inferred from the input arrays' shapes.

    Refuses, naming the node, a node whose inference fails once the inputs are known."""
    from lowbit.ops import infer_node, merge_types

    g = graph.copy()
    for v, a in zip(g.inputs, arrays, strict=True):
        if v.type is not None:
            v.type = TensorType(v.type.dtype, tuple(int(d) for d in a.shape), v.type.quant)
    shapes = ", ".join(f"{v.name} {tuple(a.shape)}" for v, a in zip(g.inputs, arrays,
                                                                       strict=True))
    for node in g.nodes:
        if node.op_type == CONSTANT:
            continue
        try:
            inferred = infer_node(node)
        except LowbitError as exc:
            raise ModelError(f"with inputs of shape {shapes}: {exc}") from exc
        for value, t in zip(node.outputs, inferred, strict=False):
            value.type = merge_types(value.type, t) if value.type is not None else t
    return g


def value_bytes(v: Value) -> int | None:
    t = v.type
    if t is None or t.numel is None:
        return None
    return t.numel * t.dtype.np_dtype.itemsize


def peak_bytes(graph: Graph) -> tuple[int, Value | None]:
    """The largest total size of the values alive at once while running `graph` in order
    (inputs, node outputs until their last reader; constants excluded, they exist already),
    and the largest single value. Values of unknown size count as zero."""
    last: dict[Value, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v is not None:
                last[v] = i
    keep = set(graph.outputs)
    live = sum(value_bytes(v) or 0 for v in graph.inputs)
    peak, largest, largest_size = live, None, -1
    for i, node in enumerate(graph.nodes):
        if node.op_type == CONSTANT:
            continue
        for v in node.outputs:
            size = value_bytes(v) or 0
            live += size
            if size > largest_size:
                largest, largest_size = v, size
        peak = max(peak, live)
        for v in {v for v in node.inputs if v is not None}:
            if last.get(v) == i and v not in keep and not v.is_constant:
                live -= value_bytes(v) or 0
        for v in node.outputs:
            if v not in last and v not in keep:
                live -= value_bytes(v) or 0
    return peak, largest


def preflight(graph: Graph, arrays: Sequence[np.ndarray], memory: int | None = None) -> Graph:
    """`specialize` the graph to the inputs, then refuse a run whose values would need more
    than MEMORY_FRACTION of `memory` (default: the memory available now). Returns the
    specialized graph."""
    g = specialize(graph, arrays)
    peak, largest = peak_bytes(g)
    memory = available_memory() if memory is None else memory
    if peak > MEMORY_FRACTION * memory:
        shapes = ", ".join(f"{tuple(a.shape)}" for a in arrays)
        what = f"; the largest, '{largest.name}' {largest.type}, alone takes " \
               f"{format_bytes(value_bytes(largest) or 0)}" if largest is not None else ""
        raise InputError(
            f"running the model on inputs of shape {shapes} needs at least "
            f"{format_bytes(peak)} for its intermediate values{what}; this machine has "
            f"{format_bytes(memory)} available. Use smaller batches or inputs, or check the "
            f"model's shapes (`lowbit inspect --nodes`)")
    return g

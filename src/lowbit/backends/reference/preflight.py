"""Checks before a run: the model's shapes for the actual inputs, and the memory they need.

A model imported with symbolic dimensions (a batch `N`) can still contradict itself once `N`
is known: a Gemm with transA=1 whose K is the batch size, a Flatten on the wrong axis. And a
small file can describe intermediate values larger than the machine's memory, or windows so
large that a run would take hours. `preflight` infers every value's type from the input
arrays' shapes with the ops' own inference, so such a model is refused naming the node; then
it adds up the bytes of the values alive at each step (the interpreter frees a value after its
last reader) plus each node's temporaries, and the operations of every node (`OpDef.work`),
refusing a run whose peak exceeds the memory available or whose operations exceed `max_ops()`,
with the figures, before anything is allocated.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np

from lowbit.errors import InputError, LowbitError, ModelError
from lowbit.ir.graph import CONSTANT, Graph, Value
from lowbit.ir.types import TensorType
from lowbit.ops.work import graph_work

MAX_OPS = 2e12
"""The most multiply-adds one run of the reference interpreter may take (at the few GFLOP/s
numpy reaches here, several minutes to hours); LOWBIT_MAX_OPS overrides it."""
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


def specialize(graph: Graph, arrays: Sequence[np.ndarray],
               runs: Sequence[bool] | None = None,
               known: Mapping[Value, np.ndarray] | None = None) -> Graph:
    """A copy of `graph` whose value types are inferred from the input arrays' shapes.

    With `runs` (one flag per node) and `known` (arrays given for values of `graph`, as a
    resumed run of the interpreter takes them), the known values' types come from their arrays
    and only the nodes that run are inferred: they read nothing else (`Interpreter`), so the
    others keep their declared types. Refuses, naming the node, a node whose inference fails
    once the inputs are known."""
    from lowbit.ops import infer_node, merge_types

    g = graph.copy()
    for v, a in zip(g.inputs, arrays, strict=True):
        if v.type is not None:
            v.type = TensorType(v.type.dtype, tuple(int(d) for d in a.shape), v.type.quant)
    if known:
        copies = dict(zip(graph.inputs, g.inputs, strict=True))
        for old, new in zip(graph.nodes, g.nodes, strict=True):
            copies.update(zip(old.outputs, new.outputs, strict=True))
        for v, a in known.items():
            copy = copies[v]
            if copy.type is not None:
                copy.type = TensorType(copy.type.dtype, tuple(int(d) for d in np.shape(a)),
                                       copy.type.quant)
    shapes = ", ".join(f"{v.name} {tuple(a.shape)}" for v, a in zip(g.inputs, arrays,
                                                                       strict=True))
    for i, node in enumerate(g.nodes):
        if node.op_type == CONSTANT or (runs is not None and not runs[i]):
            continue
        try:
            inferred = infer_node(node)
        except LowbitError as exc:
            raise ModelError(f"with inputs of shape {shapes}: {exc}") from exc
        for value, t in zip(node.outputs, inferred, strict=False):
            value.type = merge_types(value.type, t) if value.type is not None else t
    return g


def max_ops() -> float:
    """The most operations one run may take: MAX_OPS, or the LOWBIT_MAX_OPS environment
    variable."""
    text = os.environ.get("LOWBIT_MAX_OPS", "")
    try:
        return float(text) if text else MAX_OPS
    except ValueError:
        raise InputError(f"LOWBIT_MAX_OPS={text!r} is not a number") from None


def preflight(graph: Graph, arrays: Sequence[np.ndarray], memory: int | None = None,
              runs: Sequence[bool] | None = None,
              known: Mapping[Value, np.ndarray] | None = None) -> Graph:
    """`specialize` the graph to the inputs, then refuse a run whose values and temporaries
    would need more than MEMORY_FRACTION of `memory` (default: the memory available now), or
    more than `max_ops()` operations. With `runs` and `known` (a resumed run: `specialize`),
    the nodes that run and the known values count. Returns the specialized graph."""
    g = specialize(graph, arrays, runs, known)
    given = None
    if known:
        names = {v.name for v in known}
        given = [v for n in g.nodes for v in n.outputs if v.name in names]  # inputs count
    need = graph_work(g, runs, given or ())
    memory = available_memory() if memory is None else memory
    shapes = ", ".join(f"{tuple(a.shape)}" for a in arrays)
    where = f", most while computing {need.peak_node.describe()}" \
        if need.peak_node is not None else ""
    if need.peak > MEMORY_FRACTION * memory:
        raise InputError(
            f"running the model on inputs of shape {shapes} needs about "
            f"{format_bytes(need.peak)} of memory{where}; this machine has "
            f"{format_bytes(memory)} available. Use smaller batches or inputs, or check the "
            f"model's shapes (`lowbit inspect --nodes`)")
    limit = max_ops()
    if need.ops > limit:
        raise InputError(
            f"running the model on inputs of shape {shapes} takes about {need.ops:.3g} "
            f"multiply-adds, more than the reference interpreter's limit of {limit:.3g} (hours "
            f"of work); use smaller batches or inputs, check the model's shapes (`lowbit "
            f"inspect --nodes`), or raise the limit with LOWBIT_MAX_OPS")
    return g

"""Cost estimates shared by products and sliding-window ops (`OpDef.work`).

A product computes each output element from K multiply-adds; a window op from C / group
input channels times the kernel's positions. Their reference kernels accumulate in float64,
and a window op pads its input (in float64) and, for grouped convolutions, copies one image's
windows (im2col). Unknown sizes count as zero: the estimates are for shapes known once the
inputs are.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lowbit.ir.graph import CONSTANT, Graph, Node, Value
from lowbit.ir.types import Dim, TensorType
from lowbit.ops.registry import Work, numel


def _static(d: Dim) -> int:
    return d if isinstance(d, int) else 0


def product_work(out: TensorType | None, k: Dim) -> Work:
    """A matrix product: K multiply-adds per output element, a float64 result."""
    n = numel(out)
    return Work(n * _static(k), 8 * n)


def window_work(x: TensorType | None, out: TensorType | None, kernel: list[int] | tuple[int, ...],
                pads: list[int] | tuple[int, ...], per_output: int, im2col: bool) -> Work:
    """A sliding-window op: `per_output` input channels times the kernel's positions per
    output element; temporaries of the float64 padded input, the float64 output and (with
    `im2col`) one image's windows."""
    kprod = math.prod(kernel)
    n_out = numel(out)
    scratch = 8 * n_out
    if x is not None and x.shape is not None and x.is_static and len(x.shape) >= 2:
        n_sp = len(x.shape) - 2
        full = list(pads) + [0] * (2 * n_sp - len(pads))
        padded = math.prod(x.shape[:2]) * math.prod(  # type: ignore[arg-type]
            s + full[a] + full[a + n_sp] for a, s in enumerate(x.shape[2:]))  # type: ignore
        scratch += 8 * padded
        if im2col and out is not None and out.shape is not None and out.is_static:
            positions = math.prod(out.shape[2:])  # type: ignore[arg-type]
            scratch += 8 * _static(x.shape[1]) * kprod * positions
    return Work(n_out * per_output * kprod, scratch)


def value_bytes(v: Value) -> int:
    """Bytes of a value of static shape, else 0."""
    return 0 if v.type is None else numel(v.type) * v.type.dtype.np_dtype.itemsize


@dataclass
class GraphWork:
    """What running a graph costs: the peak bytes of live values plus one node's temporaries,
    the node at that peak, and the total operations (`OpDef.work` of every node)."""

    ops: int
    peak: int
    peak_node: Node | None


def graph_work(graph: Graph, runs: Sequence[bool] | None = None,
               known: Iterable[Value] = ()) -> GraphWork:
    """Walk `graph` in order as the interpreter does: inputs and node outputs live until their
    last reader; constants exist already and are not counted; unknown sizes count as zero.
    With `runs` (one flag per node), only the nodes that run count, and the `known` values
    (given to a resumed run instead of computed) live from the start like the inputs."""
    from lowbit.ops import get

    last: dict[Value, int] = {}
    for i, node in enumerate(graph.nodes):
        if runs is not None and not runs[i]:
            continue
        for v in node.inputs:
            if v is not None:
                last[v] = i
    keep = set(graph.outputs)
    live = sum(value_bytes(v) for v in graph.inputs) + sum(value_bytes(v) for v in known)
    result = GraphWork(0, live, None)
    for i, node in enumerate(graph.nodes):
        if node.op_type == CONSTANT or (runs is not None and not runs[i]):
            continue
        work = get(node.op_type, node.domain).work(
            node, [v.type if v is not None else None for v in node.inputs],
            [v.type for v in node.outputs])
        live += sum(value_bytes(v) for v in node.outputs)
        result.ops += work.ops
        if live + work.scratch > result.peak:
            result.peak, result.peak_node = live + work.scratch, node
        for v in {v for v in node.inputs if v is not None}:
            if last.get(v) == i and v not in keep and not v.is_constant:
                live -= value_bytes(v)
        for v in node.outputs:
            if v not in last and v not in keep:
                live -= value_bytes(v)
    return result

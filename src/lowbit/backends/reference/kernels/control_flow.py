"""Reference kernels of If, Loop and Scan (lowbit.ops.control_flow): each runs its body with a
reference interpreter of its own, the captured outer values bound to the body's implicit
values.

A Loop refuses to go on once its iterations would exceed the reference interpreter's
operations budget (`preflight.max_ops()`, each body node counting at least
`NODE_OVERHEAD_OPS`), so a loop whose condition never turns false ends with an error instead
of running forever.
"""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.kernels import kernel
from lowbit.errors import KernelError
from lowbit.ir.graph import CONSTANT, Graph, Node
from lowbit.ops.work import graph_work

NODE_OVERHEAD_OPS = 10_000
"""What one node costs the interpreter however small its tensors (dispatch, checks), in
operations, when bounding a loop's iterations."""


def _interpreter(body: Graph):
    from lowbit.backends.reference.interpreter import Interpreter

    return Interpreter(body)


def _captured(node: Node, inputs) -> list:
    return list(inputs[len(inputs) - node.captures:]) if node.captures else []


def _one(array: np.ndarray, what: str) -> bool:
    a = np.asarray(array)
    if a.size != 1:
        raise KernelError(f"{what} must hold one value, got shape {tuple(a.shape)}")
    return bool(a.reshape(-1)[0])


@kernel("If")
def if_(node, inputs):
    branch = node.attrs["then_branch" if _one(inputs[0], "cond") else "else_branch"]
    return _interpreter(branch).run_body(_captured(node, inputs))


def _stack(parts: list[np.ndarray], value, axis: int = 0) -> np.ndarray:
    """Scan outputs stacked along `axis`; with no iteration, an empty array of the body
    output's dtype and static dims."""
    if parts:
        return np.stack(parts, axis=axis)
    t = value.type
    dims = [d if isinstance(d, int) else 0 for d in (t.shape or ())]
    dims.insert(axis, 0)
    return np.zeros(dims, t.dtype.np_dtype)


def _budget(body: Graph) -> float:
    """How many iterations of `body` the operations budget allows."""
    from lowbit.backends.reference.preflight import max_ops

    nodes = sum(n.op_type != CONSTANT for n in body.nodes)
    per = max(graph_work(body).ops, NODE_OVERHEAD_OPS * max(1, nodes))
    return max_ops() / per


@kernel("Loop")
def loop(node, inputs):
    body: Graph = node.attrs["body"]
    formal = len(inputs) - node.captures
    trips, cond = inputs[0], inputs[1]
    limit = None
    if trips is not None:
        if np.asarray(trips).size != 1:
            raise KernelError(f"M must hold one value, got shape {tuple(np.shape(trips))}")
        limit = int(np.asarray(trips).reshape(-1)[0])
    going = True if cond is None else _one(cond, "cond")
    carried = list(inputs[2:formal])
    n = len(carried)
    scans: list[list[np.ndarray]] = [[] for _ in body.outputs[1 + n:]]
    run = _interpreter(body)
    captured = _captured(node, inputs)
    allowed = _budget(body)
    i = 0
    while going and (limit is None or i < limit):
        if i >= allowed:
            raise KernelError(f"stopped after {i:,} iterations: more would exceed the "
                              f"reference interpreter's operations limit (LOWBIT_MAX_OPS); "
                              f"does the loop's condition ever turn false?")
        outs = run.run_body([np.array(i, np.int64), np.array(going), *carried, *captured])
        going = _one(outs[0], "the body's condition")
        carried = outs[1:1 + n]
        for parts, a in zip(scans, outs[1 + n:], strict=True):
            parts.append(a)
        i += 1
    return carried + [_stack(parts, v) for parts, v in zip(scans, body.outputs[1 + n:],
                                                           strict=True)]


@kernel("Scan")
def scan(node, inputs):
    from lowbit.ops import get

    op = get("Scan")
    body: Graph = node.attrs["body"]
    n, m, k = op._split(node)
    states = list(inputs[:n])
    sequences = list(inputs[n:n + m])
    directions = node.attrs.get("scan_input_directions") or [0] * m
    axes = [op.input_axis(node, j, a.ndim) for j, a in enumerate(sequences)]
    lengths = {a.shape[ax] for a, ax in zip(sequences, axes, strict=True)}
    if len(lengths) != 1:
        raise KernelError(f"scan inputs have different lengths {sorted(lengths)} along their "
                          f"scan axes")
    length = lengths.pop()
    run = _interpreter(body)
    captured = _captured(node, inputs)
    parts: list[list[np.ndarray]] = [[] for _ in range(k)]
    for t in range(length):
        slices = [np.take(a, length - 1 - t if d else t, axis=ax)
                  for a, ax, d in zip(sequences, axes, directions, strict=True)]
        outs = run.run_body([*states, *slices, *captured])
        states = outs[:n]
        for p, a in zip(parts, outs[n:], strict=True):
            p.append(a)
    out_dirs = node.attrs.get("scan_output_directions") or [0] * k
    results = list(states)
    for j, (p, v) in enumerate(zip(parts, body.outputs[n:], strict=True)):
        rank = v.type.rank if v.type is not None and v.type.rank is not None else (
            p[0].ndim if p else 0)
        axis = op.output_axis(node, j, rank)
        results.append(_stack(p[::-1] if out_dirs[j] else p, v, axis))
    return results

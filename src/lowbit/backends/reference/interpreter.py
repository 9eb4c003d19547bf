"""The reference interpreter: dispatch plus an environment.

Nodes run in graph order; each reads its inputs from an environment keyed by value, calls the
kernel registered for its op type, and stores its outputs. A value is dropped after its last
use, so memory holds only live tensors. Observers see every node's outputs (profiling is this
same loop with observers attached); a `substitute` may then replace them (lowbit.compare's
per-layer "own" error feeds each layer the float model's values). Any failure names the node
that was executing.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

import numpy as np

from lowbit.backends.reference.kernels import is_quantized, kernel_for
from lowbit.backends.reference.preflight import preflight
from lowbit.errors import InputError, KernelError, LowbitError, UnsupportedError
from lowbit.ir import dtypes
from lowbit.ir.graph import CONSTANT, Graph, Node, Value
from lowbit.ops.registry import FUSED_CLIP


class NodeObserver(Protocol):
    """Called after each node runs, with the node and its output arrays."""

    def __call__(self, node: Node, outputs: Sequence[np.ndarray]) -> None: ...


class Substitute(Protocol):
    """Called for each node output after the observers: an array to store instead (same dtype
    and shape), or None to keep the computed one."""

    def __call__(self, value: Value, array: np.ndarray) -> np.ndarray | None: ...


class Interpreter:
    """Executes a Graph with the numpy reference kernels."""

    def __init__(self, graph: Graph, observers: Sequence[NodeObserver] = (),
                 substitute: Substitute | None = None, known: Collection[Value] = ()) -> None:
        """`known`: values whose arrays each call is given (`__call__`'s `known`) instead of
        computing them; nodes whose outputs are all known, and nodes only they read, do not
        run (a graph that shares a prefix with one already run resumes after it)."""
        self.graph = graph
        self.observers = list(observers)
        self.substitute = substitute
        self.known = frozenset(known)
        self._kernels = [None if n.op_type == CONSTANT else kernel_for(n) for n in graph.nodes]
        missing = sorted({("quantized " if is_quantized(n) else "") + n.op_type
                          for n, _ in graph.walk()
                          if n.op_type != CONSTANT and kernel_for(n) is None})
        if missing:
            raise UnsupportedError(
                f"the reference backend has no kernel for: {', '.join(missing)}"
            )
        self._runs = self._plan_runs()
        self._release = self._plan_release()
        self._checked: set[tuple] = set()
        """Input signatures (dtypes and shapes) `preflight` has accepted."""

    def _plan_runs(self) -> list[bool]:
        """For each node, whether it runs: all nodes, unless `known` makes some unneeded."""
        if not self.known:
            return [True] * len(self.graph.nodes)
        needed = {v for v in self.graph.outputs if v not in self.known}
        runs = [False] * len(self.graph.nodes)
        for i in range(len(self.graph.nodes) - 1, -1, -1):
            node = self.graph.nodes[i]
            if any(v in needed for v in node.outputs):
                runs[i] = True
                needed.update(v for v in node.inputs if v is not None and v not in self.known)
        return runs

    def _plan_release(self) -> list[list[Value]]:
        """For each node index, the values whose last reader is that node."""
        last: dict[Value, int] = {}
        for i, node in enumerate(self.graph.nodes):
            if not self._runs[i]:
                continue
            for v in node.inputs:
                if v is not None:
                    last[v] = i
        keep = set(self.graph.outputs)
        release: list[list[Value]] = [[] for _ in self.graph.nodes]
        for v, i in last.items():
            if v not in keep and not v.is_constant:
                release[i].append(v)
        return release

    def __call__(self, inputs: Mapping[str, np.ndarray],
                 known: Mapping[Value, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        # Float overflow and NaN follow IEEE semantics, as in every runtime; numpy's warnings
        # about them (from kernels and observers) would only clutter the output.
        with np.errstate(all="ignore"):
            return self._run(inputs, known)

    def _run(self, inputs: Mapping[str, np.ndarray],
             known: Mapping[Value, np.ndarray] | None) -> dict[str, np.ndarray]:
        arrays = check_inputs(self.graph, inputs)
        given: dict[Value, np.ndarray] = {}
        if self.known:
            missing = [v.name for v in self.known if known is None or v not in known]
            if missing:
                raise InputError(f"no array given for known value(s) {', '.join(missing)}")
            assert known is not None
            given = {v: known[v] for v in self.known}
        signature = tuple((a.dtype.str, a.shape) for a in arrays) + tuple(
            (v.name, np.shape(a)) for v, a in given.items())
        if signature not in self._checked:
            # a resumed run checks what it runs: the known values and the nodes reading them
            preflight(self.graph, arrays, runs=self._runs if given else None, known=given)
            self._checked.add(signature)
        env: dict[Value, np.ndarray] = dict(zip(self.graph.inputs, arrays, strict=True))
        env.update(given)
        self._execute(env)
        return {v.name: env[v] for v in self.graph.outputs}

    def run_body(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run a subgraph (If branch, Loop or Scan body): `arrays` bound to its inputs, then
        its implicit values, in order; returns its outputs in order. The node running it has
        checked the arrays."""
        env = dict(zip(self.graph.inputs + self.graph.implicit, arrays, strict=True))
        self._execute(env)
        return [env[v] for v in self.graph.outputs]

    def _execute(self, env: dict[Value, np.ndarray]) -> None:
        """Run every node in order on `env` (which holds the inputs and the known values),
        leaving the outputs; nodes only known values need are skipped."""
        for i, node in enumerate(self.graph.nodes):
            if not self._runs[i]:
                continue
            if node.op_type == CONSTANT:
                env[node.output] = node.attrs["value"]
                continue
            args = [env[v] if v is not None else None for v in node.inputs]
            kernel = self._kernels[i]
            assert kernel is not None
            try:
                results = kernel(node, args)
            except LowbitError as exc:
                raise type(exc)(f"{node.describe()}: {exc}") from exc
            except Exception as exc:
                raise KernelError(
                    f"{node.describe()} failed in the reference backend: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if len(results) < len(node.outputs):
                raise KernelError(f"{node.describe()}: kernel returned {len(results)} outputs, "
                                  f"expected {len(node.outputs)}")
            clip = node.attrs.get(FUSED_CLIP)
            for value, array in zip(node.outputs, results, strict=False):
                array = np.asarray(array)
                if clip is not None and array.dtype.kind == "f":
                    array = np.clip(array, clip[0], clip[1]).astype(array.dtype, copy=False)
                _check_output(node, value, array)
                env[value] = array
            for obs in self.observers:
                obs(node, [env[v] for v in node.outputs])
            if self.substitute is not None:
                for value in node.outputs:
                    replaced = self.substitute(value, env[value])
                    if replaced is not None:
                        _check_output(node, value, replaced)
                        env[value] = replaced
            for v in self._release[i]:
                env.pop(v, None)


def _check_output(node: Node, value: Value, array: np.ndarray) -> None:
    """A kernel's result must have its value's declared dtype and static dims (a lowbit bug
    otherwise, caught here instead of corrupting later nodes)."""
    t = value.type
    if t is None:
        return
    if array.dtype != t.dtype.np_dtype:
        raise KernelError(f"{node.describe()}: output '{value.name}' has dtype {array.dtype}, "
                          f"declared {t.dtype}")
    if t.shape is not None:
        ok = len(t.shape) == array.ndim and all(
            not isinstance(d, int) or d == n for d, n in zip(t.shape, array.shape, strict=True))
        if not ok:
            raise KernelError(f"{node.describe()}: output '{value.name}' has shape "
                              f"{tuple(array.shape)}, declared {t.shape}")


def check_inputs(graph: Graph, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Match `inputs` to the graph inputs by name, dtype and shape; return them in order.

    Symbolic dimensions must agree across inputs (every `batch` the same size).
    """
    names = [v.name for v in graph.inputs]
    unknown = sorted(set(inputs) - set(names))
    if unknown:
        raise InputError(f"unknown input(s) {', '.join(unknown)}; the model's inputs are "
                         f"{', '.join(names) or '(none)'}")
    missing = [n for n in names if n not in inputs]
    if missing:
        raise InputError(f"missing input(s) {', '.join(missing)}")
    symbols: dict[str, tuple[int, str]] = {}
    arrays: list[np.ndarray] = []
    for v in graph.inputs:
        a = np.asarray(inputs[v.name])
        t = v.type
        if t is None:
            arrays.append(a)
            continue
        if a.dtype != t.dtype.np_dtype:
            try:
                got = dtypes.from_numpy(a.dtype).name
            except ValueError:
                got = str(a.dtype)
            raise InputError(f"input '{v.name}' has dtype {got}; the model expects {t.dtype}")
        if t.shape is not None:
            if a.ndim != len(t.shape):
                raise InputError(f"input '{v.name}' has shape {tuple(a.shape)}; the model expects "
                                 f"rank {len(t.shape)} {_shape_text(t.shape)}")
            for axis, (d, n) in enumerate(zip(t.shape, a.shape, strict=True)):
                if isinstance(d, int) and d != n:
                    raise InputError(f"input '{v.name}' has shape {tuple(a.shape)}; the model "
                                     f"expects {_shape_text(t.shape)} (dimension {axis})")
                if isinstance(d, str):
                    if d in symbols and symbols[d][0] != n:
                        size, other = symbols[d]
                        raise InputError(
                            f"dimension '{d}' is {n} in input '{v.name}' but {size} in "
                            f"input '{other}'")
                    symbols.setdefault(d, (n, v.name))
        arrays.append(a)
    return arrays


def _shape_text(shape) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"

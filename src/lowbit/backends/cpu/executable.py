"""The compiled model as a Python callable: one C call per inference.

`CpuExecutable(graph)` generates and compiles the graph's C program (cached on disk, see
toolchain), and is called like the reference interpreter: `{input name: array}` in,
`{output name: array}` out. Inputs are checked by name, dtype and shape first (the reference's
`check_inputs`, same messages). The batch dimension (a symbolic first dimension of the inputs)
is a run-time argument of the compiled code: every batch size runs the same library. Other
symbolic or unknown dimensions (an image's height and width) are fixed per call: each distinct
set of sizes is compiled once, on first use.
"""

from __future__ import annotations

import ctypes as C
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lowbit.backends.cpu import library, toolchain
from lowbit.backends.cpu.codegen.lower import Lowering
from lowbit.backends.cpu.codegen.program import Plan, dim_size
from lowbit.backends.lowering import fold_quantized_constants, has_quantized_constants
from lowbit.backends.reference.interpreter import check_inputs
from lowbit.errors import InputError, LowbitError, UnsupportedError
from lowbit.ir.graph import Graph
from lowbit.ir.hashing import graph_hash
from lowbit.ir.types import TensorType
from lowbit.ops import infer_graph
from lowbit.passes.fold_constants import fold_constants


@dataclass
class Compiled:
    """One specialization: the loaded library, its blob and arena plan, output shapes."""

    function: C._CFuncPtr
    library_path: str
    blob: np.ndarray
    plan: Plan
    outputs: list[tuple[str, tuple, np.dtype]]
    source: str
    seconds: float
    steps: list[str]


def _aligned(nbytes: int, align: int = 64) -> np.ndarray:
    raw = np.empty(nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes]


class CpuExecutable:
    """A graph compiled by the cpu backend; call it with {input name: array}."""

    def __init__(self, graph: Graph, threads: int | None = None, isa: str | None = None,
                 name: str | None = None) -> None:
        self.graph = graph
        self.name = name or "model"
        self.context = library.context(threads, isa)
        self.batch = _batch_symbol(graph)
        self._compiled: dict[tuple, Compiled] = {}
        self._lock = threading.Lock()
        self._arena = np.empty(0, np.uint8)
        self._graph_hash: str | None = None
        if all(isinstance(d, int) or d == self.batch for v in graph.inputs
               for d in (v.type.shape or ())):
            self._specialize(())

    @property
    def isa(self) -> str:
        return self.context.isa

    @property
    def threads(self) -> int:
        return self.context.threads

    def compiled(self) -> list[Compiled]:
        return list(self._compiled.values())

    def _key(self, arrays: list[np.ndarray]) -> tuple:
        key = []
        for v, a in zip(self.graph.inputs, arrays, strict=True):
            for axis, (d, n) in enumerate(zip(v.type.shape or (), a.shape, strict=False)):
                if not isinstance(d, int) and d != self.batch:
                    key.append((v.name, axis, int(n)))
        return tuple(key)

    def _artifact_key(self, key: tuple) -> str:
        """The cache key of one specialization's generated program: the graph's content, the
        specialized sizes, and the code generator's and library's sources."""
        if self._graph_hash is None:
            self._graph_hash = graph_hash(self.graph)
        return toolchain.artifact_key(self._graph_hash, repr((key, self.batch, self.name)))

    def _specialize(self, key: tuple) -> Compiled:
        found = self._compiled.get(key)
        if found is not None:
            return found
        start = time.perf_counter()
        akey = self._artifact_key(key)
        cached = toolchain.load_artifact(akey)
        if cached is not None:
            meta, data = cached
            plan = Plan({}, meta["fixed"], meta["batch"])
            outputs = [(name, tuple(shape), np.dtype(dtype))
                       for name, shape, dtype in meta["outputs"]]
            compiled = self._load(Path(meta["library"]), data, plan, outputs, "",
                                  meta["steps"], start)
            if compiled is not None:
                self._compiled[key] = compiled
                return compiled
        graph = self.graph.copy()
        if has_quantized_constants(graph):
            graph = fold_quantized_constants(graph)
        if key:
            sizes = {(name, axis): n for name, axis, n in key}
            for v in graph.inputs:
                if v.type.shape is not None:
                    shape = tuple(sizes.get((v.name, axis), d)
                                  for axis, d in enumerate(v.type.shape))
                    v.type = TensorType(v.type.dtype, shape, v.type.quant)
            _forget_shapes(graph, self.batch)
            infer_graph(graph)
        graph = fold_constants(graph)  # shape computations over now-static sizes
        graph = _fold_dequantized_constants(graph)
        program = Lowering(graph, self.name, self.batch).lower()
        plan = program.make_plan()
        source = program.render()
        path = toolchain.build_model(source, "model")
        data = program.blob.bytes()
        lowering_dims = Lowering(graph, self.name, self.batch)
        outputs = [(v.name, lowering_dims.shape(v), np.dtype(v.type.dtype.np_dtype))
                   for v in graph.outputs]
        steps = [s.comment for s in program.steps]
        compiled = self._load(path, data, plan, outputs, source, steps, start)
        if compiled is None:  # a library that does not load: build it again
            toolchain.invalidate(path)
            path = toolchain.build_model(source, "model")
            compiled = self._load(path, data, plan, outputs, source, steps, start)
            if compiled is None:
                raise LowbitError(f"the compiled model {path} does not load")
        toolchain.store_artifact(akey, {
            "library": str(path), "fixed": plan.fixed_size, "batch": plan.per_batch_size,
            "outputs": [(n, list(s), d.str) for n, s, d in outputs], "steps": steps}, data)
        self._compiled[key] = compiled
        return compiled

    def _load(self, path: Path, data: bytes, plan: Plan, outputs, source: str,
              steps: list[str], start: float) -> Compiled | None:
        if not path.exists():
            return None
        try:
            lib = C.CDLL(str(path))
        except OSError:
            return None
        fn = lib.lb_model_run
        fn.restype = C.c_int
        fn.argtypes = [C.POINTER(library.Ctx), C.c_void_p, C.c_void_p, C.c_int64, C.c_void_p,
                       C.c_void_p, C.c_void_p]
        blob = _aligned(max(len(data), 64))
        blob[:len(data)] = np.frombuffer(data, np.uint8)
        return Compiled(fn, str(path), blob, plan, outputs, source,
                        time.perf_counter() - start, steps)

    def arena_bytes(self, batch: int = 1) -> int:
        """Size of the arena for one inference at batch size `batch` (first specialization)."""
        return next(iter(self._compiled.values())).plan.size(batch)

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self._run(inputs, None)

    def profile(self, inputs: Mapping[str, np.ndarray], runs: int = 10
                ) -> list[tuple[str, float]]:
        """(step, mean seconds) of each step of the generated code over `runs` inferences."""
        times = None
        for _ in range(runs):
            times = self._run(inputs, times, keep=True)
        compiled = self._compiled[self._key([np.asarray(inputs[v.name])
                                             for v in self.graph.inputs])]
        return [(name, float(t) / runs) for name, t in zip(compiled.steps, times, strict=True)]

    def _run(self, inputs, times, keep: bool = False):
        arrays = [np.ascontiguousarray(a) for a in check_inputs(self.graph, inputs)]
        n = 1
        for v, a in zip(self.graph.inputs, arrays, strict=True):
            shape = v.type.shape or ()
            if shape and shape[0] == self.batch and self.batch is not None:
                n = int(a.shape[0])
                break
        with self._lock:
            compiled = self._specialize(self._key(arrays))
            outs = [np.empty(tuple(dim_size(d).at(n) for d in shape), dtype)
                    for _, shape, dtype in compiled.outputs]
            size = compiled.plan.size(n)
            if self._arena.size < size:
                self._arena = _aligned(size)
            ins = (C.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])
            outp = (C.c_void_p * max(1, len(outs)))(*[o.ctypes.data for o in outs])
            if keep and times is None:
                times = np.zeros(len(compiled.steps), np.float64)
            status = compiled.function(self.context.handle, compiled.blob.ctypes.data,
                                       self._arena.ctypes.data, n, ins, outp,
                                       times.ctypes.data if keep else None)
        if status != 0:
            raise LowbitError(f"the compiled model failed (status {status})")
        if keep:
            return times
        return {name: o for (name, _, _), o in zip(compiled.outputs, outs, strict=True)}


def _forget_shapes(graph: Graph, batch: str | None) -> None:
    """Drop the non-batch symbolic dimensions of inferred types (an exporter's "unk__0"), so
    that inference from the specialized inputs fills in the sizes."""
    for node in graph.nodes:
        for v in node.outputs:
            t = v.type
            if node.op_type == "Constant" or t is None or t.shape is None:
                continue
            shape = tuple(None if isinstance(d, str) and d != batch else d for d in t.shape)
            v.type = TensorType(t.dtype, shape, t.quant)


def _fold_dequantized_constants(graph: Graph) -> Graph:
    """QuantizeLinear and DequantizeLinear of constants (a QDQ file's weights and biases)
    replaced by their results, computed by the reference kernels: the float weights the Conv
    multiplies by."""
    from lowbit.backends.reference.kernels import get_kernel
    from lowbit.ir.dead_code import eliminate_dead_code
    from lowbit.ir.graph import CONSTANT, Node

    changed = False
    for i, node in enumerate(graph.nodes):
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear") or \
                node.domain not in ("", "ai.onnx") or len(node.outputs) != 1 or \
                not all(v is None or v.is_constant for v in node.inputs):
            continue
        kernel = get_kernel(node.op_type)
        value = kernel(node, [v.const_value if v is not None else None for v in node.inputs])[0]
        value = np.array(value, copy=True)
        value.setflags(write=False)
        graph.nodes[i] = Node(CONSTANT, [], [node.output], {"value": value}, node.name)
        changed = True
    return eliminate_dead_code(graph) if changed else graph


def _batch_symbol(graph: Graph) -> str | None:
    """The symbolic first dimension of the inputs, if any: the batch size, a run-time argument."""
    for v in graph.inputs:
        shape = v.type.shape if v.type is not None else None
        if shape and isinstance(shape[0], str):
            return shape[0]
    return None


def _name_batch(graph: Graph) -> Graph:
    """An unknown first input dimension (an exporter's "?") is the batch size: name it, so that
    it stays a run-time argument instead of a size compiled per call."""
    graph = graph.copy()
    symbol = _batch_symbol(graph) or "batch"
    for v in graph.inputs:
        shape = v.type.shape
        if shape and shape[0] is None:
            v.type = TensorType(v.type.dtype, (symbol, *shape[1:]), v.type.quant)
    return graph


def compile(graph: Graph, *, threads: int | None = None, isa: str | None = None,
            name: str | None = None) -> CpuExecutable:
    """Compile `graph` for the cpu backend (see the module docstring)."""
    if any(v.type is None or v.type.shape is None for v in graph.inputs):
        raise UnsupportedError("the cpu backend needs typed inputs with known ranks")
    if any(v.type.shape and v.type.shape[0] is None for v in graph.inputs):
        graph = _name_batch(graph)
    return CpuExecutable(graph, threads=threads, isa=isa, name=name)


__all__ = ["CpuExecutable", "InputError", "compile"]

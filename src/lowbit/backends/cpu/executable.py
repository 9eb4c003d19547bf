"""The compiled model as a Python callable: one C call per inference.

`CpuExecutable(graph)` generates and compiles the graph's C program (cached on disk, see
toolchain), and is called like the reference interpreter: `{input name: array}` in,
`{output name: array}` out. Inputs are checked by name, dtype and shape first (the reference's
`check_inputs`, same messages).

Dimensions: when every node's kernel takes run-time dimensions (`lower.runtime_capable`), all
symbolic and unknown dimensions are arguments of the one compiled program (a transformer's
batch and sequence length). Otherwise the batch dimension alone is, and other symbolic
dimensions (an image's height and width) are fixed per call: each distinct set of sizes is
compiled once, on first use. Either way, the first call with new input shapes finds the
dimension values (from the inputs, or by shape inference for derived ones) and plans the arena
for them; both are kept for later calls with the same shapes. A generated program whose
bookkeeping is plain data (no run-time error messages, no computed scratch sizes) is cached on
disk with its blob (toolchain.load_artifact): loading it again skips code generation.
"""

from __future__ import annotations

import ctypes as C
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lowbit.backends.cpu import library, toolchain
from lowbit.backends.cpu.codegen.lower import (
    Binding,
    Limit,
    Lowering,
    batch_symbol,
    runtime_capable,
)
from lowbit.backends.cpu.codegen.program import Liveness, Size, dim_size
from lowbit.backends.reference.interpreter import check_inputs
from lowbit.errors import InputError, LowbitError, UnsupportedError
from lowbit.ir.graph import Graph
from lowbit.ir.hashing import graph_hash
from lowbit.ir.types import TensorType
from lowbit.ops import infer_graph
from lowbit.passes.fold_constants import fold_constants


@dataclass
class Prepared:
    """What a call with given input shapes needs: dimension values, arena offsets and size,
    output shapes."""

    dims: np.ndarray
    offsets: np.ndarray
    arena_size: int
    output_shapes: list[tuple[int, ...]]


@dataclass
class Compiled:
    """One compiled program: the loaded library, its blob, the arena tensors' lifetimes, its
    dimension variables and where they come from, output shapes (lowered)."""

    function: C._CFuncPtr
    library_path: str
    blob: np.ndarray
    liveness: Liveness
    dim_vars: list[str]
    bindings: list[Binding]
    graph: Graph
    outputs: list[tuple[str, tuple, np.dtype]]
    source: str
    seconds: float
    steps: list[str]
    prepared: dict[tuple, Prepared]
    errors: dict
    """Step number -> a function (detail, input arrays) -> message for its failure."""
    limits: list[Limit] = field(default_factory=list)
    nhwc: list[int] = field(default_factory=list)
    """Outputs whose arrays are physical NHWC (`nhwc_outputs`), handed out as [N, C, H, W]
    views."""


def _aligned(nbytes: int, align: int = 64) -> np.ndarray:
    raw = np.empty(nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes]


class CpuExecutable:
    """A graph compiled by the cpu backend; call it with {input name: array}."""

    def __init__(self, graph: Graph, threads: int | None = None, isa: str | None = None,
                 name: str | None = None, nhwc_outputs: bool = False,
                 fma_floats: bool = False) -> None:
        self.graph = graph
        self.nhwc_outputs = nhwc_outputs
        """4-D float outputs the program computes in NHWC come back as [N, C, H, W] views of
        NHWC arrays (not C-contiguous), saving the conversion."""
        self.fma_floats = fma_floats
        """Float Conv, Gemm and MatMul by a constant as float32 fused multiply-add chains
        (lb_fgemm_fma) instead of double sums rounded once."""
        self.name = name or "model"
        self.context = library.context(threads, isa)
        self.batch = batch_symbol(graph)
        self.runtime_dims = runtime_capable(graph)
        self._compiled: dict[tuple, Compiled] = {}
        self._lock = threading.Lock()
        self._arena = np.empty(0, np.uint8)
        self._graph_hash: str | None = None
        self._fast: _FastCall | None = None
        if self.runtime_dims or all(isinstance(d, int) or d == self.batch
                                    for v in graph.inputs for d in (v.type.shape or ())):
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
        if self.runtime_dims:
            return ()
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
        return toolchain.artifact_key(self._graph_hash, repr((key, self.batch, self.name,
                                                              self.runtime_dims,
                                                              self.nhwc_outputs,
                                                              self.fma_floats)))

    def _specialize(self, key: tuple) -> Compiled:
        found = self._compiled.get(key)
        if found is not None:
            return found
        start = time.perf_counter()
        akey = self._artifact_key(key)
        cached = toolchain.load_artifact(akey, lambda size: _aligned(max(size, 64)))
        if cached is not None:
            compiled = self._from_artifact(*cached, start)
            if compiled is not None:
                self._compiled[key] = compiled
                return compiled
        graph = self.graph.copy()
        if key:
            sizes = {(name, axis): n for name, axis, n in key}
            for v in graph.inputs:
                if v.type.shape is not None:
                    shape = tuple(sizes.get((v.name, axis), d)
                                  for axis, d in enumerate(v.type.shape))
                    v.type = TensorType(v.type.dtype, shape, v.type.quant)
            _forget_shapes(graph, self.batch)
            infer_graph(graph)
        graph = prepare_for_lowering(graph)
        lowering = Lowering(graph, self.name, self.batch, runtime_dims=self.runtime_dims,
                            nhwc_outputs=self.nhwc_outputs, fma_floats=self.fma_floats)
        program = lowering.lower()
        liveness = program.make_liveness()
        source = program.render()
        data = program.blob.bytes()
        nhwc = [i for i, layout in enumerate(lowering.output_layouts) if layout == "nhwc"]
        outputs = [(v.name, _physical(lowering.shape(v), i in nhwc),
                    np.dtype(v.type.dtype.np_dtype)) for i, v in enumerate(graph.outputs)]
        steps = [s.comment for s in program.steps]
        errors = {s.number: s.error for s in program.steps if s.error}
        path = toolchain.build_model(source, "model")
        fn = _load(path)
        if fn is None:  # a library that does not load: build it again
            toolchain.invalidate(path)
            path = toolchain.build_model(source, "model")
            fn = _load(path)
            if fn is None:
                raise LowbitError(f"the compiled model {path} does not load")
        compiled = Compiled(fn, str(path), _blob(data), liveness, list(program.dim_vars),
                            list(lowering.bindings), graph, outputs, source,
                            time.perf_counter() - start, steps, {}, errors,
                            list(lowering.limits), nhwc)
        if not errors and not any(r.size_fn for r in liveness.roots):
            toolchain.store_artifact(akey, {
                "library": str(path), "dim_vars": compiled.dim_vars,
                "bindings": [[b.value, b.axis, b.coef, list(b.names)] for b in compiled.bindings],
                "roots": [[r.nbytes.coef, list(r.nbytes.syms)] for r in liveness.roots],
                "first": liveness.first, "last": liveness.last,
                "limits": [[lim.dim, lim.most, lim.what, lim.checked]
                           for lim in compiled.limits],
                "outputs": [(n, list(s), d.str) for n, s, d in outputs], "steps": steps,
                "nhwc": nhwc}, data)
        self._compiled[key] = compiled
        return compiled

    def _from_artifact(self, meta: dict, blob: np.ndarray, start: float) -> Compiled | None:
        """The Compiled of a cached artifact, `blob` read into an aligned array (`_blob`'s
        form), or None when its library does not load."""
        fn = _load(Path(meta["library"]))
        if fn is None:
            return None
        liveness = Liveness([_Root(Size(c, tuple(syms))) for c, syms in meta["roots"]],
                            list(meta["first"]), list(meta["last"]))
        bindings = [Binding(v, a, c, tuple(n)) for v, a, c, n in meta["bindings"]]
        outputs = [(name, tuple(shape), np.dtype(dtype))
                   for name, shape, dtype in meta["outputs"]]
        return Compiled(fn, meta["library"], blob, liveness, list(meta["dim_vars"]),
                        bindings, self.graph, outputs, "", time.perf_counter() - start,
                        list(meta["steps"]), {}, {},
                        [Limit(*lim) for lim in meta.get("limits", [])],
                        list(meta.get("nhwc", [])))

    def arena_bytes(self, inputs: Mapping[str, np.ndarray]) -> int:
        """Size of the arena for one inference on `inputs` (their shapes are what counts)."""
        arrays = [np.asarray(a) for a in check_inputs(self.graph, inputs)]
        with self._lock:
            compiled = self._specialize(self._key(arrays))
            return self._prepare(compiled, arrays).arena_size

    def _prepare(self, compiled: Compiled, arrays: list[np.ndarray]) -> Prepared:
        shapes = tuple(a.shape for a in arrays)
        found = compiled.prepared.get(shapes)
        if found is not None:
            return found
        values = self._dimension_values(compiled, arrays)
        dims = np.array([values.get(v, 1) for v in compiled.dim_vars], np.int64)
        offsets, size = compiled.liveness.plan(values)
        outs = [tuple(dim_size(d).at(values) for d in shape) for _, shape, _ in compiled.outputs]
        prepared = Prepared(dims, offsets, size, outs)
        compiled.prepared[shapes] = prepared
        return prepared

    def _dimension_values(self, compiled: Compiled, arrays: list[np.ndarray]) -> dict[str, int]:
        """The value of each dimension variable for these inputs: read from the inputs' shapes,
        and for the others from shape inference on the graph with these shapes."""
        graph = compiled.graph
        values: dict[str, int] = {}
        if self.batch is not None:
            values[BATCH_VAR] = next((int(a.shape[0]) for v, a in
                                      zip(graph.inputs, arrays, strict=True)
                                      if v.type.shape and v.type.shape[0] == self.batch), 1)
        shapes = {v.name: a.shape for v, a in zip(graph.inputs, arrays, strict=True)}
        _solve(compiled.bindings, shapes, values)
        if any(v not in values for v in compiled.dim_vars):
            try:
                shapes.update(_inferred_shapes(graph, arrays))
            except InputError:
                _check_limits(compiled, values)  # the cause, when it is one
                raise
            _solve(compiled.bindings, shapes, values)
        missing = [v for v in compiled.dim_vars if v not in values and v != BATCH_VAR]
        if missing:
            raise LowbitError(f"the cpu backend could not find the size of dimension(s) "
                              f"{', '.join(missing)} for inputs of shapes "
                              f"{[tuple(a.shape) for a in arrays]}")
        _check_limits(compiled, values, checked=True)
        return values

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        fast = self._fast
        if fast is not None and type(inputs) is dict and len(inputs) == len(fast.names):
            arrays = [inputs.get(name) for name in fast.names]
            for a, (dt, shape) in zip(arrays, fast.inputs, strict=True):
                if type(a) is not np.ndarray or a.shape != shape or a.dtype != dt or \
                        not a.flags.c_contiguous:
                    break
            else:
                return self._run_fast(fast, arrays)
        return self._run(inputs, None)

    def _run_fast(self, fast: _FastCall, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        """A call with the inputs' names, dtypes and shapes of the previous one (checked by the
        caller): the same program, dimensions and arena, pointers set in place."""
        with self._lock:
            outs = [np.empty(shape, dtype) for shape, dtype in fast.outputs]
            for i, a in enumerate(arrays):
                fast.ins[i] = a.__array_interface__["data"][0]
            for i, o in enumerate(outs):
                fast.outs[i] = o.__array_interface__["data"][0]
            status = fast.function(*fast.args)
            if status != 0:
                self._failed(fast.compiled, status, fast.err, arrays)
        for i in fast.compiled.nhwc:
            outs[i] = outs[i].transpose(0, 3, 1, 2)
        return dict(zip(fast.names_out, outs, strict=True))

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
        with self._lock:
            compiled = self._specialize(self._key(arrays))
            prep = self._prepare(compiled, arrays)
            outs = [np.empty(shape, dtype) for shape, (_, _, dtype)
                    in zip(prep.output_shapes, compiled.outputs, strict=True)]
            if self._arena.size < prep.arena_size:
                self._arena = _aligned(prep.arena_size)
            ins = (C.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])
            outp = (C.c_void_p * max(1, len(outs)))(*[o.ctypes.data for o in outs])
            if keep and times is None:
                times = np.zeros(len(compiled.steps), np.float64)
            err = np.zeros(2, np.int64)
            status = compiled.function(self.context.handle, compiled.blob.ctypes.data,
                                       self._arena.ctypes.data, prep.dims.ctypes.data,
                                       prep.offsets.ctypes.data, ins, outp,
                                       times.ctypes.data if keep else None, err.ctypes.data)
            if not keep and status == 0:
                self._fast = _FastCall.make(self, compiled, prep, arrays)
        if status != 0:
            self._failed(compiled, status, err, arrays)
        if keep:
            return times
        for i in compiled.nhwc:
            outs[i] = outs[i].transpose(0, 3, 1, 2)
        return {name: o for (name, _, _), o in zip(compiled.outputs, outs, strict=True)}

    @staticmethod
    def _failed(compiled: Compiled, status: int, err: np.ndarray, arrays) -> None:
        describe = compiled.errors.get(status)
        if describe is not None:
            raise InputError(describe(int(err[0]), arrays))
        raise LowbitError(f"the compiled model failed (status {status})")


BATCH_VAR = "N"


@dataclass
class _FastCall:
    """What a call with the same input names, dtypes and shapes as the last one reuses: the
    program's arguments with the input and output pointer arrays filled in per call (checking
    and planning cost more than the inference of a small model: MNISTNet)."""

    names: list[str]
    inputs: list[tuple[np.dtype, tuple[int, ...]]]
    outputs: list[tuple[tuple[int, ...], np.dtype]]
    names_out: list[str]
    compiled: Compiled
    function: C._CFuncPtr
    ins: C.Array
    outs: C.Array
    err: np.ndarray
    arena: np.ndarray
    """The arena `args` points into, held so that a later call that grows the executable's
    arena (then fails, leaving this fast call in place) cannot free it under us."""
    args: tuple

    @staticmethod
    def make(exe: CpuExecutable, compiled: Compiled, prep: Prepared,
             arrays: list[np.ndarray]) -> _FastCall:
        ins = (C.c_void_p * max(1, len(arrays)))()
        outs = (C.c_void_p * max(1, len(compiled.outputs)))()
        err = np.zeros(2, np.int64)
        args = (exe.context.handle, compiled.blob.ctypes.data, exe._arena.ctypes.data,
                prep.dims.ctypes.data, prep.offsets.ctypes.data, ins, outs, None,
                err.ctypes.data)
        return _FastCall([v.name for v in exe.graph.inputs],
                         [(a.dtype, tuple(a.shape)) for a in arrays],
                         [(shape, dtype) for shape, (_, _, dtype)
                          in zip(prep.output_shapes, compiled.outputs, strict=True)],
                         [name for name, _, _ in compiled.outputs], compiled,
                         compiled.function, ins, outs, err, exe._arena, args)


@dataclass
class _Root:
    """An arena tensor's size, as a cached program's liveness holds it."""

    nbytes: Size
    size_fn: None = None


def _load(path: Path) -> C._CFuncPtr | None:
    """lb_model_run of the library at path, or None (absent or not loadable)."""
    if not path.exists():
        return None
    try:
        lib = C.CDLL(str(path))
    except OSError:
        return None
    fn = lib.lb_model_run
    fn.restype = C.c_int
    fn.argtypes = [C.POINTER(library.Ctx), C.c_void_p, C.c_void_p, C.c_void_p, C.c_void_p,
                   C.c_void_p, C.c_void_p, C.c_void_p, C.c_void_p]
    return fn


def _blob(data: bytes) -> np.ndarray:
    blob = _aligned(max(len(data), 64))
    blob[:len(data)] = np.frombuffer(data, np.uint8)
    return blob


def _check_limits(compiled: Compiled, values: dict[str, int], checked: bool = False) -> None:
    """InputError, naming the input that sets it, for a dimension above its limit (a
    sequence longer than the position table). Called when shape inference refuses inputs:
    a graph may cut a table on purpose, and run; with `checked`, for every new set of sizes,
    on the limits the generated code needs (`Limit.checked`)."""
    for lim in compiled.limits:
        if checked and not lim.checked:
            continue
        size = dim_size(lim.dim)
        if any(s not in values for s in size.syms):
            continue
        n = size.at(values)
        if n <= lim.most:
            continue
        inputs = {v.name for v in compiled.graph.inputs}
        where = [f"'{b.value}' axis {b.axis}" for b in compiled.bindings
                 if b.value in inputs and set(b.names) & set(size.syms)]
        raise InputError(f"input {', '.join(where) or 'sizes'}: {n} is more than the model "
                         f"holds, at most {lim.most} ({lim.what}); cut the input to at most "
                         f"{lim.most}")


def _solve(bindings: list[Binding], shapes: dict[str, tuple], values: dict[str, int]) -> None:
    """Bind dimension variables from known shapes: a binding with one unbound variable gives
    it (repeated until nothing changes)."""
    progress = True
    while progress:
        progress = False
        for b in bindings:
            shape = shapes.get(b.value)
            unbound = [n for n in b.names if n not in values]
            if len(unbound) != 1 or shape is None or shape[b.axis] is None:
                continue
            known = b.coef
            for n in b.names:
                if n in values:
                    known *= values[n]
            if known:
                values[unbound[0]] = int(shape[b.axis]) // known
                progress = True


def _inferred_shapes(graph: Graph, arrays: list[np.ndarray]) -> dict[str, tuple]:
    """Every value's shape when the graph's inputs have the shapes of `arrays` (shape
    inference on a copy)."""
    g = graph.copy()
    for v, a in zip(g.inputs, arrays, strict=True):
        v.type = TensorType(v.type.dtype, tuple(int(n) for n in a.shape), v.type.quant)
    _forget_shapes(g, None)
    try:
        infer_graph(g)
    except LowbitError as exc:
        given = ", ".join(f"'{v.name}' {tuple(a.shape)}" for v, a in
                          zip(g.inputs, arrays, strict=True))
        raise InputError(f"inputs of shapes {given} do not fit the model: {exc}") from exc
    return {v.name: tuple(v.type.shape) for v in g.values()
            if v.type is not None and v.type.shape is not None}


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


def rewrite_imported_products(graph: Graph) -> Graph:
    """Other tools' dynamic products as the backend's own ops, exactly, here and in bundles:
    PyTorch's dynamic Linears as imported (torch_products: TorchDynamicQuantize; its exporter's
    erf-form GELU as TorchGelu), then every
    MatMulInteger + Cast(float) of int8 weights (integer_products: DynamicMatMul; ONNX
    Runtime's quantize_dynamic files and the PyTorch import's)."""
    from lowbit.backends.cpu.integer_products import rewrite_integer_products
    from lowbit.backends.cpu.torch_products import rewrite_torch_gelus, rewrite_torch_quantizers

    return rewrite_integer_products(rewrite_torch_quantizers(rewrite_torch_gelus(graph)))


def prepare_for_lowering(graph: Graph) -> Graph:
    """The graph (sizes set) as the code generator takes it, here and in bundles: shape
    computations over now-static sizes folded, and constants' Quantize/DequantizeLinear."""
    return _fold_dequantized_constants(fold_constants(graph))


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


def _name_batch(graph: Graph) -> Graph:
    """An unknown first input dimension (an exporter's "?") is the batch size: name it, so that
    it stays a run-time argument instead of a size compiled per call."""
    graph = graph.copy()
    symbol = batch_symbol(graph) or "batch"
    for v in graph.inputs:
        shape = v.type.shape
        if shape and shape[0] is None:
            v.type = TensorType(v.type.dtype, (symbol, *shape[1:]), v.type.quant)
    return graph


def _physical(shape: tuple, nhwc: bool) -> tuple:
    """An output array's shape: [N, H, W, C] for an NHWC output of logical [N, C, H, W]."""
    return (shape[0], shape[2], shape[3], shape[1]) if nhwc else shape


def compile(graph: Graph, *, threads: int | None = None, isa: str | None = None,
            name: str | None = None, nhwc_outputs: bool = False,
            fma_floats: bool = False) -> CpuExecutable:
    """Compile `graph` for the cpu backend (see the module docstring). `nhwc_outputs`: 4-D
    outputs computed in NHWC are returned as [N, C, H, W] views of NHWC arrays (no
    conversion; for readers indifferent to the element order, such as calibration).
    `fma_floats`: float Conv, Gemm and MatMul by a constant compute each result as a float32
    chain (from +0, one fused multiply-add a product in k order, then the bias by one float32
    addition: the same bits on every ISA path and thread count, about twice as fast) instead
    of the default double sum rounded once (the reference interpreter's bits but for rare
    ties); for calibration."""
    from lowbit.backends.lowering import fold_quantized_constants, has_quantized_constants

    if any(v.type is None or v.type.shape is None for v in graph.inputs):
        raise UnsupportedError("the cpu backend needs typed inputs with known ranks")
    if has_quantized_constants(graph):
        graph = fold_quantized_constants(graph.copy())
    graph = rewrite_imported_products(graph)
    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") and
           all(v is None or v.is_constant for v in n.inputs) for n in graph.nodes):
        graph = _fold_dequantized_constants(graph.copy())  # before runtime_capable looks
    if any(v.type.shape and v.type.shape[0] is None for v in graph.inputs):
        graph = _name_batch(graph)
    return CpuExecutable(graph, threads=threads, isa=isa, name=name,
                         nhwc_outputs=nhwc_outputs, fma_floats=fma_floats)


__all__ = ["CpuExecutable", "InputError", "compile"]

"""Lowering a Graph to a Program: one emitter per op, values mapped to stored tensors.

`Lowering` walks the graph in order and calls the emitter registered for each node (quantized
or float); emitters ask for their inputs in the layout they want (`operand`), declare outputs
(`result`), and add C steps. Conversions between layouts and between stored and raw int8 are
inserted here, once per value and layout. Every node must have an emitter: `unsupported`
lists those without one before anything is generated.

Dimensions: with `runtime_dims`, every symbolic or unknown dimension of the graph becomes a C
variable of the generated function (the batch symbol is `N`, others `d1`, `d2`, ..., unknown
ones `u1`, ...), and `bindings` records where each appears so that the caller can find its
value from the inputs' shapes. That needs every node's emitter to handle such dimensions
(registered with `dynamic=True`); `runtime_capable` says whether a graph qualifies. Otherwise
the batch symbol alone is a variable and other symbols must have been fixed before lowering.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lowbit.backends.cpu import library as L
from lowbit.backends.cpu.codegen.program import BATCH, Program, Size, Tensor, dim_c, numel
from lowbit.backends.reference.kernels import is_quantized
from lowbit.errors import KernelError, UnsupportedError
from lowbit.ir.graph import CONSTANT, Graph, Node, Value
from lowbit.ir.types import TensorType
from lowbit.ops.product import product_of
from lowbit.ops.symbolic import as_monomial

Emitter = Callable[["Lowering", Node], None]
_EMITTERS: dict[tuple[str, str, bool], Emitter] = {}
_DYNAMIC: dict[Emitter, Callable[[Node], bool]] = {}
"""Emitters that handle dimensions known only at run time (C variables), with the test of
the nodes they handle so (every node, or those a predicate accepts)."""

TYPE_CODES = {np.dtype(np.uint8): L.U8, np.dtype(np.int16): L.I16,
              np.dtype(np.uint16): L.U16, np.dtype(np.float32): L.F32,
              np.dtype(np.int32): L.I32, np.dtype(np.int8): L.I8, np.dtype(np.int64): L.I64,
              np.dtype(np.float64): L.F64, np.dtype(np.bool_): L.BOOL}


def emitter(op_type: str, *, quantized: bool = False, domain: str = "",
            dynamic: bool | Callable[[Node], bool] = False) -> Callable:
    """Register the emitter of `op_type` for float (plain) or quantized nodes; `dynamic`: it
    handles dimensions that are C variables (see the module docstring), for every node
    (True) or for the nodes a predicate accepts."""

    def deco(fn: Emitter) -> Emitter:
        _EMITTERS[(domain, op_type, quantized)] = fn
        if dynamic:
            _DYNAMIC[fn] = dynamic if callable(dynamic) else _every_node
        return fn

    return deco


def _every_node(node: Node) -> bool:
    return True


def find_emitter(node: Node) -> Emitter | None:
    from lowbit.backends.cpu.codegen import (  # noqa: F401
        ops_float,
        ops_onnxq,
        ops_quant,
        ops_shape,
        ops_tensor,
        ops_torch,
        ops_transformer,
    )

    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    if is_quantized(node):
        found = _EMITTERS.get((domain, node.op_type, True))
        if found is not None:
            return found
    return _EMITTERS.get((domain, node.op_type, False))


def unsupported(graph: Graph) -> list[str]:
    """`OpType` (or `quantized OpType`) of every node the cpu backend has no emitter for."""
    missing = set()
    for n in graph.nodes:
        if n.op_type != CONSTANT and find_emitter(n) is None:
            missing.add(("quantized " if is_quantized(n) else "") + n.op_type)
    return sorted(missing)


def batch_symbol(graph: Graph) -> str | None:
    """The symbolic first dimension of the inputs, if any: the batch size."""
    for v in graph.inputs:
        shape = v.type.shape if v.type is not None else None
        if shape and isinstance(shape[0], str):
            return shape[0]
    return None


def runtime_capable(graph: Graph) -> bool:
    """Whether every node can be lowered with run-time dimensions: its emitter is dynamic, or
    its values have no dimension but static ones and the batch symbol."""
    batch = batch_symbol(graph)
    for n in graph.nodes:
        if n.op_type == CONSTANT:
            continue
        fn = find_emitter(n)
        if fn is None or (fn in _DYNAMIC and _DYNAMIC[fn](n)):
            continue
        for v in (*n.inputs, *n.outputs):
            if v is None or v.type is None or v.type.shape is None:
                continue
            if any(not isinstance(d, int) and d != batch for d in v.type.shape):
                return False
    return True


@dataclass(frozen=True)
class Binding:
    """Dimension `axis` of value `value` is coef * (product of the variables `names`)."""

    value: str
    axis: int
    coef: int
    names: tuple[str, ...]


@dataclass(frozen=True)
class Limit:
    """A run-time dimension (a C product of dimension variables) that the graph cuts to at
    most `most` somewhere ("Min(512, S)": a position table sliced to the sequence length).
    When inputs of some sizes fail shape inference, a dimension above its limit is named as
    the cause. `checked`: the generated code is exact only up to `most` (a product's integer
    parameters fixed for a run-time reduction size), so inputs above it are refused before
    any run."""

    dim: str
    most: int
    what: str
    checked: bool = False


def stored_dtype(t: TensorType) -> tuple[np.dtype, bool]:
    """(dtype in memory, biased): quantized int8 codes are stored as uint8 code + 128."""
    dt = t.dtype.np_dtype
    if t.quant is not None and dt == np.int8:
        return np.dtype(np.uint8), True
    return np.dtype(dt), False


ALL_ISAS = frozenset(L.ISAS)


class Lowering:
    """`batch`: the symbol of the batch dimension (the run-time N). `runtime_dims`: other
    symbolic dimensions become run-time variables too. `isas`: the instruction sets the
    generated code may run with (the cpu backend: every one the library has; a bundle: its
    target's); emitters leave out constants in layouts only other ISAs' kernels read."""

    def __init__(self, graph: Graph, name: str, batch: str | None = None,
                 runtime_dims: bool = False, isas: frozenset[str] = ALL_ISAS,
                 nhwc_outputs: bool = False, fma_floats: bool = False) -> None:
        self.graph = graph
        self.nhwc_outputs = nhwc_outputs
        """4-D outputs computed in NHWC are handed out in NHWC (`output_layouts`), not
        converted: for callers that read every element in any order (calibration)."""
        self.fma_floats = fma_floats
        """Float Conv, Gemm and MatMul by a constant as float32 fused multiply-add chains
        (lb_fgemm_fma, lb_fconv.fma) instead of double sums rounded once."""
        self.output_layouts: list[str] = []
        """Per graph output, the layout of its array ("plain", or "nhwc": physical [N, H, W,
        C]), set by `finish`."""
        self.batch = batch if batch is not None else batch_symbol(graph)
        """The symbol of the batch dimension (the run-time N); without `runtime_dims`, other
        symbols are refused."""
        self.isas = frozenset(isas)
        self.prog = Program(name)
        self.runtime_dims = runtime_dims
        self._dim_vars: dict[object, str] = {}
        self.bindings: list[Binding] = []
        """Where each dimension variable appears (the inputs' dimensions first)."""
        self._bound: set[tuple[str, int]] = set()
        self.limits: list[Limit] = []
        """Upper bounds of run-time dimensions, checked before each run with new sizes."""
        self.tensors: dict[Value, Tensor] = {}
        self._views: dict[tuple[int, str, bool], Tensor] = {}
        self.users = graph.users()
        self.output_values = set(graph.outputs)
        self.fused: set[Node] = set()
        self.k_orders: dict[Value, np.ndarray] = {}
        """Rows [N, K] left in the order of the NHWC image they flatten (no layout change):
        stored element j holds logical element k_orders[v][j] (the product permutes its
        weights' K axis alike)."""
        """Nodes an earlier emitter computed as part of its own step (a residual Add)."""
        for i, v in enumerate(graph.inputs):
            self.tensors[v] = self.prog.tensor(v.name, v.type.dtype.np_dtype, self.shape(v),
                                               kind="input", index=i)

    # -- shapes and types -------------------------------------------------------------------
    def shape(self, v: Value) -> tuple:
        """The value's lowered shape: ints, and C products of dimension variables."""
        t = v.type
        if t is None or t.shape is None:
            raise UnsupportedError(f"the cpu backend needs tensors of known rank; value "
                                   f"'{v.name}' has shape {None if t is None else t.shape}")
        if not self.runtime_dims:
            dims = [self._static_dim(d) for d in t.shape]
            if any(d is None for d in dims):
                raise UnsupportedError(f"the cpu backend needs static shapes (the batch size "
                                       f"aside); value '{v.name}' has shape {t.shape}")
            return tuple(dims)
        return tuple(self._dim(v, axis, d) for axis, d in enumerate(t.shape))

    def _variable(self, key: object) -> str:
        name = self._dim_vars.get(key)
        if name is None:
            if key == ("symbol", self.batch):
                name = BATCH
            else:
                name = f"{'u' if key[0] == 'unknown' else 'd'}{len(self.prog.dim_vars)}"
                self.prog.dim_vars.append(name)
            self._dim_vars[key] = name
        return name

    def _note_limit(self, v: Value, d: str) -> None:
        m = re.fullmatch(r"Min\((\d+), ?([A-Za-z_][\w.]*)\)", d)
        if m is None or any(lim.what.endswith(f"is {d}") for lim in self.limits):
            return
        by = f"{v.producer.describe()} makes " if v.producer is not None else ""
        self.limits.append(Limit(self._variable(("symbol", m.group(2))), int(m.group(1)),
                                 f"{by}'{v.name}', whose size is {d}"))

    def bound(self, dim: str, most: int, what: str) -> None:
        """Refuse inputs that make the run-time dimension `dim` (a lowered dimension) more
        than `most` (a `checked` Limit): `what` says why."""
        self.limits.append(Limit(dim, most, what, checked=True))

    def _dim(self, v: Value, axis: int, d) -> int | str:
        if isinstance(d, int):
            return d
        if d is None:
            names: tuple[str, ...] = (self._variable(("unknown", v.name, axis)),)
            coef = 1
        else:
            mono = as_monomial(d)
            assert mono is not None
            coef, symbols = mono
            names = tuple(sorted(self._variable(("symbol", s)) for s in symbols))
            self._note_limit(v, d)
        if (v.name, axis) not in self._bound:
            self._bound.add((v.name, axis))
            self.bindings.append(Binding(v.name, axis, coef, names))
        return "*".join(([str(coef)] if coef != 1 else []) + list(names)) or "1"

    def _static_dim(self, d):
        """int, BATCH, "k*N" (a multiple of the batch size), or None (not static)."""
        if isinstance(d, int):
            return d
        if not isinstance(d, str) or self.batch is None:
            return None
        if d == self.batch:
            return BATCH
        for a, b in (d.split("*", 1),) if d.count("*") == 1 else ():
            if b == self.batch and a.isdigit():
                return f"{int(a)}*N"
            if a == self.batch and b.isdigit():
                return f"{int(b)}*N"
        return None

    @staticmethod
    def type_code(t: Tensor) -> int:
        return TYPE_CODES[t.dtype]

    # -- operands ---------------------------------------------------------------------------
    def const_array(self, v: Value) -> np.ndarray:
        a = v.const_value
        if a is None:
            raise KernelError(f"value '{v.name}' must be a constant here")
        return np.asarray(a)

    def dense_weight_rows(self, node: Node) -> np.ndarray:
        """The constant weight of a Gemm-like node (Gemm, QGemm) as rows [N, K]
        (`ProductGeometry.weight_matrix`, the one reading of transB), refusing transA and a
        weight or bias that is not constant."""
        g = product_of(node)
        bv, cv = node.inputs[g.weight_input], node.input_or_none(g.bias_input)
        if g.trans_a or not bv.is_constant or (cv is not None and not cv.is_constant):
            raise UnsupportedError(f"{node.op_type} with transA or a non-constant B or C")
        return g.weight_matrix(self.const_array(bv))

    def tensor_of(self, v: Value) -> Tensor:
        t = self.tensors.get(v)
        if t is not None:
            return t
        if v.is_constant:
            a = self.const_array(v)
            dtype, biased = stored_dtype(v.type) if v.type is not None else (a.dtype, False)
            if biased:
                a = (a.astype(np.int16) + 128).astype(np.uint8)
            t = self.prog.const(a.astype(dtype, copy=False), v.name, biased=biased)
            self.tensors[v] = t
            return t
        raise KernelError(f"value '{v.name}' is used before it is computed")

    def operand(self, v: Value, layout: str | None = "plain", biased: bool | None = None
                ) -> Tensor:
        """The stored tensor of value `v`, converted to `layout` ("plain", "nhwc", or None for
        as stored) and, for quantized int8, to stored (biased=True) or raw codes."""
        t = self.tensor_of(v)
        if biased is None:
            biased = stored_dtype(v.type)[1] if v.type is not None else t.biased
        if t.biased != biased:
            t = self._flip(t, biased)
        if layout is not None and t.layout != layout:
            t = self._relayout(t, layout)
        return t

    def _relayout(self, t: Tensor, layout: str) -> Tensor:
        key = (t.id, layout, t.biased)
        if key in self._views:
            return self._views[key]
        n, c, h, w = t.shape
        if (h == 1 and w == 1) or c == 1:  # the same bytes in both orders
            out = self.prog.alias(t, f"{t.name}.{layout}", layout=layout)
        else:
            out = self.prog.tensor(f"{t.name}.{layout}", t.dtype, t.shape, layout=layout,
                                   biased=t.biased)
            hw = h * w
            if layout == "nhwc":  # physical [N, H, W, C] read from NCHW
                shape, strides = (n, h, w, c), (c * hw, w, 1, hw)
            else:  # physical [N, C, H, W] read from NHWC
                shape, strides = (n, c, h, w), (hw * c, 1, w * c, c)
            self.permute(out, t, shape, strides, f"{t.name}: layout {t.layout} -> {layout}")
        self._views[key] = out
        return out

    def _flip(self, t: Tensor, biased: bool) -> Tensor:
        """int8 codes <-> stored uint8 codes (XOR 0x80 through a table)."""
        key = (t.id, t.layout, biased)
        if key in self._views:
            return self._views[key]
        out = self.prog.tensor(f"{t.name}.{'stored' if biased else 'raw'}",
                               np.uint8 if biased else np.int8, t.shape, layout=t.layout,
                               biased=biased)
        table = self.prog.data(np.arange(256, dtype=np.uint8) ^ 0x80)
        self.prog.step(f"{t.name}: int8 codes {'to' if biased else 'from'} stored uint8",
                       [f"lb_lookup(ctx, {numel(t.shape).c()}, {t.ptr}, LB_U8, 0, {table}, "
                        f"LB_U8, {out.ptr});"], [t], [out])
        self._views[key] = out
        return out

    def permute(self, out: Tensor, src: Tensor, shape, strides, comment: str) -> None:
        self.permute_from(out, src, 0, shape, strides, comment)

    def permute_from(self, out: Tensor, src: Tensor, offset: int, shape, strides,
                     comment: str) -> None:
        """out[i...] = src[offset + sum i_j * strides[j]] (elements), out contiguous."""
        nd = len(shape)
        offset = offset if isinstance(offset, Size) else Size(int(offset))
        base = f"{src.ptr} + ({offset.c()}) * {src.dtype.itemsize}" if offset.coef else src.ptr
        self.prog.step(comment, [
            f"const int64_t shape[{nd}] = {{{', '.join(dim_c(d) for d in shape)}}};",
            f"const int64_t strides[{nd}] = {{{', '.join(stride_c(s) for s in strides)}}};",
            f"lb_permute(ctx, {nd}, shape, strides, {src.dtype.itemsize}, {base}, "
            f"{out.ptr});"], [src], [out])

    def sole_user(self, v: Value) -> Node | None:
        """The one node reading `v` (once), if `v` is not a graph output."""
        uses = self.users.get(v, [])
        if len(uses) != 1 or v in self.output_values:
            return None
        return uses[0][0]

    def available(self, v: Value) -> bool:
        """Whether `v` is computed already (or a constant or an input)."""
        return v in self.tensors or v.is_constant

    # -- results ----------------------------------------------------------------------------
    def result(self, v: Value, layout: str = "plain", dtype=None, biased: bool | None = None
               ) -> Tensor:
        """A new tensor for value `v` computed by the current node (written straight into the
        caller's output array when it can be)."""
        if dtype is None:
            dtype, stored_biased = stored_dtype(v.type)
            biased = stored_biased if biased is None else biased
        shape = self.shape(v)
        handed = layout == "plain" or (self.nhwc_outputs and layout == "nhwc" and
                                       len(shape) == 4)
        direct = v in self.output_values and handed and not biased and \
            v not in self.graph.inputs and self.graph.outputs.count(v) == 1
        if direct:
            t = self.prog.tensor(v.name, dtype, shape, layout=layout, biased=False,
                                 kind="output", index=self.graph.outputs.index(v))
        else:
            t = self.prog.tensor(v.name, dtype, shape, layout=layout, biased=bool(biased))
        self.tensors[v] = t
        return t

    def alias_result(self, v: Value, src: Tensor) -> Tensor:
        """Value `v` holds the bytes of `src` (a reshape): no copy."""
        t = self.prog.alias(src, v.name, shape=self.shape(v), layout="plain")
        self.tensors[v] = t
        return t

    def finish(self) -> None:
        """Copy or convert graph outputs that are not already in the caller's arrays."""
        self.output_layouts = []
        for i, v in enumerate(self.graph.outputs):
            t = self.tensors.get(v) or self.tensor_of(v)
            nhwc = len(t.shape) == 4 and t.layout == "nhwc" and not t.biased
            self.output_layouts.append("nhwc" if nhwc and self.nhwc_outputs else "plain")
            if t.kind == "output" and t.index == i:
                continue
            if nhwc and self.nhwc_outputs:
                out = self.prog.tensor(f"{v.name}.out", t.dtype, t.shape, layout="nhwc",
                                       kind="output", index=i)
                self.prog.step(f"output {i}: {v.name} (nhwc)", [
                    f"lb_copy(ctx, {t.nbytes.c()}, {t.ptr}, {out.ptr});"], [t], [out])
                continue
            if len(t.shape) == 4 and t.layout == "nhwc" and not t.biased and \
                    (t.id, "plain", False) not in self._views:
                n, c, h, w = t.shape
                if not ((h == 1 and w == 1) or c == 1):
                    # converted straight into the caller's array (no copy of a plain tensor)
                    out = self.prog.tensor(f"{v.name}.out", t.dtype, t.shape, kind="output",
                                           index=i)
                    hw = h * w
                    self.permute(out, t, (n, c, h, w), (hw * c, 1, w * c, c),
                                 f"{t.name}: layout nhwc -> plain, output {i}")
                    continue
            src = self.operand(v, "plain" if len(t.shape) == 4 and t.layout != "plain" else
                               t.layout, biased=False)
            out = self.prog.tensor(f"{v.name}.out", src.dtype, src.shape, kind="output",
                                   index=i)
            self.prog.step(f"output {i}: {v.name}", [
                f"lb_copy(ctx, {src.nbytes.c()}, {src.ptr}, {out.ptr});"], [src], [out])

    def needed(self) -> set[Node]:
        """Nodes whose results reach an output through data: a Reshape's target shape, a
        Squeeze's or Unsqueeze's axes are known statically (from the types), so whatever
        computes only them is not generated."""
        shape_only = {"Reshape": 1, "Squeeze": 1, "Unsqueeze": 1, "Expand": 1}
        needed: set[Node] = set()
        stack = [v.producer for v in self.graph.outputs if v.producer is not None]
        while stack:
            node = stack.pop()
            if node in needed:
                continue
            needed.add(node)
            skip = shape_only.get(node.op_type)
            for i, v in enumerate(node.inputs):
                if v is not None and v.producer is not None and i != skip:
                    stack.append(v.producer)
        return needed

    def lower(self) -> Program:
        needed = self.needed()
        self.graph = graph = _pruned(self.graph, needed)
        self.users = graph.users()
        missing = unsupported(self.graph)
        if missing:
            raise UnsupportedError(f"the cpu backend has no kernel for: {', '.join(missing)} "
                                   f"(backend='reference' runs every op)")
        from lowbit.backends.cpu.codegen.row_chain import reorder_for_fusion

        for node in reorder_for_fusion(self.graph.nodes, self.users):
            if node.op_type == CONSTANT or node in self.fused:
                continue
            fn = find_emitter(node)
            assert fn is not None
            try:
                fn(self, node)
            except (KernelError, UnsupportedError) as exc:
                raise type(exc)(f"{node.describe()}: {exc}") from exc
        self.finish()
        self.prog.prune()
        return self.prog


def _pruned(graph: Graph, needed: set[Node]) -> Graph:
    """`graph` without the nodes outside `needed` (the same objects otherwise)."""
    if len(needed) == len(graph.nodes):
        return graph
    pruned = Graph(graph.name, graph.opset)
    pruned.inputs, pruned.outputs = graph.inputs, graph.outputs
    pruned.nodes = [n for n in graph.nodes if n in needed]
    return pruned


def stride_c(s) -> str:
    return s.c() if isinstance(s, Size) else str(s)

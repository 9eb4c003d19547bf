"""ONNX import: a model file becomes a typed lowbit Graph, or is refused before any work.

Order of checks: the file (exists, not empty, parses as an ONNX model with a graph), external
data (each location must stay inside the model's folder), opset (newest supported is
`MAX_OPSET`; older models are converted to `CANONICAL_OPSET` by onnx's version converter), ops
(every unsupported op is listed at once, with node name, op type and opset), then the graph
itself (dangling inputs, duplicate outputs, cycles, initializer data, absurd dimensions,
attributes). Each node is then rewritten into its op's canonical form, checked and typed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, numpy_helper

from lowbit.errors import ModelError, UnsupportedError
from lowbit.ir import dtypes
from lowbit.ir.graph import CONSTANT, Graph, Node, Value
from lowbit.ir.types import Dim, TensorType
from lowbit.ops import merge_types, registry

CANONICAL_OPSET = 21
"""Models older than this are converted up to it, so each op has one canonical form."""
MAX_OPSET = onnx.defs.onnx_opset_version()
MAX_DIM = registry.MAX_DIM
MAX_ELEMENTS = 1 << 36


def read_model(path: str | os.PathLike) -> onnx.ModelProto:
    """Read and parse an ONNX file, loading external data that stays inside its folder."""
    path = Path(path)
    if not path.exists():
        raise ModelError(f"{path}: no such file")
    if path.is_dir():
        raise ModelError(f"{path}: is a folder, not an ONNX model file")
    if path.stat().st_size == 0:
        raise ModelError(f"{path}: the file is empty, not an ONNX model")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:
        raise ModelError(f"{path}: not a valid ONNX model (cannot parse it: "
                         f"{type(exc).__name__}); is the file truncated or of another format?"
                         ) from exc
    if not model.HasField("graph") or model.ir_version <= 0 or not model.opset_import:
        raise ModelError(f"{path}: not a valid ONNX model (no graph, IR version or opset); "
                         "is the file truncated or of another format?")
    _load_external_data(model, path)
    return model


def _tensors_of(model: onnx.ModelProto):
    yield from model.graph.initializer
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.type == AttributeProto.TENSOR:
                yield attr.t


def _load_external_data(model: onnx.ModelProto, path: Path) -> None:
    folder = path.resolve().parent
    for tensor in _tensors_of(model):
        if tensor.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        target = (folder / location).resolve()
        if not location or os.path.isabs(location) or not target.is_relative_to(folder):
            raise ModelError(
                f"{path}: external data '{location}' of tensor '{tensor.name}' lies outside the "
                f"model's folder {folder}; move the data file next to the model")
        if not target.is_file():
            raise ModelError(f"{path}: external data file '{location}' of tensor "
                             f"'{tensor.name}' not found in {folder}")
        offset = int(info.get("offset", 0) or 0)
        length = info.get("length")
        size = target.stat().st_size
        if offset > size or (length is not None and offset + int(length) > size):
            raise ModelError(f"{path}: external data of tensor '{tensor.name}' runs past the end "
                             f"of '{location}' (truncated data file?)")
    try:
        onnx.external_data_helper.load_external_data_for_model(model, str(folder))
    except Exception as exc:
        raise ModelError(f"{path}: cannot read external data: {exc}") from exc


def model_opset(model: onnx.ModelProto, source: str = "model") -> int:
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        raise UnsupportedError(f"{source}: the model imports no ai.onnx opset")
    opset = versions[0]
    if opset < 1:
        raise ModelError(f"{source}: opset {opset} is not an ONNX opset (they count from 1); "
                         "is the file corrupted?")
    if opset > MAX_OPSET:
        raise UnsupportedError(
            f"{source}: opset {opset} is newer than lowbit supports (newest: {MAX_OPSET}); "
            f"re-export the model with opset {CANONICAL_OPSET}")
    return opset


def _all_nodes(g: onnx.GraphProto, scope: str = ""):
    """(node, index, scope label) for every node, subgraphs' included."""
    for i, node in enumerate(g.node):
        yield node, i, scope
        for a in node.attribute:
            if a.type == AttributeProto.GRAPH:
                yield from _all_nodes(a.g, f"{scope}{node.name or f'#{i}'}/{a.name}/")


def check_ops_supported(model: onnx.ModelProto, opset: int, source: str = "model") -> None:
    """Refuse, listing every unsupported node (in subgraphs too) at once, before any work."""
    problems: list[str] = []
    for node, i, scope in _all_nodes(model.graph):
        label = f"node '{scope}{node.name or f'#{i}'}' ({node.op_type}, opset {opset})"
        if any(a.type == AttributeProto.GRAPHS for a in node.attribute):
            problems.append(f"{label}: lists of subgraphs are not supported")
            continue
        if node.op_type == CONSTANT and node.domain in ("", "ai.onnx"):
            continue
        if registry.lookup(node.op_type, node.domain) is None:
            domain = f" in domain '{node.domain}'" if node.domain not in ("", "ai.onnx") else ""
            problems.append(f"{label}: op {node.op_type}{domain} is not supported")
    if problems:
        shown = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20
                                 else [])
        raise UnsupportedError(
            f"{source}: cannot import:\n  " + "\n  ".join(shown) +
            f"\nsupported ops: {', '.join(registry.supported_ops())}")


def _schema(op_type: str, opset: int, domain: str = ""):
    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except Exception:
        return None


def _needs_conversion(model: onnx.ModelProto, opset: int) -> bool:
    """Whether any ai.onnx node follows another op version at `opset` than at
    CANONICAL_OPSET (otherwise conversion would change nothing)."""
    for node, _, _ in _all_nodes(model.graph):
        if node.domain not in ("", "ai.onnx"):
            continue
        old, new = _schema(node.op_type, opset), _schema(node.op_type, CANONICAL_OPSET)
        if old is None or new is None or old.since_version != new.since_version:
            return True
    return False


def _convert_opset(model: onnx.ModelProto, opset: int, source: str) -> onnx.ModelProto:
    if opset >= CANONICAL_OPSET or not _needs_conversion(model, opset):
        return model
    if model.ir_version < 4:
        # The converter refuses IR versions before ONNX 1.0's, which ONNX Runtime still runs,
        # and before IR 4 it expects every initializer among the graph inputs.
        model = _copy_model(model)
        model.ir_version = 4
    try:
        from onnx import version_converter

        return version_converter.convert_version(model, CANONICAL_OPSET)
    except Exception as exc:
        # The converter's messages start with a C++ source location and an assertion.
        reason = re.sub(r"^.*failed: (Warning: )?", "", str(exc).strip(), flags=re.S)
        raise UnsupportedError(
            f"{source}: cannot convert opset {opset} to {CANONICAL_OPSET}: {reason}; re-export "
            f"the model with opset {CANONICAL_OPSET}") from exc


def _copy_model(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def _dims(shape_proto, where: str) -> tuple[Dim, ...]:
    dims: list[Dim] = []
    for d in shape_proto.dim:
        if d.HasField("dim_value"):
            n = int(d.dim_value)
            if n == -1:
                # Paddle2ONNX and some older converters write -1 (and the name "?", below) for
                # a dimension known only at run time; ONNX Runtime reads both as unknown and
                # independent of each other, and so does lowbit.
                dims.append(None)
                continue
            if n < 0 or n > MAX_DIM:
                raise ModelError(f"{where} declares dimension {n}, which is absurd "
                                 f"(allowed: 0..{MAX_DIM})")
            dims.append(n)
        elif d.HasField("dim_param") and d.dim_param and d.dim_param != "?":
            dims.append(d.dim_param)
        else:
            dims.append(None)
    static = [d for d in dims if isinstance(d, int)]
    if static and int(np.prod(np.array(static, dtype=np.float64))) > MAX_ELEMENTS:
        raise ModelError(f"{where} declares shape {tuple(dims)}, which is absurdly large")
    return tuple(dims)


def _value_info_type(vi: onnx.ValueInfoProto, where: str) -> TensorType | None:
    if not vi.type.HasField("tensor_type"):
        if vi.type.WhichOneof("value") is None:
            return None
        raise UnsupportedError(f"{where}: only tensor types are supported, not "
                               f"{vi.type.WhichOneof('value')}")
    tt = vi.type.tensor_type
    if tt.elem_type == TensorProto.UNDEFINED:
        return None
    try:
        dtype = dtypes.from_onnx(tt.elem_type)
    except ValueError as exc:
        raise UnsupportedError(f"{where}: {exc}") from exc
    shape = _dims(tt.shape, where) if tt.HasField("shape") else None
    return TensorType(dtype, shape)


def tensor_to_array(tensor: TensorProto, where: str) -> np.ndarray:
    """Convert a TensorProto, refusing data that does not match its declared shape."""
    dims = tuple(int(d) for d in tensor.dims)
    if any(d < 0 for d in dims):
        raise ModelError(f"{where}: negative dimension in shape {dims}")
    if dims and int(np.prod(np.array(dims, dtype=np.float64))) > MAX_ELEMENTS:
        raise ModelError(f"{where}: declared shape {dims} is absurdly large")
    try:
        dtypes.from_onnx(tensor.data_type)
    except ValueError as exc:
        raise UnsupportedError(f"{where}: {exc}") from exc
    try:
        array = numpy_helper.to_array(tensor)
    except Exception as exc:
        raise ModelError(f"{where}: data does not match its declared shape {dims} and type "
                         f"({exc})") from exc
    if tuple(array.shape) != dims:
        raise ModelError(f"{where}: data has shape {array.shape}, declared {dims}")
    array = np.array(array, copy=True)
    array.setflags(write=False)
    return array


def _attr_value(attr: AttributeProto, where: str) -> Any:
    A = AttributeProto
    if attr.type == A.TENSOR:
        return tensor_to_array(attr.t, f"{where} attribute '{attr.name}'")
    if attr.type == A.STRING:
        return attr.s.decode("utf-8", errors="replace")
    if attr.type == A.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in attr.strings]
    if attr.type == A.INTS:
        return [int(i) for i in attr.ints]
    if attr.type == A.FLOATS:
        return [float(f) for f in attr.floats]
    if attr.type == A.INT:
        return int(attr.i)
    if attr.type == A.FLOAT:
        return float(attr.f)
    if attr.type == A.TENSORS:
        return [tensor_to_array(t, f"{where} attribute '{attr.name}'") for t in attr.tensors]
    raise UnsupportedError(f"{where}: attribute '{attr.name}' of type "
                           f"{A.AttributeType.Name(attr.type)} is not supported")


def _constant_value(node: onnx.NodeProto, where: str) -> np.ndarray:
    """The array of an ONNX Constant node, whichever of its value_* attributes it uses."""
    if len(node.attribute) != 1:
        raise ModelError(f"{where}: a Constant needs exactly one value attribute")
    attr = node.attribute[0]
    value = _attr_value(attr, where)
    kinds = {
        "value": None, "value_float": np.float32, "value_floats": np.float32,
        "value_int": np.int64, "value_ints": np.int64,
    }
    if attr.name not in kinds:
        raise UnsupportedError(f"{where}: Constant attribute '{attr.name}' is not supported")
    if kinds[attr.name] is None:
        return value
    array = np.array(value, dtype=kinds[attr.name])
    array.setflags(write=False)
    return array


def import_model(model: onnx.ModelProto, source: str = "model") -> Graph:
    """Build a typed Graph from an ONNX model (external data already loaded)."""
    check_text(model, source)
    opset = model_opset(model, source)
    model = _inline_functions(model, source)
    model = _densify_sparse(model, source)
    check_ops_supported(model, opset, source)
    # Structural problems (dangling inputs, cycles, repeated node names, no outputs) are
    # reported before opset conversion, whose own messages would be less clear.
    _check_structure(model.graph, opset, source)
    known = {vi.name for vi in model.graph.input} | {t.name for t in model.graph.initializer} \
        | {t.values.name for t in model.graph.sparse_initializer}
    _ordered_nodes(model.graph, source, dict.fromkeys(known))
    own_value_info = {vi.name for vi in list(model.graph.value_info) + list(model.graph.output)}
    model = _convert_opset(model, opset, source)
    opset = max(opset, CANONICAL_OPSET)
    g = model.graph
    graph = Graph(g.name or Path(source).stem or "graph", opset)
    graph.metadata = {p.key: p.value for p in model.metadata_props}
    graph.metadata["source"] = str(source)
    _Scope(graph, None, source).build(g)
    # Types the model declares seed its values' types; the version converter's own shape
    # inference (which adds value_info) is not a declaration, and lowbit's inference decides.
    declared = {vi.name: vi for vi in _value_infos(g) if vi.name in own_value_info}
    _canonicalize_and_type(graph, opset, declared, source)
    return graph


def _value_infos(g: onnx.GraphProto):
    """value_info and outputs of a graph and its subgraphs (names are unique across them)."""
    yield from g.value_info
    yield from g.output
    for node in g.node:
        for a in node.attribute:
            if a.type == AttributeProto.GRAPH:
                yield from a.g.input
                yield from _value_infos(a.g)


def _outer_reads(node: onnx.NodeProto) -> list[str]:
    """Names a node's subgraphs read from enclosing scopes (not defined inside them)."""
    reads: list[str] = []
    for a in node.attribute:
        if a.type != AttributeProto.GRAPH:
            continue
        sub = a.g
        local = {vi.name for vi in sub.input} | {t.name for t in sub.initializer} | {
            o for n in sub.node for o in n.output}
        for n in sub.node:
            for name in [*n.input, *_outer_reads(n)]:
                if name and name not in local and name not in reads:
                    reads.append(name)
        for o in sub.output:
            if o.name not in local and o.name not in reads:
                reads.append(o.name)
    return reads


class _Scope:
    """The values of one graph being imported, the root or a subgraph. A subgraph reading a
    value of an enclosing scope gets a copy of it if it is a constant, else an implicit value
    bound to a trailing input of its node (`captured`, aligned with `graph.implicit`)."""

    def __init__(self, graph: Graph, parent: _Scope | None, source: str) -> None:
        self.graph, self.parent, self.source = graph, parent, source
        self.env: dict[str, Value] = {}
        self.captured: list[Value] = []
        self.constants: list[Node] = []

    def visible(self) -> set[str]:
        names = set(self.env)
        return names | self.parent.visible() if self.parent is not None else names

    def lookup(self, name: str) -> Value | None:
        if name in self.env:
            return self.env[name]
        outer = self.parent.lookup(name) if self.parent is not None else None
        if outer is None:
            return None
        if outer.is_constant:
            value = Value(name, outer.type)
            self.constants.append(Node(CONSTANT, [], [value], {"value": outer.const_value},
                                       self.graph.unique_node_name(name)))
        else:
            value = Value(name)
            self.graph.implicit.append(value)
            self.captured.append(outer)
        self.env[name] = value
        return value

    def define(self, value: Value, where: str) -> None:
        if value.name in self.env:
            raise ModelError(f"{self.source}: '{value.name}' is produced twice ({where}); an "
                             "ONNX value must have a single producer")
        self.env[value.name] = value

    def build(self, g: onnx.GraphProto) -> None:
        graph, source = self.graph, self.source
        for v in list(g.input) + list(g.output) + list(g.value_info):
            graph.reserve_name(v.name)
        initializers = _initializers(g, source)
        for vi in g.input:
            if vi.name in initializers:
                continue  # IR < 4 lists initializers among inputs too
            t = _value_info_type(vi, f"{source}: input '{vi.name}'")
            if t is None and self.parent is None:
                raise ModelError(f"{source}: input '{vi.name}' has no element type")
            value = Value(vi.name, t)
            graph.inputs.append(value)
            self.define(value, "graph input")
        for name, array in initializers.items():
            value = Value(name, TensorType(dtypes.from_numpy(array.dtype), array.shape))
            self.constants.append(Node(CONSTANT, [], [value], {"value": array},
                                       name=graph.unique_node_name(name)))
            graph.reserve_name(name)
            self.define(value, "initializer")
        nodes = [self._node(i, proto) for i, proto in _ordered_nodes(
            g, source, dict.fromkeys(self.visible() if self.parent else self.env))]
        outputs = []
        for o in g.output:
            value = self.lookup(o.name)
            if value is None:
                raise ModelError(f"{source}: graph output {o.name} produced by nothing")
            outputs.append(value)
        graph.nodes = self.constants + nodes
        graph.outputs = outputs

    def _node(self, i: int, proto: onnx.NodeProto) -> Node:
        graph, source = self.graph, self.source
        name = graph.unique_node_name(proto.name or f"{proto.op_type}_{i}")
        where = f"{source}: node '{name}' ({proto.op_type})"
        inputs: list[Value | None] = [self.lookup(n) if n else None for n in proto.input]
        bodies = [a for a in proto.attribute if a.type == AttributeProto.GRAPH]
        if not bodies:
            while inputs and inputs[-1] is None:
                inputs.pop()
        outputs = []
        for out_name in proto.output:
            if not out_name:
                out_name = graph.unique_name(f"{name}_unused")
            graph.reserve_name(out_name)
            outputs.append(Value(out_name))
        if proto.op_type == CONSTANT and proto.domain in ("", "ai.onnx"):
            array = _constant_value(proto, where)
            outputs[0].type = TensorType(dtypes.from_numpy(array.dtype), array.shape)
            node = Node(CONSTANT, [], outputs[:1], {"value": array}, name)
        else:
            attrs = {a.name: _attr_value(a, where) for a in proto.attribute
                     if a.type != AttributeProto.GRAPH}
            scopes = []
            for a in bodies:
                sub = _Scope(graph.subgraph(a.g.name or f"{name}_{a.name}"), self, source)
                sub.build(a.g)
                attrs[a.name] = sub.graph
                scopes.append(sub)
            inputs += _align_captures(scopes)
            domain = "" if proto.domain == "ai.onnx" else proto.domain
            node = Node(proto.op_type, inputs, outputs, attrs, name, domain)
        for out in node.outputs:
            self.define(out, where)
        return node


def _align_captures(scopes: list[_Scope]) -> list[Value]:
    """The outer values any of a node's subgraphs read, in first-read order; every subgraph's
    implicit values are made to follow that order (one unread value where it reads none)."""
    union: list[Value] = []
    for scope in scopes:
        union += [v for v in scope.captured if v not in union]
    for scope in scopes:
        own = dict(zip(scope.captured, scope.graph.implicit, strict=True))
        scope.graph.implicit = [own.get(v) or Value(v.name) for v in union]
        scope.captured = list(union)
    return union


def check_text(model: onnx.ModelProto, source: str) -> None:
    """Refuse names and strings that are not valid UTF-8 (protobuf hands them over as bytes): a
    corrupted file, whose bytes would otherwise surface in odd places later."""

    def bad(text, where: str) -> None:
        if isinstance(text, bytes):
            raise ModelError(f"{source}: {where} {text!r} is not valid UTF-8 text; the file is "
                             "corrupted (re-export or re-download the model)")

    def graph(g: onnx.GraphProto, label: str) -> None:
        bad(g.name, f"{label}graph name")
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            bad(vi.name, f"{label}value name")
            shape = vi.type.tensor_type.shape if vi.type.HasField("tensor_type") else None
            for d in shape.dim if shape is not None else ():
                bad(d.dim_param, f"{label}dimension name of '{vi.name}'")
        for t in g.initializer:
            bad(t.name, f"{label}initializer name")
        for t in g.sparse_initializer:
            bad(t.values.name, f"{label}sparse initializer name")
        for i, n in enumerate(g.node):
            nodes(n, i, label)

    def nodes(n: onnx.NodeProto, i: int, label: str) -> None:
        bad(n.name, f"{label}name of node #{i}")
        where = f"{label}node '{n.name or f'#{i}'}'"
        bad(n.op_type, f"{where}: op type")
        bad(n.domain, f"{where}: domain")
        for name in list(n.input) + list(n.output):
            bad(name, f"{where}: input or output name")
        for a in n.attribute:
            bad(a.name, f"{where}: attribute name")
            bad(a.ref_attr_name, f"{where}: attribute reference")
            for sub in ([a.g] if a.type == AttributeProto.GRAPH else []) + list(a.graphs):
                graph(sub, f"{where} attribute '{a.name}': ")

    graph(model.graph, "")
    for o in model.opset_import:
        bad(o.domain, "opset domain")
    for p in model.metadata_props:
        bad(p.key, "metadata key")
        bad(p.value, "metadata value")
    for f in model.functions:
        bad(f.name, "function name")
        bad(f.domain, "function domain")
        for name in list(f.input) + list(f.output) + list(f.attribute):
            bad(name, f"function '{f.name}': input, output or attribute name")
        for i, n in enumerate(f.node):
            nodes(n, i, f"function '{f.name}': ")


def _inline_functions(model: onnx.ModelProto, source: str) -> onnx.ModelProto:
    """Model-local functions replaced by their bodies, as ONNX Runtime runs them."""
    if not len(model.functions):
        return model
    try:
        from onnx import inliner

        return inliner.inline_local_functions(model)
    except Exception as exc:
        raise ModelError(f"{source}: cannot expand the model-local functions "
                         f"({', '.join(f.name for f in model.functions)}): {exc}") from exc


def _check_count(label: str, what: str, n: int, lo: int, hi: int) -> None:
    if not lo <= n <= hi:
        expected = f"{lo}" if lo == hi else f"{lo} or more" if hi > 1 << 20 else f"{lo} to {hi}"
        raise ModelError(f"{label} has {n} {what}; the op takes {expected}")


def _check_structure(g: onnx.GraphProto, opset: int, source: str, scope: str = "") -> None:
    """Refuse what ONNX Runtime refuses at load: a graph without outputs, two nodes with the
    same (non-empty) name, input and output counts the op does not take; in subgraphs too."""
    if not len(g.output):
        raise ModelError(f"{source}: {'the graph' if not scope else f'subgraph {scope!r}'} has "
                         "no outputs, so there is nothing to compute; declare the results the "
                         "model returns as graph outputs")
    if not scope:
        produced = {vi.name for vi in g.input} | {t.name for t in g.initializer} | {
            t.values.name for t in g.sparse_initializer} | {o for n in g.node for o in n.output}
        missing = [o.name for o in g.output if o.name not in produced]
        if missing:
            raise ModelError(f"{source}: graph output(s) {', '.join(missing)} produced by "
                             "nothing")
    seen: dict[str, int] = {}
    for i, node in enumerate(g.node):
        for a in node.attribute:
            if a.type == AttributeProto.GRAPH:
                _check_structure(a.g, opset, source, f"{scope}{node.name or f'#{i}'}/{a.name}/")
        schema = _schema(node.op_type, opset, node.domain) if node.domain in (
            "", "ai.onnx") else None
        if schema is not None:
            label = f"{source}: node '{scope}{node.name or f'#{i}'}' ({node.op_type}, opset " \
                    f"{opset})"
            _check_count(label, "inputs", len(node.input), schema.min_input, schema.max_input)
            _check_count(label, "outputs", len(node.output), schema.min_output,
                         schema.max_output)
        if node.name and node.name in seen:
            first = seen[node.name]
            raise ModelError(f"{source}: nodes #{first} ({g.node[first].op_type}) and #{i} "
                             f"({node.op_type}) are both named '{node.name}'; node names must "
                             "be unique (ONNX Runtime refuses this model too)")
        seen.setdefault(node.name, i)


def _initializers(g: onnx.GraphProto, source: str) -> dict[str, np.ndarray]:
    """Initializers by name as read-only arrays. A name given twice takes the last value, as
    ONNX Runtime does."""
    return {t.name: tensor_to_array(t, f"{source}: initializer '{t.name}'")
            for t in g.initializer}


def _densify_sparse(model: onnx.ModelProto, source: str) -> onnx.ModelProto:
    """Sparse initializers turned into dense ones (before opset conversion, which does not
    know them), as ONNX Runtime does."""
    if not len(model.graph.sparse_initializer):
        return model
    dense = _copy_model(model)
    for sparse in dense.graph.sparse_initializer:
        name = sparse.values.name
        array = sparse_to_array(sparse, f"{source}: sparse initializer '{name}'")
        dense.graph.initializer.append(numpy_helper.from_array(array, name))
    del dense.graph.sparse_initializer[:]
    return dense


def sparse_to_array(sparse: onnx.SparseTensorProto, where: str) -> np.ndarray:
    """The dense array of a SparseTensorProto: `values` (NNZ) at `indices`, either NNZ linear
    indices or an (NNZ, rank) array of coordinates, zeros elsewhere."""
    dims = tuple(int(d) for d in sparse.dims)
    if any(d < 0 for d in dims):
        raise ModelError(f"{where}: negative dimension in shape {dims}")
    if int(np.prod(np.array(dims, dtype=np.float64))) > MAX_ELEMENTS:
        raise ModelError(f"{where}: declared shape {dims} is absurdly large")
    values = tensor_to_array(sparse.values, f"{where} values")
    indices = tensor_to_array(sparse.indices, f"{where} indices")
    size = int(np.prod(dims, dtype=np.int64))
    if values.ndim != 1 or indices.dtype != np.int64:
        raise ModelError(f"{where}: values must be 1-D and indices int64, got values "
                         f"{list(values.shape)} and indices {indices.dtype}{list(indices.shape)}")
    if indices.ndim == 2 and indices.shape == (values.size, len(dims)):
        if np.any(indices < 0) or np.any(indices >= np.array(dims, np.int64)):
            raise ModelError(f"{where}: an index lies outside the shape {dims}")
        linear = np.ravel_multi_index(indices.T, dims) if values.size else indices[:, 0]
    elif indices.ndim == 1 and indices.size == values.size:
        linear = indices
        if np.any(linear < 0) or np.any(linear >= size):
            raise ModelError(f"{where}: an index lies outside the {size} elements of {dims}")
    else:
        raise ModelError(f"{where}: indices of shape {list(indices.shape)} do not fit "
                         f"{values.size} values in rank {len(dims)}")
    dense = np.zeros(size, values.dtype)
    dense[linear] = values
    dense = dense.reshape(dims)
    dense.setflags(write=False)
    return dense


def _ordered_nodes(g: onnx.GraphProto, source: str, known: dict):
    """Nodes in a topological order; refuse dangling inputs and cycles by name."""
    available = set(known)
    produced_by: dict[str, int] = {}
    for i, node in enumerate(g.node):
        for out in node.output:
            if out:
                produced_by[out] = i
    reads = [[*node.input, *_outer_reads(node)] for node in g.node]
    for i, node in enumerate(g.node):
        for name in reads[i]:
            if name and name not in available and name not in produced_by:
                where = "" if name in node.input else " in a subgraph"
                raise ModelError(
                    f"{source}: node '{node.name or f'#{i}'}' ({node.op_type}) reads '{name}'"
                    f"{where}, which no node, graph input or initializer produces")
    order: list[tuple[int, onnx.NodeProto]] = []
    state = [0] * len(g.node)  # 0 new, 1 visiting, 2 done

    def visit(start: int) -> None:
        stack = [(start, iter(reads[start]))]
        state[start] = 1
        while stack:
            i, inputs = stack[-1]
            for name in inputs:
                j = produced_by.get(name)
                if not name or name in available or j is None:
                    continue
                if state[j] == 1:
                    cycle = [g.node[k].name or f"#{k}" for k, _ in stack]
                    cycle = cycle[cycle.index(g.node[j].name or f"#{j}"):]
                    raise ModelError(f"{source}: the graph has a cycle through nodes "
                                     f"{' -> '.join(cycle)}")
                if state[j] == 0:
                    state[j] = 1
                    stack.append((j, iter(reads[j])))
                    break
            else:
                stack.pop()
                state[i] = 2
                order.append((i, g.node[i]))
                available.update(o for o in g.node[i].output if o)

    for i in range(len(g.node)):
        if state[i] == 0:
            visit(i)
    return order


def _since_version(node: Node, opset: int) -> int:
    domain = node.domain or ""
    try:
        return onnx.defs.get_schema(node.op_type, opset if not domain else 1, domain
                                    ).since_version
    except Exception:
        return 1


def _canonicalize_and_type(graph: Graph, opset: int, declared: dict, source: str) -> None:
    for node in list(graph.nodes):
        if node.op_type == CONSTANT:
            continue
        op = registry.get(node.op_type, node.domain)
        _plain_codes(graph, node)
        since = _since_version(node, opset)
        if since < op.min_version:
            raise UnsupportedError(
                f"{source}: {node.describe()} uses {node.op_type} version {since} (opset "
                f"{opset}); lowbit supports it from version {op.min_version}: re-export with "
                f"a newer opset")
        op.upgrade(node, since)
        _apply_attr_defaults(op, node, source)
        lo, hi = op.input_arity()
        n_in = len(node.inputs)
        if n_in < lo or (hi is not None and n_in > hi):
            raise ModelError(f"{source}: {node.describe()} has {n_in} inputs; expected "
                             f"{lo}{'' if hi == lo else f' to {hi}' if hi else ' or more'}")
        for i, name in enumerate(op.inputs):
            if not name.endswith(("?", "*")) and (i >= n_in or node.inputs[i] is None):
                raise ModelError(f"{source}: {node.describe()} is missing required input "
                                 f"{i} ({name})")
        in_types = [v.type if v is not None else None for v in node.inputs]
        try:
            if node.subgraphs():
                _type_bodies(op, node, in_types, opset, declared, source)
            op.check(node, in_types)
            from lowbit.ops import infer_node

            out_types = infer_node(node)
        except ModelError as exc:
            raise type(exc)(f"{source}: {exc}") from exc
        for value, t in zip(node.outputs, out_types, strict=False):
            _refuse_absurd(node, value.name, t, source)
            seed = declared.get(value.name)
            seed_type = _value_info_type(seed, f"{source}: value '{value.name}'") if seed else None
            if seed_type is not None and seed_type.dtype != t.dtype:
                raise ModelError(f"{source}: {node.describe()} output '{value.name}' is declared "
                                 f"{seed_type.dtype} but computes {t.dtype}")
            value.type = merge_types(seed_type, t) if seed_type is not None else t


def _type_bodies(op, node: Node, in_types: list[TensorType | None], opset: int,
                 declared: dict, source: str) -> None:
    """Type a control-flow node's bodies from its inputs, then canonicalize and type their
    nodes, before the node itself is inferred from them."""
    formals = op.body_formals(node, in_types)
    captured = in_types[len(in_types) - node.captures:] if node.captures else []
    live = op.live_bodies(node)
    for attr, sub in node.subgraphs():
        if attr not in live:
            continue  # an If's branch not taken: constant folding drops it
        if len(sub.inputs) != len(formals[attr]):
            raise ModelError(f"{source}: {node.describe()}: body '{attr}' takes "
                             f"{len(sub.inputs)} inputs; {node.op_type} gives it "
                             f"{len(formals[attr])}")
        for v, t in zip(sub.inputs, formals[attr], strict=True):
            if v.type is None or t is None or v.type.dtype != t.dtype:
                v.type = t if t is not None else v.type
        for v, t in zip(sub.implicit, captured, strict=True):
            v.type = t
        _canonicalize_and_type(sub, opset, declared, source)


def _refuse_absurd(node: Node, name: str, t: TensorType, source: str) -> None:
    """A value with more than MAX_ELEMENTS elements even when every symbolic dimension is 1
    (a batch of one) is absurd, as a declared one is."""
    if t.shape is None:
        return
    static = [d for d in t.shape if isinstance(d, int)]
    if static and int(np.prod(np.array(static, dtype=np.float64))) > MAX_ELEMENTS:
        raise ModelError(f"{source}: {node.describe()} computes '{name}' of shape {t.shape}, "
                         f"more than {MAX_ELEMENTS:,} elements, which is absurd; check its "
                         "attributes and the shapes it reads")


def _plain_codes(graph: Graph, node: Node) -> None:
    """An ONNX op computes on the integer codes of its operands. Where an operand's type is
    quantized (a QuantizeLinear or QLinear result) and the op would read the quantization
    parameters instead (integer Relu, Clip, Add, ...), feed it through a same-type Cast, whose
    result is the plain integer tensor, so the op keeps its ONNX meaning."""
    from lowbit.backends.reference.kernels import reads_quant_params

    if not any(v is not None and v.type is not None and v.type.quant is not None
               for v in node.inputs) or not reads_quant_params(node):
        return
    for i, v in enumerate(node.inputs):
        if v is None or v.type is None or v.type.quant is None:
            continue
        plain = TensorType(v.type.dtype, v.type.shape)
        cast = graph.make_node("Cast", [v], {"to": v.type.dtype.onnx_code, "saturate": 1},
                               name=f"{v.name}_codes", output_names=[f"{v.name}_codes"],
                               output_types=[plain], before=node)
        node.inputs[i] = cast.output


def _apply_attr_defaults(op: registry.OpDef, node: Node, source: str) -> None:
    known = op.attrs if op.domain != registry.QUANT_DOMAIN else op.all_attrs()
    try:
        registry.check_attributes(op, node, known)
    except ModelError as exc:
        raise ModelError(f"{source}: {exc}") from None


def load(path: str | os.PathLike) -> Graph:
    """Read an ONNX file into a typed Graph (no passes run)."""
    return import_model(read_model(path), source=str(path))

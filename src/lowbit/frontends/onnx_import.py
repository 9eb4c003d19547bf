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
MAX_DIM = 1 << 31
MAX_ELEMENTS = 1 << 36
CONTROL_FLOW = {"If", "Loop", "Scan", "SequenceMap"}


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
    if opset > MAX_OPSET:
        raise UnsupportedError(
            f"{source}: opset {opset} is newer than lowbit supports (newest: {MAX_OPSET}); "
            f"re-export the model with opset {CANONICAL_OPSET}")
    return opset


def check_ops_supported(model: onnx.ModelProto, opset: int, source: str = "model") -> None:
    """Refuse, listing every unsupported node at once, before any work is done."""
    problems: list[str] = []
    for i, node in enumerate(model.graph.node):
        label = f"node '{node.name or f'#{i}'}' ({node.op_type}, opset {opset})"
        if node.op_type in CONTROL_FLOW or any(
                a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute):
            problems.append(f"{label}: control flow (subgraphs) is not supported yet")
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


def _convert_opset(model: onnx.ModelProto, opset: int, source: str) -> onnx.ModelProto:
    if opset >= CANONICAL_OPSET:
        return model
    try:
        from onnx import version_converter

        return version_converter.convert_version(model, CANONICAL_OPSET)
    except Exception as exc:
        raise UnsupportedError(
            f"{source}: cannot convert opset {opset} to {CANONICAL_OPSET}: {exc}; re-export the "
            f"model with opset {CANONICAL_OPSET}") from exc


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
    opset = model_opset(model, source)
    check_ops_supported(model, opset, source)
    # Structural problems (dangling inputs, cycles) are reported before opset conversion,
    # whose own messages would be less clear.
    known = {vi.name for vi in model.graph.input} | {t.name for t in model.graph.initializer}
    _ordered_nodes(model.graph, source, dict.fromkeys(known))
    model = _convert_opset(model, opset, source)
    opset = max(opset, CANONICAL_OPSET)
    g = model.graph
    graph = Graph(g.name or Path(source).stem or "graph", opset)
    graph.metadata = {p.key: p.value for p in model.metadata_props}
    graph.metadata["source"] = str(source)
    for v in list(g.input) + list(g.output) + list(g.value_info):
        graph.reserve_name(v.name)
    env: dict[str, Value] = {}

    def define(value: Value, where: str) -> None:
        if value.name in env:
            raise ModelError(f"{source}: '{value.name}' is produced twice ({where}); an ONNX "
                             "value must have a single producer")
        env[value.name] = value

    init_names = {t.name for t in g.initializer}
    for vi in g.input:
        if vi.name in init_names:
            continue  # IR < 4 lists initializers among inputs too
        t = _value_info_type(vi, f"{source}: input '{vi.name}'")
        if t is None:
            raise ModelError(f"{source}: input '{vi.name}' has no element type")
        value = Value(vi.name, t)
        graph.inputs.append(value)
        define(value, "graph input")

    if len(g.sparse_initializer):
        raise UnsupportedError(f"{source}: sparse initializers are not supported")
    constants: list[Node] = []
    for tensor in g.initializer:
        array = tensor_to_array(tensor, f"{source}: initializer '{tensor.name}'")
        value = Value(tensor.name, TensorType(dtypes.from_numpy(array.dtype), array.shape))
        node = Node(CONSTANT, [], [value], {"value": array},
                    name=graph.unique_node_name(tensor.name))
        graph.reserve_name(tensor.name)
        define(value, "initializer")
        constants.append(node)

    pending = _ordered_nodes(g, source, env)
    nodes: list[Node] = []
    for i, proto in pending:
        name = graph.unique_node_name(proto.name or f"{proto.op_type}_{i}")
        where = f"{source}: node '{name}' ({proto.op_type})"
        inputs: list[Value | None] = []
        for input_name in proto.input:
            inputs.append(env[input_name] if input_name else None)
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
            attrs = {a.name: _attr_value(a, where) for a in proto.attribute}
            domain = "" if proto.domain == "ai.onnx" else proto.domain
            node = Node(proto.op_type, inputs, outputs, attrs, name, domain)
        for out in node.outputs:
            define(out, where)
        nodes.append(node)

    graph.nodes = constants + nodes
    missing = [o.name for o in g.output if o.name not in env]
    if missing:
        raise ModelError(f"{source}: graph output(s) {', '.join(missing)} produced by nothing")
    graph.outputs = [env[o.name] for o in g.output]
    declared = {vi.name: vi for vi in list(g.value_info) + list(g.output)}
    _canonicalize_and_type(graph, opset, declared, source)
    return graph


def _ordered_nodes(g: onnx.GraphProto, source: str, known: dict):
    """Nodes in a topological order; refuse dangling inputs and cycles by name."""
    available = set(known)
    produced_by: dict[str, int] = {}
    for i, node in enumerate(g.node):
        for out in node.output:
            if out:
                produced_by[out] = i
    for i, node in enumerate(g.node):
        for name in node.input:
            if name and name not in available and name not in produced_by:
                raise ModelError(
                    f"{source}: node '{node.name or f'#{i}'}' ({node.op_type}) reads '{name}', "
                    "which no node, graph input or initializer produces")
    order: list[tuple[int, onnx.NodeProto]] = []
    state = [0] * len(g.node)  # 0 new, 1 visiting, 2 done

    def visit(start: int) -> None:
        stack = [(start, iter(g.node[start].input))]
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
                    stack.append((j, iter(g.node[j].input)))
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
            op.check(node, in_types)
            from lowbit.ops import infer_node

            out_types = infer_node(node)
        except ModelError as exc:
            raise type(exc)(f"{source}: {exc}") from exc
        for value, t in zip(node.outputs, out_types, strict=False):
            seed = declared.get(value.name)
            seed_type = _value_info_type(seed, f"{source}: value '{value.name}'") if seed else None
            if seed_type is not None and seed_type.dtype != t.dtype:
                raise ModelError(f"{source}: {node.describe()} output '{value.name}' is declared "
                                 f"{seed_type.dtype} but computes {t.dtype}")
            value.type = merge_types(seed_type, t) if seed_type is not None else t


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
    unknown = sorted(set(node.attrs) - set(known))
    if unknown:
        raise ModelError(f"{source}: {node.describe()} has unknown attribute(s) "
                         f"{', '.join(unknown)}; known: {', '.join(sorted(known)) or 'none'}")
    for name, spec in known.items():
        if name in node.attrs:
            continue
        if spec.default is registry.REQUIRED:
            raise ModelError(f"{source}: {node.describe()} is missing required attribute "
                             f"'{name}'")
        if spec.default is not None:
            default = spec.default
            node.attrs[name] = list(default) if isinstance(default, (list, tuple)) else default


def load(path: str | os.PathLike) -> Graph:
    """Read an ONNX file into a typed Graph (no passes run)."""
    return import_model(read_model(path), source=str(path))

"""ONNX export of lowbit graphs.

Constant nodes become initializers, every typed value is written to value_info, and the file
is written to a temporary name in the target folder and renamed when complete, so a failed save
never leaves a partial model behind.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from lowbit.errors import LowbitError, UnsupportedError
from lowbit.fileio import atomic_path
from lowbit.ir.graph import CONSTANT, Graph, Node
from lowbit.ir.types import TensorType
from lowbit.ops import registry
from lowbit.ops.registry import FUSED_CLIP
from lowbit.version import __version__

EXTERNAL_DATA_THRESHOLD = 1 << 30
"""Above this many bytes of weights, they go to a `<model>.data` file beside the model."""

_ATTR_KINDS = {
    "int": AttributeProto.INT, "float": AttributeProto.FLOAT, "string": AttributeProto.STRING,
    "ints": AttributeProto.INTS, "floats": AttributeProto.FLOATS,
    "strings": AttributeProto.STRINGS, "tensor": AttributeProto.TENSOR,
    "tensors": AttributeProto.TENSORS,
}


def type_proto(t: TensorType | None) -> onnx.TypeProto:
    if t is None:
        return onnx.TypeProto()
    shape = None if t.shape is None else [d if d is not None else None for d in t.shape]
    return helper.make_tensor_type_proto(t.dtype.onnx_code, shape)


def _value_info(name: str, t: TensorType | None) -> onnx.ValueInfoProto:
    vi = onnx.ValueInfoProto()
    vi.name = name
    if t is not None:
        vi.type.CopyFrom(type_proto(t))
    return vi


def array_to_tensor(array: np.ndarray, name: str) -> TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def _attribute(node: Node, name: str, value: Any) -> AttributeProto:
    op = registry.lookup(node.op_type, node.domain)
    spec = op.all_attrs().get(name) if op is not None else None
    kind = _ATTR_KINDS.get(spec.kind) if spec is not None else None
    if isinstance(value, np.ndarray):
        return helper.make_attribute(name, array_to_tensor(value, ""))
    if kind == AttributeProto.FLOAT:
        value = float(value)
    elif kind == AttributeProto.FLOATS:
        value = [float(v) for v in value]
    elif kind == AttributeProto.INT:
        value = int(value)
    elif kind == AttributeProto.INTS:
        value = [int(v) for v in value]
    return helper.make_attribute(name, value, attr_type=kind)


def _clip_node(node: Node, source: str, initializers: list[TensorProto], out_name: str
               ) -> onnx.NodeProto:
    """The Clip that a fused output clamp (`fused_clip`) stands for, reading `source`."""
    lo, hi = node.attrs[FUSED_CLIP]
    out = node.outputs[0]
    dtype = out.type.dtype.np_dtype if out.type is not None else np.float32
    names = []
    for suffix, bound in (("min", lo), ("max", hi)):
        if np.isinf(bound):
            names.append("")
            continue
        name = f"{out_name}_clip_{suffix}"
        initializers.append(array_to_tensor(np.array(bound, dtype=dtype), name))
        names.append(name)
    while names and not names[-1]:
        names.pop()
    return helper.make_node("Clip", [source, *names], [out_name], name=f"{node.name}_clip")


class _Names:
    """ONNX names of the values of one graph scope. A subgraph's implicit values take the
    names their node's inputs have outside; a value whose name an enclosing scope already uses
    (a constant copied into a body) gets a fresh one, since ONNX forbids shadowing."""

    def __init__(self, graph: Graph, outer: _Names | None = None,
                 implicit: dict | None = None) -> None:
        self.graph = graph
        self.outer = outer
        self.names: dict = dict(implicit or {})
        self.used: set[str] = set(outer.all_used()) if outer is not None else set()
        self.used.update(self.names.values())

    def all_used(self) -> set[str]:
        return self.used

    def define(self, value) -> str:
        name = value.name
        if name in self.used:
            name = self.graph.unique_name(name)
            while name in self.used:
                name = self.graph.unique_name(value.name)
        self.names[value] = name
        self.used.add(name)
        return name

    def __getitem__(self, value) -> str:
        return self.names[value] if value is not None else ""


def _graph_proto(graph: Graph, names: _Names, domains: set[str]) -> onnx.GraphProto:
    """The GraphProto of `graph` (a subgraph: its formal inputs only, its implicit values read
    by their outer names)."""
    initializers: list[TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    for v in graph.inputs:
        names.define(v)
    for node in graph.nodes:
        if node.op_type == CONSTANT:
            initializers.append(array_to_tensor(node.attrs["value"], names.define(node.output)))
            continue
        for v in node.outputs:
            names.define(v)
        attrs = []
        for k, v in node.attrs.items():
            if k == FUSED_CLIP:
                continue
            if isinstance(v, Graph):
                first = len(node.inputs) - node.captures
                implicit = {inner: names[outer] for inner, outer in
                            zip(v.implicit, node.inputs[first:], strict=True)}
                body = _graph_proto(v, _Names(v, names, implicit), domains)
                attrs.append(helper.make_attribute(k, body))
            else:
                attrs.append(_attribute(node, k, v))
        outputs = [names[v] for v in node.outputs]
        clip = node.attrs.get(FUSED_CLIP)
        if clip is not None:
            outputs[0] = f"{outputs[0]}_unclipped"
        formal = node.inputs[:len(node.inputs) - node.captures]
        proto = helper.make_node(node.op_type, [names[v] for v in formal], outputs,
                                 name=node.name, domain=node.domain or None)
        proto.attribute.extend(attrs)
        if node.domain:
            domains.add(node.domain)
        nodes.append(proto)
        if clip is not None:
            nodes.append(_clip_node(node, outputs[0], initializers, names[node.outputs[0]]))
    out_names = []
    for i, v in enumerate(graph.outputs):
        name = names[v]
        if names.outer is not None and (v in graph.implicit or v in graph.inputs or
                                        name in out_names):
            # A body output passing an outer value or an input through: an Identity of its own.
            alias = graph.unique_name(f"{graph.name}_out{i}")
            nodes.append(helper.make_node("Identity", [name], [alias],
                                          name=graph.unique_node_name(f"{graph.name}_out{i}")))
            name = alias
        out_names.append(name)
    inputs = [_value_info(names[v], v.type) for v in graph.inputs]
    outputs = [_value_info(n, v.type) for n, v in zip(out_names, graph.outputs, strict=True)]
    io_names = set(names[v] for v in graph.inputs) | set(out_names)
    value_info = [_value_info(names[v], v.type) for n in graph.nodes if n.op_type != CONSTANT
                  for v in n.outputs if names[v] not in io_names and v.type is not None]
    return helper.make_graph(nodes, graph.name, inputs, outputs, initializers,
                             value_info=value_info)


def to_onnx(graph: Graph) -> onnx.ModelProto:
    """Build an ONNX ModelProto for a float graph (or a graph of plain ONNX ops), subgraphs
    of If, Loop and Scan included."""
    domains: set[str] = set()
    g = _graph_proto(graph, _Names(graph), domains)
    opsets = [helper.make_opsetid("", graph.opset)]
    opsets += [helper.make_opsetid(d, 1) for d in sorted(domains)]
    model = helper.make_model(g, opset_imports=opsets, producer_name="lowbit",
                              producer_version=__version__)
    model.ir_version = max(helper.find_min_ir_version_for(
        [o for o in opsets if o.domain in ("", "ai.onnx")]), 8)
    for k, v in graph.metadata.items():
        if k != "source":
            model.metadata_props.add(key=k, value=v)
    return model


def save_model(model: onnx.ModelProto, path: str | os.PathLike) -> None:
    """Write `model` atomically: to a temporary file in the same folder, then rename."""
    path = Path(path)
    folder = path.resolve().parent
    if not folder.is_dir():
        raise LowbitError(f"{path}: folder {folder} does not exist")
    weights = sum(len(t.raw_data) for t in model.graph.initializer)
    external = weights > EXTERNAL_DATA_THRESHOLD
    data_name = path.name + ".data"
    tmp_data = folder / f".{data_name}.tmp"
    try:
        with atomic_path(path) as tmp:
            if external:
                onnx.save_model(model, tmp, save_as_external_data=True,
                                all_tensors_to_one_file=True, location=tmp_data.name,
                                size_threshold=1024)
                _relocate_external(str(tmp), tmp_data.name, data_name)
                os.replace(tmp_data, folder / data_name)
            else:
                onnx.save_model(model, tmp)
    finally:
        tmp_data.unlink(missing_ok=True)


def _relocate_external(model_path: str, old: str, new: str) -> None:
    model = onnx.load(model_path, load_external_data=False)
    for t in model.graph.initializer:
        for e in t.external_data:
            if e.key == "location" and e.value == old:
                e.value = new
    onnx.save_model(model, model_path)


def save(graph: Graph, path: str | os.PathLike, format: str | None = None) -> None:
    """Export `graph` to an ONNX file.

    Formats: `onnx` (float graphs, graphs of plain ONNX ops, dynamically quantized graphs as
    MatMulInteger and friends, see `lowbit.exporters.dynamic_export`), and for quantized graphs
    `qdq` (QuantizeLinear/DequantizeLinear around float ops) or `qoperator` (QLinearConv,
    QLinearMatMul, ... of ONNX and ONNX Runtime); see `lowbit.exporters.qdq_export`. Without a
    format: `qdq` for a graph that computes on quantized types, else `onnx`.
    """
    from lowbit.exporters.dynamic_export import has_dynamic_ops, lower_dynamic
    from lowbit.exporters.qdq_export import FORMATS, lower

    if format is not None and format not in ("onnx", *FORMATS):
        raise UnsupportedError(f"unknown export format '{format}'; available: onnx, "
                               f"{', '.join(FORMATS)}")
    if has_dynamic_ops(graph):
        graph = lower_dynamic(graph)
    computing = _computes_on_quantized_types(graph) if format in (None, "onnx") else None
    if format is None:
        format = "onnx" if computing is None else "qdq"
    elif format == "onnx" and computing is not None:
        raise UnsupportedError(
            f"graph computes on quantized types ({computing.describe()}); export it with "
            "format='qdq' or 'qoperator'")
    if format in FORMATS:
        graph = lower(graph, format)
    save_model(to_onnx(graph), path)


def _computes_on_quantized_types(graph: Graph) -> Node | None:
    """The first node whose result depends on quantized types, which plain ONNX cannot say; None
    when quantized types are only annotations (results of QuantizeLinear and the QLinear ops,
    moved by Reshape, MaxPool, ...), which export as they are."""
    from lowbit.backends.reference.kernels import is_quantized, reads_quant_params
    from lowbit.ops.registry import QUANT_DOMAIN

    for node in graph.nodes:
        if node.domain == QUANT_DOMAIN or (is_quantized(node) and reads_quant_params(node)):
            return node
    return None

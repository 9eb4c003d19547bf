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


def _clip_node(node: Node, source: str, initializers: list[TensorProto]) -> onnx.NodeProto:
    """The Clip that a fused output clamp (`fused_clip`) stands for, reading `source`."""
    lo, hi = node.attrs[FUSED_CLIP]
    out = node.outputs[0]
    dtype = out.type.dtype.np_dtype if out.type is not None else np.float32
    names = []
    for suffix, bound in (("min", lo), ("max", hi)):
        if np.isinf(bound):
            names.append("")
            continue
        name = f"{out.name}_clip_{suffix}"
        initializers.append(array_to_tensor(np.array(bound, dtype=dtype), name))
        names.append(name)
    while names and not names[-1]:
        names.pop()
    return helper.make_node("Clip", [source, *names], [out.name], name=f"{node.name}_clip")


def to_onnx(graph: Graph) -> onnx.ModelProto:
    """Build an ONNX ModelProto for a float graph (or a graph of plain ONNX ops)."""
    initializers: list[TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    domains: set[str] = set()
    for node in graph.nodes:
        if node.op_type == CONSTANT:
            initializers.append(array_to_tensor(node.attrs["value"], node.output.name))
            continue
        attrs = [_attribute(node, k, v) for k, v in node.attrs.items() if k != FUSED_CLIP]
        outputs = [v.name for v in node.outputs]
        clip = node.attrs.get(FUSED_CLIP)
        if clip is not None:
            outputs[0] = f"{outputs[0]}_unclipped"
        proto = helper.make_node(
            node.op_type,
            [v.name if v is not None else "" for v in node.inputs],
            outputs,
            name=node.name,
            domain=node.domain or None,
        )
        proto.attribute.extend(attrs)
        if node.domain:
            domains.add(node.domain)
        nodes.append(proto)
        if clip is not None:
            nodes.append(_clip_node(node, outputs[0], initializers))
    inputs = [_value_info(v.name, v.type) for v in graph.inputs]
    outputs = [_value_info(v.name, v.type) for v in graph.outputs]
    io_names = {v.name for v in graph.inputs} | {v.name for v in graph.outputs}
    value_info = [_value_info(v.name, v.type) for n in graph.nodes if n.op_type != CONSTANT
                  for v in n.outputs if v.name not in io_names and v.type is not None]
    g = helper.make_graph(nodes, graph.name, inputs, outputs, initializers,
                          value_info=value_info)
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

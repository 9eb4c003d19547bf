"""A seeded generator of broken variants of a small ONNX model, as an adversary would make them.

`variants(model_bytes, seed, count)` yields (label, bytes) pairs: attributes of the wrong type
or absurd value, missing, renamed or extra inputs, wrong initializer dims and data, NaN and
Inf weights, cycles, huge or odd graph input dims, changed op types and opsets, duplicate
names, no outputs, truncated files, overwritten bytes and names that are not UTF-8. Each
label says what was done, so a failing case can be rebuilt from it and the seed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

Mutation = Callable[[onnx.ModelProto, np.random.Generator], str]
"""Changes the model in place and returns a label, or raises Skip when it does not apply."""


class Skip(Exception):
    """The mutation does not apply to this model."""


ABSURD_INTS = [0, -1, -7, 1, 2, 3, 1000, 2**31, 2**40, -(2**62), 2**63 - 1]
ABSURD_FLOATS = [0.0, -1.0, 1e30, -1e30, float("inf"), float("nan"), 1e-45]


def _pick(rng: np.random.Generator, seq):
    if not len(seq):
        raise Skip
    return seq[int(rng.integers(len(seq)))]


def _node(m: onnx.ModelProto, rng: np.random.Generator) -> onnx.NodeProto:
    return _pick(rng, list(m.graph.node))


def _node_with_attrs(m, rng) -> onnx.NodeProto:
    return _pick(rng, [n for n in m.graph.node if n.attribute])


def _set_attr(node: onnx.NodeProto, name: str, value, kind: int | None = None) -> None:
    for a in list(node.attribute):
        if a.name == name:
            node.attribute.remove(a)
    node.attribute.append(helper.make_attribute(name, value, attr_type=kind))


def attr_absurd_value(m, rng) -> str:
    node = _node_with_attrs(m, rng)
    attr = _pick(rng, list(node.attribute))
    if attr.type == AttributeProto.INTS:
        n = len(attr.ints) or 2
        choice = int(rng.integers(4))
        if choice == 0:
            value = [_pick(rng, ABSURD_INTS)] * n
        elif choice == 1:
            value = [int(v) for v in rng.choice(ABSURD_INTS, n)]
        elif choice == 2:
            value = []
        else:
            value = [_pick(rng, ABSURD_INTS)] * (n + int(rng.integers(1, 4)))
        attr.CopyFrom(helper.make_attribute(attr.name, value, attr_type=AttributeProto.INTS))
    elif attr.type == AttributeProto.INT:
        value = _pick(rng, ABSURD_INTS)
        attr.CopyFrom(helper.make_attribute(attr.name, value))
    elif attr.type == AttributeProto.FLOAT:
        value = _pick(rng, ABSURD_FLOATS)
        attr.CopyFrom(helper.make_attribute(attr.name, value))
    else:
        raise Skip
    return f"attribute {node.name}.{attr.name} = {value}"


OP_ATTRS = {
    "Conv": {"pads": "ints", "strides": "ints", "dilations": "ints", "kernel_shape": "ints",
             "group": "int", "auto_pad": "string"},
    "MaxPool": {"pads": "ints", "strides": "ints", "dilations": "ints", "kernel_shape": "ints",
                "ceil_mode": "int", "storage_order": "int", "auto_pad": "string"},
    "Gemm": {"transA": "int", "transB": "int", "alpha": "float", "beta": "float"},
    "Flatten": {"axis": "int"},
}


def attr_targeted(m, rng) -> str:
    """An attribute the op defines (present or not) set to an absurd value of its own type."""
    node = _pick(rng, [n for n in m.graph.node if n.op_type in OP_ATTRS])
    name, kind = _pick(rng, sorted(OP_ATTRS[node.op_type].items()))
    if kind == "ints":
        n = int(rng.integers(1, 6))
        value = [_pick(rng, ABSURD_INTS)] * n if rng.integers(2) else [
            int(v) for v in rng.choice(ABSURD_INTS, n)]
    elif kind == "int":
        value = _pick(rng, ABSURD_INTS)
    elif kind == "float":
        value = _pick(rng, ABSURD_FLOATS)
    else:
        value = _pick(rng, ["SAME_UPPER", "SAME_LOWER", "VALID", "NOTSET", "", "bogus"])
    _set_attr(node, name, value, {"ints": AttributeProto.INTS}.get(kind))
    return f"attribute {node.name}.{name} = {value}"


def attr_wrong_type(m, rng) -> str:
    node = _node_with_attrs(m, rng)
    attr = _pick(rng, list(node.attribute))
    kinds = {
        "int": 3, "ints": [1, 2], "float": 1.5, "floats": [0.5, 2.0], "string": "SAME_UPPER",
        "strings": ["a", "b"], "tensor": numpy_helper.from_array(np.ones(2, np.float32), "t"),
        "graph": helper.make_graph([], "sub", [], []),
    }
    kind = _pick(rng, sorted(kinds))
    new = helper.make_attribute(attr.name, kinds[kind])
    if new.type == attr.type:
        raise Skip
    attr.CopyFrom(new)
    return f"attribute {node.name}.{attr.name} retyped as {kind}"


def attr_removed(m, rng) -> str:
    node = _node_with_attrs(m, rng)
    attr = _pick(rng, list(node.attribute))
    node.attribute.remove(attr)
    return f"attribute {node.name}.{attr.name} removed"


def attr_unknown(m, rng) -> str:
    node = _node(m, rng)
    node.attribute.append(helper.make_attribute("frobnication", 3))
    return f"unknown attribute on {node.name}"


def input_renamed(m, rng) -> str:
    node = _node(m, rng)
    i = int(rng.integers(len(node.input)))
    node.input[i] = "nowhere"
    return f"input {i} of {node.name} renamed"


def input_dropped(m, rng) -> str:
    node = _node(m, rng)
    i = int(rng.integers(len(node.input)))
    del node.input[i]
    return f"input {i} of {node.name} dropped"


def input_emptied(m, rng) -> str:
    node = _node(m, rng)
    i = int(rng.integers(len(node.input)))
    node.input[i] = ""
    return f"input {i} of {node.name} emptied"


def input_extra(m, rng) -> str:
    node = _node(m, rng)
    node.input.append(_pick(rng, [v.name for v in m.graph.initializer] + ["input"]))
    return f"extra input on {node.name}"


def cycle(m, rng) -> str:
    nodes = list(m.graph.node)
    if len(nodes) < 2:
        raise Skip
    i = int(rng.integers(len(nodes) - 1))
    j = int(rng.integers(i + 1, len(nodes)))
    nodes[i].input[0] = nodes[j].output[0]
    return f"{nodes[i].name} reads {nodes[j].name}'s output (cycle)"


def output_renamed(m, rng) -> str:
    node = _node(m, rng)
    node.output[0] = _pick(rng, ["input", m.graph.initializer[0].name, "", "twin"])
    if node.output[0] == "twin":
        _pick(rng, [n for n in m.graph.node if n is not node]).output[0] = "twin"
    return f"output of {node.name} renamed to '{node.output[0]}'"


def op_type_changed(m, rng) -> str:
    node = _node(m, rng)
    node.op_type = _pick(rng, ["Relu", "Conv", "Gemm", "MaxPool", "Flatten", "Add", "Softmax",
                               "Reshape", "Frobnicate", "If", "Loop", "BatchNormalization",
                               "Concat", "Transpose", "Identity", "Gather"])
    return f"{node.name} made {node.op_type}"


def domain_changed(m, rng) -> str:
    node = _node(m, rng)
    node.domain = _pick(rng, ["com.microsoft", "lowbit", "ai.onnx.ml", "nowhere"])
    return f"{node.name} moved to domain {node.domain}"


def initializer_dims(m, rng) -> str:
    t = _pick(rng, list(m.graph.initializer))
    dims = list(t.dims)
    choice = int(rng.integers(4))
    if choice == 0 and dims:
        dims[int(rng.integers(len(dims)))] += int(rng.integers(1, 5))  # data no longer fits
    elif choice == 1:
        dims = dims[::-1]  # same size, another shape
    elif choice == 2:
        dims = [-abs(d) for d in dims] or [-1]
    else:
        dims = dims + [1, 2**40]
    del t.dims[:]
    t.dims.extend(dims)
    return f"initializer {t.name} dims {dims}"


def initializer_reshaped(m, rng) -> str:
    t = _pick(rng, list(m.graph.initializer))
    a = numpy_helper.to_array(t).ravel()
    n = int(rng.integers(1, max(2, a.size)))
    new = numpy_helper.from_array(a[:n].copy(), t.name)
    t.CopyFrom(new)
    return f"initializer {t.name} cut to {n} elements"


def initializer_nonfinite(m, rng) -> str:
    t = _pick(rng, [t for t in m.graph.initializer if t.data_type == TensorProto.FLOAT])
    a = numpy_helper.to_array(t).copy()
    flat = a.reshape(-1)
    bad = _pick(rng, [np.inf, -np.inf, np.nan, 3e38])
    idx = rng.integers(flat.size, size=int(rng.integers(1, 4)))
    flat[idx] = bad
    t.CopyFrom(numpy_helper.from_array(a, t.name))
    return f"initializer {t.name}: {bad} at {sorted(set(idx.tolist()))}"


def initializer_dtype(m, rng) -> str:
    t = _pick(rng, list(m.graph.initializer))
    a = numpy_helper.to_array(t)
    dtype = _pick(rng, [np.float16, np.float64, np.int8, np.int64, np.uint8, np.bool_])
    t.CopyFrom(numpy_helper.from_array(a.astype(dtype), t.name))
    return f"initializer {t.name} as {np.dtype(dtype).name}"


def initializer_zero(m, rng) -> str:
    t = _pick(rng, list(m.graph.initializer))
    a = numpy_helper.to_array(t)
    t.CopyFrom(numpy_helper.from_array(np.zeros_like(a), t.name))
    return f"initializer {t.name} all zero"


def input_dims(m, rng) -> str:
    vi = m.graph.input[0]
    shape = vi.type.tensor_type.shape
    d = shape.dim[int(rng.integers(len(shape.dim)))]
    value = _pick(rng, [0, 1, 2, 3, 7, 2**31, 2**33, -5, "sym"])
    if isinstance(value, str):
        d.dim_param = value
    else:
        d.dim_value = value
    return f"graph input dim set to {value}"


def input_rank(m, rng) -> str:
    vi = m.graph.input[0]
    shape = vi.type.tensor_type.shape
    if rng.integers(2):
        shape.dim.add().dim_value = 1
    else:
        del shape.dim[-1]
    return f"graph input rank {len(shape.dim)}"


def input_elem_type(m, rng) -> str:
    vi = m.graph.input[0]
    code = _pick(rng, [TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.INT8,
                       TensorProto.STRING, TensorProto.BOOL, TensorProto.UNDEFINED, 999])
    vi.type.tensor_type.elem_type = code
    return f"graph input elem_type {code}"


def duplicate_node_name(m, rng) -> str:
    nodes = list(m.graph.node)
    a, b = rng.choice(len(nodes), 2, replace=False)
    nodes[int(b)].name = nodes[int(a)].name
    return f"node name {nodes[int(a)].name} twice"


def no_outputs(m, rng) -> str:
    del m.graph.output[:]
    return "no graph outputs"


def output_unproduced(m, rng) -> str:
    m.graph.output[0].name = "ghost"
    return "graph output produced by nothing"


def output_is_input(m, rng) -> str:
    m.graph.output[0].name = m.graph.input[0].name
    return "graph output is the graph input"


def duplicate_initializer(m, rng) -> str:
    t = _pick(rng, list(m.graph.initializer))
    m.graph.initializer.append(copy.deepcopy(t))
    return f"initializer {t.name} twice"


def opset_changed(m, rng) -> str:
    version = _pick(rng, [1, 6, 9, 11, 13, 19, 21, 22, 99, 0])
    m.opset_import[0].version = version
    return f"opset {version}"


def ir_version_changed(m, rng) -> str:
    version = _pick(rng, [0, 1, 3, 99])
    m.ir_version = version
    return f"ir_version {version}"


def node_dropped(m, rng) -> str:
    node = _node(m, rng)
    m.graph.node.remove(node)
    return f"node {node.name} dropped"


def nodes_shuffled(m, rng) -> str:
    nodes = list(m.graph.node)
    order = rng.permutation(len(nodes))
    del m.graph.node[:]
    m.graph.node.extend(nodes[int(i)] for i in order)
    return "nodes shuffled"


def node_outputs_extra(m, rng) -> str:
    node = _node(m, rng)
    node.output.append(f"{node.name}_extra")
    return f"extra output on {node.name}"


MODEL_MUTATIONS: list[Mutation] = [
    attr_absurd_value, attr_targeted, attr_targeted, attr_targeted, attr_wrong_type, attr_removed,
    attr_unknown, input_renamed, input_dropped, input_emptied, input_extra, cycle,
    output_renamed, op_type_changed, domain_changed, initializer_dims, initializer_reshaped,
    initializer_nonfinite, initializer_dtype, initializer_zero, input_dims, input_rank,
    input_elem_type, duplicate_node_name, no_outputs, output_unproduced, output_is_input,
    duplicate_initializer, opset_changed, ir_version_changed, node_dropped, nodes_shuffled,
    node_outputs_extra,
]


def truncated(data: bytes, rng) -> tuple[str, bytes]:
    n = int(rng.integers(0, len(data)))
    return f"truncated to {n} bytes", data[:n]


def overwritten(data: bytes, rng) -> tuple[str, bytes]:
    """A few bytes overwritten, in the structure (not the large weight payloads) half the time."""
    b = bytearray(data)
    count = int(rng.integers(1, 4))
    start = int(rng.integers(0, len(b) - count))
    if rng.integers(2):
        # Aim at the first or last 4 kB: graph structure, names and attributes live there.
        start = int(rng.integers(0, 4096)) if rng.integers(2) else len(b) - 1 - int(
            rng.integers(count, 4096))
    for k in range(count):
        b[start + k] = int(rng.integers(256))
    return f"{count} bytes overwritten at {start}", bytes(b)


def text_corrupted(data: bytes, model: onnx.ModelProto, rng) -> tuple[str, bytes]:
    """A name in the file (node, attribute, value or op type) with bytes that are not UTF-8."""
    texts = sorted({t for n in model.graph.node for t in [n.name, n.op_type, *n.input,
                                                           *n.output,
                                                           *(a.name for a in n.attribute)]
                    if len(t) >= 3})
    text = _pick(rng, texts).encode()
    start = data.index(text) + int(rng.integers(len(text) - 2))
    b = bytearray(data)
    for k in range(int(rng.integers(1, 3))):
        b[start + k] = int(rng.integers(0x80, 0x100))
    return f"name {text.decode()!r} overwritten with non-UTF-8 bytes", bytes(b)


def variants(model_bytes: bytes, seed: int, count: int) -> Iterator[tuple[str, bytes]]:
    """`count` broken variants of the model, the same ones for the same seed."""
    rng = np.random.default_rng(seed)
    base = onnx.load_from_string(model_bytes)
    made = 0
    while made < count:
        kind = rng.random()
        if kind < 0.08:
            label, data = truncated(model_bytes, rng)
        elif kind < 0.18:
            label, data = overwritten(model_bytes, rng)
        elif kind < 0.25:
            label, data = text_corrupted(model_bytes, base, rng)
        else:
            m = copy.deepcopy(base)
            steps = 1 + int(rng.random() < 0.2)
            labels = []
            try:
                for _ in range(steps):
                    labels.append(_pick(rng, MODEL_MUTATIONS)(m, rng))
            except Skip:
                continue
            label, data = "; ".join(labels), m.SerializeToString()
        made += 1
        yield f"#{made - 1} {label}", data

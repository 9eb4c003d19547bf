"""Exporting quantized graphs to ONNX: int8 activations stored as uint8 (code + 128, zero point
+ 128), ONNX Runtime's fast uint8 x int8 path, and what moves, what stays int8, that ONNX
Runtime still computes lowbit's result, 16-bit values (which ONNX Runtime computes in float)
written as float, and the default format of `lowbit.save`."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import lowbit
from lowbit.backends.lowering import fold_quantized_constants
from lowbit.exporters.uint8_activations import move_activations_to_uint8
from lowbit.frontends.onnx_import import import_model
from lowbit.ir import dtypes
from lowbit.ir.graph import Graph
from lowbit.ir.types import QuantParams, TensorType
from lowbit.passes import optimize

RNG = np.random.default_rng(3)


def _padded_cnn() -> lowbit.Graph:
    """x -> Pad (constant 0.25) -> Conv -> Relu -> MaxPool -> Flatten -> MatMul -> y."""
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("w", RNG.normal(size=(4, 3, 3, 3)) * 0.4), ("b", RNG.normal(size=4) * 0.1),
        ("wm", RNG.normal(size=(4 * 4 * 4, 5)) * 0.2), ("v", np.array(0.25)))]
    inits.append(numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"))
    nodes = [helper.make_node("Pad", ["x", "pads", "v"], ["p"], name="pad"),
             helper.make_node("Conv", ["p", "w", "b"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["m"], ["f"]),
             helper.make_node("MatMul", ["f", "wm"], ["y"], name="head")]
    g = helper.make_graph(nodes, "padded", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["N", 3, 8, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, ["N", 5])], inits)
    return optimize(import_model(helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 21)]), "padded"))


def _x(n: int) -> dict[str, np.ndarray]:
    return {"x": RNG.normal(size=(n, 3, 8, 8)).astype(np.float32)}


@pytest.mark.parametrize("form", ["qdq", "qoperator"])
def test_activations_are_uint8_and_weights_int8(tmp_path, form):
    graph = _padded_cnn()
    q = lowbit.quantize(graph, lowbit.profile(graph, [_x(4) for _ in range(4)], progress=False),
                        assert_all_quantized=True)
    path = tmp_path / "m.onnx"
    lowbit.save(q, path, format=form)
    model = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    nodes = {n.name: n for n in model.graph.node}
    conv = nodes["conv"]
    producers = {o: n for n in model.graph.node for o in n.output}
    weights = [nodes[k].input[3 if nodes[k].op_type == "QLinearConv" else 1]
               for k in ("conv", "head")]
    # a weight of a float-form node is read through a DequantizeLinear
    weights = [producers[w].input[0] if w in producers else w for w in weights]
    assert [inits[w].dtype for w in weights] == [np.int8, np.int8]
    zero_points = [inits[n.input[2]] for n in model.graph.node
                   if n.op_type in ("QuantizeLinear", "DequantizeLinear")
                   and n.input[0] not in inits]
    assert zero_points and all(z.dtype == np.uint8 for z in zero_points)
    if form == "qoperator":
        assert conv.op_type == "QLinearConv" and inits[conv.input[2]].dtype == np.uint8
    # QOperator pads the uint8 codes with the code of 0.25; QDQ pads the float values with the
    # value that code stands for
    pad = nodes["pad"]
    scale, zero = (inits[producers[pad.input[0]].input[k]] for k in (1, 2))
    value = inits[pad.input[2]]
    assert zero.dtype == np.uint8
    code = int(zero) + round(0.25 / float(scale))
    if form == "qoperator":
        assert value.dtype == np.uint8 and int(value) == code
    else:
        assert value.dtype == np.float32 and value == np.float32(float(scale) * (code - int(zero)))
    assert [i.type.tensor_type.elem_type for i in (*model.graph.input, *model.graph.output)] \
        == [TensorProto.FLOAT, TensorProto.FLOAT]
    _check_onnxruntime_agrees(q, path)


def _check_onnxruntime_agrees(q: lowbit.Graph, path) -> None:
    """ONNX Runtime's output of the exported `q` is within one unit of the head's int8 input
    (s_in * max|w|: the head returns float from its accumulator) of lowbit's on 99 % of values."""
    x = _x(8)
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, x)[0]
    ours = lowbit.run(q, x)["y"]
    head = next(n for n in q.nodes if n.name == "head")
    unit = float(head.inputs[0].type.quant.scale) * float(np.abs(
        head.inputs[1].producer.inputs[0].const_value).max())
    assert np.mean(np.abs(ours - theirs) <= unit * 1.001) >= 0.99


def _int8(shape, scale: float, zero: int) -> TensorType:
    return TensorType(dtypes.INT8, shape, QuantParams(scale, zero))


def _boundary_graph() -> Graph:
    """x (an int8 graph input) -> MatMul(c) -> h; Concat(h, c) -> y (an int8 graph output); the
    int8 constant c is both the MatMul's weight and the Concat's operand."""
    g = Graph("boundary")
    x = g.add_input("x", _int8((4, 4), 0.05, 3))
    c = g.add_constant(RNG.integers(-128, 128, (4, 4)).astype(np.int8), "c")
    c.type = _int8((4, 4), 0.02, -7)
    h = g.make_node("MatMul", [x, c], name="mm", output_names=["h"],
                    output_types=[_int8((4, 4), 0.02, -7)]).output
    y = g.make_node("Concat", [h, c], {"axis": 0}, name="cat", output_names=["y"],
                    output_types=[_int8((8, 4), 0.02, -7)]).output
    g.outputs = [y]
    return g


def test_graph_inputs_outputs_and_weights_keep_int8_a_shared_constant_is_split():
    g = move_activations_to_uint8(_boundary_graph())
    nodes = {n.name: n for n in g.nodes}
    mm, cat = nodes["mm"], nodes["cat"]
    assert g.inputs[0].type.dtype == dtypes.INT8 and g.outputs[0].type.dtype == dtypes.INT8
    h = mm.outputs[0]
    assert h.type.dtype == dtypes.UINT8 and int(h.type.quant.zero_point) == -7 + 128
    weight, copy = mm.inputs[1], cat.inputs[1]
    assert weight.type.dtype == dtypes.INT8 and copy.type.dtype == dtypes.UINT8
    assert np.array_equal(copy.const_value.astype(np.int64),
                          weight.const_value.astype(np.int64) + 128)
    assert int(copy.type.quant.zero_point) == int(weight.type.quant.zero_point) + 128


@pytest.mark.parametrize("form", ["qdq", "qoperator"])
def test_mixed_int8_and_uint8_operands_run_in_onnxruntime(tmp_path, form):
    """Nodes reading an int8 graph input or writing an int8 graph output next to uint8 values
    are written in QDQ form, and ONNX Runtime computes lowbit's result."""
    g = _boundary_graph()
    path = tmp_path / "m.onnx"
    lowbit.save(g, path, format=form)
    x = {"x": RNG.integers(-128, 128, (4, 4)).astype(np.int8)}
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, x)[0]
    ours = lowbit.run(g, x)["y"]
    assert theirs.dtype == ours.dtype == np.int8
    assert np.abs(theirs.astype(np.int64) - ours.astype(np.int64)).max() <= 1


@pytest.mark.parametrize("form", ["qdq", "qoperator"])
def test_symmetric_activations_stay_int8_in_qdq(tmp_path, form):
    """With symmetric activations (zero point 0), the QDQ form keeps them int8, the convention
    of runtimes that take only symmetric int8; QOperator, ONNX Runtime's format, moves them to
    uint8 with zero point 128. ONNX Runtime computes lowbit's result from both."""
    graph = _padded_cnn()
    config = lowbit.QuantConfig.from_dict({"default": {"scheme": "symmetric"}})
    q = lowbit.quantize(graph, lowbit.profile(graph, [_x(4) for _ in range(4)], progress=False),
                        config)
    path = tmp_path / "m.onnx"
    lowbit.save(q, path, format=form)
    model = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    zero_points = [inits[n.input[2]] for n in model.graph.node
                   if n.op_type in ("QuantizeLinear", "DequantizeLinear")
                   and n.input[0] not in inits]
    stored = (np.dtype(np.int8), 0) if form == "qdq" else (np.dtype(np.uint8), 128)
    assert zero_points and {(z.dtype, int(z)) for z in zero_points} == {stored}
    _check_onnxruntime_agrees(q, path)


def test_save_writes_a_quantized_graph_as_qdq_by_default(tmp_path):
    """lowbit.save without a format writes a quantized graph in QDQ form (before, it refused it
    and asked for a format); format="onnx" still refuses, naming the node and the formats."""
    graph = _padded_cnn()
    q = lowbit.quantize(graph, lowbit.profile(graph, [_x(4) for _ in range(4)], progress=False))
    lowbit.save(q, tmp_path / "default.onnx")
    lowbit.save(q, tmp_path / "qdq.onnx", format="qdq")
    assert (tmp_path / "default.onnx").read_bytes() == (tmp_path / "qdq.onnx").read_bytes()
    with pytest.raises(lowbit.LowbitError, match=r"computes on quantized types .*'qdq' or "
                                                 r"'qoperator'"):
        lowbit.save(q, tmp_path / "plain.onnx", format="onnx")
    assert not (tmp_path / "plain.onnx").exists()
    lowbit.save(graph, tmp_path / "float.onnx")  # a float graph: plain ONNX
    assert {n.op_type for n in onnx.load(tmp_path / "float.onnx").graph.node}.isdisjoint(
        {"QuantizeLinear", "DequantizeLinear"})


def _sixteen_bit_chain() -> lowbit.Graph:
    """x -> Conv "wide" -> HardSwish -> Mul by a per-channel constant -> Conv "narrow" -> y,
    the Conv and the HardSwish made int16 by the config of the test."""
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("w1", RNG.normal(size=(6, 3, 3, 3)) * 0.4), ("b1", RNG.normal(size=6) * 0.1),
        ("k", RNG.uniform(0.5, 2.0, size=(1, 6, 1, 1))), ("w2", RNG.normal(size=(4, 6, 1, 1))))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], name="wide", pads=[1] * 4),
             helper.make_node("HardSwish", ["c"], ["h"], name="hswish"),
             helper.make_node("Mul", ["h", "k"], ["m"], name="scale"),
             helper.make_node("Conv", ["m", "w2"], ["y"], name="narrow")]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["N", 3, 8, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, ["N", 4, 8, 8])], inits)
    return optimize(import_model(helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 21)]), "chain"))


def _onnxruntime_value(path, name: str, elem_type: int, feed: dict) -> np.ndarray:
    """The value `name` of the exported model at `path`, computed by ONNX Runtime."""
    model = onnx.load(path)
    model.graph.output.append(helper.make_tensor_value_info(name, elem_type, None))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run([name], feed)[0]


@pytest.mark.parametrize("form", ["qdq", "qoperator"])
def test_sixteen_bit_values_are_written_as_float(tmp_path, form):
    """ONNX Runtime computes every op on a 16-bit value in float, so the export writes those
    values as float: no QuantizeLinear / DequantizeLinear pair between the int16 Conv,
    HardSwish and the Mul that rounds to 8 bits, and the int16 Conv's weight and bias are float
    initializers holding what
    DequantizeLinear would compute, while the 8-bit Conv keeps its int8 weight. The 8-bit codes
    the chain ends in stay within one of lowbit's."""
    graph = _sixteen_bit_chain()
    prof = lowbit.profile(graph, [_x(4) for _ in range(4)], progress=False)
    config = lowbit.QuantConfig.from_dict(
        {"rules": [{"regex": "wide|hswish", "precision": "int16"}]})
    q = lowbit.quantize(graph, prof, config)
    types = {n.name: n.outputs[0].type.dtype.name for n in q.nodes}
    assert (types["wide"], types["hswish"], types["scale"]) == ("int16", "int16", "int8")
    path = tmp_path / "m.onnx"
    lowbit.save(q, path, format=form)
    model = onnx.load(path)
    inits = {i.name: i for i in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    int16 = {TensorProto.INT16, TensorProto.UINT16}
    assert not [i.name for i in model.graph.initializer if i.data_type in int16]
    assert not [n.name for n in model.graph.node if n.op_type == "QuantizeLinear"
                and inits[n.input[2]].data_type in int16]
    wide = next(n for n in model.graph.node if n.name == "wide")
    assert [inits[v].data_type for v in wide.input[1:]] == [TensorProto.FLOAT] * 2
    assert wide.input[0] == "x"  # the graph input itself, not an int16 round trip
    w = next(n for n in fold_quantized_constants(q.copy()).nodes if n.name == "wide").inputs[1]
    expected = w.const_value.astype(np.float32) * \
        w.type.quant.scale.astype(np.float32).reshape(-1, 1, 1, 1)
    assert np.array_equal(numpy_helper.to_array(inits[wide.input[1]]), expected)
    narrow = next(n for n in model.graph.node if n.name == "narrow")
    weight = narrow.input[3] if narrow.op_type == "QLinearConv" else \
        producers[narrow.input[1]].input[0]
    assert inits[weight].data_type == TensorProto.INT8


    # lowbit saturates a 16-bit value at its calibrated range and the export computes it in
    # float: inside the range the codes the chain ends in agree within one, beyond it they may
    # not, on a few values (x drawn beyond its calibrated range here on about 1 in 10000)
    executable = lowbit.compile(q)
    ours: dict[str, np.ndarray] = {}
    executable.observers.append(
        lambda node, outs: ours.update({v.name: a for v, a in zip(node.outputs, outs,
                                                                   strict=True)}))
    end = next(n for n in q.nodes if n.name == "narrow").inputs[0].name
    x_range = next(n for n in q.nodes if n.name == "wide").inputs[0].type.quant
    bound = float(x_range.scale) * 32767
    for x, within_one in ((np.clip(_x(8)["x"], -bound, bound), 1.0), (_x(8)["x"], 0.99)):
        executable({"x": x})
        theirs = _onnxruntime_value(path, end, TensorProto.UINT8, {"x": x}).astype(int) - 128
        diff = np.abs(theirs - ours[end].astype(int))
        assert (diff <= 1).mean() >= within_one and (diff == 0).mean() >= 0.99, diff.max()


@pytest.mark.parametrize("form", ["qdq", "qoperator"])
def test_a_sixteen_bit_graph_output_keeps_its_name_and_values(tmp_path, form):
    """An int16 result that is a graph output keeps its QuantizeLinear / DequantizeLinear pair:
    the exported model's output has lowbit's name and lowbit's values."""
    inits = [numpy_helper.from_array(RNG.normal(size=(4, 3, 3, 3)).astype(np.float32), "w")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1] * 4),
             helper.make_node("Sigmoid", ["c"], ["y"], name="sig")]
    g = helper.make_graph(nodes, "sig", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["N", 3, 8, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, ["N", 4, 8, 8])], inits)
    graph = optimize(import_model(helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 21)]), "sig"))
    q = lowbit.quantize(graph, lowbit.profile(graph, [_x(4)], progress=False),
                        lowbit.QuantConfig.from_dict({"rules": [{"name": "sig",
                                                                 "precision": "int16"}]}))
    assert next(n for n in q.nodes if n.name == "sig").outputs[0].type.dtype.name == "int16"
    path = tmp_path / "m.onnx"
    lowbit.save(q, path, format=form)
    assert [o.name for o in onnx.load(path).graph.output] == ["y"]
    x = _x(4)
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, x)[0]
    # ONNX Runtime requantizes the Conv in float: where its int8 code differs from lowbit's by
    # one, the sigmoid (slope at most 1/4) moves by at most a quarter of the Conv's step
    nodes = {n.name: n for n in q.nodes}
    step = float(nodes["sig"].outputs[0].type.quant.scale)
    conv_step = float(nodes["conv"].outputs[0].type.quant.scale)
    diff = np.abs(theirs - lowbit.run(q, x)["y"])
    assert np.mean(diff <= step * 1.001) >= 0.99
    assert diff.max() <= conv_step / 4 + 2 * step


def _reducing_cnn() -> lowbit.Graph:
    """x -> Conv -> ReduceMax (over the width) -> Flatten -> MatMul -> y; ReduceMax only
    moves values (`OpDef.moves_data`)."""
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("w", RNG.normal(size=(4, 3, 3, 3)) * 0.4), ("b", RNG.normal(size=4) * 0.1),
        ("wm", RNG.normal(size=(4 * 6, 5)) * 0.2))]
    inits.append(numpy_helper.from_array(np.array([3], np.int64), "axes"))
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
             helper.make_node("ReduceMax", ["c", "axes"], ["r"], keepdims=1, name="max"),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("MatMul", ["f", "wm"], ["y"], name="head")]
    g = helper.make_graph(nodes, "reducing", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["N", 3, 8, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, ["N", 5])], inits)
    return optimize(import_model(helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 21)]), "reducing"))


def test_qoperator_moves_codes_through_every_op_onnx_defines_on_them(tmp_path):
    """An op that only moves values (ReduceMax here) runs on the uint8 codes in the QOperator
    export, since ONNX's schema defines it on 8-bit integers, and ONNX Runtime agrees."""
    graph = _reducing_cnn()
    q = lowbit.quantize(graph, lowbit.profile(graph, [_x(4) for _ in range(4)], progress=False),
                        assert_all_quantized=True)
    path = tmp_path / "m.onnx"
    lowbit.save(q, path, format="qoperator")
    model = onnx.shape_inference.infer_shapes(onnx.load(path))
    types = {v.name: v.type.tensor_type.elem_type for v in model.graph.value_info}
    reduce = next(n for n in model.graph.node if n.op_type == "ReduceMax")
    assert types[reduce.input[0]] == types[reduce.output[0]] == TensorProto.UINT8
    _check_onnxruntime_agrees(q, path)

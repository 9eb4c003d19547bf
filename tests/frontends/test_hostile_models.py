"""Broken variants of the bundled model (issue 22): each is refused at import with a message
naming the node and attribute, or handled as ONNX Runtime handles it; inspect, run and quantize
agree, since they share the import."""

from __future__ import annotations

import copy

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import lowbit
from lowbit.cli.demo import bundled
from lowbit.errors import InputError, LowbitError, ModelError
from lowbit.quant.config import QuantConfig
from lowbit.quant.static import QuantizationError

MODEL = onnx.load(str(bundled("mnistnet.onnx")))
DIGITS = np.load(bundled("digits.npz"))["images"][:4]
FAST = QuantConfig.from_dict({"default": {"calibration": "minmax",
                                          "weight_rounding": "nearest"}})


def _variant() -> onnx.ModelProto:
    return copy.deepcopy(MODEL)


def _node(m: onnx.ModelProto, op_type: str, k: int = 0) -> onnx.NodeProto:
    return [n for n in m.graph.node if n.op_type == op_type][k]


def _set(node: onnx.NodeProto, name: str, value) -> None:
    for a in list(node.attribute):
        if a.name == name:
            node.attribute.remove(a)
    node.attribute.append(helper.make_attribute(name, value))


def _save(m: onnx.ModelProto, tmp_path, name: str = "m.onnx"):
    path = tmp_path / name
    path.write_bytes(m.SerializeToString())
    return path


def _ort(path) -> np.ndarray:
    return ort.InferenceSession(str(path)).run(None, {"input": DIGITS})[0]


def _lowbit(path) -> np.ndarray:
    return lowbit.run(lowbit.load(path), {"input": DIGITS})["logits"]


def test_maxpool_pads_larger_than_the_kernel(tmp_path):
    m = _variant()
    _set(_node(m, "MaxPool"), "pads", [1000] * 4)
    with pytest.raises(ModelError, match=r"'/features/features.2/MaxPool'.*'pads' is \[1000, "
                                         r"1000, 1000, 1000\]: each pad must be smaller than "
                                         r"the kernel \[2, 2\]"):
        lowbit.load(_save(m, tmp_path))


def test_conv_pads_beyond_any_dimension(tmp_path):
    m = _variant()
    _set(_node(m, "Conv"), "pads", [2**40] * 4)
    with pytest.raises(ModelError, match=r"'/features/features.0/Conv'.*attribute 'pads' is "
                                         r"\[1099511627776.*each value must be in \[0, "
                                         r"2147483648\]"):
        lowbit.load(_save(m, tmp_path))


@pytest.mark.parametrize(("op", "name", "value", "message"), [
    ("Gemm", "transA", 2, r"attribute 'transA' is 2; allowed: 0 or 1"),
    ("Gemm", "transB", -1, r"attribute 'transB' is -1; allowed: 0 or 1"),
    ("Gemm", "alpha", [1.0, 2.0], r"attribute 'alpha' must be a float, got a list of floats"),
    ("Conv", "group", 0, r"attribute 'group' is 0; must be at least 1"),
    ("Conv", "group", 3, r"32 output channels do not split into 3 groups"),
    ("Conv", "strides", [0, 1], r"attribute 'strides' is \[0, 1\]; each value must be in"),
    ("Conv", "dilations", [1, 2, 3], r"dilations \[1, 2, 3\] must have 2 values"),
    ("Conv", "kernel_shape", [5, 5], r"kernel_shape \[5, 5\] does not match the weight"),
    ("Conv", "auto_pad", "SAME", r"attribute 'auto_pad' is 'SAME'; allowed: one of 'NOTSET'"),
    ("Conv", "pads", "1", r"attribute 'pads' must be a list of integers, got a string '1'"),
    ("MaxPool", "ceil_mode", 7, r"attribute 'ceil_mode' is 7; allowed: 0 or 1"),
    ("MaxPool", "storage_order", 2, r"attribute 'storage_order' is 2; allowed: 0 or 1"),
    ("Flatten", "axis", 9, r"axis 9 out of range"),
])
def test_attribute_type_and_range_named(tmp_path, op, name, value, message):
    m = _variant()
    node = _node(m, op)
    _set(node, name, value)
    with pytest.raises(ModelError, match=f"node '{node.name}' \\({op}\\): .*{message}"):
        lowbit.load(_save(m, tmp_path))


def test_gemm_trans_a_on_a_non_square_input_refused_once_the_batch_is_known(tmp_path):
    """transA=1 makes K the batch size N, which must then equal 3136: the import cannot know N
    (ONNX Runtime loads this model too), but run and quantize refuse before computing, with
    the op's own message."""
    m = _variant()
    _set(_node(m, "Gemm"), "transA", 1)
    path = _save(m, tmp_path)
    graph = lowbit.load(path)
    message = r"inputs of shape input \(4, 1, 28, 28\): node '/classifier/classifier.0/Gemm' " \
              r"\(Gemm\): inner dimensions differ: A is \(4, 3136\), so with transA=1 K is 4"
    with pytest.raises(ModelError, match=message):
        lowbit.run(graph, {"input": DIGITS})
    with pytest.raises(ModelError, match=message):
        lowbit.profile(graph, [{"input": DIGITS}], progress=False)


def _corrupt(data: bytes, text: bytes, offset: int = 2) -> bytes:
    i = data.index(text) + offset
    return data[:i] + b"\xff\xfe\xfd" + data[i + 3:]


@pytest.mark.parametrize(("text", "what"), [
    (b"dilations", "attribute name"), (b"features.0.weight", "input or output name"),
    (b"\x1a\x19/features/features.0/Conv", "name of node #0"),  # NodeProto field 3, 25 bytes
    (b"main_graph", "graph name"),
])
def test_names_that_are_not_utf8(tmp_path, text, what):
    path = tmp_path / "m.onnx"
    offset = 4 if text.startswith(b"\x1a") else 2
    path.write_bytes(_corrupt(MODEL.SerializeToString(), text, offset))
    with pytest.raises(ModelError, match=f"{what} b'.*' is not valid UTF-8 text; the file is "
                                         "corrupted"):
        lowbit.load(path)


def test_an_inf_in_a_bias_runs_and_quantize_names_the_initializer(tmp_path):
    m = _variant()
    bias = m.graph.initializer[1]
    a = numpy_helper.to_array(bias).copy()
    a[3] = np.inf
    bias.CopyFrom(numpy_helper.from_array(a, bias.name))
    graph = lowbit.load(_save(m, tmp_path))
    assert np.isnan(lowbit.run(graph, {"input": DIGITS})["logits"]).all()  # as in ONNX Runtime
    profile = lowbit.profile(graph, [{"input": DIGITS}], progress=False)
    with pytest.raises(QuantizationError, match=r"initializer 'features.0.bias' \(input 2 of "
                       r"node '/features/features.0/Conv' \(Conv\)\) holds 1 infinite value\(s\), "
                       r"the first at index \[3\].*keep the node in float with a config rule "
                       r"`- \{name: '/features/features.0/Conv', precision: float\}`"):
        lowbit.quantize(graph, profile, FAST)
    keep = QuantConfig.from_dict({"default": {"calibration": "minmax",
                                              "weight_rounding": "nearest"},
                                  "rules": [{"name": "/features/features.0/Conv",
                                             "precision": "float"}]})
    # Here the Inf makes every later value NaN, which the next message says.
    with pytest.raises(InputError, match=r"'/classifier/classifier.1/Relu_output_0' has no "
                                         "finite calibration values"):
        lowbit.quantize(graph, profile, keep)


def test_a_huge_gemm_alpha_is_refused_naming_the_node(tmp_path):
    """alpha = -1e30 puts the next Gemm's input at 1e30: its weights, rounded by GPTQ against
    those inputs, get scales no float32 holds."""
    m = _variant()
    _set(_node(m, "Gemm"), "alpha", -1e30)
    graph = lowbit.load(_save(m, tmp_path))
    profile = lowbit.profile(graph, [{"input": DIGITS}], progress=False)
    with pytest.raises(QuantizationError, match=r"cannot quantize node "
                       r"'/classifier/classifier.2/Gemm' \(Gemm\): scale must be finite.*keep "
                       r"it in float with a config rule"):
        lowbit.quantize(graph, profile, QuantConfig.from_dict({"default": {
            "calibration": "minmax"}}))


def test_duplicate_node_names_refused_like_onnx_runtime(tmp_path):
    m = _variant()
    m.graph.node[0].name = m.graph.node[1].name = "same"
    path = _save(m, tmp_path)
    with pytest.raises(Exception, match="same node name"):
        ort.InferenceSession(str(path))
    with pytest.raises(ModelError, match=r"nodes #0 \(Conv\) and #1 \(Relu\) are both named "
                                         r"'same'"):
        lowbit.load(path)


def test_unnamed_nodes_are_not_duplicates(tmp_path):
    m = _variant()
    for n in m.graph.node:
        n.name = ""
    np.testing.assert_allclose(_lowbit(_save(m, tmp_path)), _ort(_save(m, tmp_path)),
                               rtol=1e-4, atol=1e-4)


def test_a_graph_without_outputs_refused_like_onnx_runtime(tmp_path):
    m = _variant()
    del m.graph.output[:]
    with pytest.raises(ModelError, match="the graph has no outputs"):
        lowbit.load(_save(m, tmp_path))


def test_sparse_initializer_runs_as_in_onnx_runtime(tmp_path):
    m = _variant()
    dense = m.graph.initializer[7]
    a = numpy_helper.to_array(dense).copy()
    a[[1, 4, 5, 8]] = 0
    keep = np.flatnonzero(a)
    del m.graph.initializer[7]
    values = numpy_helper.from_array(a[keep], dense.name)
    for indices in (keep.astype(np.int64), keep.astype(np.int64).reshape(-1, 1)):
        model = copy.deepcopy(m)
        model.graph.sparse_initializer.append(helper.make_sparse_tensor(
            values, numpy_helper.from_array(indices, ""), [10]))
        path = _save(model, tmp_path)
        np.testing.assert_allclose(_lowbit(path), _ort(path), rtol=1e-4, atol=1e-4)


def test_sparse_initializer_index_out_of_range(tmp_path):
    m = _variant()
    name = m.graph.initializer[7].name
    del m.graph.initializer[7]
    m.graph.sparse_initializer.append(helper.make_sparse_tensor(
        numpy_helper.from_array(np.ones(2, np.float32), name),
        numpy_helper.from_array(np.array([0, 10], np.int64), ""), [10]))
    with pytest.raises(ModelError, match=r"sparse initializer 'classifier.2.bias': an index lies "
                                         "outside"):
        lowbit.load(_save(m, tmp_path))


def test_model_local_function_is_inlined(tmp_path):
    m = _variant()
    f = helper.make_function("local", "MyRelu", ["X"], ["Y"],
                             [helper.make_node("Relu", ["X"], ["Y"])],
                             [helper.make_opsetid("", 17)])
    for relu in [n for n in m.graph.node if n.op_type == "Relu"]:
        relu.op_type, relu.domain = "MyRelu", "local"
    m.functions.append(f)
    m.opset_import.append(helper.make_opsetid("local", 1))
    path = _save(m, tmp_path)
    np.testing.assert_allclose(_lowbit(path), _ort(path), rtol=1e-4, atol=1e-4)


def test_duplicate_initializer_takes_the_last_like_onnx_runtime(tmp_path):
    m = _variant()
    bias = m.graph.initializer[7]
    other = numpy_helper.from_array(numpy_helper.to_array(bias) + 5, bias.name)
    m.graph.initializer.append(other)
    path = _save(m, tmp_path)
    got = _lowbit(path)
    np.testing.assert_allclose(got, _ort(path), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, _lowbit(_save(MODEL, tmp_path, "orig.onnx")) + 5,
                               rtol=1e-4, atol=1e-3)


def test_an_old_ir_version_loads_like_onnx_runtime(tmp_path):
    m = _variant()
    m.ir_version = 1
    path = _save(m, tmp_path)
    np.testing.assert_allclose(_lowbit(path), _ort(path), rtol=1e-4, atol=1e-4)


def test_opset_zero(tmp_path):
    m = _variant()
    m.opset_import[0].version = 0
    with pytest.raises(ModelError, match="opset 0 is not an ONNX opset"):
        lowbit.load(_save(m, tmp_path))


def test_every_error_is_a_lowbit_error():
    assert issubclass(QuantizationError, LowbitError) and issubclass(InputError, LowbitError)

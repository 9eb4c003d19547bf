"""LSTM against ONNX Runtime: directions, biases, peepholes, initial states, sequence lengths,
clip, coupled input and forget gates, batch-first layout and other activations."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import lowbit
from lowbit.errors import ModelError

RNG = np.random.default_rng(0)
SEQ, BATCH, INPUT, HIDDEN = 5, 3, 4, 6


def _case(tmp_path, direction="forward", layout=0, bias=True, peephole=False, initial=False,
          lens=False, **attrs):
    dirs = 2 if direction == "bidirectional" else 1
    inits = [numpy_helper.from_array(RNG.normal(size=(dirs, 4 * HIDDEN, INPUT)).astype(
                 np.float32), "W"),
             numpy_helper.from_array(RNG.normal(size=(dirs, 4 * HIDDEN, HIDDEN)).astype(
                 np.float32), "R")]
    names = ["X", "W", "R", "", "", "", "", ""]
    feeds = {"X": RNG.normal(size=(BATCH, SEQ, INPUT) if layout else (SEQ, BATCH, INPUT)
                             ).astype(np.float32)}
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(feeds["X"].shape))]
    if bias:
        inits.append(numpy_helper.from_array(RNG.normal(size=(dirs, 8 * HIDDEN)).astype(
            np.float32), "B"))
        names[3] = "B"
    if lens:
        feeds["L"] = np.array([5, 2, 4], np.int32)
        inputs.append(helper.make_tensor_value_info("L", TensorProto.INT32, [BATCH]))
        names[4] = "L"
    if initial:
        state = (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN)
        for i, name in ((5, "H0"), (6, "C0")):
            feeds[name] = RNG.normal(size=state).astype(np.float32)
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(state)))
            names[i] = name
    if peephole:
        inits.append(numpy_helper.from_array(RNG.normal(size=(dirs, 3 * HIDDEN)).astype(
            np.float32), "P"))
        names[7] = "P"
    while not names[-1]:
        names.pop()
    node = helper.make_node("LSTM", names, ["Y", "Y_h", "Y_c"], hidden_size=HIDDEN,
                            direction=direction, layout=layout, name="lstm", **attrs)
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
               for n in ("Y", "Y_h", "Y_c")]
    model = helper.make_model(helper.make_graph([node], "g", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 14)])
    path = tmp_path / "lstm.onnx"
    path.write_bytes(model.SerializeToString())
    return path, feeds


@pytest.mark.parametrize("options", [
    {},
    {"direction": "reverse"},
    {"direction": "bidirectional", "initial": True},
    {"peephole": True, "initial": True},
    {"lens": True},
    {"lens": True, "direction": "bidirectional"},
    {"clip": 0.5, "bias": False},
    {"input_forget": 1},
    {"activations": ["HardSigmoid", "Tanh", "Relu"], "activation_alpha": [0.3],
     "activation_beta": [0.4]},
])
def test_lstm_equals_onnx_runtime(tmp_path, options):
    path, feeds = _case(tmp_path, **options)
    want = ort.InferenceSession(str(path)).run(None, feeds)
    got = lowbit.run(lowbit.load(path), feeds)
    for w, g in zip(want, got.values(), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_batch_first_layout_is_the_transposed_default(tmp_path):
    """ONNX Runtime runs no layout=1 LSTM: compare with its layout=0 result, transposed."""
    import onnx

    path, feeds = _case(tmp_path, direction="bidirectional", initial=True, lens=True)
    want = ort.InferenceSession(str(path)).run(None, feeds)
    model = onnx.load(str(path))
    node = model.graph.node[0]
    next(a for a in node.attribute if a.name == "layout").i = 1
    for vi in model.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if len(dims) == 3:
            dims[0].dim_value, dims[1].dim_value = dims[1].dim_value, dims[0].dim_value
    path.write_bytes(model.SerializeToString())
    got = lowbit.run(lowbit.load(path), {k: v.transpose(1, 0, 2) if v.ndim == 3 else v
                                         for k, v in feeds.items()})
    np.testing.assert_allclose(got["Y"], want[0].transpose(2, 0, 1, 3), rtol=1e-5, atol=1e-5)
    for name, w in zip(("Y_h", "Y_c"), want[1:], strict=True):
        np.testing.assert_allclose(got[name], w.transpose(1, 0, 2), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("attrs", "message"), [
    ({"direction": "sideways"}, "attribute 'direction' is 'sideways'; allowed: one of"),
    ({"activations": ["Sigmoid", "Tanh"]}, r"activations \['Sigmoid', 'Tanh'\] must name 3"),
    ({"activations": ["Sigmoid", "Tanh", "Cube"]}, r"unknown activation\(s\) \['Cube'\]"),
    ({"clip": -1.0}, "clip must be positive"),
    ({"hidden_size": 7}, "W has 24 rows; 4 gates of hidden_size 7 need 28"),
])
def test_bad_lstm_attributes_are_refused(tmp_path, attrs, message):
    path, _ = _case(tmp_path)
    import onnx

    model = onnx.load(str(path))
    node = model.graph.node[0]
    for name, value in attrs.items():
        for a in list(node.attribute):
            if a.name == name:
                node.attribute.remove(a)
        node.attribute.append(helper.make_attribute(name, value))
    path.write_bytes(model.SerializeToString())
    with pytest.raises(ModelError, match=message):
        lowbit.load(path)

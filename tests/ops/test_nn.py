"""Conv, ConvTranspose, pooling, matrix products and normalizations: shape inference agrees
with the kernels (hypothesis), and results agree with ONNX Runtime on random configurations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ort_compare import one_node_model, run_both

from lowbit.errors import ModelError
from lowbit.frontends.onnx_import import import_model
from lowbit.passes import canonicalize

RNG = np.random.default_rng(11)


@st.composite
def conv_configs(draw):
    group = draw(st.sampled_from([1, 2]))
    cin = group * draw(st.integers(1, 3))
    cout = group * draw(st.integers(1, 3))
    k = draw(st.integers(1, 3))
    size = draw(st.integers(2 * (k - 1) + 1, 9))  # the dilated kernel fits the input
    attrs = {
        "group": group,
        "strides": [draw(st.integers(1, 3))] * 2,
        "dilations": [draw(st.integers(1, 2))] * 2,
    }
    pad_mode = draw(st.sampled_from(["pads", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    if pad_mode == "pads":
        attrs["pads"] = [draw(st.integers(0, 2)) for _ in range(4)]
    else:
        attrs["auto_pad"] = pad_mode
    if pad_mode.startswith("SAME"):
        attrs["dilations"] = [1, 1]  # ONNX Runtime refuses dilated SAME padding
    x = RNG.normal(size=(2, cin, size, size + 1)).astype(np.float32)
    w = RNG.normal(size=(cout, cin // group, k, k)).astype(np.float32)
    return x, w, attrs


def _inferred_and_actual(op, inputs, attrs):
    model = one_node_model(op, inputs, attrs)
    graph = canonicalize(import_model(model, "t"))
    out = graph.outputs[0]
    from lowbit import run

    return out.type.shape, run(graph, inputs)[out.name]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv_configs())
def test_conv_shape_inference_matches_kernel_and_onnxruntime(config):
    x, w, attrs = config
    try:
        shape, y = _inferred_and_actual("Conv", {"x": x, "w": w}, attrs)
    except ModelError:
        return  # an impossible configuration (empty output) is refused, not run
    assert shape == y.shape
    got, ref = run_both("Conv", {"x": x, "w": w}, attrs)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 3), st.integers(1, 3), st.integers(0, 1), st.integers(3, 9),
       st.sampled_from(["MaxPool", "AveragePool"]), st.integers(0, 1))
def test_pool_shape_inference_matches_kernel_and_onnxruntime(k, s, pad, size, op, ceil):
    x = RNG.normal(size=(1, 2, size, size + 2)).astype(np.float32)
    attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [pad] * 4, "ceil_mode": ceil}
    if pad >= k:
        attrs["pads"] = [0] * 4
    shape, y = _inferred_and_actual(op, {"x": x}, attrs)
    assert shape == y.shape
    got, ref = run_both(op, {"x": x}, attrs)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attrs", [
    {"strides": [2, 2]},
    {"strides": [2, 1], "pads": [1, 0, 1, 1], "output_padding": [1, 0]},
    {"group": 2, "dilations": [2, 1]},
    {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
])
def test_conv_transpose_matches_onnxruntime(attrs):
    group = attrs.get("group", 1)
    x = RNG.normal(size=(2, 4, 5, 6)).astype(np.float32)
    w = RNG.normal(size=(4, 3 if group == 1 else 2, 3, 3)).astype(np.float32)
    got, ref = run_both("ConvTranspose", {"x": x, "w": w}, attrs)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("a_shape, b_shape", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)),
                                              ((4,), (2, 4, 3)), ((2, 1, 3, 4), (5, 4, 2))])
def test_matmul_broadcasting_matches_onnxruntime(a_shape, b_shape):
    a = RNG.normal(size=a_shape).astype(np.float32)
    b = RNG.normal(size=b_shape).astype(np.float32)
    got, ref = run_both("MatMul", {"a": a, "b": b})
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_layer_norm_and_softmax_match_onnxruntime():
    x = RNG.normal(size=(2, 5, 8)).astype(np.float32) * 3
    scale = RNG.normal(size=(8,)).astype(np.float32)
    bias = RNG.normal(size=(8,)).astype(np.float32)
    got, ref = run_both("LayerNormalization", {"x": x, "s": scale, "b": bias},
                        {"epsilon": 1e-12})
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    got, ref = run_both("Softmax", {"x": x}, {"axis": 1})
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)


def test_bad_windows_are_refused():
    for attrs in ({"kernel_shape": [0, 2]}, {"kernel_shape": [2, 2], "strides": [0, 1]},
                  {"kernel_shape": [2, 2], "pads": [-1, 0, 0, 0]}):
        with pytest.raises(ModelError, match="must"):
            canonicalize(import_model(_raw("MaxPool", attrs), "t"))


def _raw(op, attrs):
    from onnx import TensorProto, helper

    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 1, 4, 4])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])

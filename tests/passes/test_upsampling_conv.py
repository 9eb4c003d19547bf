"""An upsampling ConvTranspose (b x b kernel, stride b) becomes a 1x1 Conv and DepthToSpace:
the same results, its fused clamp kept, its output value's name and users unchanged; other
ConvTransposes are left alone."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import lowbit
from lowbit.frontends.onnx_import import import_model
from lowbit.passes import canonicalize, optimize

RNG = np.random.default_rng(3)


def _graph(c: int, m: int, k: int, s: int, bias: bool, relu: bool, **attrs):
    inits = [numpy_helper.from_array(RNG.normal(size=(c, m, k, k)).astype(np.float32), "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(RNG.normal(size=m).astype(np.float32), "b"))
        ins.append("b")
    nodes = [helper.make_node("ConvTranspose", ins, ["t" if relu else "y"], kernel_shape=[k, k],
                              strides=[s, s], **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["t"], ["y"]))
    g = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, 5, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return canonicalize(import_model(model, "t"))


@pytest.mark.parametrize("c, m, b, bias, relu", [
    (24, 24, 2, True, True), (24, 1, 2, True, False), (5, 3, 3, False, True),
    (1, 6, 4, True, False)])
def test_upsampling_conv_transpose_becomes_conv_and_depth_to_space(c, m, b, bias, relu):
    g = _graph(c, m, b, b, bias, relu)
    x = RNG.normal(size=(2, c, 5, 7)).astype(np.float32)
    want = lowbit.run(g, {"x": x})["y"]
    opt = optimize(g.copy())
    ops = [n.op_type for n in opt.nodes if n.op_type != "Constant"]
    assert ops == ["Conv", "DepthToSpace"]
    assert opt.outputs[0].name == "y" and opt.outputs[0].producer.op_type == "DepthToSpace"
    got = lowbit.run(opt, {"x": x})["y"]
    assert got.shape == (2, m, 5 * b, 7 * b)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    if relu:
        assert got.min() == 0.0


@pytest.mark.parametrize("k, s, attrs", [
    (3, 2, {}),  # overlapping taps
    (2, 2, {"pads": [1, 1, 0, 0]}),
    (2, 2, {"output_padding": [1, 1]}),
    (2, 2, {"dilations": [2, 2]}),
    (2, 1, {}),
])
def test_other_conv_transposes_stay(k, s, attrs):
    g = optimize(_graph(4, 3, k, s, True, False, **attrs))
    assert [n.op_type for n in g.nodes if n.op_type != "Constant"] == ["ConvTranspose"]


def test_quantized_upsampling_is_integer_and_bit_exact_on_the_cpu_backend():
    """After the rewrite the quantizer computes the upsampling in integers (a Conv, then the
    codes rearranged), and the cpu backend gives the reference's codes."""
    from lowbit.backends.cpu import library

    g = optimize(_graph(24, 8, 2, 2, True, True))
    calib = [{"x": RNG.normal(size=(1, 24, 5, 7)).astype(np.float32)} for _ in range(4)]
    q = lowbit.quantize(g, lowbit.profile(g, calib, progress=False))
    kinds = {n.op_type: n for n in q.nodes}
    assert kinds["Conv"].outputs[0].type.quant is not None
    assert kinds["DepthToSpace"].outputs[0].type.quant is not None
    x = {"x": RNG.normal(size=(3, 24, 5, 7)).astype(np.float32)}
    want = lowbit.run(q, x)["y"]
    for isa in library.supported_isas():
        np.testing.assert_array_equal(lowbit.compile(q, backend="cpu", isa=isa)(x)["y"], want)

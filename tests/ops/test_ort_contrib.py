"""com.microsoft.QGemm (ONNX Runtime's QOperator Gemm): lowbit's kernel against an independent
int64 / float64 computation of its formula and against ONNX Runtime on random one-node models.
Weights stay in [-64, 63] where ONNX Runtime's uint8 x int8 kernels do not saturate
(docs/onnx_quantized_ops.md)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from ort_compare import run_lowbit, run_ort


def _qgemm_model(inputs: dict[str, np.ndarray], attrs: dict) -> onnx.ModelProto:
    node = helper.make_node("QGemm", list(inputs), ["y"], domain="com.microsoft", **attrs)
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                                  a.shape) for n, a in inputs.items() if n]
    graph = helper.make_graph([node], "qgemm", graph_inputs,
                              [helper.make_value_info("y", onnx.TypeProto())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 9
    return model


def _case(rng, trans_a: bool, trans_b: bool, per_column: bool, bias: bool, quantized: bool):
    m, k, n = 5, 37, 11
    a = rng.integers(0, 256, (k, m) if trans_a else (m, k), dtype=np.uint8)
    b = rng.integers(-64, 64, (n, k) if trans_b else (k, n), dtype=np.int8)
    shape = (n,) if per_column else ()
    inputs = {
        "a": a, "a_scale": np.array(rng.uniform(0.01, 0.05), np.float32),
        "a_zero": np.array(rng.integers(0, 256), np.uint8),
        "b": b, "b_scale": rng.uniform(0.001, 0.01, shape).astype(np.float32),
        "b_zero": rng.integers(-3, 4, shape).astype(np.int8),
    }
    if bias:
        inputs["c"] = rng.integers(-20000, 20000, (n,)).astype(np.int32)
    if quantized:
        if not bias:
            inputs[""] = np.zeros(0, np.int32)  # C left out: an empty input name
        inputs["y_scale"] = np.array(rng.uniform(0.02, 0.2), np.float32)
        inputs["y_zero"] = np.array(rng.integers(0, 256), np.uint8)
    return inputs


def _expected(inputs, attrs) -> np.ndarray:
    """The formula of lowbit.ops.ort_contrib.QGemm, computed independently."""
    a = inputs["a"].astype(np.int64)
    b = inputs["b"].astype(np.int64)
    a = a.T if attrs["transA"] else a
    b = b.T if attrs["transB"] else b
    acc = (a - int(inputs["a_zero"])) @ (b - inputs["b_zero"].astype(np.int64))
    if "c" in inputs:
        acc = acc + inputs["c"]
    f = np.float32
    mult = f(f(attrs["alpha"]) * inputs["a_scale"]) * inputs["b_scale"]
    if "y_scale" not in inputs:
        return acc.astype(f) * mult
    mult = (mult / inputs["y_scale"]).astype(f)
    q = np.rint((acc.astype(f) * mult).astype(np.float64)) + int(inputs["y_zero"])
    return np.clip(q, 0, 255).astype(np.uint8)


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("bias,quantized,alpha", [(True, True, 1.0), (False, True, 0.75),
                                                  (True, False, 1.0), (False, False, 2.0)])
def test_qgemm_matches_formula_and_onnxruntime(trans_a, trans_b, per_column, bias, quantized,
                                               alpha):
    rng = np.random.default_rng(7 + 2 * trans_a + 4 * trans_b + 8 * per_column + 16 * bias)
    inputs = _case(rng, trans_a, trans_b, per_column, bias, quantized)
    attrs = {"transA": int(trans_a), "transB": int(trans_b), "alpha": alpha}
    model = _qgemm_model(inputs, attrs)
    got = run_lowbit(model, inputs)[0]
    expected = _expected({k: v for k, v in inputs.items() if k}, attrs)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got, run_ort(model, inputs)[0])
    if quantized:
        assert np.count_nonzero((got > 0) & (got < 255)) > 0  # not all saturated


def test_qgemm_with_y_scale_but_no_y_zero_point_is_refused_naming_the_node():
    from lowbit.errors import ModelError

    rng = np.random.default_rng(0)
    inputs = _case(rng, False, False, False, True, True)
    del inputs["y_zero"]
    with pytest.raises(ModelError, match=r"QGemm.*y_scale and y_zero_point"):
        run_lowbit(_qgemm_model(inputs, {}), inputs)

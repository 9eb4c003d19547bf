"""Activation functions: attributes, Clip/PRelu inference, formulas, ONNX Runtime agreement."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from ort_compare import one_node_model, run_both, run_lowbit

from lowbit.errors import ModelError
from lowbit.ir import dtypes
from lowbit.ir.graph import Node, Value
from lowbit.ir.types import TensorType
from lowbit.ops import infer_node

RNG = np.random.default_rng(11)
X = (RNG.standard_normal((4, 129)) * 4).astype(np.float32)
F32 = dtypes.FLOAT32


def _run(op, attrs=None, **inputs):
    return run_lowbit(one_node_model(op, inputs, attrs), inputs)[0]


def _infer(op, *types):
    inputs = [None if t is None else Value(f"x{i}", t) for i, t in enumerate(types)]
    return infer_node(Node(op, inputs, [Value("y")], name="n"))[0]


@pytest.mark.parametrize(("op", "attrs"), [
    ("Relu", None), ("LeakyRelu", None), ("LeakyRelu", {"alpha": 0.3}), ("Sigmoid", None),
    ("HardSigmoid", None), ("HardSigmoid", {"alpha": 0.5, "beta": 0.1}), ("HardSwish", None),
    ("Tanh", None), ("Elu", None), ("Elu", {"alpha": 0.5}), ("Selu", None), ("Celu", None),
    ("Celu", {"alpha": 2.0}), ("Softplus", None), ("Softsign", None), ("Mish", None),
    ("ThresholdedRelu", None), ("ThresholdedRelu", {"alpha": 0.5}), ("Shrink", None),
    ("Shrink", {"lambd": 1.5, "bias": 0.5}),
])  # fmt: skip
def test_matches_onnxruntime(op, attrs):
    got, expected = run_both(op, {"x": X}, attrs)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    # Absolute slack for values near 0: ORT computes sigmoid and exp(x) - 1 less accurately
    # than lowbit (logistic without cancellation, expm1).
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=2e-7)


@pytest.mark.parametrize("op", ["Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish",
                                "Tanh", "Elu", "Selu", "Softplus", "Softsign", "Mish"])
def test_float16_matches_onnxruntime(op):
    got, expected = run_both(op, {"x": X.astype(np.float16)})
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, expected, rtol=2e-3, atol=1e-6)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_onnxruntime(approximate):
    got, expected = run_both("Gelu", {"x": X}, {"approximate": approximate})
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_gelu_is_accurate_for_negative_inputs():
    """x Phi(x) from the Gaussian tail Phi(-|x|) itself: no cancellation at x << 0, relative
    accuracy down to x = -8; from -8 on the defined tail is 0 (|GELU| < 5e-15 there)."""
    x = np.array([-1.0, -5.0, -7.5, -10.0, -13.0, 0.0, 3.0], np.float32)
    exact = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64)])
    got = _run("Gelu", x=x)
    near = np.abs(x) < 8
    np.testing.assert_allclose(got[near], exact[near], rtol=2e-7)
    assert np.all(got[~near] == 0) and np.abs(exact[~near]).max() < 5e-15


def test_swish_matches_its_formula():
    got = _run("Swish", {"alpha": 1.702}, x=X)
    alpha = np.float32(1.702)
    np.testing.assert_allclose(got, X / (1 + np.exp(-alpha * X)), rtol=2e-6, atol=1e-7)


def test_sigmoid_is_accurate_in_the_tails():
    x = np.array([-80.0, -30.0, 0.0, 30.0, 100.0, np.inf, -np.inf], np.float32)
    got = _run("Sigmoid", x=x)
    exact = [1 / (1 + math.exp(-v)) if v > -700 else 0.0 for v in x.astype(np.float64)]
    np.testing.assert_allclose(got, exact, rtol=1e-6)


def test_relu_on_integers_and_bfloat16():
    i = np.array([-128, -1, 0, 5, 127], np.int8)
    np.testing.assert_array_equal(_run("Relu", x=i), [0, 0, 0, 5, 127])
    b = X.astype(ml_dtypes.bfloat16)
    got = _run("Relu", x=b)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got, np.maximum(b.astype(np.float32), 0).astype(b.dtype))


def test_shrink_on_integers():
    x = np.array([-5, -1, 0, 1, 5], np.int32)
    got = _run("Shrink", {"lambd": 1.5, "bias": 1.5}, x=x)
    np.testing.assert_array_equal(got, [-3, 0, 0, 0, 3])  # -5 + 1.5 = -3.5 truncates to -3


def test_gelu_and_celu_attributes_are_checked():
    with pytest.raises(ModelError, match="approximate must be 'none' or 'tanh'"):
        _run("Gelu", {"approximate": "fast"}, x=X)
    with pytest.raises(ModelError, match="alpha must not be 0"):
        _run("Celu", {"alpha": 0.0}, x=X)


# -- Clip -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("bounds", [(-1.0, 2.0), (-1.0, None), (None, 0.5), (None, None),
                                    (2.0, -1.0)])
def test_clip_matches_onnxruntime(bounds):
    lo, hi = bounds
    inputs = {"x": X, "lo" if lo is not None else "": np.array(lo or 0, np.float32)}
    if hi is not None:
        inputs["hi"] = np.array(hi, np.float32)
    elif lo is None:
        inputs = {"x": X}
    got, expected = run_both("Clip", inputs)
    np.testing.assert_array_equal(got, expected)


def test_clip_with_min_above_max_gives_max_everywhere():
    got = _run("Clip", x=X, lo=np.array(3, np.float32), hi=np.array(-2, np.float32))
    assert np.all(got == -2)


def test_clip_on_integers_matches_onnxruntime():
    x = RNG.integers(-128, 128, 50, dtype=np.int8)
    got, expected = run_both("Clip", {"x": x, "lo": np.array(-20, np.int8),
                                      "hi": np.array(90, np.int8)})
    np.testing.assert_array_equal(got, expected)


def test_clip_bounds_must_be_scalars_of_the_input_dtype():
    x = TensorType(F32, ("n", 4))
    assert _infer("Clip", x, TensorType(F32, ()), None).shape == ("n", 4)
    assert _infer("Clip", x, TensorType(F32, (1,)), TensorType(F32, ())).shape == ("n", 4)
    with pytest.raises(ModelError, match="min must be a scalar"):
        _infer("Clip", x, TensorType(F32, (2,)))
    with pytest.raises(ModelError, match="dtypes float32 and float16"):
        _infer("Clip", x, None, TensorType(dtypes.FLOAT16, ()))


# -- PRelu ----------------------------------------------------------------------------------------
def test_prelu_broadcasts_slope_to_input():
    x = (RNG.standard_normal((2, 3, 4, 5))).astype(np.float32)
    for slope_shape in [(3, 1, 1), (5,), (1,), (2, 3, 4, 5)]:
        slope = RNG.standard_normal(slope_shape).astype(np.float32)
        got = _run("PRelu", x=x, slope=slope)
        np.testing.assert_array_equal(got, np.where(x < 0, x * slope, x))


def test_prelu_slope_must_broadcast_to_input_only():
    x = TensorType(F32, ("batch", 3, 1))
    assert _infer("PRelu", x, TensorType(F32, (3, 1))).shape == ("batch", 3, 1)
    assert _infer("PRelu", TensorType(F32, (None, 3)), TensorType(F32, (4, 3))).shape == (4, 3)
    with pytest.raises(ModelError, match="slope of shape \\(3, 5\\) does not broadcast"):
        _infer("PRelu", x, TensorType(F32, (3, 5)))
    with pytest.raises(ModelError, match="higher rank"):
        _infer("PRelu", TensorType(F32, (3,)), TensorType(F32, (2, 3)))

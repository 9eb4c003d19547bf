"""One-input math ops: inference, special values, and agreement with ONNX Runtime."""

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

RNG = np.random.default_rng(7)
X = (RNG.standard_normal((4, 129)) * 3).astype(np.float32)
POSITIVE = np.abs(X) + 0.01
UNIT = np.tanh(X) * 0.999

INPUTS = {
    "Sqrt": POSITIVE, "Exp": X, "Log": POSITIVE, "Reciprocal": X, "Erf": X, "Floor": X,
    "Ceil": X, "Round": X, "Sin": X, "Cos": X, "Tan": X, "Asin": UNIT, "Acos": UNIT, "Atan": X,
    "Sinh": X, "Cosh": X, "Asinh": X, "Acosh": POSITIVE + 1, "Atanh": UNIT, "Abs": X, "Neg": X,
    "Sign": X,
}  # fmt: skip


def _run(op, x, attrs=None):
    return run_lowbit(one_node_model(op, {"x": x}, attrs), {"x": x})[0]


def test_inference_keeps_shape_and_checks_dtype():
    x = Value("x", TensorType(dtypes.FLOAT16, ("batch", 3)))
    assert infer_node(Node("Sqrt", [x], [Value("y")]))[0] == TensorType(dtypes.FLOAT16,
                                                                        ("batch", 3))
    assert infer_node(Node("IsNaN", [x], [Value("y")]))[0].dtype == dtypes.BOOL
    ints = Value("i", TensorType(dtypes.INT32, (2,)))
    with pytest.raises(ModelError, match="input 0 has dtype int32; Sqrt accepts"):
        infer_node(Node("Sqrt", [ints], [Value("y")], name="n"))
    with pytest.raises(ModelError, match="Neg accepts"):
        infer_node(Node("Neg", [Value("u", TensorType(dtypes.UINT8, (2,)))], [Value("y")]))


def test_quantized_integers_are_accepted_where_floats_are():
    from lowbit.errors import ModelError
    from lowbit.ir.types import QuantParams

    q = TensorType(dtypes.INT8, (4,), QuantParams(0.5, 0))
    declared = TensorType(dtypes.UINT8, None, QuantParams(1 / 256, 0))
    got = infer_node(Node("Exp", [Value("q", q)], [Value("y", declared)]))[0]
    assert got == TensorType(dtypes.UINT8, (4,), QuantParams(1 / 256, 0))
    # A TABLE op's result parameters come from the quantizer: none declared is an error.
    with pytest.raises(ModelError, match="no quantized type"):
        infer_node(Node("Exp", [Value("q", q)], [Value("y")]))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", sorted(INPUTS))
def test_matches_onnxruntime(op, dtype):
    got, expected = run_both(op, {"x": INPUTS[op].astype(dtype)})
    assert got.dtype == expected.dtype and got.shape == expected.shape
    # A few float32 ulps: numpy's and ORT's libm differ slightly.
    np.testing.assert_allclose(got, expected, rtol=4 * np.finfo(dtype).eps,
                               atol=np.finfo(dtype).tiny)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8])
def test_integer_abs_neg_sign_match_onnxruntime(dtype):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, 64, dtype=dtype, endpoint=True)
    x[:2] = [info.min, info.max]
    ops = ["Abs", "Sign"] + (["Neg"] if info.min < 0 else [])
    for op in ops:
        np.testing.assert_array_equal(*run_both(op, {"x": x}), err_msg=op)


def test_round_is_half_to_even_and_keeps_specials():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.3, -2.7, np.inf, -np.inf, np.nan, -0.0],
                 np.float32)
    got = _run("Round", x)
    np.testing.assert_array_equal(got, [0, 2, 2, -0, -2, -2, 2, -3, np.inf, -np.inf, np.nan, -0])
    assert np.signbit(got[-1])


def test_bfloat16_is_computed_in_float32_and_rounded_once():
    x = RNG.standard_normal(200).astype(ml_dtypes.bfloat16)
    got = _run("Exp", x)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got, np.exp(x.astype(np.float32)).astype(ml_dtypes.bfloat16))


def test_erf_is_accurate_at_float32_precision():
    x = np.concatenate([np.linspace(-6, 6, 20001), np.geomspace(1e-38, 10, 5000),
                        -np.geomspace(1e-30, 5, 3000), [0.0, -0.0, np.inf, -np.inf]]
                       ).astype(np.float32)
    got = _run("Erf", x).astype(np.float64)
    exact = np.array([math.erf(v) for v in x.astype(np.float64)])
    # Correctly rounded to float32 (half an ulp), allowing one ulp for rare near-ties.
    assert np.all(np.abs(got - exact) <= np.spacing(np.abs(exact).astype(np.float32)))
    assert np.isnan(_run("Erf", np.array([np.nan], np.float32))[0])


def test_isnan_and_isinf():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, 1e38, -1.0], np.float32)
    np.testing.assert_array_equal(_run("IsNaN", x), [1, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(_run("IsInf", x), [0, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(_run("IsInf", x, {"detect_negative": 0}), [0, 1, 0, 0, 0, 0])
    np.testing.assert_array_equal(_run("IsInf", x, {"detect_positive": 0}), [0, 0, 1, 0, 0, 0])
    both_off = _run("IsInf", x, {"detect_positive": 0, "detect_negative": 0})
    assert both_off.shape == x.shape and not both_off.any()
    f8 = x.astype(ml_dtypes.float8_e5m2)
    np.testing.assert_array_equal(_run("IsInf", f8), [0, 1, 1, 0, 1, 0])  # 1e38 overflows
    np.testing.assert_array_equal(_run("IsNaN", f8), [1, 0, 0, 0, 0, 0])


def test_scalar_inputs_give_scalar_outputs():
    got = _run("Sqrt", np.array(4.0, np.float32))
    assert got.shape == () and got.dtype == np.float32 and got == 2
    assert _run("Abs", np.array(-3, np.int8)).shape == ()

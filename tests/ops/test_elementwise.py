"""Broadcasting elementwise ops: shape and dtype inference, integer semantics, ONNX Runtime
agreement."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays, mutually_broadcastable_shapes
from ort_compare import one_node_model, run_both, run_lowbit

from lowbit.errors import KernelError, ModelError
from lowbit.ir import dtypes
from lowbit.ir.graph import Node, Value
from lowbit.ir.types import TensorType
from lowbit.ops import infer_node

F32 = dtypes.FLOAT32


def infer(op_type: str, *types: TensorType | None, attrs: dict | None = None) -> TensorType:
    inputs = [None if t is None else Value(f"x{i}", t) for i, t in enumerate(types)]
    return infer_node(Node(op_type, inputs, [Value("y")], attrs or {}, name="n"))[0]


# -- shape inference ------------------------------------------------------------------------------
@given(mutually_broadcastable_shapes(num_shapes=2, min_side=0, max_side=4, max_dims=5))
def test_binary_static_shapes_agree_with_numpy(shapes):
    inputs, result = shapes
    for op in ("Add", "Mul", "Pow", "Equal", "Less"):
        out = infer(op, *(TensorType(F32, s) for s in inputs))
        assert out.shape == result


@given(mutually_broadcastable_shapes(num_shapes=3, max_side=4, max_dims=4))
def test_variadic_and_where_static_shapes_agree_with_numpy(shapes):
    inputs, result = shapes
    assert infer("Max", *(TensorType(F32, s) for s in inputs)).shape == result
    assert infer("Sum", *(TensorType(F32, s) for s in inputs)).shape == result
    cond, x, y = inputs
    where = infer("Where", TensorType(dtypes.BOOL, cond), TensorType(F32, x), TensorType(F32, y))
    assert where.shape == result


@given(st.data())
def test_symbolic_dims_broadcast_consistently(data):
    """Making some dims symbolic (named after their size) or unknown never contradicts numpy:
    each output dim is the numpy size, a symbol standing for it, or unknown; and an axis where
    no input dim was replaced stays static."""
    inputs, result = data.draw(mutually_broadcastable_shapes(num_shapes=2, max_side=4,
                                                             max_dims=4))
    replaced_axes: set[int] = set()
    types = []
    for shape in inputs:
        dims = []
        for axis, d in enumerate(shape):
            kind = data.draw(st.sampled_from(["static", "static", "symbol", "unknown"]))
            if kind != "static":
                replaced_axes.add(len(result) - len(shape) + axis)
            dims.append(d if kind == "static" else f"n{d}" if kind == "symbol" else None)
        types.append(TensorType(F32, tuple(dims)))
    out = infer("Add", *types)
    assert out.shape is not None and len(out.shape) == len(result)
    for axis, (o, r) in enumerate(zip(out.shape, result, strict=True)):
        if isinstance(o, int):
            assert o == r
        elif isinstance(o, str):
            assert int(o[1:]) == r
        assert o is not None or axis in replaced_axes


def test_same_symbol_survives_and_static_dim_wins():
    a = TensorType(F32, ("batch", 1, "seq"))
    b = TensorType(F32, ("batch", 8, 1))
    assert infer("Add", a, b).shape == ("batch", 8, "seq")
    assert infer("Mul", TensorType(F32, ("n",)), TensorType(F32, (5,))).shape == (5,)
    assert infer("Sub", TensorType(F32, ("n",)), TensorType(F32, ("m",))).shape == (None,)


def test_unknown_rank_gives_unknown_shape():
    assert infer("Add", TensorType(F32, None), TensorType(F32, (3,))).shape is None


def test_shapes_that_do_not_broadcast_are_refused_naming_them():
    with pytest.raises(ModelError, match=r"\(2, 3\) and \(4,\) do not broadcast"):
        infer("Add", TensorType(F32, (2, 3)), TensorType(F32, (4,)))


# -- dtype rules ----------------------------------------------------------------------------------
def test_comparisons_give_bool_and_arithmetic_keeps_dtype():
    i8 = TensorType(dtypes.INT8, (3,))
    assert infer("Less", i8, i8).dtype == dtypes.BOOL
    assert infer("Equal", TensorType(dtypes.BOOL, (3,)), TensorType(dtypes.BOOL, (1,))
                 ).dtype == dtypes.BOOL
    assert infer("Add", i8, i8).dtype == dtypes.INT8
    assert infer("Pow", TensorType(F32, (2,)), TensorType(dtypes.INT64, ())).dtype == F32


@pytest.mark.parametrize(("op", "a", "b", "message"), [
    ("Add", dtypes.FLOAT32, dtypes.INT64, "dtypes float32 and int64"),
    ("Add", dtypes.BOOL, dtypes.BOOL, "input 0 has dtype bool"),
    ("Sum", dtypes.INT32, dtypes.INT32, "input 0 has dtype int32"),
    ("BitwiseAnd", dtypes.FLOAT32, dtypes.FLOAT32, "input 0 has dtype float32"),
    ("And", dtypes.INT8, dtypes.INT8, "input 0 has dtype int8"),
    ("Pow", dtypes.INT8, dtypes.INT8, "input 0 has dtype int8"),
])  # fmt: skip
def test_bad_dtypes_are_refused(op, a, b, message):
    with pytest.raises(ModelError, match=message):
        infer(op, TensorType(a, (2,)), TensorType(b, (2,)))


def test_where_needs_bool_condition_and_equal_branches():
    f = TensorType(F32, (2,))
    with pytest.raises(ModelError, match="input 0 has dtype float32"):
        infer("Where", f, f, f)
    with pytest.raises(ModelError, match="dtypes float32 and float16"):
        infer("Where", TensorType(dtypes.BOOL, (2,)), f, TensorType(dtypes.FLOAT16, (2,)))


def test_variadic_without_inputs_is_refused():
    with pytest.raises(ModelError, match="at least one input"):
        infer("Max")


def test_bad_attributes_are_refused_at_import():
    a = np.zeros(3, np.int32)
    with pytest.raises(ModelError, match="direction must be LEFT or RIGHT"):
        run_lowbit(one_node_model("BitShift", {"a": a, "b": a}, {"direction": "UP"}),
                   {"a": a, "b": a})
    with pytest.raises(ModelError, match=r"fmod.* allowed: 0 or 1"):
        run_lowbit(one_node_model("Mod", {"a": a, "b": a}, {"fmod": 2}), {"a": a, "b": a})


# -- integer semantics ----------------------------------------------------------------------------
INT_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32]


def _int_arrays(dtype, nonzero=False):
    info = np.iinfo(dtype)
    values = st.integers(int(info.min), int(info.max))
    if nonzero:
        values = values.filter(bool)
    return arrays(dtype, 6, elements=values)


def _run(op, attrs=None, **inputs):
    return run_lowbit(one_node_model(op, inputs, attrs), inputs)[0]


def _wrap(value: int, dtype) -> int:
    return int(np.array(value % (1 << 64), dtype=np.uint64).astype(dtype))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(INT_TYPES).flatmap(lambda t: st.tuples(_int_arrays(t),
                                                               _int_arrays(t, nonzero=True))))
def test_integer_arithmetic_matches_exact_python_integers(ab):
    a, b = ab
    pa, pb = [int(v) for v in a], [int(v) for v in b]
    add, mul, div = _run("Add", a=a, b=b), _run("Mul", a=a, b=b), _run("Div", a=a, b=b)
    mod, fmod = _run("Mod", a=a, b=b), _run("Mod", {"fmod": 1}, a=a, b=b)
    for i, (x, y) in enumerate(zip(pa, pb, strict=True)):
        truncated = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
        assert int(add[i]) == _wrap(x + y, a.dtype)
        assert int(mul[i]) == _wrap(x * y, a.dtype)
        assert int(div[i]) == _wrap(truncated, a.dtype)
        assert int(mod[i]) == _wrap(x % y, a.dtype)  # Python's % takes the divisor's sign
        assert int(fmod[i]) == _wrap(x - truncated * y, a.dtype)


def test_integer_division_truncates_and_mod_follows_divisor_sign():
    a = np.array([-7, 7, -7, 7, -128, 5], np.int8)
    b = np.array([2, -2, -2, 2, -1, 3], np.int8)
    np.testing.assert_array_equal(_run("Div", a=a, b=b), [-3, -3, 3, 3, -128, 1])
    np.testing.assert_array_equal(_run("Mod", a=a, b=b), [1, -1, -1, 1, 0, 2])
    np.testing.assert_array_equal(_run("Mod", {"fmod": 1}, a=a, b=b), [-1, 1, -1, 1, 0, 2])


def test_integer_division_by_zero_is_refused():
    a, b = np.array([1, 2], np.int32), np.array([1, 0], np.int32)
    with pytest.raises(KernelError, match="integer division by zero"):
        _run("Div", a=a, b=b)
    with pytest.raises(KernelError, match="integer modulo by zero"):
        _run("Mod", a=a, b=b)


def test_float_division_by_zero_gives_ieee_results():
    a, b = np.array([1, -1, 0], np.float32), np.zeros(3, np.float32)
    np.testing.assert_array_equal(_run("Div", a=a, b=b), [np.inf, -np.inf, np.nan])


def test_bit_shift_edge_cases():
    x = np.array([1, -1, 64, -128, -128, 5, -5], np.int8)
    s = np.array([7, 1, 2, 8, -1, 9, 8], np.int8)
    np.testing.assert_array_equal(_run("BitShift", {"direction": "LEFT"}, x=x, s=s),
                                  [-128, -2, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(_run("BitShift", {"direction": "RIGHT"}, x=x, s=s),
                                  [0, -1, 16, -1, -1, 0, -1])


def test_integer_pow():
    x = np.array([2, -3, 2, -1, -1, 1, 5, 2], np.int32)
    y = np.array([10, 3, 31, -3, -2, -7, -1, 32], np.int64)
    np.testing.assert_array_equal(_run("Pow", x=x, y=y),
                                  [1024, -27, -(2**31), -1, 1, 1, 0, 0])
    with pytest.raises(KernelError, match="0 raised to a negative"):
        _run("Pow", x=np.array([0], np.int32), y=np.array([-1], np.int32))


def test_integer_pow_with_float_exponent_truncates():
    x = np.array([2, 9, 7], np.int64)
    y = np.array([0.5, 0.5, -1.0], np.float32)
    np.testing.assert_array_equal(_run("Pow", x=x, y=y), [1, 3, 0])


# -- agreement with ONNX Runtime ------------------------------------------------------------------
RNG = np.random.default_rng(1234)
A = (RNG.standard_normal((3, 1, 5)) * 4).astype(np.float32)
B = (RNG.standard_normal((4, 1)) * 4).astype(np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum",
                                "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
def test_float_ops_match_onnxruntime(op, dtype):
    got, expected = run_both(op, {"a": A.astype(dtype), "b": B.astype(dtype)})
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=0)


def test_mean_and_mod_match_onnxruntime():
    got, expected = run_both("Mean", {"a": A, "b": B, "c": A[0]})
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    got, expected = run_both("Mod", {"a": A, "b": B}, {"fmod": 1})
    np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint64])
def test_integer_ops_match_onnxruntime(dtype):
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max, (3, 1, 40), dtype=dtype, endpoint=True)
    b = RNG.integers(info.min, info.max, (4, 40), dtype=dtype, endpoint=True)
    b[b == 0] = 1
    small = RNG.integers(-20 if info.min < 0 else 1, 20, (4, 40)).astype(dtype)
    small[small == 0] = 3
    shifts = RNG.integers(0, info.bits, (4, 40)).astype(dtype)
    cases = [("Add", b, None), ("Sub", b, None), ("Mul", b, None), ("Div", b, None),
             ("Div", small, None), ("Mod", small, {"fmod": 0}), ("Mod", small, {"fmod": 1}),
             ("BitwiseAnd", b, None), ("BitwiseXor", b, None), ("Equal", b, None),
             ("Greater", b, None)]
    if dtype in (np.int32, np.int64, np.uint8, np.uint64):  # ORT's Max/Min integer kernels
        cases += [("Max", b, None), ("Min", b, None)]
    if np.dtype(dtype).kind == "u":  # ORT implements BitShift for unsigned types only
        cases += [("BitShift", shifts, {"direction": "LEFT"}),
                  ("BitShift", shifts, {"direction": "RIGHT"})]
    for op, other, attrs in cases:
        got, expected = run_both(op, {"a": a, "b": other}, attrs)
        np.testing.assert_array_equal(got, expected, err_msg=f"{op} {attrs}")


def test_logic_and_where_match_onnxruntime():
    c = RNG.random((3, 1, 5)) > 0.5
    d = RNG.random((4, 1)) > 0.5
    for op in ("And", "Or", "Xor"):
        np.testing.assert_array_equal(*run_both(op, {"c": c, "d": d}))
    np.testing.assert_array_equal(*run_both("Not", {"c": c}))
    np.testing.assert_array_equal(*run_both("Where", {"c": c, "a": A, "b": B}))
    i = RNG.integers(0, 1 << 16, (4, 5)).astype(np.int32)
    np.testing.assert_array_equal(*run_both("BitwiseNot", {"i": i}))


def test_every_elementwise_family_op_has_a_reference_kernel():
    from lowbit.backends.reference.kernels import get_kernel
    from lowbit.ops import all_ops

    families = {f"lowbit.ops.{m}" for m in ("elementwise", "unary", "activation", "cast")}
    ours = [op for op in all_ops().values() if type(op).__module__ in families]
    assert len(ours) == 69
    assert [op.op_type for op in ours if get_kernel(op.op_type) is None] == []

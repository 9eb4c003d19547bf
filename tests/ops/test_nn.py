"""Neural-network ops: conv, linalg, normalization, softmax, pool, reduce.

Shape inference is checked against the shapes the reference kernels produce (hypothesis), the
kernels against ONNX Runtime on random configurations, integer kernels exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from ort_compare import one_node_model, run_both, run_lowbit

from lowbit.api import run
from lowbit.backends.reference.kernels import get_kernel
from lowbit.errors import ModelError
from lowbit.frontends.onnx_import import import_model
from lowbit.ir import dtypes
from lowbit.ir.graph import Graph, Node, Value
from lowbit.ir.types import TensorType
from lowbit.ops import REQUIRED, get, infer_node
from lowbit.passes import canonicalize

RNG = np.random.default_rng(7)
F32 = dtypes.FLOAT32


def _node(op: str, types: list[TensorType | Value | None], attrs: dict | None = None,
          n_outputs: int = 1) -> Node:
    """A node with the op's default attributes filled in, as import leaves it."""
    full = dict(attrs or {})
    for name, spec in get(op).attrs.items():
        if name not in full and spec.default not in (None, REQUIRED):
            full[name] = spec.default
    inputs = [t if isinstance(t, Value) or t is None else Value(f"x{i}", t)
              for i, t in enumerate(types)]
    return Node(op, inputs, [Value(f"y{i}") for i in range(n_outputs)], full, name="n")


def _infer(op: str, *types, attrs: dict | None = None, n_outputs: int = 1):
    return infer_node(_node(op, list(types), attrs, n_outputs))


def _const(array: np.ndarray) -> Value:
    return Graph().add_constant(np.asarray(array))


def _kernel_shapes(op: str, arrays: list[np.ndarray | None], attrs: dict,
                   n_outputs: int = 1) -> tuple[list, list]:
    """(inferred shapes, kernel output shapes) of a node over `arrays`."""
    types = [None if a is None else TensorType(dtypes.from_numpy(a.dtype), a.shape)
             for a in arrays]
    node = _node(op, types, attrs, n_outputs)
    inferred = [t.shape for t in infer_node(node)]
    outputs = get_kernel(op)(node, arrays)
    return inferred, [o.shape for o in outputs]


# -- shape inference against the kernels ----------------------------------------------------------
AUTO_PADS = ["NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"]


@st.composite
def conv_configs(draw):
    rank = draw(st.integers(1, 3))
    group = draw(st.integers(1, 3))
    cg, mg = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kernel = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    strides = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    dilations = draw(st.lists(st.integers(1, 2), min_size=rank, max_size=rank))
    pads = draw(st.lists(st.integers(0, 2), min_size=2 * rank, max_size=2 * rank))
    auto_pad = draw(st.sampled_from(AUTO_PADS))
    spatial = [draw(st.integers(d * (k - 1) + 1, d * (k - 1) + 6))
               for k, d in zip(kernel, dilations, strict=True)]
    attrs = {"group": group, "strides": strides, "dilations": dilations, "auto_pad": auto_pad}
    if auto_pad == "NOTSET":
        attrs["pads"] = pads
    return rank, group, cg, mg, kernel, spatial, attrs


@settings(max_examples=60, deadline=None)
@given(conv_configs(), st.integers(1, 2))
def test_conv_inferred_shape_is_the_kernel_shape(config, batch):
    _, group, cg, mg, kernel, spatial, attrs = config
    x = RNG.standard_normal((batch, cg * group, *spatial)).astype(np.float32)
    w = RNG.standard_normal((mg * group, cg, *kernel)).astype(np.float32)
    inferred, got = _kernel_shapes("Conv", [x, w, None], attrs)
    assert inferred == got


@settings(max_examples=60, deadline=None)
@given(conv_configs(), st.integers(0, 2), st.booleans())
def test_conv_transpose_inferred_shape_is_the_kernel_shape(config, out_pad, with_shape):
    rank, group, cg, mg, kernel, spatial, attrs = config
    attrs["output_padding"] = [min(out_pad, max(s, d) - 1)
                               for s, d in zip(attrs["strides"], attrs["dilations"], strict=True)]
    if with_shape:
        attrs["output_shape"] = [s * i + 1 for s, i in zip(attrs["strides"], spatial,
                                                           strict=True)]
    pads = attrs.get("pads", [0] * 2 * rank)
    assume(all(s * (i - 1) + p + d * (k - 1) + 1 > pads[a] + pads[a + rank]
               for a, (s, i, p, d, k) in enumerate(zip(attrs["strides"], spatial,
                                                       attrs["output_padding"],
                                                       attrs["dilations"], kernel, strict=True))))
    x = RNG.standard_normal((1, cg * group, *spatial)).astype(np.float32)
    w = RNG.standard_normal((cg * group, mg, *kernel)).astype(np.float32)
    inferred, got = _kernel_shapes("ConvTranspose", [x, w, None], attrs)
    assert inferred == got


@st.composite
def pool_configs(draw):
    rank = draw(st.integers(1, 3))
    kernel = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    strides = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    dilations = draw(st.lists(st.integers(1, 2), min_size=rank, max_size=rank))
    pads = [draw(st.integers(0, k - 1)) for k in kernel * 2]
    auto_pad = draw(st.sampled_from(AUTO_PADS))
    spatial = [draw(st.integers(d * (k - 1) + 1, d * (k - 1) + 6))
               for k, d in zip(kernel, dilations, strict=True)]
    attrs = {"kernel_shape": kernel, "strides": strides, "dilations": dilations,
             "auto_pad": auto_pad, "ceil_mode": int(draw(st.booleans()))}
    if auto_pad == "NOTSET":
        attrs["pads"] = pads
    return spatial, attrs


@settings(max_examples=60, deadline=None)
@given(pool_configs(), st.sampled_from(["MaxPool", "AveragePool", "LpPool"]))
def test_pool_inferred_shape_is_the_kernel_shape(config, op):
    spatial, attrs = config
    x = RNG.standard_normal((2, 3, *spatial)).astype(np.float32)
    n_out = 2 if op == "MaxPool" else 1
    inferred, got = _kernel_shapes(op, [x], attrs, n_out)
    assert inferred == got


@settings(max_examples=40, deadline=None)
@given(pool_configs(), st.integers(0, 1))
def test_maxpool_indices_point_at_the_maxima(config, storage_order):
    spatial, attrs = config
    x = RNG.permutation(np.prod(spatial) * 6).reshape((2, 3, *spatial)).astype(np.float32)
    node = _node("MaxPool", [TensorType(F32, x.shape)], {**attrs, "storage_order":
                                                         storage_order}, 2)
    y, idx = get_kernel("MaxPool")(node, [x])
    # storage_order 1 numbers the spatial axes column-major: reverse them, then flatten.
    flat = x if storage_order == 0 else x.transpose((0, 1, *reversed(range(2, x.ndim))))
    finite = np.isfinite(y)
    np.testing.assert_array_equal(flat.reshape(-1)[idx[finite]], y[finite])


def test_symbolic_dims_flow_through_inference():
    x = TensorType(F32, ("batch", 3, "h", "w"))
    w = TensorType(F32, (8, 3, 3, 3))
    assert _infer("Conv", x, w)[0].shape == ("batch", 8, None, None)
    same = _infer("Conv", x, w, attrs={"auto_pad": "SAME_UPPER"})[0]
    assert same.shape == ("batch", 8, "h", "w")
    assert _infer("MaxPool", TensorType(F32, ("n", 3, 8, 8)),
                  attrs={"kernel_shape": [2, 2], "strides": [2, 2]})[0].shape == ("n", 3, 4, 4)
    a = TensorType(F32, ("b", "s", 384))
    assert _infer("MatMul", a, TensorType(F32, (384, 1536)))[0].shape == ("b", "s", 1536)
    assert _infer("MatMul", TensorType(F32, (384,)), TensorType(F32, ("b", 384, 7))
                  )[0].shape == ("b", 7)
    y, mean, inv = _infer("LayerNormalization", a, TensorType(F32, (384,)), n_outputs=3)
    assert y.shape == ("b", "s", 384) and mean.shape == inv.shape == ("b", "s", 1)
    axes = _const(np.array([-1], np.int64))
    assert _infer("ReduceMean", a, axes)[0].shape == ("b", "s", 1)
    assert _infer("ReduceMean", a, axes, attrs={"keepdims": 0})[0].shape == ("b", "s")
    assert _infer("ReduceSum", a, Value("axes", TensorType(dtypes.INT64, (1,))))[0].shape == (
        None, None, None)
    assert _infer("ArgMax", a, attrs={"axis": 1, "keepdims": 0})[0].shape == ("b", 384)
    assert _infer("Gemm", TensorType(F32, ("n", 5)), TensorType(F32, (6, 5)),
                  TensorType(F32, (6,)), attrs={"transB": 1})[0].shape == ("n", 6)


# -- refusals -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("op", "types", "attrs", "message"), [
    ("Conv", [(1, 4, 5, 5), (6, 3, 3, 3)], {"group": 2}, "expects 3 per group"),
    ("Conv", [(1, 4, 5, 5), (6, 2, 3, 3)], {"group": 4}, "do not split into 4 groups"),
    ("Conv", [(1, 3, 5, 5), (6, 3, 3, 3)], {"kernel_shape": [2, 2]}, "does not match"),
    ("Conv", [(1, 3, 5, 5), (6, 3, 3, 3)], {"strides": [0, 1]}, "must be positive"),
    ("Conv", [(1, 3, 2, 2), (6, 3, 3, 3)], {}, "does not fit"),
    ("ConvTranspose", [(1, 3, 5, 5), (3, 2, 3, 3)], {"output_padding": [2, 0]},
     "smaller than the stride"),
    ("MaxPool", [(1, 3, 5)], {"kernel_shape": [2, 2]}, "has 2 axes"),
    ("MatMul", [(2, 3), (4, 5)], {}, "inner dimensions differ"),
    ("MatMul", [(2, 2, 3), (3, 3, 4)], {}, "do not broadcast"),
    ("Gemm", [(2, 3, 1), (3, 4)], {}, "must be a matrix"),
    ("Gemm", [(2, 3), (3, 4), (3, 4)], {}, "does not broadcast"),
    ("Softmax", [(2, 3)], {"axis": 2}, "out of range"),
    ("LayerNormalization", [(2, 3), (3,)], {"stash_type": 10}, "stash_type"),
])  # fmt: skip
def test_bad_nodes_are_refused(op, types, attrs, message):
    node = _node(op, [TensorType(F32, s) for s in types], attrs)
    with pytest.raises(ModelError, match=message):
        get(op).check(node, [v.type for v in node.inputs])
        infer_node(node)


def test_reduce_refuses_repeated_axes():
    with pytest.raises(ModelError, match="repeat an axis"):
        _infer("ReduceSum", TensorType(F32, (2, 3)), _const(np.array([1, -1], np.int64)))


def test_integer_gemm_needs_integral_alpha_and_beta():
    types = [TensorType(dtypes.INT32, (2, 3)), TensorType(dtypes.INT32, (3, 4))]
    node = _node("Gemm", types, {"alpha": 0.5})
    with pytest.raises(ModelError, match=r"alpha = 0\.5 is not an integer"):
        get("Gemm").check(node, types)


def test_training_mode_batchnorm_is_refused_at_import():
    c = 3
    inputs = {"x": RNG.standard_normal((2, c, 4)).astype(np.float32)}
    for name in ("s", "b", "m", "v"):
        inputs[name] = np.ones(c, np.float32)
    model = one_node_model("BatchNormalization", inputs, {"training_mode": 1}, n_outputs=3)
    with pytest.raises(ModelError, match=r"training_mode=1 .* not supported"):
        run_lowbit(model, inputs)


# -- against ONNX Runtime -------------------------------------------------------------------------
def _f32(*shape, scale=1.0):
    return np.asarray(RNG.standard_normal(shape) * scale, dtype=np.float32)


def _close(got, expected, rtol=1e-5, atol=1e-5):
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


@pytest.mark.parametrize(("x", "w", "attrs"), [
    ((2, 4, 9, 11), (6, 2, 3, 3), {"group": 2, "pads": [1, 0, 2, 1], "strides": [2, 1]}),
    ((1, 8, 10, 10), (8, 1, 5, 5), {"group": 8, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 8, 9, 9), (16, 1, 4, 4), {"group": 8, "auto_pad": "SAME_LOWER", "strides": [2, 1]}),
    ((1, 8, 9, 9), (16, 1, 3, 3), {"group": 8, "dilations": [2, 2], "pads": [2, 1, 0, 2]}),
    ((1, 3, 7, 8), (5, 3, 1, 1), {"auto_pad": "VALID"}),
    ((2, 3, 17), (4, 3, 4), {"dilations": [3], "pads": [2, 1]}),
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), {"strides": [1, 2, 3], "pads": [1, 0, 1, 0, 1, 1]}),
])  # fmt: skip
def test_conv_matches_onnxruntime(x, w, attrs):
    inputs = {"x": _f32(*x), "w": _f32(*w), "b": _f32(w[0])}
    _close(*run_both("Conv", inputs, attrs))


@pytest.mark.parametrize(("x", "w", "attrs"), [
    ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": [2, 2], "output_shape": [9, 12]}),
    ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((2, 4, 3, 4), (4, 2, 3, 2), {"group": 2, "strides": [3, 2], "output_padding": [1, 1],
                                  "pads": [1, 0, 2, 1], "dilations": [2, 1]}),
    ((1, 2, 6), (2, 1, 4), {"strides": [2], "pads": [1, 1]}),
])  # fmt: skip
def test_conv_transpose_matches_onnxruntime(x, w, attrs):
    inputs = {"x": _f32(*x), "w": _f32(*w)}
    _close(*run_both("ConvTranspose", inputs, attrs))


def test_conv_accumulates_accurately():
    """2**24 plus 4095 ones: a float32 running sum stays at 2**24; the exact sum rounds to
    2**24 + 4096."""
    x = np.ones((1, 4096, 1, 1), np.float32)
    x[0, 0] = 2**24
    w = np.ones((1, 4096, 1, 1), np.float32)
    node = _node("Conv", [TensorType(F32, x.shape), TensorType(F32, w.shape)])
    (y,) = get_kernel("Conv")(node, [x, w])
    assert y.dtype == np.float32 and y.item() == 2**24 + 4096


@pytest.mark.parametrize(("a", "b", "c", "attrs"), [
    ((3, 5), (5, 4), None, {}),
    ((5, 3), (4, 5), (4,), {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}),
    ((3, 5), (5, 4), (3, 1), {"beta": -1.0}),
    ((3, 5), (5, 4), (), {}),
])  # fmt: skip
def test_gemm_matches_onnxruntime(a, b, c, attrs):
    inputs = {"a": _f32(*a), "b": _f32(*b)}
    if c is not None:
        inputs["c"] = _f32(*c)
    _close(*run_both("Gemm", inputs, attrs))


@pytest.mark.parametrize(("a", "b"), [((4,), (4,)), ((4,), (2, 4, 3)), ((2, 1, 3, 4), (5, 4, 2)),
                                      ((3, 4), (4,)), ((2, 3, 4), (2, 4, 5))])
def test_matmul_matches_onnxruntime(a, b):
    _close(*run_both("MatMul", {"a": _f32(*a), "b": _f32(*b)}))


def test_integer_matmul_and_gemm_wrap_exactly():
    a = RNG.integers(-2**31, 2**31, (3, 4), dtype=np.int64).astype(np.int32)
    b = RNG.integers(-2**31, 2**31, (4, 2), dtype=np.int64).astype(np.int32)
    exact = (a.astype(object) @ b.astype(object)) % 2**32
    wrapped = np.array([[int(v) - 2**32 if v >= 2**31 else int(v) for v in r] for r in exact])
    np.testing.assert_array_equal(run_lowbit(one_node_model("MatMul", {"a": a, "b": b}),
                                             {"a": a, "b": b})[0], wrapped)
    got, expected = run_both("MatMul", {"a": a % 100, "b": b % 100})
    np.testing.assert_array_equal(got, expected)
    c = RNG.integers(-50, 50, (2,), dtype=np.int32)
    inputs = {"a": a % 100, "b": b % 100, "c": c}
    got = run_lowbit(one_node_model("Gemm", inputs, {"alpha": 3.0, "beta": -2.0}), inputs)[0]
    np.testing.assert_array_equal(got, 3 * ((a % 100) @ (b % 100)) - 2 * c)


def test_normalizations_match_onnxruntime():
    x = _f32(2, 5, 4, 3, scale=3)
    bn = {"x": x, "s": _f32(5), "b": _f32(5), "m": _f32(5),
          "v": RNG.uniform(0.1, 2, 5).astype(np.float32)}
    _close(*run_both("BatchNormalization", bn, {"epsilon": 1e-3}))
    ln = {"x": x, "s": _f32(3), "b": _f32(4, 3)}
    _close(*run_both("LayerNormalization", ln, {"axis": -2}))
    model = one_node_model("LayerNormalization", ln, {"axis": 1}, n_outputs=3)
    from ort_compare import run_ort

    for got, expected in zip(run_lowbit(model, ln), run_ort(model, ln), strict=True):
        _close(got, expected)
    _close(*run_both("InstanceNormalization", {"x": x, "s": _f32(5), "b": _f32(5)}))


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_family_matches_onnxruntime(op, axis):
    x = _f32(3, 4, 5, scale=20)
    x[0, 0, :2] = x[0, 0, 2]  # ties for Hardmax
    _close(*run_both(op, {"x": x}, {"axis": axis}))


@pytest.mark.parametrize(("op", "attrs"), [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", {"kernel_shape": [2, 3], "dilations": [2, 1], "pads": [1, 1, 0, 1]}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                     "count_include_pad": 1, "ceil_mode": 1}),
    ("AveragePool", {"kernel_shape": [3, 2], "auto_pad": "SAME_LOWER", "strides": [2, 1]}),
    ("AveragePool", {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 0, 1, 0]}),
    ("LpPool", {"kernel_shape": [2, 2], "p": 3, "strides": [2, 2]}),
    ("GlobalAveragePool", None), ("GlobalMaxPool", None), ("GlobalLpPool", {"p": 1}),
])  # fmt: skip
def test_pools_match_onnxruntime(op, attrs):
    _close(*run_both(op, {"x": _f32(2, 3, 9, 8)}, attrs))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_integer_maxpool_is_exact(dtype):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max + 1, (1, 2, 7, 7), dtype=dtype)
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    got, expected = run_both("MaxPool", {"x": x}, attrs)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, expected)


REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize(("axes", "keepdims"), [(None, 1), ([0, 2], 0), ([-1], 1)])
def test_reductions_match_onnxruntime(op, axes, keepdims):
    x = np.abs(_f32(3, 4, 5)) + 0.5 if op == "ReduceLogSum" else _f32(3, 4, 5)
    inputs = {"x": x}
    if axes is not None:
        inputs["axes"] = np.array(axes, np.int64)
    _close(*run_both(op, inputs, {"keepdims": keepdims}), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                                "ReduceSumSquare", "ReduceL1"])
def test_integer_reductions_match_onnxruntime(op):
    x = RNG.integers(-20, 20, (3, 4, 5), dtype=np.int32)
    inputs = {"x": x, "axes": np.array([1], np.int64)}
    got, expected = run_both(op, inputs)
    np.testing.assert_array_equal(got, expected)


def test_integer_reductions_are_exact():
    x = np.array([[-7, 2, 2], [2**31 - 1, 2**31 - 1, 3]], np.int32)
    node = _node("ReduceMean", [TensorType(dtypes.INT32, x.shape)], {"keepdims": 0})
    (mean,) = get_kernel("ReduceMean")(node, [x, np.array([1], np.int64)])
    np.testing.assert_array_equal(mean, [-1, (2 * (2**31 - 1) + 3) // 3])
    node = _node("ReduceSum", [TensorType(dtypes.INT32, x.shape)], {"keepdims": 0})
    (total,) = get_kernel("ReduceSum")(node, [x, np.array([1], np.int64)])
    assert total[1] == 1  # 2**32 + 1 wraps around in int32
    i8 = np.array([[-128, 5], [-3, -128]], np.int8)
    node = _node("ReduceMax", [TensorType(dtypes.INT8, i8.shape)])
    (mx,) = get_kernel("ReduceMax")(node, [i8, None])
    assert mx.dtype == np.int8 and mx.item() == 5


def test_empty_set_reductions_give_identities():
    x = np.zeros((2, 0, 3), np.float32)
    axes = np.array([1], np.int64)
    expected = {"ReduceSum": 0.0, "ReduceProd": 1.0, "ReduceMax": -np.inf, "ReduceMin": np.inf,
                "ReduceLogSum": -np.inf, "ReduceLogSumExp": -np.inf, "ReduceL2": 0.0}
    for op, value in expected.items():
        node = _node(op, [TensorType(F32, x.shape)])
        (y,) = get_kernel(op)(node, [x, axes])
        assert y.shape == (2, 1, 3) and np.all(y == value), op


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reductions_match_onnxruntime(op, last):
    x = RNG.integers(-3, 3, (4, 5, 6)).astype(np.float32)  # many ties
    for axis, keepdims in ((0, 1), (-1, 0), (1, 1)):
        got, expected = run_both(op, {"x": x}, {"axis": axis, "keepdims": keepdims,
                                                "select_last_index": last})
        np.testing.assert_array_equal(got, expected)


def test_noop_with_empty_axes_is_identity():
    x = _f32(2, 3)
    inputs = {"x": x, "axes": np.array([], np.int64)}
    got = run_lowbit(one_node_model("ReduceSum", inputs, {"noop_with_empty_axes": 1}), inputs)
    np.testing.assert_array_equal(got[0], x)
    got = run_lowbit(one_node_model("ReduceSum", inputs), inputs)
    np.testing.assert_allclose(got[0], x.sum(keepdims=True), rtol=1e-6)


# -- whole import path: inferred shapes, kernel results and ONNX Runtime agree --------------------
@st.composite
def ort_conv_configs(draw):
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
    graph = canonicalize(import_model(one_node_model(op, inputs, attrs), "t"))
    out = graph.outputs[0]
    return out.type.shape, run(graph, inputs)[out.name]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ort_conv_configs())
def test_imported_conv_shape_and_values_match_onnxruntime(config):
    x, w, attrs = config
    shape, y = _inferred_and_actual("Conv", {"x": x, "w": w}, attrs)
    assert shape == y.shape
    got, ref = run_both("Conv", {"x": x, "w": w}, attrs)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 3), st.integers(1, 3), st.integers(0, 1), st.integers(3, 9),
       st.sampled_from(["MaxPool", "AveragePool"]), st.integers(0, 1))
def test_imported_pool_shape_and_values_match_onnxruntime(k, s, pad, size, op, ceil):
    x = RNG.normal(size=(1, 2, size, size + 2)).astype(np.float32)
    attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [pad] * 4, "ceil_mode": ceil}
    if pad >= k:
        attrs["pads"] = [0] * 4
    shape, y = _inferred_and_actual(op, {"x": x}, attrs)
    assert shape == y.shape
    got, ref = run_both(op, {"x": x}, attrs)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attrs", [{"kernel_shape": [0, 2]},
                                   {"kernel_shape": [2, 2], "strides": [0, 1]},
                                   {"kernel_shape": [2, 2], "pads": [-1, 0, 0, 0]}])
def test_bad_windows_are_refused_at_import(attrs):
    from onnx import TensorProto, helper

    node = helper.make_node("MaxPool", ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 1, 4, 4])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(ModelError, match="must"):
        canonicalize(import_model(model, "t"))

"""Tensor and shape ops: shape inference agrees with the kernels (hypothesis), symbolic dims
survive shape sub-graphs, quantization parameters follow moved data, integer kernels are exact,
and the constant folder folds transformer-style shape chains."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from ort_compare import run_both

from lowbit.backends.reference.interpreter import Interpreter
from lowbit.errors import KernelError, ModelError, UnsupportedError
from lowbit.ir import dtypes
from lowbit.ir.graph import Graph, Node, Value
from lowbit.ir.types import QuantParams, TensorType
from lowbit.ops import get, infer_node
from lowbit.ops.registry import REQUIRED
from lowbit.ops.symbolic import dim_div, dim_mul, dim_product
from lowbit.passes import fold_constants

F32 = dtypes.FLOAT32
I64 = dtypes.INT64


class C:
    """A constant input (anything else given as an array is a graph input)."""

    def __init__(self, values, dtype=np.int64) -> None:
        self.array = np.asarray(values, dtype=dtype)


def build(op: str, inputs: list, attrs: dict | None = None, n_outputs: int = 1
          ) -> tuple[Graph, Node, dict[str, np.ndarray]]:
    """A one-node graph: arrays become graph inputs, C(...) constants, TensorTypes typed inputs
    without data; attribute defaults are filled as import does, outputs typed by inference."""
    g = Graph("t")
    values: list[Value | None] = []
    feeds: dict[str, np.ndarray] = {}
    for i, x in enumerate(inputs):
        if x is None:
            values.append(None)
        elif isinstance(x, C):
            values.append(g.add_constant(x.array, f"c{i}"))
        elif isinstance(x, TensorType):
            values.append(g.add_input(f"x{i}", x))
        else:
            v = g.add_input(f"x{i}", TensorType(dtypes.from_numpy(x.dtype), x.shape))
            feeds[v.name] = x
            values.append(v)
    attrs = dict(attrs or {})
    for name, spec in get(op).all_attrs().items():
        if spec.default is not None and spec.default is not REQUIRED:
            attrs.setdefault(name, spec.default)
    node = g.make_node(op, values, attrs, num_outputs=n_outputs)
    for v, t in zip(node.outputs, infer_node(node), strict=True):
        v.type = t
    g.outputs = list(node.outputs)
    return g, node, feeds


def run(op: str, inputs: list, attrs: dict | None = None, n_outputs: int = 1
        ) -> tuple[list[TensorType], list[np.ndarray]]:
    """(inferred output types, kernel outputs); the interpreter itself refuses results whose
    dtype or static dims differ from the inferred types."""
    g, node, feeds = build(op, inputs, attrs, n_outputs)
    out = Interpreter(g)(feeds)
    return [v.type for v in node.outputs], [out[v.name] for v in node.outputs]


def infer(op: str, inputs: list, attrs: dict | None = None, n_outputs: int = 1):
    return build(op, inputs, attrs, n_outputs)[1].outputs[0].type


def assert_same_shape(t: TensorType, array: np.ndarray) -> None:
    assert t.shape == array.shape, f"inferred {t.shape}, kernel gave {array.shape}"


shapes = st.lists(st.integers(1, 4), min_size=0, max_size=4).map(tuple)


def data(shape, dtype=np.float32) -> np.ndarray:
    return np.arange(math.prod(shape), dtype=np.int64).reshape(shape).astype(dtype)


# -- shape inference == kernel (hypothesis) -------------------------------------------------------
@st.composite
def reshape_cases(draw):
    shape = draw(shapes)
    total = math.prod(shape)
    rank = draw(st.integers(0 if total == 1 else 1, 4))
    factors = [p for p in range(2, total + 1) for _ in range(_multiplicity(total, p))]
    target = [1] * rank
    for f in factors:
        target[draw(st.integers(0, rank - 1))] *= f
    if rank and draw(st.booleans()):
        target[draw(st.integers(0, rank - 1))] = -1
    for i, d in enumerate(target):
        if i < len(shape) and d == shape[i] and draw(st.booleans()):
            target[i] = 0
    return shape, target


def _multiplicity(n: int, p: int) -> int:
    if any(p % q == 0 for q in range(2, p)):
        return 0
    k = 0
    while n % p == 0:
        n //= p
        k += 1
    return k


@given(reshape_cases())
def test_reshape_inference_matches_kernel(case):
    shape, target = case
    (t,), (y,) = run("Reshape", [data(shape), C(target)])
    assert_same_shape(t, y)
    assert y.size == math.prod(shape)
    np.testing.assert_array_equal(y.reshape(-1), data(shape).reshape(-1))


@given(st.data())
def test_transpose_inference_matches_kernel(draw):
    shape = draw.draw(shapes)
    perm = draw.draw(st.permutations(range(len(shape))))
    (t,), (y,) = run("Transpose", [data(shape)], {"perm": list(perm)})
    assert_same_shape(t, y)
    np.testing.assert_array_equal(y, np.transpose(data(shape), perm))


bounds = st.one_of(st.integers(-7, 7), st.sampled_from([2**63 - 1, -(2**63), 2**31 - 1]))


@st.composite
def slice_cases(draw):
    shape = draw(st.lists(st.integers(0, 5), min_size=1, max_size=3).map(tuple))
    axes = draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1,
                         max_size=len(shape), unique_by=lambda a: a % len(shape)))
    starts = [draw(bounds) for _ in axes]
    ends = [draw(bounds) for _ in axes]
    steps = [draw(st.integers(-3, 3).filter(bool)) for _ in axes]
    return shape, starts, ends, axes, steps


@given(slice_cases())
def test_slice_inference_matches_kernel_and_the_onnx_definition(case):
    shape, starts, ends, axes, steps = case
    x = data(shape)
    (t,), (y,) = run("Slice", [x, C(starts), C(ends), C(axes), C(steps)])
    assert_same_shape(t, y)
    expected = x
    for a, s, e, step in zip(axes, starts, ends, steps, strict=True):
        expected = np.take(expected, _onnx_slice_indices(s, e, step, shape[a]), axis=a)
    np.testing.assert_array_equal(y, expected)


def _onnx_slice_indices(start: int, end: int, step: int, dim: int) -> list[int]:
    """The ONNX spec's loop, written out independently of the kernel."""
    if dim == 0:
        return []
    start, end = (start + dim if start < 0 else start), (end + dim if end < 0 else end)
    if step > 0:
        i, stop = max(0, min(start, dim)), max(0, min(end, dim))
        return list(range(i, stop, step))
    i, stop = max(0, min(start, dim - 1)), max(-1, min(end, dim - 1))
    out = []
    while i > stop:
        out.append(i)
        i += step
    return out


@settings(max_examples=25, deadline=None)
@given(slice_cases())
def test_slice_agrees_with_onnx_runtime(case):
    """(ONNX Runtime reads an INT_MAX end with a negative step as "to the start"; the spec, the
    ONNX reference and lowbit clamp it to dim - 1, so those cases are left out.)"""
    shape, starts, ends, axes, steps = case
    assume(not any(t < 0 and e >= 2**31 - 1 for e, t in zip(ends, steps, strict=True)))
    ours, theirs = run_both("Slice", {"x": data(shape), "s": np.array(starts),
                                      "e": np.array(ends), "a": np.array(axes),
                                      "t": np.array(steps)})
    np.testing.assert_array_equal(ours, theirs)


@given(st.data())
def test_concat_inference_matches_kernel(draw):
    base = draw.draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))
    axis = draw.draw(st.integers(-len(base), len(base) - 1))
    parts = []
    for _ in range(draw.draw(st.integers(1, 4))):
        shape = list(base)
        shape[axis] = draw.draw(st.integers(0, 3))
        parts.append(data(tuple(shape)))
    (t,), (y,) = run("Concat", parts, {"axis": axis})
    assert_same_shape(t, y)
    np.testing.assert_array_equal(y, np.concatenate(parts, axis=axis))


@given(st.data())
def test_gather_inference_matches_kernel(draw):
    shape = draw.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple))
    axis = draw.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[axis]
    index_shape = draw.draw(st.lists(st.integers(0, 3), max_size=2).map(tuple))
    indices = np.array(draw.draw(st.lists(st.integers(-n, n - 1), min_size=math.prod(
        index_shape), max_size=math.prod(index_shape))), dtype=np.int64).reshape(index_shape)
    (t,), (y,) = run("Gather", [data(shape), C(indices)], {"axis": axis})
    assert_same_shape(t, y)
    np.testing.assert_array_equal(y, np.take(data(shape), indices % n, axis=axis))


@st.composite
def pad_cases(draw):
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple))
    mode = draw(st.sampled_from(["constant", "reflect", "edge", "wrap"]))
    axes = draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
    begins, ends = [], []
    for a in axes:
        b = draw(st.integers(-1, 3))
        e = draw(st.integers(-1, 3))
        kept = shape[a] - max(-b, 0) - max(-e, 0)
        assume(kept >= (1 if mode != "constant" else 0))
        if mode == "reflect":
            assume(max(b, e) < kept)
        begins.append(b)
        ends.append(e)
    return shape, mode, axes, begins + ends


@given(pad_cases())
def test_pad_inference_matches_kernel(case):
    shape, mode, axes, pads = case
    x = data(shape)
    (t,), (y,) = run("Pad", [x, C(pads), None, C(axes)], {"mode": mode})
    assert_same_shape(t, y)
    if min(pads) >= 0:
        widths = [(0, 0)] * len(shape)
        for i, a in enumerate(axes):
            widths[a] = (pads[i], pads[len(axes) + i])
        np.testing.assert_array_equal(y, np.pad(x, widths, mode=mode))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes_agree_with_onnx_runtime(mode):
    x = data((3, 4))
    pads = np.array([1, 2, 2, -1], np.int64)
    ours, theirs = run_both("Pad", {"x": x, "p": pads, "v": np.array(7, np.float32)},
                            {"mode": mode})
    np.testing.assert_array_equal(ours, theirs)


# -- symbolic dims --------------------------------------------------------------------------------
def _evaluate(dim, binding: dict[str, int]) -> int | None:
    if dim is None or isinstance(dim, int):
        return dim
    value = 1
    for part in dim.split("*"):
        value *= int(part) if part.isdigit() else binding[part]
    return value


@given(reshape_cases(), st.data())
def test_symbolic_reshape_never_contradicts_the_static_result(case, draw):
    """With some input dims replaced by symbols, each inferred dim is unknown or evaluates (with
    the symbols bound to their sizes) to the static answer."""
    shape, target = case
    symbolic = tuple(f"s{i}" if draw.draw(st.booleans()) else d for i, d in enumerate(shape))
    binding = {f"s{i}": d for i, d in enumerate(shape)}
    static = infer("Reshape", [TensorType(F32, shape), C(target)]).shape
    out = infer("Reshape", [TensorType(F32, symbolic), C(target)]).shape
    assert len(out) == len(static)
    for o, s in zip(out, static, strict=True):
        assert o is None or _evaluate(o, binding) == s


def test_reshape_of_symbolic_input_with_zero_and_minus_one():
    x = TensorType(F32, ("batch", "seq", 384))
    assert infer("Reshape", [x, C([0, 0, 12, 32])]).shape == ("batch", "seq", 12, 32)
    assert infer("Reshape", [x, C([0, -1, 32])]).shape == ("batch", "12*seq", 32)
    assert infer("Reshape", [x, C([-1, 384])]).shape == ("batch*seq", 384)
    merged = TensorType(F32, ("batch*seq", 384))
    assert infer("Reshape", [merged, C([-1, 12, 32])]).shape == ("batch*seq", 12, 32)
    assert infer("Reshape", [x, C([-1])]).shape == ("384*batch*seq",)
    # -1 is exact whenever the shape is valid at all
    assert infer("Reshape", [x, C([2, -1, 32])]).shape == (2, "6*batch*seq", 32)
    assert infer("Reshape", [x, C([5, -1])]).shape == (5, None)


def test_reshape_with_allowzero_keeps_zero_sizes():
    (t,), (y,) = run("Reshape", [np.zeros((0, 3), np.float32), C([3, 0])], {"allowzero": 1})
    assert t.shape == y.shape == (3, 0)
    with pytest.raises(ModelError, match="cannot have both 0 and -1"):
        infer("Reshape", [TensorType(F32, (0, 3)), C([0, -1])], {"allowzero": 1})


def test_bad_reshapes_are_refused():
    x = TensorType(F32, (2, 3))
    with pytest.raises(ModelError, match="6 elements"):
        infer("Reshape", [x, C([4, 2])])
    with pytest.raises(ModelError, match="more than one -1"):
        infer("Reshape", [x, C([-1, -1])])
    with pytest.raises(ModelError, match="do not divide"):
        infer("Reshape", [x, C([4, -1])])


def shape_chain(x: TensorType) -> tuple[Graph, Node]:
    """Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), Unsqueeze(Gather(Shape(x), 1)), [12],
    [32])), as transformer exports build head splits."""
    g = Graph("chain")
    v = g.add_input("x", x)

    def node(op, inputs, **attrs):
        n = g.make_node(op, inputs, attrs)
        n.output.type = infer_node(n)[0]
        return n.output

    shape = node("Shape", [v], start=0)
    dims = [node("Unsqueeze", [node("Gather", [shape, g.add_constant(np.array(i))], axis=0),
                               g.add_constant(np.array([0]))]) for i in (0, 1)]
    target = node("Concat", [*dims, g.add_constant(np.array([12])),
                             g.add_constant(np.array([32]))], axis=0)
    out = node("Reshape", [v, target], allowzero=0)
    g.outputs = [out]
    return g, out.producer


def test_shape_chain_of_symbolic_input_gives_symbolic_reshape():
    g, reshape = shape_chain(TensorType(F32, ("batch", "seq", 384)))
    assert reshape.output.type.shape == ("batch", "seq", 12, 32)
    folded = fold_constants(g)
    # The dims are symbolic: the chain stays, but its result is still typed symbolically.
    assert any(n.op_type == "Shape" for n in folded.nodes)
    assert folded.outputs[0].type.shape == ("batch", "seq", 12, 32)
    x = np.random.default_rng(0).standard_normal((2, 5, 384)).astype(np.float32)
    y = Interpreter(folded)({"x": x})[folded.outputs[0].name]
    np.testing.assert_array_equal(y, x.reshape(2, 5, 12, 32))


def test_shape_chain_over_static_dims_folds_away():
    g, _ = shape_chain(TensorType(F32, ("batch", 7, 384)))
    folded = fold_constants(g)
    ops = [n.op_type for n in folded.nodes]
    # Gather(Shape(x), 1) = 7 became a constant; batch is still read from the input.
    assert ops.count("Gather") == 1 and "Shape" in ops
    assert folded.outputs[0].type.shape == ("batch", 7, 12, 32)
    g, _ = shape_chain(TensorType(F32, (2, 7, 384)))
    assert [n.op_type for n in fold_constants(g).nodes] == ["Constant", "Reshape"]


def test_shape_of_partially_symbolic_input():
    x = TensorType(F32, ("batch", None, 4, 5))
    assert infer("Shape", [x]).shape == (4,)
    assert infer("Shape", [x], {"start": 1, "end": -1}).shape == (2,)
    assert infer("Shape", [x], {"start": -10, "end": 10}).shape == (4,)
    assert infer("Shape", [x], {"start": 3, "end": 1}).shape == (0,)
    assert infer("Size", [x]).shape == ()


def test_symbolic_values_feed_generators():
    g = Graph("gen")
    x = g.add_input("x", TensorType(F32, ("batch", "seq")))
    shape = g.make_node("Shape", [x], {"start": 0})
    seq = g.make_node("Gather", [shape.output, g.add_constant(np.array(1))], {"axis": 0})
    rng = g.make_node("Range", [g.add_constant(np.array(0)), seq.output,
                                g.add_constant(np.array(1))])
    fill = g.make_node("ConstantOfShape", [shape.output], {"value": np.array([1], np.int32)})
    grown = g.make_node("Expand", [g.add_constant(np.zeros((1, 1, 1), np.float32)),
                                   shape.output])
    for n in (shape, seq, rng, fill, grown):
        n.output.type = infer_node(n)[0]
    assert rng.output.type.shape == ("seq",)
    assert fill.output.type == TensorType(dtypes.INT32, ("batch", "seq"))
    assert grown.output.type.shape == (1, "batch", "seq")


def test_concat_of_symbolic_dims():
    a = TensorType(F32, ("batch", "n", 3))
    b = TensorType(F32, ("batch", 0, 3))
    c = TensorType(F32, (None, 4, 3))
    assert infer("Concat", [a, b], {"axis": 1}).shape == ("batch", "n", 3)
    assert infer("Concat", [a, c], {"axis": 1}).shape == ("batch", None, 3)
    assert infer("Concat", [TensorType(F32, (2, 3)), TensorType(F32, (5, 3))],
                 {"axis": 0}).shape == (7, 3)
    with pytest.raises(ModelError, match="differ outside axis 1"):
        infer("Concat", [TensorType(F32, (2, 3)), TensorType(F32, (5, 3))], {"axis": 1})


def test_flatten_split_slice_tile_keep_symbols():
    x = TensorType(F32, ("batch", "seq", 4))
    assert infer("Flatten", [x], {"axis": 2}).shape == ("batch*seq", 4)
    assert infer("Flatten", [x], {"axis": 0}).shape == (1, "4*batch*seq")
    assert infer("Slice", [x, C([0]), C([2**63 - 1]), C([1])]).shape == ("batch", "seq", 4)
    assert infer("Slice", [x, C([1]), C([2**63 - 1]), C([1])]).shape == ("batch", None, 4)
    assert infer("Tile", [x, C([2, 1, 3])]).shape == ("2*batch", "seq", 12)
    parts = build("Split", [TensorType(F32, ("2*n", 6))], {"num_outputs": 2}, n_outputs=2)[1]
    assert [v.type.shape for v in parts.outputs] == [("n", 6), ("n", 6)]


def test_a_table_sliced_to_a_symbolic_length_broadcasts_with_it():
    """A position table [1, 512, 384] sliced along axis 1 to the sequence length (the end is
    Shape(ids)[1], as PyTorch's TorchScript export of BERT writes it) has min(512, seq) rows,
    and adding it to [batch, seq, 384] gives [batch, seq, 384]."""
    g = Graph("positions")
    ids = g.add_input("ids", TensorType(I64, ("batch", "seq")))
    x = g.add_input("x", TensorType(F32, ("batch", "seq", 384)))
    table = g.add_constant(np.zeros((1, 512, 384), np.float32), "table")

    def node(op, inputs, **attrs):
        n = g.make_node(op, inputs, attrs)
        n.output.type = infer_node(n)[0]
        return n.output

    shape = node("Shape", [ids], start=0)
    length = node("Gather", [shape, g.add_constant(np.array(1), "one")], axis=0)
    end = node("Unsqueeze", [length, g.add_constant(np.array([0]), "zero_axis")])
    rows = node("Slice", [table, g.add_constant(np.array([0]), "start"), end,
                          g.add_constant(np.array([1]), "axis")])
    assert rows.type.shape == (1, "Min(512, seq)", 384)
    assert node("Add", [x, rows]).type.shape == ("batch", "seq", 384)
    assert node("Add", [rows, x]).type.shape == ("batch", "seq", 384)
    assert node("Add", [rows, rows]).type.shape == (1, "Min(512, seq)", 384)
    # any other start keeps the length unknown
    shifted = node("Slice", [table, g.add_constant(np.array([1]), "start1"), end,
                             g.add_constant(np.array([1]), "axis1")])
    assert shifted.type.shape == (1, None, 384)


def test_data_dependent_shapes_are_unknown():
    x = TensorType(F32, (3, 4))
    assert infer("NonZero", [x]).shape == (2, None)
    assert infer("Range", [TensorType(F32, ()), TensorType(F32, ()), TensorType(F32, ())]
                 ).shape == (None,)
    assert infer("ConstantOfShape", [TensorType(I64, (3,))]).shape == (None, None, None)
    assert infer("ConstantOfShape", [TensorType(I64, (None,))]).shape is None
    assert infer("Reshape", [x, TensorType(I64, (2,))]).shape == (None, None)
    assert infer("TopK", [x, TensorType(I64, (1,))], n_outputs=2).shape == (3, None)


def test_monomial_arithmetic():
    assert dim_product(["b", 3, "s", 4]) == "12*b*s"
    assert dim_div("12*b*s", "s") == "12*b"
    assert dim_div("b", 2) is None and dim_div(7, 2) is None
    assert dim_mul("b", 0) == 0 and dim_mul(None, 3) is None


# -- quantization parameters follow the data ------------------------------------------------------
def per_axis(n: int, axis: int) -> QuantParams:
    return QuantParams(np.linspace(0.1, 0.2, n), np.arange(n) % 3, axis)


def q8(shape, q) -> TensorType:
    return TensorType(dtypes.INT8, shape, q)


def test_per_tensor_parameters_pass_through_shape_ops():
    q = QuantParams(0.05, -3)
    x = q8((2, 3, 4), q)
    for op, inputs, attrs in [
        ("Reshape", [x, C([6, 4])], {}),
        ("Transpose", [x], {}),
        ("Slice", [x, C([1]), C([3]), C([2])], {}),
        ("Gather", [x, C([0, 2])], {"axis": 1}),
        ("Expand", [x, C([3, 2, 1, 1])], {}),
        ("Tile", [x, C([1, 2, 1])], {}),
        ("Flatten", [x], {}),
        ("Unsqueeze", [x, C([0])], {}),
    ]:
        assert infer(op, inputs, attrs).quant == q, op


def test_per_axis_parameters_follow_their_axis():
    q = per_axis(3, 1)
    x = q8((2, 3, 4), q)
    assert infer("Transpose", [x], {"perm": [2, 0, 1]}).quant.axis == 2
    assert infer("Unsqueeze", [x, C([0, -1])]).quant.axis == 2
    assert infer("Reshape", [x, C([2, 3, 2, 2])]).quant.axis == 1
    assert infer("Reshape", [x, C([1, 2, 3, 4])]).quant.axis == 2
    assert infer("Gather", [x, C([[0, 1]])], {"axis": 2}).quant.axis == 1
    assert infer("Gather", [x, C([[0, 1]])], {"axis": 0}).quant.axis == 2
    sliced = infer("Slice", [x, C([2]), C([0]), C([1]), C([-1])]).quant
    np.testing.assert_array_equal(sliced.scale, q.scale[2:0:-1])
    picked = infer("Gather", [x, C([2, 0])], {"axis": 1}).quant
    np.testing.assert_array_equal(picked.zero_point, q.zero_point[[2, 0]])
    first, rest = build("Split", [x, C([1, 2])], {"axis": 1}, n_outputs=2)[1].outputs
    np.testing.assert_array_equal(rest.type.quant.scale, q.scale[1:])
    assert first.type.quant.channels == 1
    tiled = infer("Tile", [x, C([1, 2, 1])]).quant
    assert tiled.channels == 6


def test_squeezing_the_channel_axis_leaves_per_tensor_parameters():
    q = QuantParams([0.5], [4], 0)
    out = infer("Squeeze", [q8((1, 3), q), C([0])]).quant
    assert out.per_tensor and float(out.scale) == 0.5 and int(out.zero_point) == 4


@pytest.mark.parametrize(("op", "inputs", "attrs"), [
    ("Reshape", [C([6, 4])], {}),
    ("Flatten", [], {"axis": 2}),
    ("Gather", [TensorType(I64, (2,))], {"axis": 1}),
    ("DepthToSpace", [], {"blocksize": 1}),
])  # fmt: skip
def test_per_axis_parameters_that_cannot_follow_are_refused(op, inputs, attrs):
    x = q8((2, 3, 4) if op != "DepthToSpace" else (2, 3, 4, 4), per_axis(3, 1))
    with pytest.raises(UnsupportedError, match="per channel along axis 1"):
        infer(op, [x, *inputs], attrs)


INT_DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
              np.uint64, ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2]


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_shape_only_kernels_are_exact_for_integer_dtypes(dtype):
    kind = dtypes.from_numpy(np.dtype(dtype))
    span = kind.qmax - kind.qmin + 1
    values = [kind.qmin + (i * 7919 + i * i * 104729) % span for i in range(23)] + [kind.qmax]
    x = np.array(values, dtype=dtype).reshape(2, 3, 4)
    wide = np.array(values, dtype=object).reshape(2, 3, 4)
    cases = [
        ("Reshape", [x, C([4, 6])], {}, wide.reshape(4, 6)),
        ("Transpose", [x], {"perm": [2, 0, 1]}, wide.transpose(2, 0, 1)),
        ("Slice", [x, C([-1]), C([-(2**63)]), C([2]), C([-2])], {}, wide[:, :, ::-2]),
        ("Gather", [x, C([2, -3])], {"axis": 1}, wide[:, [2, 0]]),
        ("Concat", [x, x], {"axis": 0}, np.concatenate([wide, wide])),
        ("Expand", [x[:, :1], C([2, 3, 4])], {}, np.broadcast_to(wide[:, :1], (2, 3, 4))),
        ("Tile", [x, C([1, 1, 2])], {}, np.tile(wide, (1, 1, 2))),
        ("Pad", [x, C([0, 0, 1, 0, 0, 1]), C(values[-1], dtype)], {},
         np.pad(wide, [(0, 0), (0, 0), (1, 1)], constant_values=values[-1])),
        ("Pad", [x, C([0, 1, 0, 0, 1, 0])], {"mode": "reflect"},
         np.pad(wide, [(0, 0), (1, 1), (0, 0)], mode="reflect")),
        ("DepthToSpace", [x.reshape(1, 4, 3, 2)], {"blocksize": 2},
         wide.reshape(1, 2, 2, 1, 3, 2).transpose(0, 3, 4, 1, 5, 2).reshape(1, 1, 6, 4)),
    ]
    for op, inputs, attrs, expected in cases:
        _, (y,) = run(op, inputs, attrs)
        assert y.dtype == x.dtype, op
        got = np.array([int(v) for v in y.reshape(-1)], dtype=object).reshape(y.shape)
        np.testing.assert_array_equal(got, expected, err_msg=op)


# -- other ops ------------------------------------------------------------------------------------
def test_out_of_range_indices_are_refused_when_running():
    with pytest.raises(KernelError, match="index 3 out of range"):
        run("Gather", [data((3,)), C([3])])


def test_topk_prefers_lower_index_on_ties_and_handles_extreme_integers():
    x = np.array([[-128, 127, 5, 127, -128]], np.int8)
    (_, _), (values, indices) = run("TopK", [x, C([3])], n_outputs=2)
    np.testing.assert_array_equal(values, [[127, 127, 5]])
    np.testing.assert_array_equal(indices, [[1, 3, 2]])
    _, (values, indices) = run("TopK", [x, C([2])], {"largest": 0}, n_outputs=2)
    np.testing.assert_array_equal(indices, [[0, 4]])


def test_cumsum_wraps_integers_and_runs_backwards():
    x = np.array([2**31 - 1, 1, -5], np.int32)
    _, (y,) = run("CumSum", [x, C(0)])
    np.testing.assert_array_equal(y, [2**31 - 1, -(2**31), 2**31 - 5])
    _, (y,) = run("CumSum", [x, C(0)], {"reverse": 1, "exclusive": 1})
    np.testing.assert_array_equal(y, [-4, -5, 0])


@pytest.mark.parametrize(("mode", "nearest_mode", "coordinates"), [
    ("nearest", "round_prefer_floor", "half_pixel"),
    ("nearest", "floor", "asymmetric"),
    ("nearest", "round_prefer_ceil", "align_corners"),
    ("linear", "round_prefer_floor", "half_pixel"),
    ("linear", "round_prefer_floor", "pytorch_half_pixel"),
    ("linear", "round_prefer_floor", "align_corners"),
    ("cubic", "round_prefer_floor", "half_pixel"),
])  # fmt: skip
def test_resize_agrees_with_onnx_runtime(mode, nearest_mode, coordinates):
    x = np.random.default_rng(1).standard_normal((1, 2, 5, 7)).astype(np.float32)
    sizes = np.array([1, 2, 8, 4], np.int64)
    ours, theirs = run_both("Resize", {"x": x, "roi": np.zeros(0, np.float32), "": x,
                                       "s": sizes},
                            {"mode": mode, "nearest_mode": nearest_mode,
                             "coordinate_transformation_mode": coordinates})
    assert ours.shape == theirs.shape == (1, 2, 8, 4)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_resize_nearest_keeps_integers_exact_and_parameters():
    q = QuantParams(0.1, 3)
    x = TensorType(dtypes.INT8, (1, 1, 2, 2), q)
    t = infer("Resize", [x, None, C([1, 1, 2, 3], np.float32)])
    assert t.shape == (1, 1, 4, 6) and t.quant == q
    assert infer("Resize", [x, None, C([1, 1, 2, 3], np.float32)], {"mode": "linear"}
                 ).quant is None
    values = np.array([[[[-128, 127], [0, 5]]]], np.int8)
    _, (y,) = run("Resize", [values, None, C([1, 1, 2, 2], np.float32)])
    np.testing.assert_array_equal(y, values.repeat(2, axis=2).repeat(2, axis=3))


def test_resize_refuses_bad_attributes():
    x = TensorType(F32, (1, 1, 2, 2))
    with pytest.raises(ModelError, match="nearest_mode must be one of"):
        infer("Resize", [x, None, C([1, 1, 2, 2], np.float32)], {"nearest_mode": "up"})
    with pytest.raises(ModelError, match="exactly one of scales and sizes"):
        infer("Resize", [x, None, C([1, 1, 2, 2], np.float32), C([1, 1, 4, 4])])


def test_shape_ops_run_on_integers_in_a_quantized_graph():
    """Conv -> Pad -> Slice -> Transpose -> Concat -> Reshape -> Gather -> Split quantize
    end to end: every node computes in int8 and the result tracks the float model."""
    from onnx import TensorProto, helper, numpy_helper

    import lowbit
    from lowbit.frontends.onnx_import import import_model
    from lowbit.passes import optimize
    from lowbit.quant.static import quantize

    rng = np.random.default_rng(3)

    def init(name, array):
        return numpy_helper.from_array(np.asarray(array), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Pad", ["c1", "pads"], ["p"], mode="edge"),
        helper.make_node("Slice", ["p", "starts", "ends", "axes", "steps"], ["s"]),
        helper.make_node("Transpose", ["s"], ["t"], perm=[0, 1, 3, 2]),
        helper.make_node("Concat", ["t", "c2"], ["cat"], axis=1),
        helper.make_node("Reshape", ["cat", "shape"], ["r"]),
        helper.make_node("Gather", ["r", "idx"], ["g"], axis=1),
        helper.make_node("Split", ["g"], ["y0", "y1"], axis=2, num_outputs=2),
    ]
    inits = [
        init("w1", rng.normal(size=(4, 3, 3, 3)).astype(np.float32) * 0.3),
        init("w2", rng.normal(size=(4, 3, 3, 3)).astype(np.float32) * 0.3),
        init("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1])),
        init("starts", np.array([-3, 1])), init("ends", np.array([-(2**63), 9])),
        init("axes", np.array([2, 3])), init("steps", np.array([-1, 1])),
        init("shape", np.array([0, 8, -1])), init("idx", np.array([7, 0, 3])),
    ]
    graph = helper.make_graph(
        nodes, "shapes", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, None) for y in ("y0", "y1")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    g = optimize(import_model(model, "shapes"))
    batches = [{"x": rng.normal(size=(2, 3, 8, 8)).astype(np.float32)} for _ in range(4)]
    result = quantize(g, lowbit.profile(g, batches, progress=False), assert_all_quantized=True)
    modes = {r.op_type: r.mode for r in result.summary.rows}
    assert set(modes.values()) == {"int8"}
    assert {"Pad", "Slice", "Transpose", "Concat", "Reshape", "Gather", "Split"} <= set(modes)
    x = batches[0]
    for name in ("y0", "y1"):
        ref, got = lowbit.run(g, x)[name], lowbit.run(result.graph, x)[name]
        assert ref.shape == got.shape
        cos = float(ref.ravel() @ got.ravel() / np.linalg.norm(ref) / np.linalg.norm(got))
        assert cos > 0.99, name

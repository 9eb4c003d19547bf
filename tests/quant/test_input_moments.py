"""Input moments: the input vectors are exactly what each weight row multiplies (W rows @ vectors
is the Conv/Gemm/MatMul output), pieces of any size give the same moments, and the profile
keeps, merges, saves and loads them; without them weights round to nearest, and say so."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import lowbit
from lowbit.ir.graph import Node
from lowbit.quant import input_moments
from lowbit.quant.input_moments import InputMoments, input_vectors, moments_problem
from lowbit.quant.profile import Profile
from lowbit.quant.static import quantize
from lowbit.quant.weight_rounding import weight_rows

RNG = np.random.default_rng(11)


def _single(path, op, attrs, x_shape, w):
    nodes = [helper.make_node(op, ["x", "w"], ["y"], name="p", **attrs)]
    g = helper.make_graph(nodes, "one", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, list(x_shape))], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return lowbit.load(path)


CONVS = {
    "strided, padded": ({"strides": [2, 2], "pads": [1, 0, 2, 1]}, (2, 4, 9, 8), (6, 4, 3, 3)),
    "dilated": ({"dilations": [2, 1], "pads": [2, 1, 2, 1]}, (2, 3, 8, 8), (4, 3, 3, 3)),
    "grouped": ({"group": 2, "pads": [1, 1, 1, 1]}, (1, 4, 7, 7), (6, 2, 3, 3)),
    "depthwise": ({"group": 3, "strides": [2, 2]}, (2, 3, 9, 9), (3, 1, 3, 3)),
    "same_upper": ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, (1, 2, 7, 6), (3, 2, 2, 3)),
    "1-d": ({"pads": [1, 1], "strides": [2]}, (2, 3, 11), (5, 3, 3)),
}


@pytest.mark.parametrize("case", list(CONVS))
def test_conv_input_vectors_reproduce_the_convolution(case, tmp_path, monkeypatch):
    attrs, x_shape, w_shape = CONVS[case]
    w = RNG.normal(size=w_shape).astype(np.float32)
    graph = _single(tmp_path / "c.onnx", "Conv", attrs, x_shape, w)
    node = next(n for n in graph.nodes if n.op_type == "Conv")
    x = RNG.normal(size=x_shape).astype(np.float32)
    y = lowbit.run(graph, {"x": x})["y"].astype(np.float64)
    groups = attrs.get("group", 1)
    rows = weight_rows(node, w.astype(np.float64)).reshape(groups, w_shape[0] // groups, -1)
    monkeypatch.setattr(input_moments, "CHUNK", 40)  # many pieces
    pieces = list(input_vectors(node, x))
    assert len(pieces) > x_shape[0]
    vectors = np.concatenate(pieces, axis=2)  # [G, K, N * positions], batch-major
    out = np.einsum("gok,gkp->gop", rows, vectors).reshape(w_shape[0], x_shape[0], -1)
    assert np.allclose(out.transpose(1, 0, 2).reshape(y.shape), y, atol=1e-5)


@pytest.mark.parametrize(("op", "attrs", "x_shape", "w_shape"), [
    ("Gemm", {"transB": 1}, (5, 6), (4, 6)),
    ("Gemm", {}, (5, 6), (6, 4)),
    ("MatMul", {}, (2, 3, 6), (6, 4)),
])
def test_gemm_and_matmul_input_vectors_reproduce_the_product(op, attrs, x_shape, w_shape,
                                                             tmp_path):
    w = RNG.normal(size=w_shape).astype(np.float32)
    graph = _single(tmp_path / "g.onnx", op, attrs, x_shape, w)
    node = next(n for n in graph.nodes if n.op_type == op)
    x = RNG.normal(size=x_shape).astype(np.float32)
    y = lowbit.run(graph, {"x": x})["y"].astype(np.float64)
    vectors = np.concatenate(list(input_vectors(node, x)), axis=2)[0]
    assert np.allclose((weight_rows(node, w.astype(np.float64)) @ vectors).T.reshape(y.shape), y,
                       atol=1e-5)


def test_gemm_with_transposed_input_reads_its_columns():
    w = Node("Gemm", [], [], {"transA": 1}, "g")
    x = RNG.normal(size=(6, 5))
    assert np.array_equal(np.concatenate(list(input_vectors(w, x)), axis=2)[0], x)


def _two_convs(path):
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"], name="conv", pads=[1] * 4),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="dw", group=4)]
    inits = [numpy_helper.from_array(RNG.normal(size=(4, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(np.zeros(4, np.float32), "b1"),
             numpy_helper.from_array(RNG.normal(size=(4, 1, 3, 3)).astype(np.float32), "w2")]
    g = helper.make_graph(nodes, "two", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["N", 3, 10, 10])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return lowbit.load(path)


def test_profile_keeps_merges_saves_and_loads_input_moments(tmp_path):
    graph = _two_convs(tmp_path / "m.onnx")
    batches = [{"x": RNG.normal(size=(2, 3, 10, 10)).astype(np.float32)} for _ in range(3)]
    whole = lowbit.profile(graph, batches, progress=False)
    assert set(whole.moments) == {"conv", "dw"}
    conv = whole.moments["conv"]
    assert (conv.groups, conv.size, conv.count) == (1, 27, 6 * 100)
    assert (whole.moments["dw"].groups, whole.moments["dw"].size) == (4, 9)
    assert whole.moments["dw"].count == 6 * 64
    x = np.concatenate([b["x"] for b in batches])
    node = next(n for n in graph.nodes if n.name == "conv")
    v = np.concatenate(list(input_vectors(node, x)), axis=2)
    v = v.astype(np.float64)
    assert np.allclose(conv.second[0], v[0] @ v[0].T, rtol=1e-5, atol=1e-3)
    parts = lowbit.profile(graph, batches[:1], progress=False)
    parts.merge(lowbit.profile(graph, batches[1:], progress=False))
    for name in ("conv", "dw"):
        assert np.allclose(parts.moments[name].second, whole.moments[name].second, atol=1e-3)
        assert parts.moments[name].count == whole.moments[name].count
    whole.save(tmp_path / "p.yaml")
    again = Profile.load(tmp_path / "p.yaml", graph)
    for name in ("conv", "dw"):
        assert np.allclose(again.moments[name].second, whole.moments[name].second, rtol=1e-7,
                           atol=0)  # stored as float32
        assert again.moments[name].count == whole.moments[name].count


@pytest.mark.parametrize("without", ["version 1", "moments=False"])
def test_without_moments_weights_round_to_nearest_and_the_summary_says_why(tmp_path, without):
    """A version 1 profile (written before moments were kept) still loads, and a profile taken
    with moments=False leaves them out (a smaller file); the weights of either round to nearest,
    exactly as `weight_rounding: nearest` does, and the summary says why. The other statistics
    are those of a full profile."""
    graph = _two_convs(tmp_path / "m.onnx")
    batches = [{"x": RNG.normal(size=(2, 3, 10, 10)).astype(np.float32)} for _ in range(2)]
    prof = lowbit.profile(graph, batches, progress=False)
    prof.save(tmp_path / "p.yaml")
    text = (tmp_path / "p.yaml").read_text()
    if without == "version 1":
        old = text[:text.index("products:")].replace("version: 2", "version: 1")
        (tmp_path / "v1.yaml").write_text(old)
        bare = Profile.load(tmp_path / "v1.yaml", graph)
    else:
        bare = lowbit.profile(graph, batches, progress=False, moments=False)
        bare.save(tmp_path / "bare.yaml")
        assert (tmp_path / "bare.yaml").stat().st_size < len(text)
        bare = Profile.load(tmp_path / "bare.yaml", graph)
    assert not bare.moments
    assert set(bare) == set(prof)
    assert all(bare[n].min == prof[n].min and bare[n].max == prof[n].max for n in prof)
    result = quantize(graph, bare)
    details = [r.detail for r in result.summary.rows if r.op_type == "Conv"]
    assert len(details) == 2 and all("rounded to nearest: the profile has no input moments"
                                     in d for d in details)
    nearest = quantize(graph, prof, lowbit.QuantConfig.from_dict(
        {"default": {"weight_rounding": "nearest"}}))
    x = {"x": RNG.normal(size=(2, 3, 10, 10)).astype(np.float32)}
    assert np.array_equal(lowbit.run(result.graph, x)["y"], lowbit.run(nearest.graph, x)["y"])
    gptq = quantize(graph, prof)
    assert all("GPTQ rounding" in r.detail for r in gptq.summary.rows if r.op_type == "Conv")
    assert not np.array_equal(lowbit.run(gptq.graph, x)["y"], lowbit.run(nearest.graph, x)["y"])


def test_rows_longer_than_the_limit_keep_no_moments(tmp_path, monkeypatch):
    graph = _two_convs(tmp_path / "m.onnx")
    monkeypatch.setattr(input_moments, "MAX_SIZE", 20)
    conv = next(n for n in graph.nodes if n.name == "conv")
    assert moments_problem(conv) == "its rows are 27 long (moments are kept up to 20)"
    prof = lowbit.profile(graph, [{"x": RNG.normal(size=(1, 3, 10, 10)).astype(np.float32)}],
                          progress=False)
    assert set(prof.moments) == {"dw"}
    details = {r.name: r.detail for r in quantize(graph, prof).summary.rows}
    assert "rounded to nearest: its rows are 27 long" in details["conv"]
    assert "GPTQ rounding" in details["dw"]


def test_moments_of_different_shapes_do_not_merge():
    a, b = InputMoments.empty("n", 1, 3), InputMoments.empty("n", 1, 4)
    with pytest.raises(ValueError, match="input moments of 'n'"):
        a.merge(b)


def test_products_reading_one_value_share_their_moments(tmp_path):
    """Two MatMuls on one input (as a transformer's Q and K projections) see the same vectors:
    the moments are formed once and each product gets its own copy."""
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"], name="q"),
             helper.make_node("MatMul", ["x", "wk"], ["k"], name="k"),
             helper.make_node("Add", ["q", "k"], ["y"], name="sum")]
    inits = [numpy_helper.from_array(RNG.normal(size=(6, 4)).astype(np.float32), "wq"),
             numpy_helper.from_array(RNG.normal(size=(6, 4)).astype(np.float32), "wk")]
    g = helper.make_graph(nodes, "qk", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["N", 3, 6])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "qk.onnx")
    graph = lowbit.load(tmp_path / "qk.onnx")
    x = RNG.normal(size=(5, 3, 6)).astype(np.float32)
    prof = lowbit.profile(graph, [{"x": x[:2]}, {"x": x[2:]}], progress=False)
    q, k = prof.moments["q"], prof.moments["k"]
    rows = x.reshape(-1, 6).astype(np.float64)
    for m in (q, k):
        assert m.count == 15 and np.allclose(m.second[0], rows.T @ rows, rtol=1e-5)
    assert q is not k and q.second is not k.second


@pytest.mark.parametrize("native", [True, False])
def test_triangles_waiting_for_one_exact_addition_equal_adding_each(native, monkeypatch):
    """Batches' float32 triangles kept (`pending_slot`) and added PENDING at a time, or when S
    is read, merged, copied or pickled, give the limbs, S and count of `add_upper` per batch;
    a triangle with an infinity turns the sum into float64 from there on, as it did."""
    import pickle

    if not native:
        monkeypatch.setattr(input_moments, "_native", lambda: False)
    rng = np.random.default_rng(5)
    groups, k = 2, 6
    t = k * (k + 1) // 2
    batches = [(rng.standard_normal((groups, t)) * 2.0 ** (30 * (b % 3))).astype(np.float32)
               for b in range(input_moments.PENDING * 2 + 1)]
    for stop in (1, input_moments.PENDING, len(batches)):
        now, later = InputMoments.empty("p", groups, k), InputMoments.empty("p", groups, k)
        for b, upper in enumerate(batches[:stop]):
            now.add_upper(upper.astype(np.float64), b + 1)
            assert later.can_defer()
            later.pending_slot()[...] = upper
            later.commit_pending(b + 1)
        assert later.count == now.count
        copied = pickle.loads(pickle.dumps(later))
        assert later._exact.equals(now._exact) and copied._exact.equals(now._exact)
        np.testing.assert_array_equal(later.second, now.second)
    bad = batches[1].copy()
    bad[0, 3] = np.inf
    now, later = InputMoments.empty("p", groups, k), InputMoments.empty("p", groups, k)
    for upper in (batches[0], bad, batches[2]):
        now.add_upper(upper.astype(np.float64), 1)
        later.pending_slot()[...] = upper
        later.commit_pending(1)
    merged = InputMoments.empty("p", groups, k)
    merged.merge(later)
    np.testing.assert_array_equal(later.second, now.second)
    np.testing.assert_array_equal(merged.second, now.second)
    assert later._exact is None and now._exact is None


@pytest.mark.parametrize("size", [(9, 8), (40, 40)])
def test_observed_batches_kept_for_one_exact_addition_equal_adding_each(size, tmp_path,
                                                                       monkeypatch):
    """observe_input keeps a depthwise Conv's or a 1x1 Conv's batch of one block (the 9 x 8
    map) as float32 triangles and adds them later; the exact sums, S and counts equal those
    of adding each batch at once (and the 40 x 40 map, several blocks, is added at once)."""
    rng = np.random.default_rng(8)
    c = 5
    cases = {"depthwise": ({"group": c, "pads": [1, 1, 1, 1]}, (c, 1, 3, 3)),
             "pointwise": ({}, (4, c, 1, 1))}
    for name, (attrs, w_shape) in cases.items():
        graph = _single(tmp_path / f"{name}.onnx", "Conv", attrs, (1, c, *size),
                        rng.standard_normal(w_shape).astype(np.float32))
        node = next(n for n in graph.nodes if n.op_type == "Conv")
        shape = input_moments.moments_shape(node)
        batches = [rng.standard_normal((1, c, *size)).astype(np.float32) for _ in range(6)]
        later = InputMoments.empty("p", *shape)
        with monkeypatch.context() as m:
            m.setattr(InputMoments, "can_defer", lambda self: False)
            now = InputMoments.empty("p", *shape)
            for x in batches:
                input_moments.observe_input(now, node, x)
        for x in batches:
            input_moments.observe_input(later, node, x)
        assert (later._pending_used > 0) == (size == (9, 8)), name
        assert later.count == now.count
        np.testing.assert_array_equal(later.second, now.second)
        assert later._exact.equals(now._exact), name


def test_the_profile_adds_and_frees_the_waiting_triangles(tmp_path):
    """After `lowbit.profile`, no batch waits and no waiting buffer is kept, and S is that of
    every batch (3 batches: fewer than PENDING, so all of them waited until the end)."""
    rng = np.random.default_rng(9)
    graph = _single(tmp_path / "g.onnx", "Gemm", {"transB": 1}, (1, 6),
                    rng.standard_normal((3, 6)).astype(np.float32))
    batches = [{"x": rng.standard_normal((1, 6)).astype(np.float32)} for _ in range(3)]
    assert len(batches) < input_moments.PENDING
    moments = lowbit.profile(graph, batches, progress=False).moments["p"]
    assert moments._pending is None and moments._pending_used == 0 and moments.count == 3
    x = np.concatenate([b["x"] for b in batches]).astype(np.float64)
    np.testing.assert_allclose(moments.second[0], x.T @ x, rtol=1e-6)

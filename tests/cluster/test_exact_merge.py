"""Partial profiles merge into the one-pass profile bit for bit in any order and grouping, even
for data whose float64 sums depend on the order of the additions (batches scaled from 1e-6 to
1e6): channel sums and input moments are exact sums (`lowbit.numerics.exact_sum`). No cluster
here: the merges are the ones the workers do."""

from __future__ import annotations

import copy
import functools

import numpy as np
from profiles import differences

import lowbit


def _model(folder) -> lowbit.Graph:
    """Conv(1->4, 3x3) -> Relu -> Conv(4->4, 1x1): channel sums and input moments, small."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["input", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
             helper.make_node("Conv", ["r1", "w2"], ["out"], name="conv2")]
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w1", (4, 1, 3, 3)), ("w2", (4, 4, 1, 1)))]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, ["N", 1, 8, 8])], [helper.make_tensor_value_info(
            "out", TensorProto.FLOAT, ["N", 4, 8, 8])], inits)
    import onnx

    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              folder / "tiny.onnx")
    return lowbit.load(folder / "tiny.onnx")


def _batches() -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"input": (rng.standard_normal((5, 1, 8, 8)) * 10.0 ** s).astype(np.float32)}
            for s in rng.integers(-6, 7, size=12)]


def _merged(parts: list) -> lowbit.Profile:
    out = copy.deepcopy(parts[0])
    for p in parts[1:]:
        out.merge(copy.deepcopy(p))
    return out


def _tree(parts: list) -> lowbit.Profile:
    if len(parts) == 1:
        return copy.deepcopy(parts[0])
    half = len(parts) // 2
    return _merged([_tree(parts[:half]), _tree(parts[half:])])


def test_partial_profiles_merge_exactly_in_any_order(tmp_path):
    graph = _model(tmp_path)
    batches = _batches()
    one = lowbit.profile(graph, batches, progress=False)
    parts = [lowbit.profile(graph, [b], progress=False) for b in batches]
    order = np.random.default_rng(1).permutation(len(parts))
    for merged in (_merged(parts), _merged(parts[::-1]), _merged([parts[i] for i in order]),
                   _tree(parts), _tree(parts[::-1]),
                   _merged([lowbit.profile(graph, batches[:5], progress=False),
                            lowbit.profile(graph, batches[5:], progress=False)])):
        assert differences(merged, one) == []
    # the data are such that plain float64 additions depend on their order
    add = functools.partial(functools.reduce, np.add)

    def naive(key):
        return [key(p) for p in parts]

    channel = next((n, s) for n, s in one.stats.items() if s.channels)
    name, axis = channel[0], next(iter(channel[1].channels))
    sums = naive(lambda p: p.stats[name].channels[axis].sum)
    moment = next(iter(one.moments))
    seconds = naive(lambda p: p.moments[moment].second)
    assert not (np.array_equal(add(sums), add(sums[::-1])) and
                np.array_equal(add(seconds), add(seconds[::-1])))


def test_a_partial_profile_moves_compactly_and_merges_the_same(tmp_path):
    """What a worker sends (a pickled partial profile) packs its exact sums' limbs and leaves
    out the float64 S: MNISTNet's 3136-wide Gemm moments alone hold 3 x 3136 x 3137 / 2 int64
    limbs (118 MB); the partial crosses in a small part of that, and the profile merged from
    unpickled partials equals the one-pass profile bit for bit."""
    import pickle

    from lowbit.cli.demo import bundled

    x = np.load(bundled("digits.npz"))["images"]
    graph = lowbit.load(bundled("mnistnet.onnx"))
    batches = [{"input": x[i:i + 10]} for i in range(0, 40, 10)]
    one = lowbit.profile(graph, batches, progress=False)
    parts = [lowbit.profile(graph, batches[i:i + 2], progress=False) for i in (0, 2)]
    for p in parts:
        for m in p.moments.values():
            m.second  # noqa: B018 (the cached float64 S must not be pickled)
    sent = [pickle.dumps(p) for p in parts]
    limbs = sum(m._exact.limbs.nbytes for m in parts[0].moments.values())
    assert limbs > 100e6
    assert all(len(s) < limbs / 10 for s in sent), [len(s) for s in sent]
    merged = _merged([pickle.loads(s) for s in sent])
    assert differences(merged, one) == []

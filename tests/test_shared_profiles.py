"""The test suite's shared profiles (tests/shared_profiles.py): a profile read back from the
cache quantizes to the same model as one just computed, and the key follows the inputs."""

from __future__ import annotations

import numpy as np
from shared_profiles import profile_key, shared_profile

import lowbit
from lowbit.cli.demo import bundled
from lowbit.ir.hashing import graph_hash


def test_a_cached_profile_quantizes_to_the_same_model():
    x = np.load(bundled("digits.npz"))["images"]
    graph = lowbit.load(bundled("mnistnet.onnx"))
    batches = [{"input": x[i:i + 50]} for i in range(300, 400, 50)]
    first = shared_profile(graph, batches)
    again = shared_profile(graph, batches)  # read from the cache
    fresh = lowbit.profile(graph, batches, progress=False)
    assert again is not first
    want = graph_hash(lowbit.quantize(graph, fresh))
    assert graph_hash(lowbit.quantize(graph, again)) == want
    assert graph_hash(lowbit.quantize(graph, first)) == want
    other = [{"input": b["input"].copy()} for b in batches]
    other[1]["input"][0, 0, 0, 0] += 1
    assert profile_key(graph, other, {}) != profile_key(graph, batches, {})
    assert profile_key(graph, batches, {"moments": False}) != profile_key(graph, batches, {})

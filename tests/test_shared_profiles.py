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


def test_a_shared_result_is_computed_once_per_key(tmp_path):
    from shared_profiles import result_key, shared_result

    model = tmp_path / "model.bin"
    model.write_bytes(b"weights")
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    calls = []

    def compute():
        calls.append(1)
        return data * 2

    nonce = str(tmp_path)  # a key no other run has used
    first = shared_result(compute, nonce, model, [data])
    again = shared_result(compute, nonce, model, [data])
    np.testing.assert_array_equal(again, first)
    assert len(calls) == 1
    key = result_key(nonce, model, [data])
    assert result_key(nonce, model, [data.astype(np.float64)]) != key
    assert result_key(nonce, model, [data, data]) != key
    model.write_bytes(b"other weights")  # a file counts by its bytes
    assert result_key(nonce, model, [data]) != key

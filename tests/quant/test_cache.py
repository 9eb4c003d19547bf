"""QuantCache: quantizing again with a cache gives the same graph as without, and computes only
what changed."""

from __future__ import annotations

import numpy as np
import pytest

import lowbit
from lowbit.cli.demo import bundled
from lowbit.errors import LowbitError
from lowbit.quant.cache import QuantCache
from lowbit.quant.config import QuantConfig, Rule
from lowbit.quant.static import quantize


@pytest.fixture(scope="module")
def mnist():
    x = np.load(bundled("digits.npz"))["images"]
    graph = lowbit.load(bundled("mnistnet.onnx"))
    prof = lowbit.profile(graph, [{"input": x[i:i + 50]} for i in range(0, 100, 50)],
                          progress=False)
    return graph, prof, {"input": x[300:310]}


def _same(a, b, batch):
    out_a, out_b = lowbit.run(a, batch), lowbit.run(b, batch)
    assert all(np.array_equal(out_a[k], out_b[k]) for k in out_a)
    assert lowbit.ir.hashing.graph_hash(a) == lowbit.ir.hashing.graph_hash(b)


def test_cached_quantization_equals_uncached_and_recomputes_only_the_change(mnist):
    import lowbit.ir.hashing  # noqa: F401

    graph, prof, batch = mnist
    cache = QuantCache(prof)
    base = quantize(graph, prof, QuantConfig(), cache=cache)
    _same(base.graph, quantize(graph, prof, QuantConfig()).graph, batch)
    computed = cache.misses
    assert computed > 0 and cache.hits == 0
    again = quantize(graph, prof, QuantConfig(), cache=cache)
    assert cache.misses == computed
    _same(again.graph, base.graph, batch)
    raised = QuantConfig(rules=(Rule(name="/classifier/classifier.0/Gemm", precision="int16",
                                     weight_precision="int16"),))
    one = quantize(graph, prof, raised, cache=cache)
    # the raised Gemm's rounding and its input's and output's int16 ranges are new
    assert 0 < cache.misses - computed <= 3
    _same(one.graph, quantize(graph, prof, raised).graph, batch)


def test_a_cache_serves_one_profile(mnist):
    graph, prof, _ = mnist
    other = lowbit.profile(graph, [{"input": np.zeros((2, 1, 28, 28), np.float32) + 0.5}],
                           progress=False)
    with pytest.raises(LowbitError, match="another profile"):
        quantize(graph, other, cache=QuantCache(prof))

"""Checks shared by the quantization tests: entropy calibration's range widths at several
histogram resolutions, lowbit's int8 codes of an exported activation, and a float graph's
outputs computed once per graph and batch."""

from __future__ import annotations

import numpy as np

import lowbit
from lowbit.ir import dtypes
from lowbit.quant import calibration, schemes
from lowbit.quant.config import DEFAULT_SCHEME
from lowbit.quant.observers import StatsObserver

ENTROPY_BINS = (1024, 2048, 4096, 8192)

_FLOAT: dict[tuple[int, int], tuple] = {}


def float_outputs(graph, batch) -> dict:
    """The float graph's outputs on `batch` (reference interpreter), computed once per graph and
    batch in this process, for tests that measure many quantized models against them. The entry
    keeps both alive, so their ids stay theirs."""
    key = (id(graph), id(batch))
    if key not in _FLOAT:
        _FLOAT[key] = (graph, batch, lowbit.run(graph, batch))
    return _FLOAT[key][2]


def entropy_widths(graph, prof) -> dict[str, list[float]]:
    """Width of the range entropy calibration picks for each activation (on the default scheme's
    grid) from histograms of 1024 to 8192 bins. The coarser histograms come from the profile's
    8192-bin ones merged into fewer bins, which equals observing with fewer bins (exact, see
    tests/quant/test_observers.py)."""
    constants = {n.output.name for n in graph.constants()}
    widths = {}
    for name, stats in prof.stats.items():
        if name in constants or stats.min is None or stats.min == stats.max:
            continue
        assert stats.bins == ENTROPY_BINS[-1]
        nonnegative = stats.min >= 0
        storage = schemes.storage_dtype(DEFAULT_SCHEME, dtypes.INT8, nonnegative)
        symmetric, steps = schemes.calibration_grid(DEFAULT_SCHEME, storage, nonnegative)
        widths[name] = []
        for bins in ENTROPY_BINS:
            coarse = StatsObserver(name, bins)
            coarse.merge(stats)
            lo, hi = calibration.entropy(coarse, steps=steps, symmetric=symmetric)
            widths[name].append(hi - lo)
    return widths


def assert_within_5_percent(widths: dict[str, list[float]]) -> None:
    spread = {name: (max(w) - min(w)) / max(w) for name, w in widths.items()}
    worst = max(spread, key=spread.get)
    assert spread[worst] <= 0.05, (worst, widths[worst])


def int8_codes(stored: np.ndarray) -> np.ndarray:
    """lowbit's int8 codes of an exported activation: the exports store int8 activations as
    uint8, code + 128 with zero point + 128 (ONNX Runtime's fast kernels take uint8 x int8)."""
    assert stored.dtype == np.uint8
    return stored.astype(np.int64) - 128

"""ONNX DynamicQuantizeLinear of whole tensors long enough to be split over threads
(rt_dqtensor.c: minimum and maximum per chunk, then the codes per chunk) on every ISA path:
the bits of the one-task row kernel (1 thread) always, and the reference's for inputs without
NaN: ordinary values, one sign only, all zeros, -0.0, constants, infinities, lengths at and
around the split threshold and chunk tails. (A NaN's code is the zero point in the row kernel,
0 in the reference: a difference older than the split, kept as it was.) The sanitizer test
runs this file too."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_kernels import ISAS
from transformer_graphs import F32, node_outputs

import lowbit
from lowbit.backends import cpu
from lowbit.ir.graph import Graph
from lowbit.ir.types import TensorType


def _inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    out = []
    for n in (32767, 32768, 32768 + 5, 200_001, 1 << 20):
        x = (rng.standard_normal(n) * 3).astype(np.float32)
        out.append(x)
    n = 100_003
    out += [np.abs(rng.standard_normal(n)).astype(np.float32),
            -np.abs(rng.standard_normal(n)).astype(np.float32) - 1,
            np.zeros(n, np.float32), np.full(n, -0.0, np.float32), np.full(n, 2.5, np.float32)]
    special = (rng.standard_normal(n) * 10).astype(np.float32)
    special[rng.integers(0, n, 50)] = np.nan
    special[7] = -0.0
    out.append(special.copy())
    special[rng.integers(0, n, 3)] = np.inf
    special[-1] = -np.inf
    out.append(special)
    return out


@pytest.mark.parametrize("isa", ISAS)
def test_split_dynamic_quantize_linear_keeps_the_reference_bits(isa):
    g = Graph("dql")
    x = g.add_input("x", TensorType(F32, ("n",)))
    g.outputs = node_outputs(g, "DynamicQuantizeLinear", [x], outputs=3)
    exe = cpu.compile(g, isa=isa, threads=2)
    one_task = cpu.compile(g, isa=isa, threads=1)
    assert any("DynamicQuantizeLinear" in s for s in exe.compiled()[0].steps)
    for v in _inputs():
        got, rows = exe({"x": v}), one_task({"x": v})
        want = lowbit.run(g, {"x": v}) if not np.isnan(v).any() else rows
        for name, w in want.items():
            for other in (w, rows[name]):
                assert got[name].dtype == other.dtype and \
                    got[name].tobytes() == other.tobytes(), (name, v.size, isa)

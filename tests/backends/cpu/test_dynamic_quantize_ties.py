"""Dynamic quantization's codes where rounding is hardest, on every ISA path against the
reference: values whose quotient x / scale is exactly a half-integer (ties to even) or one
float32 step either side of one, scales near the ends of float32's range (huge, and subnormal:
a reciprocal that overflows) and NaN. (A kernel
that multiplies by 1 / scale instead of dividing differs from the reference on such values
unless it detects them: an AVX-512 one that did, measured, was no faster than vdivps; one
correcting the product by its exact residual (Markstein), exact, measured 5-8 % slower on Zen 4.)
Groups of 32, 64 and 128 filling whole rows take AVX-512's whole-group path, other groups and
whole rows the general one."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_kernels import ISAS
from transformer_graphs import const, node_outputs

import lowbit
from lowbit.backends import cpu
from lowbit.ir import dtypes
from lowbit.ir.graph import Graph
from lowbit.ir.types import TensorType
from lowbit.numerics.dynamic_params import qmax
from lowbit.ops.registry import QUANT_DOMAIN

F32 = np.float32


def near_half_rows(rng, rows: int, k: int, symmetric: bool) -> np.ndarray:
    """Rows whose range fixes the scale (first two values: the row's extremes) and whose other
    values are float32(j + 1/2) * scale and its neighbours, for random j and scale."""
    top = F32(qmax(symmetric, False))
    x = np.zeros((rows, k), F32)
    for r in range(rows):
        hi = F32(2.0 ** rng.uniform(-20, 20)) * F32(rng.uniform(1, 2))
        lo = F32(0) if symmetric or rng.random() < 0.3 else -F32(rng.uniform(0, 1)) * hi
        scale = (hi / top) if symmetric else ((hi - lo) / top)
        x[r, 0], x[r, 1] = hi, lo
        for i in range(2, k):
            j = rng.integers(int(lo / scale) if not symmetric else -int(top), int(top))
            v = F32((F32(j) + F32(0.5)) * scale)
            v = np.nextafter(v, F32(rng.choice([-np.inf, np.inf]))) if rng.random() < 0.5 else v
            x[r, i] = np.clip(v, lo if not symmetric else -hi, hi)
    return x


def extreme_rows(rng, k: int) -> np.ndarray:
    """Values near float32's largest (the largest scales, still finite after the channel
    scales), subnormal values and scales (a
    reciprocal that overflows), tiny ones, and NaN. (Not infinities: inf / inf is NaN, whose
    conversion to an integer code numpy leaves undefined.)"""
    rows = [rng.uniform(-1, 1, k).astype(F32) * F32(1.6e38),
            rng.standard_normal(k).astype(F32) * F32(1e-40),
            rng.standard_normal(k).astype(F32) * F32(1e-30),
            rng.standard_normal(k).astype(F32)]
    rows[3][5] = F32(np.nan)
    return np.stack(rows)


@pytest.mark.parametrize("symmetric", [0, 1])
@pytest.mark.parametrize("group", [32, 64, 128, 0])
def test_codes_near_half_integers_are_exact(symmetric, group):
    rng = np.random.default_rng(7 + symmetric + group)
    k = 256
    x = np.concatenate([near_half_rows(rng, 300, k, bool(symmetric)), extreme_rows(rng, k)])
    if group:  # each group its own range: repeat a row's extremes in every group
        for g0 in range(group, k, group):
            x[:300, g0:g0 + 2] = x[:300, 0:2]
    g = Graph("dq_ties")
    xv = g.add_input("x", TensorType(dtypes.FLOAT32, x.shape))
    outs = []
    for cs in (None, const(g, rng.uniform(0.5, 3, k).astype(F32))):
        attrs = {"axes": [1], "symmetric": symmetric, "reduce_range": 0}
        if group:
            attrs["group_size"] = group
        outs += node_outputs(g, "DynamicQuantize", [xv, cs], attrs, QUANT_DOMAIN, 3)
    g.outputs = outs
    ref = lowbit.run(g, {"x": x})
    for isa in ISAS:
        got = cpu.compile(g, isa=isa, threads=2)({"x": x})
        for name, want in ref.items():
            np.testing.assert_array_equal(got[name], want, err_msg=f"{name} on {isa}")

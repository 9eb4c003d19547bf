"""lowbit.numerics.elementary: the float32 functions the reference and the cpu backend share are
accurate (against float64 evaluations) and handle the edges (NaN, inf, underflow)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lowbit.backends.reference.special import erfc as erfc64
from lowbit.numerics import elementary as el
from lowbit.numerics.dynamic_params import dequantize_groups

F32 = np.float32


def _ulps(got: np.ndarray, ref64: np.ndarray) -> np.ndarray:
    ref32 = np.abs(ref64).astype(F32)
    return np.abs(got.astype(np.float64) - ref64) / np.spacing(ref32).astype(np.float64)


def test_exp_within_1_3_ulp_and_edges():
    x = np.linspace(-87, 88.7, 1_000_001).astype(F32)
    assert _ulps(el.exp(x), np.exp(x.astype(np.float64))).max() < 1.3
    edges = np.array([np.nan, -np.inf, np.inf, -200, 200, 0, -0.0, -103.9, 88.72], F32)
    got = el.exp(edges)
    assert np.isnan(got[0]) and got[1] == 0 and got[2] == np.inf and got[3] == 0
    assert got[4] == np.inf and got[5] == 1 and got[6] == 1
    assert got[7] in (0, np.float32(1.4e-45)) and np.isfinite(got[8])
    tiny = np.linspace(-103, -87.5, 10001).astype(F32)  # subnormal results: ldexp rounding
    assert np.all(np.abs(el.exp(tiny) - np.exp(tiny.astype(np.float64))) <= 1.5e-45)


@pytest.mark.parametrize("lo,hi", [(0, 0.7), (0.7, 3), (3, 6), (6, 8)])
def test_gauss_tail_within_6_ulp(lo, hi):
    a = np.linspace(lo, hi, 400_001).astype(F32)
    a = a[a < 8]
    ref = 0.5 * erfc64(a.astype(np.float64) / math.sqrt(2))
    assert _ulps(el.gauss_tail(a), ref).max() < 6
    beyond = np.array([8, 8.5, 100, np.inf], F32)
    assert np.all(el.gauss_tail(beyond) == 0) and np.isnan(el.gauss_tail(F32(np.nan)))


def test_gelu_erf_form_within_6_ulp_and_edges():
    x = np.concatenate([np.linspace(-13, 13, 1_000_001),
                        np.logspace(-30, 1, 10_000), -np.logspace(-30, 1, 10_000)]).astype(F32)
    with np.errstate(all="ignore"):
        ref = 0.5 * x.astype(np.float64) * erfc64(-x.astype(np.float64) / math.sqrt(2))
    normal = (np.abs(ref) > 1.2e-38) & (np.abs(x) < 8)
    assert _ulps(el.gelu(x)[normal], ref[normal]).max() < 6
    far = x <= -8  # the tail is 0 there: |GELU| < 5e-15 before
    assert np.all(el.gelu(x[far]) == 0) and np.abs(ref[far]).max() < 5e-15
    assert np.all(el.gelu(x[x >= 8]) == x[x >= 8])
    with np.errstate(all="ignore"):
        got = el.gelu(np.array([np.nan, np.inf, -np.inf, -30, 30, 0], F32))
    assert np.isnan(got[0]) and got[1] == np.inf and got[4] == 30 and got[5] == 0
    assert got[3] == 0 and (got[2] == 0 or np.isnan(got[2]))


def test_gelu_tanh_form_close_to_float64():
    x = np.linspace(-5, 8, 400_001).astype(F32)
    xd = x.astype(np.float64)
    ref = 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd ** 3)))
    got = el.gelu(x, "tanh").astype(np.float64)
    assert np.max(np.abs(got - ref) / np.maximum(np.abs(ref), 1e-30)) < 4e-6


def test_lane_sum_order_is_lanes_then_halving():
    rng = np.random.default_rng(0)
    for n in (1, 5, 16, 17, 100, 384, 1000):
        x = rng.standard_normal((3, n)).astype(F32)
        lanes = np.zeros((3, 16), F32)
        for i in range(n):
            lanes[:, i % 16] = lanes[:, i % 16] + x[:, i]
        for width in (8, 4, 2, 1):
            lanes = lanes[:, :width] + lanes[:, width:2 * width]
        assert np.array_equal(el.lane_sum(x), lanes[:, 0])
    x = rng.standard_normal((4, 37, 2))
    assert np.allclose(el.lane_sum(x, axis=1), x.sum(axis=1), rtol=1e-12)


def test_softmax_close_and_nan_rows():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((20, 4096)) * 8).astype(F32)
    xd = x.astype(np.float64)
    e = np.exp(xd - xd.max(axis=-1, keepdims=True))
    ref = e / e.sum(axis=-1, keepdims=True)
    got = el.softmax(x).astype(np.float64)
    # e^(x - m) with x - m rounded to float32: relative error about |x - m| * 2**-24
    big = ref > 1e-7
    assert np.max(np.abs(got - ref)[big] / ref[big]) < 1.5e-6
    assert np.max(np.abs(got - ref) / ref) < 1e-5
    rows = np.array([[0, np.nan, 1], [-np.inf] * 3, [0, -np.inf, 0]], F32)
    out = el.softmax(rows)
    assert np.all(np.isnan(out[0])) and np.all(np.isnan(out[1]))
    assert np.array_equal(out[2], np.array([0.5, 0, 0.5], F32))


def test_dequantize_groups_is_the_float32_chain():
    rng = np.random.default_rng(2)
    acc = rng.integers(-2**20, 2**20, (2, 5, 3, 4))  # [batch, G, M, N]
    sa = rng.random((2, 3, 5)).astype(F32)           # [batch, M, G]
    sb = rng.random((5, 4)).astype(F32)              # [G, N]
    got = dequantize_groups(acc, sa, sb)
    for b in range(2):
        for m in range(3):
            for n in range(4):
                y = F32(0)
                for j in range(5):
                    y = F32(y + F32(F32(acc[b, j, m, n]) * sb[j, n]) * sa[b, m, j])
                assert got[b, m, n] == y

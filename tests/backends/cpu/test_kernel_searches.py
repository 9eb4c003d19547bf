"""The quantization search kernels (runtime/rt_qsearch.c) against their Python definitions, bit
for bit, on every ISA the machine runs (forced by $LOWBIT_CPU_ISA), with and without the thread
pool: exhaustive weight rounding, the MSE range search, exact sums unpacked to matrices, GPTQ's
permuted H, and the solvers built ahead on a background thread."""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest
from cpu_kernels import ISAS

from lowbit.backends.cpu import library as L
from lowbit.backends.cpu import searches
from lowbit.numerics.exact_sum import GridSum
from lowbit.quant import calibration, input_moments, weight_rounding
from lowbit.quant.observers import StatsObserver


@pytest.fixture(params=ISAS)
def isa(request, monkeypatch):
    monkeypatch.setenv(L.ISA_ENV, request.param)
    return request.param


@pytest.fixture(params=["pool", "serial"])
def threads(request):
    if request.param == "serial":
        with searches.serial():
            yield request.param
    else:
        yield request.param


def _einsum_exhaustive(rows, scale, zero, h, per_group, qmin, qmax):
    """The definition as lowbit wrote it before the C kernel: np.einsum's cost (whose sum runs
    over (k, l) row-major from 0, as `_exhaustive`'s loop does)."""
    k = rows.shape[1]
    choices = np.array(list(product((0.0, 1.0), repeat=k)))
    s, z = scale[:, None], zero[:, None]
    cand = np.clip(np.floor(rows / s + z)[:, None, :] + choices, qmin, qmax)
    d = (cand - z[:, :, None]) * s[:, :, None] - rows[:, None, :]
    group = np.arange(rows.shape[0]) // per_group
    cost = np.einsum("rck,rkl,rcl->rc", d, h[group], d)
    return cand[np.arange(len(cand)), np.argmin(cost, axis=1)].astype(np.int64)


def _problem(rng, rows, k, per_group, ties=False):
    w = rng.standard_normal((rows, k)) * np.exp2(rng.integers(-6, 6, (rows, 1)))
    scale = np.abs(w).max(axis=1) / 127 * rng.uniform(0.3, 1.2, rows)  # some clipped
    zero = rng.integers(-3, 4, rows).astype(np.float64)
    x = rng.standard_normal((-(-rows // per_group), 4 * k, k))
    if ties:  # H = I with weights on half codes: many equal costs
        h = np.broadcast_to(np.eye(k), x.shape[:1] + (k, k)).copy()
        w = (rng.integers(-20, 20, (rows, k)) + 0.5) * scale[:, None]
    else:
        h = x.transpose(0, 2, 1) @ x / x.shape[1]
    return w, scale, zero, h


@pytest.mark.parametrize("k", range(1, 10))
def test_round_exhaustive_equals_python(isa, threads, k):
    rng = np.random.default_rng(k)
    for rows, per_group, ties in ((1, 1, False), (7, 7, False), (37, 1, False), (64, 16, True),
                                  (203, 29, False)):
        w, s, z, h = _problem(rng, rows, k, per_group, ties)
        mine = searches.round_exhaustive(w, s, z, h, per_group, -128, 127)
        groups = h.shape[0]
        pad = groups * per_group - rows
        if pad == 0:
            ref = weight_rounding._round_rows(w.reshape(groups, per_group, k),
                                              s.reshape(groups, -1), z.reshape(groups, -1),
                                              -128, 127, h, None).reshape(rows, k)
            np.testing.assert_array_equal(mine, ref)
        np.testing.assert_array_equal(mine, _einsum_exhaustive(w, s, z, h, per_group, -128,
                                                               127))


def test_exhaustive_python_definition_equals_einsum(monkeypatch):
    """The Python fallback (no C compiler) is the same definition."""
    monkeypatch.setattr(weight_rounding, "_native", lambda: False)
    rng = np.random.default_rng(5)
    for k in (1, 3, 9):
        w, s, z, h = _problem(rng, 40, k, 4)
        ref = weight_rounding._round_rows(w.reshape(10, 4, k), s.reshape(10, 4),
                                          z.reshape(10, 4), -8, 7, h, None).reshape(40, k)
        np.testing.assert_array_equal(ref, _einsum_exhaustive(w, s, z, h, 4, -8, 7))


def _stats(rng, n, shift):
    x = np.concatenate([rng.standard_normal(n) * rng.uniform(0.1, 3), rng.standard_t(2, n // 50)])
    obs = StatsObserver("x")
    obs.observe((x + shift).astype(np.float32))
    return obs


@pytest.mark.parametrize("seed", range(8))
def test_mse_search_equals_python(isa, seed, monkeypatch):
    rng = np.random.default_rng(seed)
    obs = _stats(rng, int(rng.integers(50, 200000)), float(rng.choice([0.0, 0.5, -0.7, 2.0])))
    for steps in (255, 15, 65535):
        mine = calibration.mse(obs, steps=steps)
        with monkeypatch.context() as m:
            m.setattr(calibration, "_native_searches", lambda: False)
            ref = calibration.mse(obs, steps=steps)
        assert mine == ref, (seed, steps)


def test_mse_search_ties_and_nothing_finite():
    m0 = np.zeros(9)
    assert searches.mse_search(np.zeros(4), np.zeros(9), m0, np.zeros(9), 3, 2) == (0, 2)
    assert searches.mse_search(np.full(4, np.inf), np.zeros(9), m0, np.zeros(9), 3, 2) is None


@pytest.mark.parametrize("seed", range(4))
def test_unpack_and_gather_equal_python(isa, threads, seed):
    rng = np.random.default_rng(10 + seed)
    groups, k = int(rng.choice([1, 3])), int(rng.choice([1, 10, 33, 130]))
    total = GridSum((groups, k * (k + 1) // 2))
    for step in range(3):
        x = rng.standard_normal(total.shape) * np.exp2(rng.integers(-60, 60, total.shape))
        total.add(x * 2.0 ** (300 * step - 400))  # limbs reaching subnormal scales
    mine = searches.unpack_upper_sum(total, k)
    ref = input_moments.unpack_upper(total.value(), k)
    np.testing.assert_array_equal(mine, ref)
    back = np.stack([rng.permutation(k) for _ in range(groups)])
    for count in (1, 7, 1000):
        got = searches.gather_symmetric(ref, back, count)
        want = np.take_along_axis(np.take_along_axis(ref, back[:, :, None], 1),
                                  back[:, None, :], 2)
        if count != 1:
            want /= count
        np.testing.assert_array_equal(got, want)
    assert not searches.unpack_upper_sum(GridSum((1, 3)), 2).any()


def test_solver_equals_python_and_prefetch(monkeypatch):
    """The solver from the C gather equals numpy's; built ahead, it is the one taken."""
    rng = np.random.default_rng(3)
    k, count = 150, 400
    x = rng.standard_normal((count, k)).astype(np.float32)
    moments = input_moments.InputMoments.empty("n", 1, k)
    moments.observe(x.T[None].astype(np.float64))
    native = weight_rounding._Solver(moments.second, count)
    with monkeypatch.context() as m:
        m.setattr(weight_rounding, "_native", lambda: False)
        python = weight_rounding._Solver(moments.second, count)
    np.testing.assert_array_equal(native.order, python.order)
    np.testing.assert_array_equal(native.ratios, python.ratios)
    fresh = moments.copy()
    with weight_rounding.RoundingPrefetch([weight_rounding.Ahead(fresh)]) as ahead:
        known = weight_rounding._known(fresh)
    assert known.solver is not None and not weight_rounding._PENDING
    np.testing.assert_array_equal(known.solver.ratios, python.ratios)
    ahead.close()  # closing twice is harmless

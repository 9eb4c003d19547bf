"""The calibration statistics kernels (runtime/rt_stats.c) against their Python definitions,
bit for bit, on every ISA the machine runs (forced by $LOWBIT_CPU_ISA) and on random shapes,
magnitudes, strides, dilations and paddings: GridSum additions (flat and upper triangles) and
depthwise input moments."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_kernels import ISAS

from lowbit.backends.cpu import library as L
from lowbit.backends.cpu import stats
from lowbit.numerics.exact_sum import ExactSum, GridSum
from lowbit.quant import input_moments


@pytest.fixture(params=ISAS)
def isa(request, monkeypatch):
    monkeypatch.setenv(L.ISA_ENV, request.param)
    return request.param


def _values(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Values of mixed magnitudes and signs, some exactly 0, some tiny (truncated limbs)."""
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-40, 40, shape))
    x[rng.random(shape) < 0.1] = 0.0
    return x.astype(dtype)


@pytest.mark.parametrize("seed", range(6))
def test_gridsum_add_equals_python(isa, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.choice([1, 7, 1000, 70000, 140001]))
    mine, ref = GridSum((n,)), GridSum((n,))
    for step in range(4):
        dtype = np.float32 if (seed + step) % 2 else np.float64
        x = _values(rng, (n,), dtype) * (2.0 ** (20 * step))  # top rises between additions
        x = x.astype(dtype)
        stats.gridsum_add(mine, x)
        ref.add(x)
        assert mine.equals(ref), f"{isa}: step {step}, {n} elements"
    assert mine.adds == ref.adds
    np.testing.assert_array_equal(mine.value(), ref.value())


def test_gridsum_add_zeros_and_non_finite(isa):
    mine, ref = GridSum((5,)), GridSum((5,))
    stats.gridsum_add(mine, np.zeros(5))
    ref.add(np.zeros(5))
    assert mine.equals(ref) and mine.adds == ref.adds == 1
    with pytest.raises(ValueError, match="finite"):
        stats.gridsum_add(mine, np.array([1.0, np.nan, 0, 0, 0]))
    with pytest.raises(ValueError, match="finite"):
        stats.gridsum_add(mine, np.array([1.0, 0, 0, 0, -np.inf], np.float32))


@pytest.mark.parametrize("seed", range(6))
def test_gridsum_add_upper_equals_python(isa, seed):
    rng = np.random.default_rng(100 + seed)
    groups, k = int(rng.integers(1, 40)), int(rng.integers(1, 90))
    dtype = np.float32 if seed % 2 else np.float64
    flat = input_moments.upper_flat(k)
    mine = GridSum((groups, k * (k + 1) // 2))
    ref = GridSum((groups, k * (k + 1) // 2))
    for _ in range(3):
        square = _values(rng, (groups, k, k), dtype)
        assert stats.gridsum_add_upper(mine, square)
        ref.add(square.reshape(groups, -1)[:, flat])
        assert mine.equals(ref), f"{isa}: {groups} x {k} x {k} {dtype.__name__}"
    square[-1, 0, -1] = np.nan  # in the triangle: refused, nothing added
    assert not stats.gridsum_add_upper(mine, square)
    assert mine.equals(ref) and mine.adds == ref.adds
    if k > 1:
        square[-1, 0, -1] = 1.0
        square[-1, -1, 0] = np.inf  # below the diagonal: not read
        assert stats.gridsum_add_upper(mine, square)


def _depthwise_case(rng: np.random.Generator):
    kernel = (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
    strides = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    dilations = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    pads = (int(rng.integers(0, 4)), int(rng.integers(0, 4)))
    ends = (int(rng.integers(0, 4)), int(rng.integers(0, 4)))
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 21))
    h, w = (int(rng.integers((kernel[i] - 1) * dilations[i] + 1, 14)) for i in range(2))
    outs = tuple((size + pads[i] + ends[i] - (kernel[i] - 1) * dilations[i] - 1)
                 // strides[i] + 1 for i, size in enumerate((h, w)))
    x = (rng.standard_normal((n, c, h, w)) * np.exp2(rng.integers(-8, 8, (1, c, 1, 1)))
         ).astype(np.float32)
    return x, (kernel, strides, dilations, pads, outs)


@pytest.mark.parametrize("seed", range(24))
def test_depthwise_moments_equal_python(isa, seed):
    rng = np.random.default_rng(200 + seed)
    x, geometry = _depthwise_case(rng)
    want = input_moments.depthwise_moments(x, *geometry)
    # the reused padding buffer holds NaN from before: only its padding is cleared per call
    stats._reused((1 << 16,), np.float32).fill(np.nan)
    got = stats.depthwise_moments(x, *geometry)
    np.testing.assert_array_equal(got, want, err_msg=f"{isa}: {x.shape} {geometry}")
    # float32 totals (what a batch of one block defers): each float64 total rounded
    out32 = np.full(want.shape, np.nan, np.float32)
    assert stats.depthwise_moments(x, *geometry, out=out32) is out32
    np.testing.assert_array_equal(out32, want.astype(np.float32))


@pytest.mark.parametrize("case", ["finite", "inf", "nan"])
@pytest.mark.parametrize("geometry", [((5, 5), (1, 1), (2, 2), (7, 7)),
                                      ((5, 5), (2, 2), (2, 2), (14, 14)),
                                      ((3, 3), (2, 2), (0, 0), (9, 9)),
                                      ((4, 2), (1, 1), (3, 1), (5, 6))])
def test_depthwise_moments_skip_padding_rows_exactly(isa, case, geometry):
    """Tiles skip the output rows whose taps read only padding rows (products of zeros):
    the same bits as the definition, and with a NaN or an infinity in the input (whose
    products with the padding are NaN) nothing is skipped."""
    kernel, strides, pads, (h, w) = geometry
    rng = np.random.default_rng(h * w + kernel[0])
    x = rng.standard_normal((1, 40, h, w)).astype(np.float32)
    x[:, ::3] = np.maximum(x[:, ::3], 0.0)  # some zeros, as after a ReLU
    if case != "finite":
        x[0, 17, 0, w - 1] = np.inf if case == "inf" else np.nan
    outs = tuple((size + 2 * pads[i] - kernel[i]) // strides[i] + 1
                 for i, size in enumerate((h, w)))
    window = (kernel, strides, (1, 1), pads, outs)
    want = input_moments.depthwise_moments(x, *window)
    got = stats.depthwise_moments(x, *window)
    np.testing.assert_array_equal(got, want)
    # an infinity times the padding's zeros is NaN
    assert np.isnan(got).any() == (case == "nan" or (case == "inf" and any(pads)))


def test_reused_buffers_start_on_a_cache_line():
    """`_reused` arrays (the depthwise moments' padded input, the moments' scratch) start on
    an `ALIGN`-byte boundary whatever their size, dtype, or the size asked for before."""
    for dtype in (np.float32, np.float64):
        for size in (1, 7, 1000, 1 << 20, 3, (1 << 21) + 5):
            a = stats._reused((size,), dtype)
            assert a.dtype == dtype and a.shape == (size,)
            assert a.ctypes.data % stats.ALIGN == 0, (dtype, size)


def test_depthwise_moments_are_the_moments_of_the_receptive_fields(tmp_path):
    """The definition itself: S of each channel equals that of the vectors `input_vectors`
    forms for the Conv node (in float64), to float32 rounding: the products and each block's
    sums are float32, so the error is relative to the sum of |products| (a few float32 ulps of
    it per block), not to the result."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import lowbit

    rng = np.random.default_rng(7)
    c = 5
    w = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="dw", group=c, strides=[2, 1],
                            pads=[1, 0, 1, 2], dilations=[1, 2])
    g = helper.make_graph([node], "dw", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, c, 9, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "dw.onnx")
    conv = next(n for n in lowbit.load(tmp_path / "dw.onnx").nodes if n.op_type == "Conv")
    data = rng.standard_normal((2, c, 9, 8)).astype(np.float32)
    window = input_moments._depthwise_window(conv, data)
    assert window is not None
    upper = input_moments.depthwise_moments(data, *window)
    vectors = np.concatenate([v.astype(np.float64) for v in
                              input_moments.input_vectors(conv, data)], axis=2)
    s = vectors @ vectors.transpose(0, 2, 1)
    rows, cols = np.triu_indices(9)
    magnitude = np.abs(vectors) @ np.abs(vectors).transpose(0, 2, 1)
    error = np.abs(upper - s[:, rows, cols])
    assert np.all(error <= 1e-6 * magnitude[:, rows, cols]), error.max()
    assert np.any(error > 0)  # float32 blocks, not float64 sums
    assert vectors.shape[2] == 2 * window[-1][0] * window[-1][1]


def _observe_both(monkeypatch, arrays, axes, bins=8192):
    from lowbit.quant import observers

    native = observers.StatsObserver("x", bins, axes)
    for a in arrays:
        native.observe(a)
    with monkeypatch.context() as m:
        m.setattr(observers, "_native", lambda: False)
        python = observers.StatsObserver("x", bins, axes)
        for a in arrays:
            python.observe(a)
    return native, python


def _same_stats(a, b) -> None:
    for field in ("count", "zeros", "nan", "posinf", "neginf", "min", "max"):
        assert getattr(a, field) == getattr(b, field), field
    ha, hb = a.histogram, b.histogram
    assert (ha is None) == (hb is None)
    if ha is not None:
        assert (ha.offset, ha.exponent) == (hb.offset, hb.exponent)
        np.testing.assert_array_equal(ha.counts, hb.counts)
    assert a.channels.keys() == b.channels.keys()
    for axis, ch in a.channels.items():
        other = b.channels[axis]
        for field in ("min", "max", "sum", "count"):
            np.testing.assert_array_equal(getattr(ch, field), getattr(other, field), field)


@pytest.mark.parametrize("seed", range(8))
def test_observers_equal_python(isa, monkeypatch, seed):
    """StatsObserver.observe through the C kernels equals the Python path: ranges, zeros,
    histogram bins (the window moving and widening between arrays) and channel sums, along no
    axis, one axis or every axis (a constant's statistics)."""
    rng = np.random.default_rng(300 + seed)
    ndim = int(rng.integers(1, 5))
    shape = tuple(int(d) for d in rng.integers(1, 9, ndim))
    axes = () if seed % 4 == 0 else tuple(range(ndim)) if seed % 4 == 1 else (
        int(rng.integers(-ndim, ndim)),)
    arrays = []
    for step in range(4):
        x = rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4) + step
        x[rng.random(shape) < 0.2] = 0.0
        arrays.append(x.astype(np.float32))
    native, python = _observe_both(monkeypatch, arrays, axes, bins=int(rng.choice([16, 8192])))
    _same_stats(native, python)


def test_observers_with_non_finite_values_equal_python(isa, monkeypatch):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    y = x.copy()
    y[1, 2, 3], y[0, 0, 0] = np.nan, -np.inf
    native, python = _observe_both(monkeypatch, [x, y, x * 3], (1,))
    _same_stats(native, python)
    assert native.nan == 1 and native.neginf == 1


@pytest.mark.parametrize("seed", range(4))
def test_gptq_columns_equal_python(isa, monkeypatch, seed):
    """GPTQ's codes with the column loop in C equal numpy's, rows longer than a block too."""
    from lowbit.quant import weight_rounding as wr

    rng = np.random.default_rng(400 + seed)
    groups, n, k = int(rng.integers(1, 4)), int(rng.integers(1, 20)), int(rng.integers(2, 300))
    rows = rng.standard_normal((groups, n, k))
    x = rng.standard_normal((groups, k, 3 * k))
    solver = wr._Solver(x @ x.transpose(0, 2, 1), 3 * k)
    scale = np.abs(rng.standard_normal((groups, n, 1))) * 0.02 + 1e-3
    zero = rng.integers(-3, 3, (groups, n, 1)).astype(np.float64)
    ordered = np.take_along_axis(rows, solver.order[:, None, :], 2).transpose(0, 2, 1)
    native = wr._gptq(ordered, scale, zero, -128, 127, solver.ratios)
    with monkeypatch.context() as m:
        m.setattr(wr, "_native", lambda: False)
        python = wr._gptq(ordered, scale, zero, -128, 127, solver.ratios)
    np.testing.assert_array_equal(native, python)


@pytest.mark.parametrize("groups, k", [(1, 700), (2, 400), (3, 1)])
def test_gridsum_add_upper_in_row_blocks_equals_python(isa, groups, k):
    """Large triangles are added by several tasks, each a block of rows."""
    rng = np.random.default_rng(k)
    square = _values(rng, (groups, k, k), np.float32)
    mine, ref = (GridSum((groups, k * (k + 1) // 2)) for _ in range(2))
    assert stats.gridsum_add_upper(mine, square)
    ref.add(square.reshape(groups, -1)[:, input_moments.upper_flat(k)])
    assert mine.equals(ref)


@pytest.mark.parametrize("seed", range(6))
def test_exactsum_add_equals_python(seed):
    """ExactSum.add in C (the observers' per-channel sums): the same limbs and tops, top rising
    between additions and per element, zeros and signed zeros kept out."""
    rng = np.random.default_rng(300 + seed)
    n = int(rng.choice([1, 3, 64, 1000]))
    mine, ref = ExactSum((n,)), ExactSum((n,))
    for step in range(5):
        x = _values(rng, (n,), np.float64) * (2.0 ** (rng.integers(-60, 60, n) * (step % 2)))
        x[rng.random(n) < 0.05] = -0.0
        stats.exactsum_add(mine, x)
        ref.add(x)
        np.testing.assert_array_equal(mine.top, ref.top)
        np.testing.assert_array_equal(mine.limbs, ref.limbs)
    assert mine.adds == ref.adds == 5
    np.testing.assert_array_equal(mine.value(), ref.value())
    bad = np.zeros(n)
    bad[-1] = np.inf
    with pytest.raises(ValueError, match="finite"):
        stats.exactsum_add(mine, bad)
    assert mine.adds == 5 and np.array_equal(mine.limbs, ref.limbs)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_maxabs_is_the_largest_magnitude_and_refuses_non_finite(dtype):
    """lb_stats_maxabs (the top window of every exact sum of the moments) for lengths around
    its vectors of running maxima (8 doubles, 16 floats) and their tails: the largest |x|
    wherever it sits, 0 for none (or only zeros of either sign); NaN or an infinity at any
    position makes it refuse."""
    import ctypes as C

    rng = np.random.default_rng(77)
    lib = stats._lib()
    for n in (0, 1, 7, 8, 9, 15, 16, 17, 23, 31, 32, 33, 64, 1001):
        zeros = np.zeros(n, dtype)
        zeros[::2] = -0.0
        out = C.c_double(-1.0)
        assert lib.lb_stats_maxabs(zeros.ctypes.data, int(dtype == np.float64), n, C.byref(out))
        assert out.value == 0.0 and not np.signbit(out.value)
        for where in [*range(0, max(n, 1), max(1, n // 5)), n - 1]:
            x = rng.standard_normal(n).astype(dtype)
            if n:
                x[where] = -1e3 * (1 + where)
            out = C.c_double(-1.0)
            assert lib.lb_stats_maxabs(x.ctypes.data, int(dtype == np.float64), n, C.byref(out))
            assert out.value == (float(np.abs(x).max()) if n else 0.0)
            for bad in (np.nan, np.inf, -np.inf):
                if n:
                    y = x.copy()
                    y[where] = bad
                    assert not lib.lb_stats_maxabs(y.ctypes.data, int(dtype == np.float64), n,
                                                   C.byref(out))


@pytest.mark.parametrize("seed", range(6))
def test_value_range_is_channel_stats_of_the_whole_tensor(isa, seed):
    """lb_range_f32 (16 lanes, no sum) gives the minimum, maximum and zero count the one-channel
    lb_observe_f32 gives, bits included: of 0 and -0 the one that comes first in memory order,
    also through an NHWC view; None for NaN or an infinity."""
    rng = np.random.default_rng(300 + seed)
    n = int(rng.choice([1, 15, 16, 17, 1000, 4099]))
    x = rng.standard_normal(n).astype(np.float32)
    x = -np.abs(x) if seed % 2 else np.abs(x)  # the maximum, or the minimum, is a zero
    zeros = rng.random(n) < 0.3
    x[zeros] = np.where(rng.random(int(zeros.sum())) < 0.5, 0.0, -0.0).astype(np.float32)
    shapes = [(n,), (1, n, 1, 1)]
    if n == 1000:
        nhwc = x.reshape(1, 10, 10, 10)
        shapes.append(nhwc.transpose(0, 3, 1, 2))
    for a in [x.reshape(s) if isinstance(s, tuple) else s for s in shapes]:
        lo, hi, _, count = stats.channel_stats(a, None)
        got = stats.value_range(a)
        assert got is not None
        assert (got[0], got[1], got[2]) == (lo[0], hi[0], count)
        assert (np.signbit(got[0]), np.signbit(got[1])) == (np.signbit(lo[0]), np.signbit(hi[0]))
    for bad in (np.nan, np.inf, -np.inf):
        y = x.copy()
        y[n // 2] = bad
        assert stats.value_range(y) is None

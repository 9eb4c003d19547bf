"""The float product kernels (lb_fgemm, runtime/rt_float_impl.h; lb_fgemm_fma,
runtime/rt_ffma_impl.h) and the input moments kernel (lb_moments_f32, runtime/rt_moments.c) on
random shapes, strides and thread counts, on every ISA path the machine runs.

lb_fgemm's definition (docs/cpu_backend.md): each result is its products, exact in double,
added in k order to one double, plus the bias, rounded once to float, then clamped. A numpy
loop over k reproduces it bit for bit. lb_fgemm_fma's: each result starts at +0 and takes its
products in k order by one float32 fused multiply-add each, then the bias by one float32
addition, then the clamp; a numpy loop over k with an exactly rounded fused multiply-add
(`fma32`) reproduces it bit for bit, and so do float Convs compiled with `fma_floats`.
lb_moments_f32 sums float32 blocks of 256 positions (one fused multiply-add a product) into
float64: checked against float64 to 1e-5 of the diagonal, and bit for bit across ISAs and
threads."""

from __future__ import annotations

import ctypes as C

import numpy as np
import pytest
from cpu_kernels import ISAS

from lowbit.backends.cpu import library as L
from lowbit.backends.cpu import stats
from lowbit.backends.cpu.codegen.ops_float import FMA_PANEL, fma_packed

_F = C.c_float


def fma32(a, b, c) -> np.ndarray:
    """float32(a * b + c) rounded once (fmaf), elementwise, for float32 operands: the sum in
    float64 (the product is exact there) with its rounding error (TwoSum), corrected where the
    float64 sum fell exactly on a float32 midpoint that the exact sum is not on."""
    a, b, c = (np.asarray(v, np.float32) for v in (a, b, c))
    with np.errstate(invalid="ignore", over="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)
        c64 = np.broadcast_to(c, p.shape).astype(np.float64)
        s = p + c64
        t = s - p
        err = (p - (s - t)) + (c64 - t)
        f = s.astype(np.float32)
        toward = np.nextafter(f, np.where(s > f, np.float32(np.inf), np.float32(-np.inf)))
        mid = (f.astype(np.float64) + toward.astype(np.float64)) / 2
        tie = np.isfinite(s) & (s == mid) & (err != 0) & (s != f)
    # on a midpoint float32(s) rounded to even; the exact sum lies on err's side of it
    fix = tie & ((err > 0) == (toward.astype(np.float64) > s))
    return np.where(fix, toward, f)


def test_fma32_rounds_once():
    """1 + 2^-23 + 2^-24 (1 - 2^-46): the float64 sum rounds onto the float32 midpoint and
    float32 of it to even, 1 + 2^-22; rounded once it is 1 + 2^-23."""
    a = np.float32(1 + 2.0**-23)
    b = np.float32(2.0**-24 * (1 - 2.0**-23))
    c = np.float32(1 + 2.0**-23)
    assert np.float32(np.float64(a) * np.float64(b) + np.float64(c)) == np.float32(1 + 2.0**-22)
    assert fma32(a, b, c) == np.float32(1 + 2.0**-23)
    assert fma32(-a, b, -c) == np.float32(-(1 + 2.0**-23))
    assert fma32(np.float32(3), np.float32(5), np.float32(-15)) == 0
    assert np.isnan(fma32(np.float32(np.inf), np.float32(0), np.float32(1)))


def _fgemm(ctx: L.Context, a: np.ndarray, b: np.ndarray, bias, lo: float, hi: float,
           ldc: int, kernel: str = "lb_fgemm") -> np.ndarray:
    """lb_fgemm (or `kernel`, with its arguments) on A [M, lda >= K] and B [N, ldb >= K] (the
    first K columns), into C with row stride ldc (the first N columns returned)."""
    fn = getattr(L.lib(), kernel)
    fn.restype = None
    fn.argtypes = [C.c_void_p, C.c_int64, C.c_int64, C.c_int64, C.c_void_p, C.c_int64,
                   C.c_void_p, C.c_int64, C.c_void_p, _F, _F, C.c_void_p, C.c_int64]
    m, n = a.shape[0], b.shape[0]
    k = min(a.shape[1], b.shape[1])
    out = np.full((m, ldc), np.nan, np.float32)
    fn(ctx.handle, m, n, k, a.ctypes.data, a.shape[1], b.ctypes.data, b.shape[1],
       None if bias is None else bias.ctypes.data, lo, hi, out.ctypes.data, ldc)
    assert np.isnan(out[:, n:]).all(), "wrote past the N columns"
    return out[:, :n]


def _reference(a: np.ndarray, b: np.ndarray, bias, lo: float, hi: float) -> np.ndarray:
    """The definition: products in double added in k order, the bias, one rounding, clamp."""
    k = min(a.shape[1], b.shape[1])
    a64, b64 = a[:, :k].astype(np.float64), b[:, :k].astype(np.float64)
    acc = np.zeros((a.shape[0], b.shape[0]))
    for i in range(k):
        acc += a64[:, i, None] * b64[None, :, i]
    if bias is not None:
        acc += bias.astype(np.float64)
    y = acc.astype(np.float32)
    return np.minimum(np.maximum(y, np.float32(lo)), np.float32(hi))


def _fma_reference(a: np.ndarray, b: np.ndarray, bias, lo: float, hi: float) -> np.ndarray:
    """lb_fgemm_fma's definition: +0, then a float32 fused multiply-add per k in order, then
    the bias in float32, then the clamp (`y < lo ? lo : y`, then `y > hi ? hi : y`)."""
    k = min(a.shape[1], b.shape[1])
    acc = np.zeros((a.shape[0], b.shape[0]), np.float32)
    for i in range(k):
        acc = fma32(a[:, i, None], b[None, :, i], acc)
    if bias is not None:
        acc = acc + bias
    acc = np.where(acc < np.float32(lo), np.float32(lo), acc)
    return np.where(acc > np.float32(hi), np.float32(hi), acc)


def _case(rng: np.random.Generator):
    m = int(rng.choice([1, 2, 5, 11, 12, 13, 40, 97, 400]))
    n = int(rng.choice([1, 3, 15, 16, 17, 33, 100]))
    k = int(rng.choice([0, 1, 7, 16, 255, 256, 257, 600]))
    a = rng.standard_normal((m, k + int(rng.integers(0, 3)))).astype(np.float32)
    b = rng.standard_normal((n, k + int(rng.integers(0, 3)))).astype(np.float32)
    a[rng.random(a.shape) < 0.1] = 0.0
    bias = rng.standard_normal(n).astype(np.float32) if rng.random() < 0.7 else None
    lo, hi = (-np.inf, np.inf) if rng.random() < 0.5 else (-1.0, 6.0)
    return a, b, bias, lo, hi, n + int(rng.integers(0, 4))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("seed", range(10))
def test_fgemm_equals_its_definition(isa, seed):
    rng = np.random.default_rng(seed)
    a, b, bias, lo, hi, ldc = _case(rng)
    want = _reference(a, b, bias, lo, hi)
    for threads in (1, 2):
        got = _fgemm(L.context(threads, isa), a, b, bias, lo, hi, ldc)
        np.testing.assert_array_equal(got, want, err_msg=f"{isa}, {threads} threads, "
                                      f"{a.shape} x {b.shape}")
    if a.shape[1] and b.shape[1]:  # and so within float rounding of a float64 product
        k = min(a.shape[1], b.shape[1])
        exact = a[:, :k].astype(np.float64) @ b[:, :k].T.astype(np.float64)
        exact = np.clip(exact + (0 if bias is None else bias), lo, hi)
        np.testing.assert_allclose(want, exact, rtol=1e-5, atol=1e-5 * np.abs(exact).max())


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("seed", range(10))
def test_fgemm_fma_equals_its_definition(isa, seed):
    rng = np.random.default_rng(100 + seed)
    a, b, bias, lo, hi, ldc = _case(rng)
    want = _fma_reference(a, b, bias, lo, hi)
    for threads in (1, 2):
        got = _fgemm(L.context(threads, isa), a, b, bias, lo, hi, ldc, "lb_fgemm_fma")
        np.testing.assert_array_equal(got, want, err_msg=f"{isa}, {threads} threads, "
                                      f"{a.shape} x {b.shape}")
    k = min(a.shape[1], b.shape[1])
    if k:  # within float32 rounding of the float64 product (each step's error < 2^-24 of
        # the partial sum, so below K 2^-24 of the sum of |products|)
        a64, b64 = a[:, :k].astype(np.float64), b[:, :k].T.astype(np.float64)
        exact = np.clip(a64 @ b64 + (0 if bias is None else bias), lo, hi)
        bound = k * 2.0**-24 * (np.abs(a64) @ np.abs(b64) + (0 if bias is None else
                                                              np.abs(bias))) + 1e-30
        assert (np.abs(want - exact) <= bound).all()


def _fgemm_packed(ctx: L.Context, a: np.ndarray, b: np.ndarray, bias, lo: float, hi: float,
                  ldc: int) -> np.ndarray:
    """lb_fgemm_fma_packed with B [N, >= K] packed by the codegen's `fma_packed`."""
    fn = L.lib().lb_fgemm_fma_packed
    fn.restype = None
    fn.argtypes = [C.c_void_p, C.c_int64, C.c_int64, C.c_int64, C.c_void_p, C.c_int64,
                   C.c_void_p, C.c_void_p, _F, _F, C.c_void_p, C.c_int64]
    m, n = a.shape[0], b.shape[0]
    k = min(a.shape[1], b.shape[1])
    packed = fma_packed(b[:, :k])
    out = np.full((m, ldc), np.nan, np.float32)
    fn(ctx.handle, m, n, k, a.ctypes.data, a.shape[1], packed.ctypes.data,
       None if bias is None else bias.ctypes.data, lo, hi, out.ctypes.data, ldc)
    assert np.isnan(out[:, n:]).all(), "wrote past the N columns"
    return out[:, :n]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("seed", range(8))
def test_fgemm_fma_packed_equals_its_definition(isa, seed):
    """B packed ahead of the calls gives lb_fgemm_fma's bits: N off and on panel multiples,
    K over several blocks, one row (the classifier's Gemm, split by columns) and many."""
    rng = np.random.default_rng(300 + seed)
    a, b, bias, lo, hi, ldc = _case(rng)
    if seed % 2:  # a wide one-row product, split across tasks by columns
        k = int(rng.choice([5, 300]))
        n = int(rng.choice([64, 150, 333]))
        a = rng.standard_normal((1, k)).astype(np.float32)
        b = rng.standard_normal((n, k)).astype(np.float32)
        bias, ldc = rng.standard_normal(n).astype(np.float32), n + 1
    want = _fma_reference(a, b, bias, lo, hi)
    for threads in (1, 2, 4):
        got = _fgemm_packed(L.context(threads, isa), a, b, bias, lo, hi, ldc)
        np.testing.assert_array_equal(got, want, err_msg=f"{isa}, {threads} threads, "
                                      f"{a.shape} x {b.shape}")


def test_fma_packed_layout():
    """packed[(n // P * K + k) * P + n % P] = B[n, k], zero past N."""
    b = np.arange(35 * 3, dtype=np.float32).reshape(35, 3) + 1
    packed = fma_packed(b)
    p = FMA_PANEL
    assert packed.shape == (2 * p * 3,)
    for n in range(2 * p):
        for k in range(3):
            assert packed[(n // p * 3 + k) * p + n % p] == (b[n, k] if n < 35 else 0)


def test_fgemm_fma_is_not_the_double_sum():
    """The two definitions differ (else the tests above could not tell them apart): a long
    sum of products of mixed signs rounds differently in float32 steps."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((40, 600)).astype(np.float32)
    b = rng.standard_normal((16, 600)).astype(np.float32)
    ctx = L.context(1, ISAS[0])
    fma = _fgemm(ctx, a, b, None, -np.inf, np.inf, 16, "lb_fgemm_fma")
    double = _fgemm(ctx, a, b, None, -np.inf, np.inf, 16)
    assert (fma != double).mean() > 0.5


def test_fgemm_keeps_signed_zeros_and_nan():
    a = np.array([[-0.0, -0.0], [np.nan, 1.0]], np.float32)
    b = np.array([[1.0, 1.0]], np.float32)
    for isa in ISAS:
        got = _fgemm(L.context(1, isa), a, b, None, -np.inf, np.inf, 1)
        want = _reference(a, b, None, -np.inf, np.inf)
        assert np.signbit(got[0, 0]) == np.signbit(want[0, 0]) and np.isnan(got[1, 0])
        got = _fgemm(L.context(1, isa), a, b, None, -np.inf, np.inf, 1, "lb_fgemm_fma")
        want = _fma_reference(a, b, None, -np.inf, np.inf)
        assert np.signbit(got[0, 0]) == np.signbit(want[0, 0]) and np.isnan(got[1, 0])


@pytest.fixture(params=ISAS)
def isa(request, monkeypatch):
    monkeypatch.setenv(L.ISA_ENV, request.param)
    return request.param


def _moments(rows: np.ndarray) -> np.ndarray:
    c = rows.shape[1]
    upper = np.zeros(c * (c + 1) // 2)
    stats.moments_upper(rows, upper)
    return upper


@pytest.mark.parametrize("seed", range(8))
def test_moments_upper_is_the_product_of_the_rows(isa, seed):
    rng = np.random.default_rng(50 + seed)
    p = int(rng.choice([1, 5, 255, 256, 257, 700]))
    c = int(rng.choice([1, 2, 6, 13, 16, 17, 40, 97]))
    x = (rng.standard_normal((p, c)) * np.exp2(rng.integers(-6, 6, (1, c)))).astype(np.float32)
    x[rng.random(x.shape) < 0.2] = 0.0
    layouts = {"rows": x, "columns": np.ascontiguousarray(x.T).T,
               "strided": np.repeat(x, 2, axis=1)[:, ::2]}
    exact = (x.astype(np.float64).T @ x.astype(np.float64))[np.triu_indices(c)]
    scale = float(np.max(np.diag(x.astype(np.float64).T @ x.astype(np.float64)), initial=0))
    first = None
    for name, rows in layouts.items():
        got = _moments(rows)
        np.testing.assert_allclose(got, exact, rtol=0, atol=1e-5 * scale + 1e-30,
                                   err_msg=f"{isa} {name} {x.shape}")
        first = got if first is None else first
        np.testing.assert_array_equal(got, first, err_msg=f"{isa} {name}: layout changed bits")
    upper = np.ones_like(first)
    stats.moments_upper(x, upper)  # adds to what is there
    np.testing.assert_array_equal(upper, first + 1.0)


def test_moments_upper_same_bits_on_every_isa_and_thread_count(monkeypatch):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1000, 70)).astype(np.float32)
    results = []
    for name in ISAS:
        monkeypatch.setenv(L.ISA_ENV, name)
        results.append(_moments(x))
        stats.single_threaded()  # this thread's later calls: one thread
        results.append(_moments(x))
        stats._local.single = False
    for got in results[1:]:
        np.testing.assert_array_equal(got, results[0])


@pytest.mark.parametrize("seed", range(6))
def test_moments_block_is_what_moments_upper_adds_to_zeros(isa, seed):
    """One block of vectors in float32 (lb_moments_block_f32) holds exactly the values
    lb_moments_f32 adds to a triangle of zeros, in every layout; NaN left in the output
    buffer from before is overwritten everywhere."""
    rng = np.random.default_rng(90 + seed)
    p = int(rng.choice([1, 7, 49, 255, 256]))
    c = int(rng.choice([1, 5, 16, 17, 70, 130]))
    x = (rng.standard_normal((p, c)) * np.exp2(rng.integers(-6, 6, (1, c)))).astype(np.float32)
    x[rng.random(x.shape) < 0.2] = 0.0
    want = _moments(x)
    for rows in (x, np.ascontiguousarray(x.T).T, np.repeat(x, 2, axis=1)[:, ::2]):
        got = np.full(c * (c + 1) // 2, np.nan, np.float32)
        stats.moments_block(rows, got)
        np.testing.assert_array_equal(got.astype(np.float64), want, err_msg=f"{isa} {x.shape}")


@pytest.mark.parametrize("p, c", [(49, 200), (3, 129), (256, 64)])
def test_moments_block_whole_tile_rows_equal_moments_upper(isa, p, c):
    """Rows of tiles wholly right of the diagonal (stored straight from the registers) and the
    diagonal and last tiles (stored in part) hold what lb_moments_f32 adds to zeros."""
    rng = np.random.default_rng(p * 1000 + c)
    x = (rng.standard_normal((p, c)) * np.exp2(rng.integers(-6, 6, (1, c)))).astype(np.float32)
    got = np.full(c * (c + 1) // 2, np.nan, np.float32)
    stats.moments_block(x, got)
    np.testing.assert_array_equal(got.astype(np.float64), _moments(x), err_msg=f"{isa}")


@pytest.mark.parametrize("seed", range(4))
def test_gridsum_add_many_equals_one_add_each(isa, seed):
    """Several float32 arrays added in one pass over the limbs give the limbs of one
    GridSum.add each, in order, whatever the grouping (the top rising between them too);
    arrays from the first one holding a NaN or an infinity on are not added."""
    from lowbit.numerics.exact_sum import GridSum

    rng = np.random.default_rng(120 + seed)
    n = int(rng.choice([1, 9, 5000, 140001]))
    arrays = [(rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))
               * 2.0 ** (25 * step)).astype(np.float32) for step in range(4)]
    arrays[1][rng.random(n) < 0.5] = 0.0
    arrays.insert(2, np.zeros(n, np.float32))
    ref = GridSum((n,))
    for a in arrays:
        ref.add(a)
    for split in (1, 2, 5):
        got = GridSum((n,))
        for start in range(0, len(arrays), split):
            assert stats.gridsum_add_many(got, arrays[start:start + split]) == \
                len(arrays[start:start + split])
        assert got.equals(ref) and got.adds == ref.adds, f"{isa}: groups of {split}"
    bad = [arrays[0], arrays[3].copy(), arrays[4]]
    bad[1][n // 2] = np.inf
    got, want = GridSum((n,)), GridSum((n,))
    want.add(arrays[0])
    assert stats.gridsum_add_many(got, bad) == 1
    assert got.equals(want) and got.adds == want.adds


def _float_conv_model(path, rng: np.random.Generator, groups: int, cin: int, cout: int,
                      kernel: int, stride: int, pad: int, size: int, clip: bool):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = rng.standard_normal((cout, cin // groups, kernel, kernel)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", group=groups,
                              strides=[stride, stride], pads=[pad] * 4)]
    if clip:
        nodes.append(helper.make_node("Relu", ["c"], ["y"], name="relu"))
    else:
        nodes.append(helper.make_node("Identity", ["c"], ["y"], name="same"))
    g = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [None, cin, size, size])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w"),
                                             numpy_helper.from_array(b, "b")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def _fma_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray, groups: int, stride: int, pad: int,
              relu: bool) -> np.ndarray:
    """A float Conv by lb_fgemm_fma's definition: each output from +0 takes its products by
    float32 fused multiply-adds, taps in (row, column) order and within a tap the group's
    input channels in order (padding: zeros times the weight), then the bias, then Relu."""
    n, _, h, wd = x.shape
    cout, cg, kh, kw = w.shape
    mg = cout // groups
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    acc = np.zeros((n, cout, oh, ow), np.float32)
    for m in range(cout):
        g = m // mg
        for ky in range(kh):
            for kx in range(kw):
                for ci in range(cg):
                    tap = xp[:, g * cg + ci, ky:ky + stride * oh:stride, kx:kx + stride * ow:stride]
                    acc[:, m] = fma32(tap, w[m, ci, ky, kx], acc[:, m])
    acc = acc + b.reshape(1, -1, 1, 1)
    return np.where(acc < 0, np.float32(0), acc) if relu else acc


@pytest.mark.parametrize("fma", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_float_convolutions_same_bits_on_every_isa(tmp_path, seed, fma):
    """Float Conv (1x1, k x k, grouped, depthwise: the tiled product and the depthwise
    kernel): within 1e-5 of the reference interpreter, and the same bits on every ISA and
    thread count; with `fma_floats`, the bits of the float32 chain's definition."""
    import onnx

    import lowbit
    from lowbit.backends import cpu

    rng = np.random.default_rng(900 + seed)
    kind = ["pointwise", "dense", "grouped", "depthwise"][seed % 4]
    cin = int(rng.choice([3, 8, 16, 33, 70]))
    groups = {"grouped": 1 if cin % 2 else 2, "depthwise": cin}.get(kind, 1)
    cout = cin if kind == "depthwise" else int(rng.choice([5, 16, 40]))
    kernel = 1 if kind == "pointwise" else int(rng.choice([3, 5]))
    stride, pad = (1, 0) if kind == "pointwise" else (int(rng.integers(1, 3)), kernel // 2)
    path = tmp_path / "conv.onnx"
    relu = bool(seed % 2)
    _float_conv_model(path, rng, groups, cin, cout, kernel, stride, pad,
                      int(rng.integers(5, 20)), relu)
    graph = lowbit.load(path)
    x = {"x": rng.standard_normal((int(rng.integers(1, 3)), cin, *graph.inputs[0].type.shape[2:])
                                  ).astype(np.float32)}
    want = lowbit.run(graph, x)["y"]
    if fma:
        weights = {t.name: onnx.numpy_helper.to_array(t)
                   for t in onnx.load(path).graph.initializer}
        defined = _fma_conv(x["x"], weights["w"], weights["b"], groups, stride, pad, relu)
    first = None
    for name in ISAS:
        for threads in (1, 2):
            got = cpu.compile(graph, isa=name, threads=threads, fma_floats=fma)(x)["y"]
            np.testing.assert_allclose(got, want, rtol=1e-5,
                                       atol=1e-5 * float(np.abs(want).max()),
                                       err_msg=f"{kind} on {name}")
            first = got if first is None else first
            np.testing.assert_array_equal(got, first, err_msg=f"{kind}: {name} differs")
            if fma:
                np.testing.assert_array_equal(got, defined, err_msg=f"{kind} on {name}")

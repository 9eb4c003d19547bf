"""The int8 product of the cpu backend's C library against numpy, on every ISA path this CPU
has (scalar, AVX2, AVX-512 VNNI, AMX-INT8): random shapes (tile edges in M, N and K), zero points,
multipliers and both requantization encodings must give the reference's integers exactly."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_kernels import PRODUCT_ISAS, qgemm, reference_product, reference_requant

from lowbit.backends.cpu import library as L
from lowbit.backends.cpu import packing
from lowbit.numerics import fixed_point

RNG = np.random.default_rng(0)


def _case(rng, m, n, k, *, unsigned_w=False, per_channel=True, method="q31", out_bits=8):
    a = rng.integers(0, 256, (m, k), dtype=np.int64).astype(np.uint8)
    za = int(rng.integers(0, 256))
    if unsigned_w:
        w_codes = rng.integers(0, 256, (n, k)).astype(np.uint8)
        zw_codes = rng.integers(0, 256, n if per_channel else ())
    else:
        w_codes = rng.integers(-128, 128, (n, k)).astype(np.int8)
        zw_codes = np.zeros(n if per_channel else (), np.int64)
    w, zw = packing.weights_int8(w_codes, zw_codes)
    bias = rng.integers(-50000, 50000, n)
    span = 2.0 ** rng.uniform(-22, 1, n if per_channel else ())
    params = fixed_point.encode(span, method, output_bits=out_bits)
    return a, za, w, zw, bias, params


@pytest.mark.parametrize("isa", PRODUCT_ISAS)
@pytest.mark.parametrize("method", ["q31", "prescale"])
def test_qgemm_matches_numpy_on_random_shapes(isa, method):
    ctx = L.Context(1, isa)
    for trial in range(60):
        m, n, k = (int(v) for v in RNG.integers(1, [30, 90, 200]))
        unsigned_w = trial % 3 == 0
        a, za, w, zw, bias, params = _case(RNG, m, n, k, unsigned_w=unsigned_w,
                                            per_channel=trial % 2 == 0, method=method)
        zp = int(RNG.integers(0, 256))
        lo, hi = sorted(int(v) for v in RNG.integers(0, 256, 2))
        lo, hi = min(lo, zp), max(hi, zp)
        rq = packing.requant_arrays(params, zp, lo, hi, n)
        got = qgemm(ctx, a, za, w, zw, bias, rq, L.U8)
        acc = reference_product(a, za, w, zw, bias)
        want = reference_requant(acc, params, zp, 0, 255, (lo, hi))
        np.testing.assert_array_equal(got, want, err_msg=f"{isa} trial {trial} {m}x{n}x{k}")


@pytest.mark.parametrize("isa", PRODUCT_ISAS)
def test_qgemm_int16_output_raw_and_float(isa):
    ctx = L.Context(1, isa)
    for _ in range(20):
        m, n, k = (int(v) for v in RNG.integers(1, [20, 70, 150]))
        a, za, w, zw, bias, params = _case(RNG, m, n, k, method="q31", out_bits=16)
        acc = reference_product(a, za, w, zw, bias)
        zp = int(RNG.integers(-100, 100))
        rq = packing.requant_arrays(params, zp, -32768, 32767, n)
        got = qgemm(ctx, a, za, w, zw, bias, rq, L.I16)
        want = reference_requant(acc, params, zp, -32768, 32767, (-32768, 32767))
        np.testing.assert_array_equal(got, want)
        raw = qgemm(ctx, a, za, w, zw, bias, rq, L.I32)
        np.testing.assert_array_equal(raw, acc)
        scale = RNG.uniform(1e-5, 1e-2, n)
        fl = qgemm(ctx, a, za, w, zw, bias, packing.dequant_arrays(scale, n, 0.0, np.inf),
                   L.F32)
        want_f = np.clip((acc.astype(np.float64) * scale).astype(np.float32), 0.0, np.inf)
        np.testing.assert_array_equal(fl, want_f)


@pytest.mark.parametrize("isa", PRODUCT_ISAS)
@pytest.mark.parametrize("m, k", [(7, 1000), (40, 3000)])
def test_qgemm_saturated_inputs_do_not_saturate_the_products(isa, m, k):
    """255 x -128 and 255 x 127 over a long reduction (`vpmaddubsw` would saturate here); at
    K = 3000 in every lane of full 16 x 16 AMX tiles (-97.9 million, exact in int32), with a K
    step of 64 cut short."""
    ctx = L.Context(1, isa)
    a = np.full((m, k), 255, np.uint8)
    w = np.stack([np.full(k, -128, np.int8), np.full(k, 127, np.int8)] * 17)
    rq = packing.requant_arrays(fixed_point.encode(1.0, "q31"), 0, -(2**31), 2**31 - 1, 34)
    raw = qgemm(ctx, a, 0, w, 0, None, rq, L.I32)
    np.testing.assert_array_equal(raw, reference_product(a, 0, w, 0, None))


@pytest.mark.parametrize("isa", PRODUCT_ISAS)
def test_qgemm_threads_split_work_without_changing_results(isa):
    ctx1, ctx2 = L.Context(1, isa), L.Context(2, isa)
    for _ in range(5):
        m, n, k = (int(v) for v in RNG.integers([50, 100, 64], [300, 400, 300]))
        a, za, w, zw, bias, params = _case(RNG, m, n, k, method="prescale")
        rq = packing.requant_arrays(params, 3, 0, 255, n)
        np.testing.assert_array_equal(qgemm(ctx1, a, za, w, zw, bias, rq, L.U8),
                                      qgemm(ctx2, a, za, w, zw, bias, rq, L.U8))


def _at_offset(a: np.ndarray, offset: int) -> np.ndarray:
    """A copy of `a` whose data starts `offset` bytes past a 64-byte boundary."""
    raw = np.empty(a.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    out = raw[start:start + a.nbytes].reshape(a.shape)
    out[...] = a
    return out


@pytest.mark.parametrize("isa", PRODUCT_ISAS)
def test_qgemm_copies_of_a_belong_to_one_call(isa):
    """On AMX each thread copies its task's rows of A (zero-padded, aligned) once and keeps the
    copy for its next tasks of the same call (two threads split a 128-row product's columns
    into several tasks each), or loads A itself when it is 64-byte aligned with whole K steps.
    A second call on the same buffer with new contents, or with other rows, must not reuse the
    copy. int32 results (the AMX tiles then start from the column constants and are stored
    straight into C) with and without the row-sum term, and uint8, against numpy."""
    ctx1, ctx2 = L.Context(1, isa), L.Context(2, isa)
    rng = np.random.default_rng(128)
    cases = [(128, 200, 768, 0), (128, 200, 768, 3), (128, 330, 100, 0), (112, 96, 640, 17),
             (250, 64, 192, 5), (256, 48, 128, 0), (128, 40, 64, 1)]
    for trial, (m, n, k, offset) in enumerate(cases):
        a0, za, w, zw, bias, params = _case(rng, m, n, k, unsigned_w=trial % 3 == 2,
                                             method="prescale")
        a = _at_offset(a0, offset)
        rq = packing.requant_arrays(params, 5, 0, 255, n)
        for ctx in (ctx2, ctx1, ctx2):
            for _ in range(2):  # the same buffer, new contents
                a[...] = rng.integers(0, 256, a.shape)
                acc = reference_product(a, za, w, zw, bias)
                got = qgemm(ctx, a, za, w, zw, bias, rq, L.I32)
                np.testing.assert_array_equal(got, acc, err_msg=f"{isa} {m}x{n}x{k} int32")
                got = qgemm(ctx, a, za, w, zw, bias, rq, L.U8)
                want = reference_requant(acc, params, 5, 0, 255, (0, 255))
                np.testing.assert_array_equal(got, want, err_msg=f"{isa} {m}x{n}x{k} uint8")


@pytest.mark.parametrize("isa", PRODUCT_ISAS)
def test_qgemm_requantization_edges(isa):
    """Tiny and huge multipliers, accumulators at the int32 limits, both encodings."""
    ctx = L.Context(1, isa)
    k = 1
    acc_values = np.array([0, 1, -1, 2**31 - 1, -(2**31), 2**30, -(2**30) - 1, 12345, -12345,
                           2**24 + 1, -(2**24) - 1, 255, -256], np.int64)
    m = acc_values.size
    for method, bits in (("q31", 8), ("prescale", 8), ("q31", 16), ("prescale", 16)):
        for M in (2.0**-40, 2.0**-32, 2.0**-31, 1e-9, 0.3, 0.5, 0.75, 0.999999, 1.0, 1.5, 7.0,
                  2.0**20, 2.0**31):
            params = fixed_point.encode(M, method, output_bits=bits)
            qmin, qmax = (0, 255) if bits == 8 else (-32768, 32767)
            zp = 5 if bits == 8 else -7
            rq = packing.requant_arrays(params, zp, qmin, qmax, 1)
            # acc = a * w + offset with a = 1, w = 1: put the value in the bias
            a = np.ones((m, k), np.uint8)
            w = np.ones((1, k), np.int8)
            got = []
            for v in acc_values:
                out = qgemm(ctx, a[:1], 0, w, 0, np.array([v - 1]), rq,
                            L.U8 if bits == 8 else L.I16)
                got.append(int(out[0, 0]))
            want = fixed_point.requantize(acc_values.reshape(-1, 1), params, zp, qmin, qmax)
            assert got == [int(x) for x in want.reshape(-1)], (method, bits, M)


def _bounded_emulation(acc_raw: np.ndarray, b: np.ndarray, rq: packing.RequantArrays,
                       c: int) -> np.ndarray:
    """lb_epilogue.bounded's formula for channel c in wrapping int32 arithmetic, as the
    VNNI kernels compute it."""
    blk = b.reshape(-1, 4, 16)[c // 16, :, c % 16].astype(np.int64)
    lo, hi, add, cst = blk
    pre, scale, post = (int(p[c]) for p in rq.p[:3])
    x = packing.wrap_int32(acc_raw + add).astype(np.int64)
    t = np.clip(x, lo, hi) >> pre
    return packing.wrap_int32(t * scale + cst).astype(np.int64) >> post


def test_bounded_requantization_equals_prescale_around_every_edge():
    """packing.bounded_arrays' formula against fixed_point.requantize, per channel, on
    accumulators around each channel's saturation points, the clip, the folded offset and
    the int32 limits (pre-shifts, per-channel offsets of any size, narrowed output ranges)."""
    rng = np.random.default_rng(7)
    used = {"plain": 0, "shifted": 0}
    for trial in range(300):
        n = int(rng.integers(1, 40))
        real = 2.0 ** rng.uniform(-34, 0.2, n)
        params = fixed_point.encode(real, "prescale", output_bits=8)
        zp = int(rng.integers(0, 256))
        lo, hi = sorted(int(v) for v in rng.integers(0, 256, 2))
        lo, hi = min(lo, zp), max(hi, zp)
        rq = packing.requant_arrays(params, zp, lo, hi, n)
        raw_bound = int(rng.choice([255 * 128 * 3, 255 * 128 * 5000]))
        offset = rng.integers(-(2**31) + raw_bound, 2**31 - raw_bound, n)
        offset[rng.random(n) < 0.3] = rng.integers(-100000, 100000)
        b = packing.bounded_arrays(rq, packing.padded(offset, np.int32), n, raw_bound)
        if b is None:
            assert np.any(params.scale > (1 << params.post)), trial
            continue
        for c in range(n):
            pre, scale, post = (int(p[c]) for p in rq.p[:3])
            edges = [0, 1, -1, int(rq.p[3][c]), -int(rq.p[3][c])]
            if scale:
                for q in (lo, hi, zp):  # x where y + zp crosses q
                    edges.append(((q - zp) << (post + pre)) // scale)
            near = np.arange(-3 << pre, (3 << pre) + 1, max(1, (1 << pre) // 2))
            xs = np.array(edges, np.int64)[:, None] + near
            xs = np.concatenate([xs.reshape(-1), rng.integers(-raw_bound, raw_bound, 200)])
            acc = np.clip(xs - offset[c], -raw_bound, raw_bound)  # raw sums the kernel sees
            x = acc + offset[c]
            ok = (x >= fixed_point.INT32_MIN) & (x <= fixed_point.INT32_MAX)
            acc, x = acc[ok], x[ok]
            one = fixed_point.PrescaleParams(params.pre[c], params.scale[c], params.post[c],
                                             params.clip[c], 8, params.real[c])
            want = fixed_point.requantize(x, one, zp, lo, hi)
            got = _bounded_emulation(acc, b, rq, c)
            np.testing.assert_array_equal(got, want, err_msg=f"trial {trial} channel {c}")
            blk = b.reshape(-1, 4, 16)[c // 16, :, c % 16]
            used["plain" if blk[2] == 0 and pre == 0 else "shifted"] += 1
    assert used["plain"] > 100 and used["shifted"] > 100, used


@pytest.mark.parametrize("isa", PRODUCT_ISAS)
def test_qgemm_bounded_epilogue_matches_numpy(isa):
    """The epilogue's bounded form (read by the VNNI kernel; the others ignore it) gives the
    reference's codes: random shapes, pre-shifts, narrowed output ranges."""
    ctx = L.Context(1, isa)
    rng = np.random.default_rng(3)
    for trial in range(60):
        m, n, k = (int(v) for v in rng.integers(1, [30, 90, 200]))
        a, za, w, zw, bias, _ = _case(rng, m, n, k, unsigned_w=trial % 3 == 0)
        params = fixed_point.encode(2.0 ** rng.uniform(-24, -1, n), "prescale", output_bits=8)
        zp = int(rng.integers(0, 256))
        lo, hi = sorted(int(v) for v in rng.integers(0, 256, 2))
        lo, hi = min(lo, zp), max(hi, zp)
        rq = packing.requant_arrays(params, zp, lo, hi, n)
        got = qgemm(ctx, a, za, w, zw, bias, rq, L.U8, bounded=True)
        want = reference_requant(reference_product(a, za, w, zw, bias), params, zp, 0, 255,
                                 (lo, hi))
        np.testing.assert_array_equal(got, want, err_msg=f"{isa} trial {trial} {m}x{n}x{k}")


@pytest.mark.parametrize("isa", PRODUCT_ISAS)
@pytest.mark.parametrize("bounded", [False, True])
def test_qgemm_last_column_block_of_at_most_8_columns(isa, bounded):
    """A last block of 1-8 columns (the VNNI kernel computes it 256 bits wide) and of 9-16
    (full width) next to it, in each of the 4 column blocks of a tile, with every row edge
    and K with and without its last 1-3 steps, give the reference's codes."""
    ctx = L.Context(1, isa)
    rng = np.random.default_rng(18)
    for n in (1, 7, 8, 9, 16, 24, 25, 40, 56, 64, 72, 88, 120):
        for m in (1, 5, 6, 7, 13):
            k = int(rng.choice([4, 16, 37, 96, 130]))
            a, za, w, zw, bias, _ = _case(rng, m, n, k, unsigned_w=n % 3 == 0)
            params = fixed_point.encode(2.0 ** rng.uniform(-20, -4, n), "prescale",
                                        output_bits=8)
            zp = int(rng.integers(0, 256))
            rq = packing.requant_arrays(params, zp, 0, 255, n)
            got = qgemm(ctx, a, za, w, zw, bias, rq, L.U8, bounded=bounded)
            want = reference_requant(reference_product(a, za, w, zw, bias), params, zp, 0, 255,
                                     (0, 255))
            np.testing.assert_array_equal(got, want, err_msg=f"{isa} {m}x{n}x{k}")


@pytest.mark.parametrize("isa", PRODUCT_ISAS)
def test_qgemm_tile_edges_of_16_rows_and_64_bytes(isa):
    """Shapes around the AMX kernel's tiles (16 rows, 16 columns, K steps of 64 bytes; 2 x 2
    tiles; copies of A of up to 128 rows, on the stack or, for long rows, the heap; the rows
    past a multiple of 16 on the VNNI kernel), every output kind and zero points on both
    sides, against numpy on every path."""
    ctx = L.Context(1, isa)
    rng = np.random.default_rng(64)
    shapes = [(m, n, k) for m in (16, 17, 31, 32, 33, 48, 97) for n, k in
              ((1, 1), (15, 3), (16, 64), (17, 65), (33, 60), (40, 127), (70, 200))]
    shapes += [(96, 33, 1000), (100, 20, 1600), (64, 17, 3100), (130, 48, 768)]
    # one task of 128 rows: copied at once (heap, stack), each output kind
    shapes += [(128, 40, 768), (128, 70, 130), (128, 48, 700), (112, 20, 333)]
    for trial, (m, n, k) in enumerate(shapes):
        a, za, w, zw, bias, params = _case(rng, m, n, k, unsigned_w=trial % 2 == 1,
                                            method=("q31", "prescale")[trial % 2])
        acc = reference_product(a, za, w, zw, bias)
        kind = trial % 4
        if kind == 0:
            got, want = qgemm(ctx, a, za, w, zw, bias, packing.requant_arrays(
                params, 0, 0, 255, n), L.I32), acc
        elif kind == 1:
            rq = packing.requant_arrays(params, 9, 0, 255, n)
            got = qgemm(ctx, a, za, w, zw, bias, rq, L.U8)
            want = reference_requant(acc, params, 9, 0, 255, (0, 255))
        elif kind == 2:
            scale = rng.uniform(1e-5, 1e-2, n)
            got = qgemm(ctx, a, za, w, zw, bias, packing.dequant_arrays(scale, n, -np.inf,
                                                                         np.inf), L.F32)
            want = (acc.astype(np.float64) * scale).astype(np.float32)
        else:
            params = fixed_point.encode(2.0 ** rng.uniform(-24, -4, n), "prescale",
                                        output_bits=8)
            w = rng.integers(-128, 128, (n, k)).astype(np.int8)
            zw = np.zeros(n, np.int64)
            acc = reference_product(a, za, w, zw, bias)
            rq = packing.requant_arrays(params, 40, 3, 250, n)
            got = qgemm(ctx, a, za, w, zw, bias, rq, L.U8, bounded=True)
            want = reference_requant(acc, params, 40, 0, 255, (3, 250))
        np.testing.assert_array_equal(got, want, err_msg=f"{isa} {m}x{n}x{k} kind {kind}")



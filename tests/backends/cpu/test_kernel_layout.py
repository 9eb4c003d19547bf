"""The vector paths of the input-side kernels against the portable ones: Quantize into NHWC
(3-channel images, with NaN, infinities and halfway values) and im2col of short window rows,
on every ISA this machine supports, bit for bit."""

from __future__ import annotations

import ctypes as C

import numpy as np
from cpu_kernels import ISAS

from lowbit.backends.cpu import library as L


def _quantize_nhwc(isa: str, x: np.ndarray, per_channel: int, scale, zp) -> np.ndarray:
    f = L.lib().lb_quantize_f32_nhwc
    f.argtypes = [C.c_void_p, C.c_int64, C.c_int64, C.c_int64, C.c_void_p, C.c_int, C.c_void_p,
                  C.c_void_p, C.c_int32, C.c_int32, C.c_float, C.c_float, C.c_float, C.c_int32,
                  C.c_void_p]
    n, c, hw = x.shape
    out = np.zeros((n, hw, c), np.uint8)
    ctx = L.context(threads=2, isa=isa)
    f(ctx.handle, n, c, hw, x.ctypes.data, per_channel, scale.ctypes.data, zp.ctypes.data, 0,
      255, 0.0, -128.0, 127.0, L.U8, out.ctypes.data)
    return out


def test_quantize_into_nhwc_is_the_same_on_every_isa():
    rng = np.random.default_rng(0)
    for trial in range(60):
        n, hw = int(rng.integers(1, 3)), int(rng.integers(1, 700))
        x = (rng.standard_normal((n, 3, hw)) * rng.choice([1, 100, 1e6])).astype(np.float32)
        m = rng.random(x.shape)
        x[m < 0.02] = np.nan
        x[(m > 0.02) & (m < 0.04)] = np.inf
        x[(m > 0.04) & (m < 0.06)] = -np.inf
        halves = (m > 0.06) & (m < 0.1)
        x[halves] = 0.5 * rng.integers(-5, 5, size=int(halves.sum()))
        per_channel = int(rng.integers(0, 2))
        scale = (rng.random(3) * 0.1 + 1e-3).astype(np.float32) if per_channel else \
            np.full(3, rng.choice([0.5, 0.02, 1e-30]), np.float32)
        zp = rng.integers(0, 256, 3).astype(np.int32)
        want = _quantize_nhwc("scalar", x, per_channel, scale, zp)
        # the expression itself: rint(x / s) (NaN 0, infinities -128 / 127) + zp, clamped
        s = scale if per_channel else scale[:1]
        r = np.rint(x / s.reshape(1, -1, 1))
        r = np.where(np.isnan(r), 0, np.where(r == np.inf, 127, np.where(r == -np.inf, -128, r)))
        expect = np.clip(r + zp.reshape(1, -1, 1) if per_channel else r + zp[0], 0, 255)
        np.testing.assert_array_equal(want, expect.transpose(0, 2, 1).astype(np.uint8))
        for isa in ISAS:
            np.testing.assert_array_equal(_quantize_nhwc(isa, x, per_channel, scale, zp), want,
                                          err_msg=f"trial {trial} on {isa}")


def test_quantize_into_nhwc_near_ties_and_range_limits_is_the_division():
    """The AVX-512 kernel divides by multiplying with 1/s and correcting once where s and
    every lane of 16 lie inside its range (finite, |x| <= 2^60): values a few ulps around
    (k + 1/2) * s (the rounding ties), at and past the range limit, zeros, subnormals, in
    tails of every length, give rint(x / s) of the true division on every ISA."""
    rng = np.random.default_rng(7)
    for trial in range(40):
        hw = int(rng.integers(1, 300))
        scale = np.float32(2.0 ** rng.uniform(-34, 34)) if trial % 4 else \
            np.float32(rng.choice([2.0 ** -30, 2.0 ** 30, 2.0 ** -31, 0.0173]))
        k = rng.integers(-140, 140, (1, 3, hw)).astype(np.float32) + 0.5 * rng.integers(0, 2)
        x = (k * scale).astype(np.float32)
        x = (x.view(np.int32) + rng.integers(-3, 4, x.shape).astype(np.int32)).view(np.float32)
        x[~np.isfinite(x)] = 0.0  # -1 on the bits of +0 is a NaN
        m = rng.random(x.shape)
        edges = np.float32([2.0 ** -60, 2.0 ** 60, 2.0 ** 61, 0.0, -0.0, 1e-40, -3e38])
        pick = m < 0.03 * (trial % 3)  # some trials keep every lane in the quick path
        x[pick] = rng.choice(edges, int(pick.sum()))
        nudge = (m > 0.97) & (trial % 2 == 1)
        x[nudge] = (x[nudge].view(np.int32) + rng.integers(-1, 2, int(nudge.sum()))
                    .astype(np.int32)).view(np.float32)
        x[~np.isfinite(x)] = 0.0
        zp = np.full(3, 128, np.int32)
        s3 = np.full(3, scale, np.float32)
        with np.errstate(over="ignore"):
            r = np.rint(x / scale)
        expect = np.clip(r + 128, 0, 255).transpose(0, 2, 1).astype(np.uint8)
        for isa in ISAS:
            np.testing.assert_array_equal(_quantize_nhwc(isa, x, 0, s3, zp), expect,
                                          err_msg=f"trial {trial} on {isa}, scale {scale}")


class _Window(C.Structure):
    _fields_ = [(n, C.c_int64) for n in ("n", "ih", "iw", "c", "oh", "ow", "kh", "kw", "sh", "sw",
                                         "dh", "dw", "pt", "pl")]


def test_im2col_of_short_rows_is_the_same_on_every_isa():
    rng = np.random.default_rng(1)
    f = L.lib().lb_im2col_u8
    f.argtypes = [C.c_void_p, C.c_void_p, C.c_int64, C.c_int64, C.c_int64, C.c_void_p, C.c_uint8,
                  C.c_void_p]
    for trial in range(80):
        c = int(rng.integers(1, 9))
        kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        sh, sw = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        ih, iw = int(rng.integers(1, 20)), int(rng.integers(1, 20))
        pt, pl = int(rng.integers(0, kh)), int(rng.integers(0, kw))
        pb, pr = int(rng.integers(0, kh)), int(rng.integers(0, kw))
        oh, ow = (ih + pt + pb - kh) // sh + 1, (iw + pl + pr - kw) // sw + 1
        if oh < 1 or ow < 1:
            continue
        kp = -(-kh * kw * c // 4) * 4 + 4 * int(rng.integers(0, 2))
        w = _Window(1, ih, iw, c, oh, ow, kh, kw, sh, sw, 1, 1, pt, pl)
        x = rng.integers(0, 256, (ih, iw, c), dtype=np.uint8)
        pad = int(rng.integers(0, 256))
        outs = {}
        for isa in ISAS:
            out = np.full((oh * ow, kp), 77, np.uint8)
            f(L.context(threads=2, isa=isa).handle, C.byref(w), 1, c, kp, x.ctypes.data, pad,
              out.ctypes.data)
            outs[isa] = out
        xp = np.pad(x, ((pt, max(0, (oh - 1) * sh + kh - ih - pt)),
                        (pl, max(0, (ow - 1) * sw + kw - iw - pl)), (0, 0)),
                    constant_values=pad)
        want = np.full((oh * ow, kp), pad, np.uint8)
        for oy in range(oh):
            for ox in range(ow):
                win = xp[oy * sh:oy * sh + kh, ox * sw:ox * sw + kw]
                want[oy * ow + ox, :kh * kw * c] = win.reshape(-1)
        for isa, out in outs.items():
            np.testing.assert_array_equal(out, want, err_msg=f"trial {trial} on {isa}")


def _permute(threads: int, x: np.ndarray, axes: tuple) -> np.ndarray:
    """lb_permute: x transposed by `axes` (strides in elements of x's C-contiguous layout)."""
    f = L.lib().lb_permute
    f.restype = None
    f.argtypes = [C.c_void_p, C.c_int, C.c_void_p, C.c_void_p, C.c_int, C.c_void_p, C.c_void_p]
    shape = np.array([x.shape[a] for a in axes], np.int64)
    strides = np.array([x.strides[a] // x.itemsize for a in axes], np.int64)
    out = np.zeros(tuple(shape), x.dtype)
    f(L.context(threads=threads).handle, x.ndim, shape.ctypes.data, strides.ctypes.data,
      x.itemsize, x.ctypes.data, out.ctypes.data)
    return out


def test_permute_is_the_transpose():
    """NCHW -> NHWC of few channels (the blocked path: images, one and several) and of many,
    NHWC -> NCHW, and other permutations, of every element size, with 1 and 2 threads."""
    rng = np.random.default_rng(3)
    cases = [((1, 3, 224, 224), (0, 2, 3, 1)), ((2, 3, 33, 40), (0, 2, 3, 1)),
             ((3, 16, 5, 7), (0, 2, 3, 1)), ((1, 17, 30, 30), (0, 2, 3, 1)),
             ((2, 1, 9, 9), (0, 2, 3, 1)), ((1, 5, 1, 1), (0, 2, 3, 1)),
             ((1, 0, 4, 4), (0, 2, 3, 1)), ((2, 30, 30, 3), (0, 3, 1, 2)),
             ((4, 6, 5), (2, 0, 1)), ((3, 2000), (1, 0)), ((2, 3, 4, 5), (3, 1, 0, 2))]
    for dtype in (np.uint8, np.int16, np.float32, np.float64):
        for shape, axes in cases:
            x = (rng.standard_normal(shape) * 100).astype(dtype)
            for threads in (1, 2):
                np.testing.assert_array_equal(_permute(threads, x, axes), x.transpose(axes),
                                              err_msg=f"{dtype.__name__} {shape} {axes}")


def test_depth_to_space_moves_every_value_once():
    """lb_depth_to_space (DCR, NHWC) against numpy's reshape and transpose, for elements of 1,
    2 and 4 bytes, blocks 1 to 4 and runs of b x m values of every copy width (1 to 64 bytes
    and others), on every ISA path (the kernel is one portable function)."""
    f = L.lib().lb_depth_to_space
    f.argtypes = [C.c_void_p] + [C.c_int64] * 5 + [C.c_int, C.c_void_p, C.c_void_p]
    rng = np.random.default_rng(5)
    for trial in range(80):
        n, h, w = int(rng.integers(1, 3)), int(rng.integers(1, 7)), int(rng.integers(1, 9))
        b, m = int(rng.integers(1, 5)), int(rng.choice([1, 2, 3, 4, 6, 8, 12, 24, 33]))
        dt = rng.choice([np.uint8, np.int16, np.float32])
        x = rng.integers(-100, 100, (n, h, w, b * b * m)).astype(dt)
        want = x.reshape(n, h, w, b, b, m).transpose(0, 1, 3, 2, 4, 5).reshape(n, h * b, w * b, m)
        for isa in ISAS:
            out = np.zeros_like(want)
            f(L.context(threads=2, isa=isa).handle, n, h, w, b, m, x.itemsize, x.ctypes.data,
              out.ctypes.data)
            np.testing.assert_array_equal(out, want, err_msg=f"trial {trial} on {isa}")

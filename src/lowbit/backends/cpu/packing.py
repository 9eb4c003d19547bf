"""Constants in the kernels' layouts: packed weights, folded per-channel offsets, and the
requantization parameters as padded int32 arrays (see lowbit_rt.h for each layout)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowbit.backends.cpu import library as L
from lowbit.errors import KernelError
from lowbit.numerics.fixed_point import PrescaleParams, Q31Params, RequantParams

LANES = 16
"""Per-channel arrays are padded to a multiple of this many entries (one zmm of int32)."""


def padded(values, dtype, n: int | None = None) -> np.ndarray:
    """`values` broadcast to n entries (or as given) and zero-padded to a multiple of LANES."""
    a = np.asarray(values)
    if n is not None:
        a = np.broadcast_to(a.reshape(-1) if a.size > 1 else a.reshape(()), (n,))
    a = a.reshape(-1).astype(dtype)
    size = max(LANES, -(-a.size // LANES) * LANES)
    out = np.zeros(size, dtype)
    out[: a.size] = a
    return out


def wrap_int32(values) -> np.ndarray:
    """Integers reduced modulo 2**32 into int32 (two's complement)."""
    v = np.asarray(values, np.int64)
    return (((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)).astype(np.int32)


def pack_weights(w: np.ndarray) -> np.ndarray:
    """int8 weights W[n, k] in the lb_packed_b layout: per block of 16 rows of W, per group of
    4 columns, 16 x 4 bytes; zero beyond n and k."""
    if w.dtype != np.int8:
        raise TypeError(f"pack_weights takes int8, got {w.dtype}")
    n, k = w.shape
    n16, k4 = -(-n // 16) * 16, -(-k // 4)
    full = np.zeros((n16, k4 * 4), np.int8)
    full[:n, :k] = w
    return np.ascontiguousarray(full.reshape(n16 // 16, 16, k4, 4).transpose(0, 2, 1, 3)
                                ).reshape(-1)


@dataclass
class RequantArrays:
    """One requantization as the C struct wants it: method code, bounds, padded arrays."""

    method: int
    qmin: int
    qmax: int
    p: list[np.ndarray]  # p0..p3 (int32)
    zero_point: np.ndarray  # int32
    fmul: np.ndarray | None = None
    dscale: np.ndarray | None = None
    fmin: float = -np.inf
    fmax: float = np.inf


def requant_arrays(params: RequantParams, zero_point, qmin: int, qmax: int,
                   n: int) -> RequantArrays:
    """fixed_point parameters (scalars or per channel) as n-channel padded int32 arrays."""
    if isinstance(params, Q31Params):
        raw = [params.multiplier, params.left_shift, params.right_shift, 0]
        method = L.RQ_Q31
    elif isinstance(params, PrescaleParams):
        raw = [params.pre, params.scale, params.post, params.clip]
        method = L.RQ_PRESCALE
    else:
        raise TypeError(f"unknown requantization parameters {type(params).__name__}")
    for a in raw[:3]:
        if np.any(np.asarray(a) > np.iinfo(np.int32).max):
            raise KernelError("requantization parameter does not fit int32")
    return RequantArrays(method, int(qmin), int(qmax), [padded(a, np.int32, n) for a in raw],
                         padded(zero_point, np.int32, n))


def float32_arrays(multiplier, zero_point, qmin: int, qmax: int, n: int) -> RequantArrays:
    """ONNX Runtime's float32 requantization (QLinearConv/QLinearMatMul)."""
    zeros = padded(0, np.int32, n)
    return RequantArrays(L.RQ_FLOAT32, int(qmin), int(qmax), [zeros] * 4,
                         padded(zero_point, np.int32, n),
                         fmul=padded(np.asarray(multiplier, np.float32), np.float32, n))


def dequant_arrays(scale, n: int, lo: float = -np.inf, hi: float = np.inf) -> RequantArrays:
    """A float result `float32(double(acc) * scale)` clamped to [lo, hi] (a fused clip)."""
    zeros = padded(0, np.int32, n)
    return RequantArrays(L.RQ_DEQUANT, 0, 0, [zeros] * 4, zeros,
                         dscale=padded(np.asarray(scale, np.float64), np.float64, n),
                         fmin=float(lo), fmax=float(hi))


def _ptr(a: np.ndarray | None, ctype):
    import ctypes as C

    if a is None:
        return C.POINTER(ctype)()
    return a.ctypes.data_as(C.POINTER(ctype))


def requant_struct(r: RequantArrays) -> L.Requant:
    """The lb_requant of `r` (pointers into r's arrays: keep r alive while it is used)."""
    import ctypes as C

    return L.Requant(r.method, r.qmin, r.qmax, *(_ptr(p, C.c_int32) for p in r.p),
                     _ptr(r.zero_point, C.c_int32), _ptr(r.fmul, C.c_float),
                     _ptr(r.dscale, C.c_double), np.float32(r.fmin), np.float32(r.fmax))


def weights_int8(codes: np.ndarray, zero_point) -> tuple[np.ndarray, np.ndarray]:
    """Weight codes and zero points as the kernels store them: int8 unchanged, uint8 minus 128
    (both), so `w - z_w` is the same number."""
    zp = np.asarray(zero_point, np.int64)
    if codes.dtype == np.uint8:
        return (codes.astype(np.int16) - 128).astype(np.int8), zp - 128
    if codes.dtype != np.int8:
        raise TypeError(f"8-bit weights expected, got {codes.dtype}")
    return codes, zp


def fold_offsets(w: np.ndarray, zw, za: int, bias: np.ndarray | None
                 ) -> tuple[np.ndarray, np.ndarray | None]:
    """The per-channel constant and row-sum factor of a product of stored activations (zero
    point `za`) with int8 weights W[n, k] (zero points `zw`, one or per row):

        sum_k (a - za)(w - zw) + bias = sum_k a w + [bias - za sum_k w + K za zw] - zw sum_k a

    returns (the bracket wrapped to int32, zw per channel or None when all are zero)."""
    n, k = w.shape
    zw = np.broadcast_to(np.asarray(zw, np.int64).reshape(-1) if np.size(zw) > 1 else
                         np.asarray(zw, np.int64), (n,))
    offset = -int(za) * w.astype(np.int64).sum(axis=1) + k * int(za) * zw
    if bias is not None:
        offset = offset + np.asarray(bias, np.int64).reshape(-1)
    zb = zw.astype(np.int32) if np.any(zw != 0) else None
    return wrap_int32(offset), zb


def exact_bound(a_span: int, w: np.ndarray, zw, bias: np.ndarray | None) -> int:
    """An upper bound of |sum_k (a - za)(w - zw) + bias| for activations with |a - za| <=
    a_span: the fast product, in wrapping int32 arithmetic, is exact when this is below
    2**31."""
    zw = np.asarray(zw, np.int64)
    centred = np.abs(w.astype(np.int64) - (zw.reshape(-1, 1) if zw.ndim else zw))
    worst = int(centred.sum(axis=1).max(initial=0)) * a_span
    if bias is not None and np.size(bias):
        worst += int(np.abs(np.asarray(bias, np.int64)).max())
    return worst


INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def bounded_arrays(r: RequantArrays, offset: np.ndarray, channels: int,
                   raw_bound: int) -> np.ndarray | None:
    """The epilogue's `bounded` form of a prescale requantization into 8-bit codes (see
    lb_epilogue in lowbit_rt.h), or None when some channel cannot take it.

    For one channel (pre, scale, post, clip, zero point zp, output range [qmin, qmax] inside
    [0, 255], folded offset `off`), the reference computes from the raw accumulator `acc`:

        x = acc + off;  t = clamp(x >> pre, -clip, clip)
        q = clamp(((t * scale + 2**(post-1)) >> post) + zp, qmin, qmax)

    With scale <= 2**post, y = (t * scale + 2**(post-1)) >> post grows by at most 1 when t does,
    so there are t_lo, t_hi inside (-clip, clip) where y + zp first reaches qmin and last is
    qmax, and q = ((clamp(t, t_lo, t_hi) * scale + cst) >> post) with cst = 2**(post-1) +
    zp * 2**post: no final clamp, and the product stays far inside int32 (it is
    < 256 * 2**post <= 2**30). Clamping x to [t_lo << pre, (t_hi << pre) + 2**pre - 1] before
    the shift gives the same t. When pre = 0 the offset folds into the constants too (exact in
    wrapping int32 arithmetic since |acc| <= raw_bound < 2**31):

        q = (clamp(acc + add, lo, hi) >> pre) * scale + cst) >> post

    with add = 0, lo/hi = the bounds minus off, cst += off * scale (wrapped), or, when pre > 0
    (or the moved bounds leave int32), add = off and the bounds on x. Layout: per block of 16
    channels, 64 int32: lo[16], hi[16], add[16], cst[16] (zeros past `channels`)."""
    if r.method != L.RQ_PRESCALE or not 0 <= r.qmin <= r.qmax <= 255 or raw_bound >= 1 << 31:
        return None
    blocks = -(-channels // LANES)
    out = np.zeros((blocks, 4, LANES), np.int64)
    pre, scale, post, clip = (p.astype(np.int64) for p in r.p)
    for c in range(channels):
        s, e, pb, cl = int(scale[c]), int(pre[c]), int(post[c]), int(clip[c])
        zp, off = int(r.zero_point[c]), int(offset[c])
        rnd = 1 << (pb - 1)
        cst = rnd + (zp << pb)
        if s == 0:  # y = 0 for every t: q = clamp(zp, qmin, qmax)
            t_lo = t_hi = 0
            cst = rnd + (min(max(zp, r.qmin), r.qmax) << pb)
        elif s > 1 << pb:
            return None
        else:
            # smallest t with y + zp >= qmin; largest t with y + zp <= qmax
            t_lo = -((rnd - ((r.qmin - zp) << pb)) // s)
            t_hi = (((r.qmax - zp + 1) << pb) - rnd - 1) // s
            if not -cl < t_lo <= t_hi < cl:
                return None
        x_lo = max(t_lo << e, INT32_MIN)
        x_hi = min((t_hi << e) + (1 << e) - 1, INT32_MAX)
        lo, hi, add = x_lo - off, x_hi - off, 0
        if e == 0 and lo >= INT32_MIN and hi <= INT32_MAX:
            cst += off * s
        else:
            lo, hi, add = x_lo, x_hi, off
        out[c // LANES, :, c % LANES] = (lo, hi, add, cst)
    return wrap_int32(out).reshape(-1)


def residual_split(add: tuple, out: RequantArrays) -> np.ndarray | None:
    """The epilogue's `residual_split` form of a fused quantized Add/Sub of 8-bit codes into
    8-bit codes (lb_epilogue in lowbit_rt.h), or None when it does not apply.

    `add` holds lb_add_params' integers (shift, z1, m1, l1, r1, z2, m2, l2, r2, sub). Each
    operand's aligned value a = q31((q - z) << shift, m, 0, r) (fixed_point's q31 without a
    left shift) is, with k = 31 - shift and m = mh 2**k + ml (0 <= ml < 2**k), exactly

        h = d mh + ((d ml + 2**(k-1)) >> k)   (d = q - z: h = floor((d m 2**shift + 2**30) / 2**31))
        a = (h + 2**(r-1) - (h < 0)) >> r     (r > 0; a = h when r = 0)

    in int32 arithmetic when no intermediate leaves int32, which is checked here for all 256
    codes against fixed_point's own q31. The output's prescale requantization of a_1 +- a_2
    takes the bounded form of bounded_arrays. Layout (24 int32): per operand z, mh, ml, k,
    2**(k-1), 2**(r-1) (0 when r = 0), -(r > 0), r; then sub, and the output's lo, hi, add,
    cst, pre, scale, post."""
    from lowbit.numerics.fixed_point import _q31

    shift, z1, m1, l1, r1, z2, m2, l2, r2, sub = (int(v) for v in add)
    if l1 or l2 or not 1 <= shift <= 30:
        return None
    q = np.arange(256, dtype=np.int64)
    k = 31 - shift
    words: list[int] = []
    aligned = []
    for z, m, r in ((z1, m1, r1), (z2, m2, r2)):
        if not 0 <= m < 1 << 31 or not 0 <= r < 31:
            return None
        mh, ml = m >> k, m & ((1 << k) - 1)
        d = q - z
        t1, t2 = d * mh, d * ml + (1 << (k - 1))
        h = t1 + (t2 >> k)
        half, neg = (1 << (r - 1), -1) if r > 0 else (0, 0)
        t3 = h + half + ((h >> 63) & neg)
        a = t3 >> r
        want = _q31(d << shift, np.int64(m), np.int64(0), np.int64(r))
        if any(v.min() < INT32_MIN or v.max() > INT32_MAX for v in (d << shift, t1, t2, h, t3)) \
                or not np.array_equal(a, want):
            return None
        words += [z, mh, ml, k, 1 << (k - 1), half, neg, r]
        aligned.append(a)
    total = aligned[0][:, None] - aligned[1][None, :] if sub else \
        aligned[0][:, None] + aligned[1][None, :]
    bound = int(np.abs(total).max())
    if bound >= 1 << 31:
        return None
    b = bounded_arrays(out, np.zeros(1, np.int64), 1, bound)
    if b is None:
        return None
    lo, hi, ad, cst = (int(b[i * LANES]) for i in range(4))
    pre, scale, post = (int(p[0]) for p in out.p[:3])
    return np.array([*words, sub, lo, hi, ad, cst, pre, scale, post], np.int64).astype(np.int32)

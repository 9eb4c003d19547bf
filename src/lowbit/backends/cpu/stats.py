"""Calibration statistics in C (runtime/rt_stats.c), for `lowbit.profile`: exact sums
(`GridSum.add`) and depthwise input moments, each equal bit for bit to its Python definition
(`lowbit.numerics.exact_sum.GridSum.add`, `lowbit.quant.input_moments.depthwise_moments`).

`available()` says whether the kernel library loads (a C compiler is there); callers use the
Python definitions otherwise: the same bits, more slowly.
"""

from __future__ import annotations

import ctypes as C
import functools
import math
import threading

import numpy as np

from lowbit.numerics.exact_sum import LIMBS, MAX_ADDS, ExactSum, GridSum

_i64p = C.POINTER(C.c_int64)
"""For an int64 the kernel writes (`C.byref`); arrays go as `.ctypes.data` (void pointers:
no ctypes cast, several microseconds a call)."""
_SIGNATURES = {
    "lb_stats_maxabs": (C.c_int, [C.c_void_p, C.c_int, C.c_int64, C.POINTER(C.c_double)]),
    "lb_stats_maxabs_upper": (C.c_int, [C.c_void_p, C.c_int, C.c_int64, C.c_int64,
                                        C.POINTER(C.c_double)]),
    "lb_gridsum_add": (None, [C.c_void_p, C.c_void_p, C.c_int64, C.c_void_p, C.c_int, C.c_double,
                              C.c_double]),
    "lb_gridsum_add_upper": (None, [C.c_void_p, C.c_void_p, C.c_void_p, C.c_int, C.c_int64,
                                    C.c_int64, C.c_double, C.c_double]),
    "lb_dw_moments": (C.c_int, [C.c_void_p] * 4),
    "lb_dw_moments_f32": (C.c_int, [C.c_void_p] * 4),
    "lb_observe_f32": (C.c_int, [C.c_void_p, C.c_int64, C.c_int64, C.c_int64, C.c_void_p,
                                 C.c_void_p, C.c_void_p, _i64p]),
    "lb_histogram_f32": (None, [C.c_void_p, C.c_int64, C.c_float, C.c_float, C.c_void_p,
                                C.c_int64]),
    "lb_range_f32": (C.c_int, [C.c_void_p, C.c_int64, C.c_void_p, _i64p]),
    "lb_gptq_block": (None, [C.c_void_p] * 7 + [C.c_int64] * 5 + [C.c_double] * 2),
    "lb_moments_scratch": (C.c_int64, [C.c_int64]),
    "lb_exactsum_add": (C.c_int, [C.c_void_p, C.c_void_p, C.c_int64, C.c_void_p]),
    "lb_moments_f32": (None, [C.c_void_p, C.c_void_p] + [C.c_int64] * 4 + [C.c_void_p] * 2),
    "lb_moments_block_f32": (C.c_int, [C.c_void_p, C.c_void_p] + [C.c_int64] * 4
                             + [C.c_void_p] * 2),
    "lb_gridsum_add_many": (None, [C.c_void_p, C.c_void_p, C.c_int64, C.c_void_p, C.c_int64,
                                   C.c_double, C.c_double]),
}
MOMENTS_BLOCK = 256
"""Vectors `moments_upper` sums in float32 before adding to float64 (rt_moments.c)."""
MAX_TAPS = 25
"""Largest depthwise kernel (taps) `depthwise_moments` takes (rt_stats.c LB_MOMENT_TAPS)."""


@functools.cache
def _lib():
    from lowbit.backends.cpu import library

    return library.with_signatures(library.lib(), _SIGNATURES)


def available() -> bool:
    """Whether the C kernels load (else the Python definitions are used)."""
    from lowbit.backends.cpu import library

    return library.loads(_lib, "calibration statistics")


def _ctx():
    """The shared context of the ISA in effect ($LOWBIT_CPU_ISA), default threads (one thread
    in a thread that called `single_threaded`)."""
    import os

    from lowbit.backends.cpu import library

    single = getattr(_local, "single", False)
    key = (os.environ.get(library.ISA_ENV, ""), single)
    handle = _contexts.get(key)
    if handle is None:
        with _lock:
            handle = _contexts.get(key)
            if handle is None:
                handle = _contexts[key] = library.context(1 if single else None).handle
    return handle


_contexts: dict[tuple[str, bool], object] = {}
_local = threading.local()
_lock = threading.Lock()


def single_threaded() -> None:
    """Run this thread's kernel calls on this thread alone (for threads that each update other
    statistics at the same time: a context with one thread has no pool to share)."""
    _local.single = True


def _float(x: np.ndarray) -> tuple[np.ndarray, int]:
    x = np.ascontiguousarray(x)
    if x.dtype == np.float64:
        return x, 1
    return np.ascontiguousarray(x, np.float32), 0


def gridsum_add(total: GridSum, values: np.ndarray) -> None:
    """`total.add(values)` (float32 or float64 of its shape; finite, else ValueError)."""
    x, f64 = _float(values)
    if x.shape != total.shape:
        raise ValueError(f"adding shape {x.shape} to a sum of shape {total.shape}")
    largest = C.c_double()
    if not _lib().lb_stats_maxabs(x.ctypes.data, f64, x.size, C.byref(largest)):
        raise ValueError("an exact sum takes finite values only")
    factors = total.begin_add(largest.value)
    if factors is None:
        return
    limbs = _limbs(total)
    _lib().lb_gridsum_add(_ctx(), limbs.ctypes.data, x.size, x.ctypes.data, f64,
                          *factors)


def exactsum_add(total: ExactSum, values: np.ndarray) -> None:
    """`total.add(values)` (float32 or float64 of its shape; ValueError when a value is not
    finite, nothing added), in C: the same limbs and tops."""
    x = np.ascontiguousarray(values, np.float64)
    if x.shape != total.shape:
        raise ValueError(f"adding shape {x.shape} to a sum of shape {total.shape}")
    if total.adds + 1 > MAX_ADDS and np.all(np.isfinite(x)):
        raise OverflowError(f"an exact sum takes at most {MAX_ADDS} additions")
    for name in ("limbs", "top"):
        a = getattr(total, name)
        if not (a.flags.c_contiguous and a.flags.writeable and a.dtype == np.int64):
            setattr(total, name, np.ascontiguousarray(a, np.int64))
    if not _lib().lb_exactsum_add(total.limbs.ctypes.data,
                                  total.top.ctypes.data, x.size, x.ctypes.data):
        raise ValueError("an exact sum takes finite values only")
    total.adds += 1


def gridsum_add_upper(total: GridSum, matrices: np.ndarray) -> bool:
    """Add the upper triangles (row-major, diagonal included) of `matrices` [G, K, K] to
    `total` of shape (G, K (K + 1) / 2), as `total.add(triangles)`; False (nothing added) when
    a triangle holds a NaN or an infinity."""
    x, f64 = _float(matrices)
    groups, k = int(x.shape[0]), int(x.shape[1])
    if x.shape != (groups, k, k) or total.shape != (groups, k * (k + 1) // 2):
        raise ValueError(f"adding the triangles of {x.shape} to a sum of shape {total.shape}")
    largest = C.c_double()
    if not _lib().lb_stats_maxabs_upper(x.ctypes.data, f64, groups, k, C.byref(largest)):
        return False
    factors = total.begin_add(largest.value)
    if factors is not None:
        limbs = _limbs(total)
        _lib().lb_gridsum_add_upper(_ctx(), limbs.ctypes.data, x.ctypes.data, f64,
                                    groups, k, *factors)
    return True


def _limbs(total: GridSum) -> np.ndarray:
    if not (total.limbs.flags.c_contiguous and total.limbs.flags.writeable
            and total.limbs.dtype == np.int64):
        total.limbs = np.ascontiguousarray(total.limbs, np.int64)
    assert total.limbs.shape[0] == LIMBS
    return total.limbs


def depthwise_moments(x: np.ndarray, kernel: tuple[int, int], strides: tuple[int, int],
                      dilations: tuple[int, int], pads: tuple[int, int],
                      out_size: tuple[int, int], out: np.ndarray | None = None) -> np.ndarray:
    """The C form of `lowbit.quant.input_moments.depthwise_moments`: x float32 [N, C, H, W],
    pads (top, left); float64 [C, T] upper triangles of each channel's S. `out`: a C-contiguous
    [C, T] float64 array to write them to, or float32 (each rounded to float32: exact when the
    output positions are one block, `input_moments.depthwise_block_rows`); returned."""
    n, c, h, w = (int(d) for d in x.shape)
    taps = kernel[0] * kernel[1]
    if taps > MAX_TAPS:
        raise ValueError(f"depthwise moments in C take at most {MAX_TAPS} taps, not {taps}")
    # zero-padded, channel-last float32, channels rounded up to 16 (rt_stats.c)
    hp, wp = (max(pads[i] + size, (out_size[i] - 1) * strides[i]
                  + (kernel[i] - 1) * dilations[i] + 1) for i, size in enumerate((h, w)))
    cp = -(-c // 16) * 16
    padded = _reused((n, hp, wp, cp), np.float32)
    top, left = pads
    # zero only the padding: the interior is overwritten (clearing it all cost ~2% of a
    # profile's CPU)
    padded[:, :top] = 0.0
    padded[:, top + h:] = 0.0
    padded[:, top:top + h, :left] = 0.0
    padded[:, top:top + h, left + w:] = 0.0
    padded[:, top:top + h, left:left + w, c:] = 0.0
    padded[:, top:top + h, left:left + w, :c] = x.transpose(0, 2, 3, 1)
    if out is None:
        out = np.empty((c, taps * (taps + 1) // 2))
    assert out.shape == (c, taps * (taps + 1) // 2) and out.flags.c_contiguous
    assert out.dtype in (np.float32, np.float64)
    geometry = np.array([n, c, hp, wp, cp, *kernel, *strides, *dilations, *out_size, top, h],
                        np.int64)
    run = _lib().lb_dw_moments if out.dtype == np.float64 else _lib().lb_dw_moments_f32
    status = run(_ctx(), padded.ctypes.data, geometry.ctypes.data, out.ctypes.data)
    if status != 0:
        raise ValueError(f"lb_dw_moments refused geometry {geometry.tolist()}")
    return out


def moments_upper(rows: np.ndarray, upper: np.ndarray) -> None:
    """upper (float64 [C (C + 1) / 2], the row-major upper triangle with the diagonal) += that
    of S = rows^T rows, for float32 `rows` [P, C] (any positive strides: one input vector a
    row). Positions are summed in blocks of 256 in order: within a block each element of S in
    float32, one fused multiply-add a product, in position order; each block's sums then added
    to `upper` in float64 (runtime/rt_moments.c). The same bits on every ISA path."""
    p, c = (int(d) for d in rows.shape)
    assert rows.dtype == np.float32 and upper.dtype == np.float64 and upper.flags.c_contiguous
    assert upper.shape == (c * (c + 1) // 2,)
    if p == 0 or c == 0:
        return
    sp, si = (int(st) // 4 for st in rows.strides)
    if min(sp, si) < 1 or any(st % 4 for st in rows.strides):
        rows = np.ascontiguousarray(rows)
        sp, si = c, 1
    scratch = _scratch(int(_lib().lb_moments_scratch(c)))
    _lib().lb_moments_f32(_ctx(), rows.ctypes.data, p, c, sp, si, scratch.ctypes.data,
                          upper.ctypes.data)


def moments_block(rows: np.ndarray, upper: np.ndarray) -> None:
    """upper (float32 [C (C + 1) / 2], overwritten) = the float32 sums of one block of
    1 <= P <= `MOMENTS_BLOCK` vectors, float32 `rows` [P, C]: exactly the values
    `moments_upper` would add to a triangle of zeros (their float64 conversions)."""
    p, c = (int(d) for d in rows.shape)
    assert rows.dtype == np.float32 and upper.dtype == np.float32 and upper.flags.c_contiguous
    assert upper.shape == (c * (c + 1) // 2,) and 1 <= p <= MOMENTS_BLOCK and c > 0
    sp, si = (int(st) // 4 for st in rows.strides)
    if min(sp, si) < 1 or any(st % 4 for st in rows.strides):
        rows = np.ascontiguousarray(rows)
        sp, si = c, 1
    scratch = _scratch(int(_lib().lb_moments_scratch(c)))
    status = _lib().lb_moments_block_f32(_ctx(), rows.ctypes.data, p, c, sp, si,
                                         scratch.ctypes.data, upper.ctypes.data)
    assert status == 0


def gridsum_add_many(total: GridSum, arrays: list[np.ndarray]) -> int:
    """`total.add(a)` for each float32 array `a` of `arrays` (C-contiguous, of its shape), in
    order, up to the first holding a NaN or an infinity; returns how many were added. One
    pass over the limbs for all of them (the same limbs: an exact sum does not depend on how
    its additions are grouped)."""
    largest = C.c_double()
    counted, nonzero = 0, []
    for a in arrays:
        assert a.dtype == np.float32 and a.flags.c_contiguous and a.shape == total.shape
        if not _lib().lb_stats_maxabs(a.ctypes.data, 0, a.size, C.byref(largest)):
            break
        counted += 1
        if total.begin_add(largest.value) is not None:
            nonzero.append(a)
    factors = total.factors()
    if nonzero and factors is not None:
        limbs = _limbs(total)
        pointers = (C.c_void_p * len(nonzero))(*(a.ctypes.data for a in nonzero))
        _lib().lb_gridsum_add_many(_ctx(), limbs.ctypes.data, limbs[0].size,
                                   pointers, len(nonzero), *factors)
    return counted


def _scratch(size: int) -> np.ndarray:
    """This thread's float32 scratch of at least `size` elements."""
    buf = getattr(_local, "scratch", None)
    if buf is None or buf.size < size:
        buf = _local.scratch = np.empty(size, np.float32)
    return buf


ALIGN = 64
"""Bytes `_reused` arrays are aligned to: a cache line, so that the kernels' 64-byte vector
loads of rows whose length is a multiple of 16 floats (the depthwise moments' padded input)
never straddle two lines (numpy's large arrays start 16 bytes into one; on the 2026 machine
that cost the 3x3 depthwise moments 1.5-1.8x their time)."""


def _reused(shape: tuple[int, ...], dtype: type = np.float64) -> np.ndarray:
    """An array of `shape` and `dtype` (any values), starting on an `ALIGN`-byte boundary, in
    this thread's reused buffer of that dtype (valid until the thread's next call with it:
    fresh pages of a new array cost more than clearing warm ones)."""
    size = math.prod(shape)
    name = f"reused_{dtype.__name__}"  # a numpy scalar type: float32, float64
    buf = getattr(_local, name, None)
    if buf is None or buf.size < size:
        itemsize = np.dtype(dtype).itemsize
        raw = np.empty(size * itemsize + ALIGN, np.uint8)
        start = -raw.ctypes.data % ALIGN
        buf = raw[start:start + size * itemsize].view(dtype)
        setattr(_local, name, buf)
    return buf[:size].reshape(shape)


def zeroed_scratch(shape: tuple[int, ...]) -> np.ndarray:
    """A float64 array of zeros of `shape` in this thread's reused buffer (valid until the
    thread's next call)."""
    out = _reused(shape)
    out.fill(0.0)
    return out


def _nhwc_array(x: np.ndarray) -> np.ndarray | None:
    """The NHWC array that float32 `x` [N, C, H, W] views (`nhwc_outputs`), None when `x` is
    no such view."""
    if x.ndim == 4 and x.dtype == np.float32 and not x.flags.c_contiguous:
        y = x.transpose(0, 2, 3, 1)
        if y.flags.c_contiguous:
            return y
    return None


def channel_stats(x: np.ndarray, axis: int | None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
    """Per channel along `axis` (None: the whole tensor as one channel) of float32 `x`: minimum,
    maximum and sum (float64, the values added in order along the other axes, row-major), and
    the number of zeros; None when a value is NaN or infinite. The C form of
    `lowbit.quant.observers.channel_stats`."""
    nhwc = _nhwc_array(x) if axis in (1, None) else None
    if nhwc is not None:  # each channel's values in the same order
        x = nhwc
        outer, channels, inner = (1, 1, x.size) if axis is None else (x.size // x.shape[3],
                                                                       x.shape[3], 1)
    elif axis is None:
        x = np.ascontiguousarray(x, np.float32)
        outer, channels, inner = 1, 1, x.size
    else:
        x = np.ascontiguousarray(x, np.float32)
        outer = math.prod(x.shape[:axis])
        channels = int(x.shape[axis])
        inner = math.prod(x.shape[axis + 1:])
    lo, hi, total = np.empty(channels), np.empty(channels), np.empty(channels)
    zeros = C.c_int64()
    if not _lib().lb_observe_f32(x.ctypes.data, outer, channels, inner, lo.ctypes.data,
                                 hi.ctypes.data, total.ctypes.data, C.byref(zeros)):
        return None
    return lo, hi, total, zeros.value


def value_range(x: np.ndarray) -> tuple[float, float, int] | None:
    """Minimum, maximum and number of zeros of float32 `x`, None when a value is NaN or
    infinite: `channel_stats(x, None)` without the sum (the same minimum and maximum, of the
    values in the same order: which of 0 and -0 comes first decides between them)."""
    nhwc = _nhwc_array(x)  # read in the order channel_stats reads it
    x = np.ascontiguousarray(x if nhwc is None else nhwc, np.float32)
    lohi = np.empty(2)
    zeros = C.c_int64()
    if not _lib().lb_range_f32(x.ctypes.data, x.size, lohi.ctypes.data, C.byref(zeros)):
        return None
    return float(lohi[0]), float(lohi[1]), zeros.value


def _in_memory_order(x: np.ndarray) -> np.ndarray:
    """`x` with its axes permuted so that it is C-contiguous when it is a permuted view of a
    C-contiguous array (for reductions indifferent to the order), else `x`."""
    if x.flags.c_contiguous or x.ndim < 2:
        return x
    nhwc = _nhwc_array(x)  # the profile's float model's outputs: no argsort
    if nhwc is not None:
        return nhwc
    y = x.transpose(np.argsort([-abs(st) for st in x.strides], kind="stable"))
    return y if y.flags.c_contiguous else x


def histogram_add(counts: np.ndarray, x: np.ndarray, scale: float, offset: float) -> None:
    """counts[floor(v * scale) - offset] += 1 for every v of float32 `x`, in float32 (the C
    form of `StatsObserver._add`; values outside the window are not counted)."""
    assert counts.dtype == np.int64 and counts.flags.c_contiguous
    x = _in_memory_order(x)
    x = np.ascontiguousarray(x, np.float32)
    _lib().lb_histogram_f32(x.ctypes.data, x.size, scale, offset,
                            counts.ctypes.data, counts.size)


def gptq_block(w: np.ndarray, original: np.ndarray, codes: np.ndarray, errors: np.ndarray,
               scale: np.ndarray, zero: np.ndarray, ratios: np.ndarray, first: int, last: int,
               qmin: float, qmax: float) -> None:
    """The in-block column loop of `lowbit.quant.weight_rounding._gptq` (w, original, codes,
    errors [G, K, N] float64 C-contiguous, updated in place; scale, zero [G, N]; ratios
    [G, K, K]), bit for bit."""
    arrays = [w, original, codes, errors]
    assert all(a.dtype == np.float64 and a.flags.c_contiguous for a in arrays)
    s, z, r = (np.ascontiguousarray(a, np.float64) for a in (scale, zero, ratios))
    groups, k, n = w.shape
    _lib().lb_gptq_block(*(a.ctypes.data for a in (*arrays, s, z, r)), groups, k, n, first,
                         last, float(qmin), float(qmax))

"""Searches of `lowbit.quantize` in C (runtime/rt_qsearch.c): exhaustive weight rounding, the
MSE range search, exact sums unpacked to matrices and GPTQ's permuted H, each equal bit for bit
to its Python definition (`lowbit.quant.weight_rounding._exhaustive`, `lowbit.quant.
calibration.mse`, `GridSum.value` + `input_moments.unpack_upper`, `weight_rounding._Solver`).

`available()` says whether the kernel library loads (a C compiler is there); callers use the
Python definitions otherwise: the same bits, more slowly.
"""

from __future__ import annotations

import contextlib
import ctypes as C
import functools
import threading
from collections.abc import Iterator

import numpy as np

from lowbit.numerics.exact_sum import LIMBS, NONE, WINDOW, GridSum

_i64p = C.POINTER(C.c_int64)
_SIGNATURES = {
    "lb_round_exhaustive": (None, [C.c_void_p] * 5 + [C.c_int64] * 3 + [C.c_double] * 2
                            + [C.c_void_p]),
    "lb_mse_search": (C.c_int, [C.c_void_p] * 4 + [C.c_int64] * 3 + [C.c_void_p]),
    "lb_gridsum_unpack_upper": (None, [C.c_void_p, C.c_void_p, C.c_int64, C.c_int64,
                                       C.c_int64, C.c_void_p]),
    "lb_sym_gather": (None, [C.c_void_p, C.c_void_p, C.c_int64, C.c_int64, C.c_void_p,
                             C.c_double, C.c_int, C.c_void_p]),
}
EXHAUSTIVE_MAX = 9
"""Longest row `round_exhaustive` takes (rt_qsearch.c LB_EXHAUSTIVE_MAX)."""


@functools.cache
def _lib():
    from lowbit.backends.cpu import library

    return library.with_signatures(library.lib(), _SIGNATURES)


@functools.cache
def available() -> bool:
    """Whether the C kernels load (else the Python definitions are used)."""
    from lowbit.backends.cpu import library

    return library.loads(_lib, "quantization searches")


_local = threading.local()


@contextlib.contextmanager
def serial() -> Iterator[None]:
    """Within it, this thread's calls run on this thread alone, not on the shared pool (a
    background thread working beside the caller's)."""
    before = getattr(_local, "serial", False)
    _local.serial = True
    try:
        yield
    finally:
        _local.serial = before


def _ctx():
    if getattr(_local, "serial", False):
        return None
    from lowbit.backends.cpu import stats

    return stats._ctx()


def _f64(a) -> np.ndarray:
    return np.ascontiguousarray(a, np.float64)


def round_exhaustive(rows: np.ndarray, scale: np.ndarray, zero: np.ndarray, h: np.ndarray,
                     per_group: int, qmin: int, qmax: int) -> np.ndarray:
    """`weight_rounding._exhaustive`'s codes: rows [R, K] (K <= EXHAUSTIVE_MAX), scale and
    zero [R], h [R / per_group, K, K] (row r uses h[r // per_group]); int64 [R, K]."""
    rows, scale, zero, h = (_f64(a) for a in (rows, scale, zero, h))
    r, k = rows.shape
    if not 1 <= k <= EXHAUSTIVE_MAX or scale.shape != (r,) or zero.shape != (r,) or \
            h.shape != (-(-r // per_group), k, k):
        raise ValueError(f"exhaustive rounding of rows {rows.shape} with scale {scale.shape}, "
                         f"zero {zero.shape}, H {h.shape}")
    codes = np.empty((r, k), np.int64)
    _lib().lb_round_exhaustive(_ctx(), rows.ctypes.data, scale.ctypes.data, zero.ctypes.data,
                               h.ctypes.data, r, k, per_group, float(qmin), float(qmax),
                               codes.ctypes.data)
    return codes


def mse_search(below: np.ndarray, above: np.ndarray, m0: np.ndarray, step: np.ndarray,
               a_max: int, b_lo: int) -> tuple[int, int] | None:
    """The first window (a, b) in (a, b) order of least error (`calibration.mse`), a in
    [0, a_max], b in [b_lo, n] and b > a, n = len(m0) - 1; None when none is finite."""
    below, above, m0, step = (_f64(a) for a in (below, above, m0, step))
    n = m0.size - 1
    if below.size < a_max + 1 or above.size != n + 1 or step.size != n + 1:
        raise ValueError("mse_search: terms of the wrong length")
    best = np.zeros(2, np.int64)
    found = _lib().lb_mse_search(below.ctypes.data, above.ctypes.data, m0.ctypes.data,
                                 step.ctypes.data, a_max, b_lo, n, best.ctypes.data)
    return (int(best[0]), int(best[1])) if found else None


def unpack_upper_sum(total: GridSum, size: int) -> np.ndarray:
    """`input_moments.unpack_upper(total.value(), size)` of a GridSum of shape
    (G, size (size + 1) / 2): float64 [G, size, size]."""
    groups = int(total.shape[0])
    if total.shape != (groups, size * (size + 1) // 2):
        raise ValueError(f"a sum of shape {total.shape} holds no upper triangles of {size}")
    if total.top == NONE:
        return np.zeros((groups, size, size))
    limbs = np.ascontiguousarray(total.limbs, np.int64)
    assert limbs.shape[0] == LIMBS
    out = np.empty((groups, size, size))
    base = (int(total.top) - (LIMBS - 1)) * WINDOW
    _lib().lb_gridsum_unpack_upper(_ctx(), limbs.ctypes.data, groups, size, base,
                                   out.ctypes.data)
    return out


def gather_symmetric(m: np.ndarray, back: np.ndarray, count: float) -> np.ndarray:
    """m[g][back[g]][:, back[g]] for every group of m [G, K, K], divided by `count` unless it
    is 1."""
    m = _f64(m)
    back = np.ascontiguousarray(back, np.int64)
    groups, k = int(m.shape[0]), int(m.shape[1])
    if m.shape != (groups, k, k) or back.shape != (groups, k):
        raise ValueError(f"gathering {back.shape} from {m.shape}")
    out = np.empty_like(m)
    _lib().lb_sym_gather(_ctx(), m.ctypes.data, groups, k, back.ctypes.data, float(count),
                         int(count != 1), out.ctypes.data)
    return out

"""Calling the cpu backend's C kernels directly from numpy, for the kernel tests."""

from __future__ import annotations

import ctypes as C

import numpy as np

from lowbit.backends.cpu import library as L
from lowbit.backends.cpu import packing
from lowbit.numerics import fixed_point

ISAS = [isa for isa in L.supported_isas() if isa != "amx"]
"""The vector paths this CPU runs. `amx` runs the vnni kernels except the int8 products, which
tests of the products run as well (PRODUCT_ISAS)."""
PRODUCT_ISAS = L.supported_isas()


def ptr(a: np.ndarray | None):
    return None if a is None else a.ctypes.data


def qgemm(ctx: L.Context, a_stored: np.ndarray, za: int, w: np.ndarray, zw, bias,
          rq: packing.RequantArrays, out_type: int, residual: np.ndarray | None = None,
          add: L.AddParams | None = None, bounded: bool = False) -> np.ndarray:
    """lb_qgemm on uint8 activations A[m, k] (stored codes) and int8 weights W[n, k]; with
    `bounded`, the epilogue carries packing.bounded_arrays (which must exist)."""
    m, k = a_stored.shape
    n = w.shape[0]
    packed = packing.pack_weights(w)
    offset, zb = packing.fold_offsets(w, zw, za, bias)
    offset, zb = packing.padded(offset, np.int32), None if zb is None else \
        packing.padded(zb, np.int32)
    dtype = {L.U8: np.uint8, L.I16: np.int16, L.U16: np.uint16, L.F32: np.float32,
             L.I32: np.int32}[out_type]
    out = np.empty((m, n), dtype)
    rsq = packing.requant_struct(rq)
    bounds = None
    if bounded:
        raw = 255 * int(np.abs(w.astype(np.int64)).sum(axis=1).max(initial=0))
        bounds = packing.bounded_arrays(rq, offset, n, raw)
        assert bounds is not None
    ep = L.Epilogue(offset.ctypes.data_as(L.i32p),
                    zb.ctypes.data_as(L.i32p) if zb is not None else L.i32p(), rsq, out_type,
                    ptr(residual), n, C.pointer(add) if add is not None else None,
                    bounds.ctypes.data_as(L.i32p) if bounds is not None else L.i32p())
    pb = L.PackedB(packed.ctypes.data, n, k, -(-k // 4))
    row_sums = np.empty(m, np.int32) if zb is not None else None
    a = np.ascontiguousarray(a_stored)
    L.lib().lb_qgemm(ctx.handle, m, n, k, ptr(a), k, C.byref(pb), C.byref(ep), ptr(out), n,
                     ptr(row_sums))
    return out


def reference_product(a: np.ndarray, za: int, w: np.ndarray, zw, bias) -> np.ndarray:
    """sum_k (a - za)(w - zw) + bias, exactly (int64)."""
    zw = np.asarray(zw, np.int64)
    wc = w.astype(np.int64) - (zw.reshape(-1, 1) if zw.ndim else zw)
    acc = (a.astype(np.int64) - za) @ wc.T
    return acc + (0 if bias is None else np.asarray(bias, np.int64))


def reference_requant(acc, params, zp, qmin, qmax, bounds) -> np.ndarray:
    y = fixed_point.requantize(np.clip(acc, fixed_point.INT32_MIN, fixed_point.INT32_MAX),
                               params, zp, qmin, qmax, axis=1 if np.ndim(params.real) else None)
    return np.clip(y, *bounds)

"""C initializers of the library's structs, from parameters derived in Python."""

from __future__ import annotations

import math

import numpy as np

from lowbit.backends.cpu import library as L
from lowbit.backends.cpu import packing
from lowbit.backends.cpu.codegen.program import Program, dim_c
from lowbit.numerics.arith import Requant
from lowbit.ops.conv_geometry import Window

RQ_NAMES = {L.RQ_Q31: "LB_RQ_Q31", L.RQ_PRESCALE: "LB_RQ_PRESCALE",
            L.RQ_FLOAT32: "LB_RQ_FLOAT32", L.RQ_DEQUANT: "LB_RQ_DEQUANT"}
TYPE_NAMES = {L.U8: "LB_U8", L.I16: "LB_I16", L.U16: "LB_U16", L.F32: "LB_F32",
              L.I32: "LB_I32", L.I8: "LB_I8", L.I64: "LB_I64", L.F64: "LB_F64",
              L.BOOL: "LB_BOOL"}


def flt(x: float) -> str:
    """An exact C float literal."""
    x = float(np.float32(x))
    if math.isinf(x):
        return "INFINITY" if x > 0 else "-INFINITY"
    return f"{x.hex()}f"


def window(n, ih: int, iw: int, c: int, oh: int, ow: int, win: Window, pads) -> str:
    """An lb_window initializer (2 spatial axes)."""
    vals = [dim_c(n), ih, iw, c, oh, ow, *win.kernel, *win.strides, *win.dilations, pads[0],
            pads[1]]
    return "{" + ", ".join(str(v) for v in vals) + "}"


def requant(prog: Program, r: packing.RequantArrays) -> str:
    """An lb_requant initializer whose arrays live in the blob."""
    ptrs = [prog.data(p) for p in r.p]
    fmul = prog.data(r.fmul) if r.fmul is not None else "NULL"
    dscale = prog.data(r.dscale) if r.dscale is not None else "NULL"
    return (f"{{{RQ_NAMES[r.method]}, {r.qmin}, {r.qmax}, {', '.join(ptrs)}, "
            f"{prog.data(r.zero_point)}, {fmul}, {dscale}, {flt(r.fmin)}, {flt(r.fmax)}}}")


def requant_arrays(rq: Requant, channels: int, shift: int = 0) -> packing.RequantArrays:
    """A reference Requant as padded arrays, zero point and bounds moved by `shift` (128 for
    int8 codes stored as uint8)."""
    return packing.requant_arrays(rq.encoding, np.asarray(rq.zero_point) + shift,
                                  rq.qmin + shift, rq.qmax + shift, channels)


def int_array(prog: Program, values, dtype=np.int32, n: int | None = None) -> str:
    return prog.data(packing.padded(values, dtype, n))

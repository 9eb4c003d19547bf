"""16-bit convolutions on the cpu backend (lb_qconv16, runtime/rt_qconv16*.c): W8A16, W16A8
and W16A16 Convs by int16 x int16 products summed in int32, where the weights prove the sums
exact.

With a = x (uint8 stored codes, int16) or x - 32768 (uint16) and w the centred weights, the
kernel computes sum_k a_k w_k + (bias - za * sum_k w_k), the reference's exact accumulator. Its
int32 sums are exact when max|a| * max_m sum_k |w_mk| < 2**31 (every partial sum, and every
pair vpmaddwd adds, is bounded by that too). Otherwise, for 16-bit activations, a = 256 hi + lo
with hi = a >> 8 in [-128, 127] and lo = a & 255: two int32 sums, each exact when
255 * max_m sum_k |w_mk| < 2**31, joined in int64. Depthwise convolutions sum in int64 when
int32 is not exact. Anything else (weights outside int16, larger sums) keeps lb_qconv_wide.
"""

from __future__ import annotations

import numpy as np

from lowbit.backends.cpu.codegen.lower import Lowering
from lowbit.backends.cpu.codegen.program import Size, Tensor

INT32_LIMIT = 2**31
INT32, SPLIT, INT64 = 0, 1, 2
MODE_NAMES = {INT32: "int32 sums", SPLIT: "int32 hi/lo sums", INT64: "int64 sums"}

# per input type: the range of a (the int16 the kernel multiplies) and x - a
A_DOMAIN = {"LB_U8": (0, 255, 0), "LB_I16": (-32768, 32767, 0), "LB_U16": (-32768, 32767, 32768)}


def conv16_mode(rows: np.ndarray, a_type: str, za: int, depthwise: bool) -> int | None:
    """The lb_qconv16 mode that keeps the sums of centred weight rows [m, K] exact for inputs
    of `a_type` with zero point `za` (of the codes x), or None where lb_qconv16 cannot run."""
    if a_type not in A_DOMAIN or rows.size == 0:
        return None
    lo, hi, move = A_DOMAIN[a_type]
    if rows.min() < -32768 or rows.max() > 32767 or not lo <= za - move <= hi:
        return None
    row_abs = int(np.abs(rows.astype(np.int64)).sum(axis=1).max())
    if max(-lo, hi) * row_abs < INT32_LIMIT:
        return INT32
    if depthwise:
        return INT64
    if 255 * row_abs < INT32_LIMIT:
        return SPLIT
    return None


def pack16(rows: np.ndarray, groups: int, kp: int) -> np.ndarray:
    """Weight rows [groups * mg, K] as lb_qconv16 reads them: per group, per 16 output
    channels, per pair of k, 16 x 2 int16 (zeros past K and past mg)."""
    m, k = rows.shape
    mg = m // groups
    blocks = -(-mg // 16)
    full = np.zeros((groups, blocks * 16, kp), np.int16)
    full[:, :mg, :k] = rows.reshape(groups, mg, k)
    # [g, block, column, pair, 2] -> [g, block, pair, column, 2]
    return full.reshape(groups, blocks, 16, kp // 2, 2).transpose(0, 1, 3, 2, 4).reshape(-1)


def conv16_code(lw: Lowering, centred: np.ndarray, groups: int, a_type: str, out_type: str,
                za: int, narrow_shift: int, bias: np.ndarray | None, requant: str,
                wdesc: str, x: Tensor, out: Tensor, oh: int, ow: int, pointwise: bool
                ) -> tuple[list[str], list[Tensor], str] | None:
    """C lines running lb_qconv16 for centred weights [m, kh, kw, cg] (int64), with their
    scratch tensors and a description of the mode; None where lb_qconv16 cannot run.
    `pointwise`: a 1x1 stride-1 unpadded convolution, whose int16 input rows of one group
    with an even channel count are the product's rows, read in place (no im2col)."""
    m, kh, kw, cg = centred.shape
    mg = m // groups
    taps = kh * kw
    depthwise = cg == 1 and mg == 1 and taps <= 64
    rows = centred.reshape(m, taps * cg)
    mode = conv16_mode(rows, a_type, za, depthwise)
    if mode is None:
        return None
    move = A_DOMAIN[a_type][2]
    offset = -(za - move) * rows.sum(axis=1)
    if bias is not None:
        offset = offset + np.asarray(bias, np.int64)
    scratch: list[Tensor] = []
    direct = False
    if depthwise:
        kp = taps
        weights = np.ascontiguousarray(rows.T.astype(np.int16))  # [taps, c]
        dtype = {"LB_U8": np.uint8, "LB_I16": np.int16, "LB_U16": np.uint16}[a_type]
        zero_row = lw.prog.data(np.full(m, za, dtype))
        scratch_ptr = "NULL"
    else:
        kp = taps * cg + (taps * cg) % 2
        weights = pack16(rows, groups, kp)
        zero_row = "NULL"
        direct = pointwise and groups == 1 and a_type == "LB_I16" and kp == cg
        scratch_ptr = "NULL"
        if not direct:
            buf = lw.prog.scratch(Size(oh * ow * groups * kp * 2), "im2col16")
            scratch.append(buf)
            scratch_ptr = f"(int16_t *){buf.ptr}"
    code = [f"const lb_qconv16 conv = {{.win = {wdesc}, .groups = {groups}, .cg = {cg}, "
            f".mg = {mg}, .kp = {kp}, .a_type = {a_type}, .out_type = {out_type}, "
            f".za = {za - move}, .narrow_shift = {narrow_shift}, .mode = {mode}, "
            f".depthwise = {int(depthwise)}, "
            f".w = (const int16_t *){lw.prog.data(weights, 'weights')}, "
            f".offset = {lw.prog.data(offset.astype(np.int64))}, .zero_row = {zero_row}, "
            f".rq = {requant}, .direct = {int(direct)}}};",
            f"lb_qconv16_run(ctx, &conv, {x.ptr}, {out.ptr}, {scratch_ptr});"]
    return code, scratch, f"16-bit{' depthwise' if depthwise else ''}, {MODE_NAMES[mode]}"

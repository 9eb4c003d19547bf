"""PyTorch's run-time activation parameters for a dynamically quantized Linear
(`torch.ao.quantization.quantize_dynamic`, qint8 weights, fbgemm): the one formula that lowbit's
reference (`TorchDynamicQuantize`), the cpu backend's C kernel (lb_torch_dq) and the standard-op
form written by the PyTorch import (`lowbit.frontends.torch_dynamic`) compute, bit for bit.

Over the whole float32 tensor x, `top` = 127 (reduce_range, fbgemm on x86) or 255:

    mn = min(min(x), 0), mx = max(max(x), 0)                       float32 (min of nothing: +inf)
    s  = (float64(mx) - float64(mn)) / top                         float64
    s  = 0.1 if float32(s) == 0 or 1 / float32(s) is inf           (float32 reciprocal)
    if s < float64(float32(6.1e-5)):                               fbgemm's smallest scale
        a  = float32(6.1e-5) / float32(s)                          float32
        mn, mx = (mn, e) if mn == 0 else (-e, mx) if mx == 0 else (mn * a, mx * a)
                 with e = float32(6.1e-5) * top                    (float32)
        s  = float64(float32(6.1e-5))
    r_mn = float64(mn) / s, r_mx = float64(mx) / s                 float64
    z  = -r_mn if -|r_mn| < top - |r_mx| else top - r_mx           (the smaller rounding error)
    z  = clamp(round_half_even(z), 0, top)                         float64
    scale = float32(s), inv = float32(1 / scale)
    q  = clamp(round_half_even(float32(float64(x) * float64(inv) + z)), 0, 255)   uint8
    zero_point = uint8(z)

Comparisons with NaN are false, min/max/clamp propagate NaN, and a NaN code or zero point is 0
(numpy's and the C kernel's conversion), so NaN and infinite inputs give the same (meaningless)
codes everywhere. float64(x) * float64(inv) is exact (24-bit by 24-bit significands), and the one
rounding to float32 of its sum with the integer z gives the same integer code as fbgemm's
single-rounding fused multiply-add: the sum is exact in float64 unless |x * inv| < 2^-6, where
the code is z either way.
"""

from __future__ import annotations

import numpy as np

SMALL_SCALE = np.float32(6.1e-5)


def _u8(v: np.ndarray) -> np.ndarray:
    """Codes held in float (integers in [0, 255] or NaN) as uint8, NaN as 0."""
    v = np.asarray(v)
    return np.where(np.isnan(v), 0, v).astype(np.uint8)


def torch_params(x: np.ndarray, reduce_range: bool = True
                 ) -> tuple[float, float, np.float32, np.float64]:
    """(mn, mx, scale, zero) of the module docstring for float32 `x`: scale float32, zero
    float64 (an integer in [0, top], or NaN)."""
    top = 127.0 if reduce_range else 255.0
    x = np.asarray(x, np.float32)
    f0 = np.float32(0)
    with np.errstate(all="ignore"):
        lo = np.min(x, initial=np.float32(np.inf)) if x.size else np.float32(np.inf)
        hi = np.max(x, initial=np.float32(-np.inf)) if x.size else np.float32(-np.inf)
        mn, mx = np.minimum(np.float32(lo), f0), np.maximum(np.float32(hi), f0)
        scale = (np.float64(mx) - np.float64(mn)) / np.float64(top)
        scale_f = np.float32(scale)
        if scale_f == 0 or np.isinf(np.float32(1) / scale_f):
            scale = np.float64(0.1)
        if scale < np.float64(SMALL_SCALE):
            amp = np.float32(SMALL_SCALE / np.float32(scale))
            edge = SMALL_SCALE * np.float32(top)
            if mn == 0:
                mx = edge
            elif mx == 0:
                mn = -edge
            else:
                mn, mx = np.float32(mn * amp), np.float32(mx * amp)
            scale = np.float64(SMALL_SCALE)
        r_mn = np.float64(mn) / scale
        r_mx = np.float64(mx) / scale
        use_min = -np.abs(r_mn) < np.float64(top) - np.abs(r_mx)
        z = -r_mn if use_min else np.float64(top) - r_mx
        z = np.clip(np.rint(z), np.float64(0), np.float64(top))
    return mn, mx, np.float32(scale), np.float64(z)


def torch_dynamic_quantize(x: np.ndarray, reduce_range: bool = True
                           ) -> tuple[np.ndarray, np.float32, np.uint8]:
    """(codes uint8 like x, scale float32, zero point uint8) of float32 `x` (module docstring)."""
    _, _, scale, z = torch_params(x, reduce_range)
    x = np.asarray(x, np.float32)
    with np.errstate(all="ignore"):
        inv = np.float64(np.float32(1) / scale)
        t = (x.astype(np.float64) * inv + z).astype(np.float32)
        q = np.clip(np.rint(t), np.float32(0), np.float32(255))
    return _u8(q), scale, _u8(z)[()]

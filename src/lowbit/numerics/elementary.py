"""Float functions with a defined evaluation: exp, erfc of x/sqrt(2), GELU (erf and tanh
forms) and Softmax in float32, and sums in a fixed order.

numpy's and libm's transcendental functions differ between versions and instruction sets, and
numpy's sums follow its own pairwise order, so a compiled kernel cannot reproduce them bit for
bit. The functions here are sequences of IEEE float operations (+, -, *, / and sqrt, each
correctly rounded), exact scalings by powers of two and comparisons, written out step by step:
the reference kernels compute with them, and the cpu backend's C executes the same operations
in the same order (compiled with -ffp-contract=off, so no step is fused), giving the same bits
on every instruction set. Quantized models depend on this: a float result one ulp off can move
a dynamically quantized code, and integer results must be bit-identical.

Accuracy (measured against float64 evaluations, tests/numerics/test_elementary.py): `exp` within
1.3 ulp; `erfc_scaled` within 6 ulp; `gelu` (erf form) within 6 ulp over normal results; `gelu`
tanh form within 4e-6 relative for x >= -5 (below, where |GELU| < 1e-6, the exponential's
argument loses the relative accuracy of u);
`softmax` within 1.5e-6 relative for probabilities above 1e-7 (x - max is rounded to float32,
so e^(x - max) carries about |x - max| * 2**-24 relative error), 1e-5 for all.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32


def _hex(text: str) -> np.float32:
    """A float32 constant from its exact hexadecimal spelling (as the C source writes it)."""
    value = F32(float.fromhex(text))
    assert float(value) == float.fromhex(text), text
    return value


SUM_LANES = 16
"""Lanes of the fixed-order sums (`lane_sum`): one 512-bit vector of float32."""

# exp: x = k ln2 + r (Cody-Waite, ln2 = LN2_HI + LN2_LO with k * LN2_HI exact), e^r by a
# degree-6 polynomial fitted on |r| <= ln2 / 2, then scaled by 2**k.
LOG2E = _hex("0x1.715476p+0")
LN2_HI = _hex("0x1.63p-1")
LN2_LO = _hex("-0x1.bd0106p-13")
EXP_COEFFS = tuple(_hex(h) for h in (
    "0x1p+0", "0x1p+0", "0x1.fffffap-2", "0x1.55540ap-3", "0x1.55586ep-5", "0x1.126d54p-7",
    "0x1.6ad80ap-10"))
EXP_MIN = F32(-104.0)
"""Below this, e^x rounds to 0 in float32."""
EXP_MAX = F32(89.0)
"""Above this, e^x overflows to inf."""

# erfc(z), z = a / sqrt(2): 1 - z P(z^2) for z < ERF_SWITCH, else t exp(-z^2 + Q(t)) with
# t = 1 / (1 + z / 2) (polynomials fitted for these ranges), 0 from ERFC_ZERO on.
INV_SQRT2 = _hex("0x1.6a09e6p-1")
ERF_SWITCH = F32(0.5)
ERFC_ZERO = F32(10.0)
ERF_COEFFS = tuple(_hex(h) for h in (
    "0x1.20dd76p+0", "-0x1.812746p-2", "0x1.ce2ef2p-4", "-0x1.b8201cp-6", "0x1.54cf06p-8",
    "-0x1.9357eep-11"))
ERFC_COEFFS = tuple(_hex(h) for h in (
    "-0x1.43fa4p+0", "0x1.003004p+0", "0x1.7675e4p-2", "0x1.357cb8p-3", "-0x1.96cd26p-2",
    "0x1.956462p-1", "-0x1.ebb42p+0", "0x1.1ca94ap+1", "-0x1.34d19cp+0", "0x1.06ce2ep-2"))
SPLIT_MASK = np.uint32(0xFFFFF000)
"""Keeps the 12 leading significant bits of a float32: the square of the result is exact."""

# GELU tanh form: x / (1 + exp(-2 u)), u = sqrt(2 / pi) (x + 0.044715 x^3)
GELU_TANH_K0 = F32(0.7978845608028654)
GELU_TANH_K1 = F32(0.044715)


def _f32(x) -> np.ndarray:
    return np.asarray(x, F32)


def horner(coeffs: tuple[np.float32, ...], x: np.ndarray) -> np.ndarray:
    """c0 + x (c1 + x (c2 + ...)) evaluated from the highest coefficient: p = c_n, then
    p = p * x + c_i for i = n-1 .. 0, every step rounded to float32."""
    p = np.full(np.shape(x), coeffs[-1], F32)
    for c in coeffs[-2::-1]:
        p = p * x + c
    return p


def _exp_parts(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """e^(hi + lo) for hi + lo in [EXP_MIN, EXP_MAX]: k = rint((hi + lo) log2e),
    r = ((hi - k LN2_HI) + lo) - k LN2_LO, e^r by EXP_COEFFS, result ldexp(p, k) (one rounding:
    the C computes it as (p 2**(k >> 1)) 2**(k - (k >> 1)), whose first product is exact)."""
    k = np.rint((hi + lo) * LOG2E)
    r = hi - k * LN2_HI
    r = r + lo
    r = r - k * LN2_LO
    return np.ldexp(horner(EXP_COEFFS, r), k.astype(np.int32)).astype(F32)


def exp(x: np.ndarray) -> np.ndarray:
    """e^x in float32: NaN stays NaN, x < EXP_MIN gives 0, x > EXP_MAX gives inf, else
    `_exp_parts(x, 0)`."""
    x = _f32(x)
    with np.errstate(invalid="ignore", over="ignore"):
        inside = np.clip(np.nan_to_num(x), EXP_MIN, EXP_MAX)
        y = _exp_parts(inside, np.zeros_like(inside))
    y = np.where(x < EXP_MIN, F32(0), np.where(x > EXP_MAX, F32(np.inf), y))
    return np.where(np.isnan(x), x, y).astype(F32)


def erfc_scaled(a: np.ndarray) -> np.ndarray:
    """erfc(a / sqrt(2)) in float32 for a >= 0 (NaN gives NaN), with z = a * INV_SQRT2:

        z < ERF_SWITCH:  1 - z * horner(ERF_COEFFS, z * z)
        z < ERFC_ZERO:   t * exp(-a^2 / 2 + horner(ERFC_COEFFS, t)), t = 1 / (1 + 0.5 * z),
                         where -a^2 / 2 = hi + lo exactly-ish: ah = a & SPLIT_MASK,
                         hi = -(ah * ah) * 0.5 (exact), lo = Q(t) - ((a - ah) * (a + ah)) * 0.5,
                         and the exponential is `_exp_parts(hi, lo)`
        otherwise:       0
    """
    a = _f32(a)
    z = a * INV_SQRT2
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        near = F32(1) - z * horner(ERF_COEFFS, z * z)
        t = F32(1) / (F32(1) + F32(0.5) * z)
        ah = (np.nan_to_num(a).view(np.uint32) & SPLIT_MASK).view(F32)
        hi = -(ah * ah) * F32(0.5)
        lo = horner(ERFC_COEFFS, t) - ((a - ah) * (a + ah)) * F32(0.5)
        far_z = np.where((z >= ERF_SWITCH) & (z < ERFC_ZERO), 1, 0).astype(bool)
        far = t * _exp_parts(np.where(far_z, hi, F32(0)), np.where(far_z, lo, F32(0)))
    y = np.where(z < ERF_SWITCH, near, np.where(z < ERFC_ZERO, far, F32(0)))
    return np.where(np.isnan(a), a, y).astype(F32)


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    """GELU in float32.

    erf form ("none"): e = erfc_scaled(|x|), h = 0.5 * e, y = x * (1 - h) for x >= 0 and
    x * h otherwise (Phi(x) = 1 - erfc(x/sqrt 2)/2, or erfc(-x/sqrt 2)/2 without cancellation).
    tanh form: u = GELU_TANH_K0 * (x + GELU_TANH_K1 * ((x * x) * x)), y = x / (1 + exp(-2 * u))
    (= x (1 + tanh u) / 2)."""
    x = _f32(x)
    with np.errstate(all="ignore"):
        if approximate == "tanh":
            u = GELU_TANH_K0 * (x + GELU_TANH_K1 * ((x * x) * x))
            return (x / (F32(1) + exp(F32(-2) * u))).astype(F32)
        h = F32(0.5) * erfc_scaled(np.abs(x))
        return (x * np.where(x >= 0, F32(1) - h, h)).astype(F32)


def lane_sum(x: np.ndarray, axis: int = -1, lanes: int = SUM_LANES) -> np.ndarray:
    """The sum of x along `axis` in a fixed order, in x's dtype: element i goes to lane
    i % lanes, each lane adds its elements in order starting from 0, then the lanes are halved
    repeatedly (lane j += lane j + width for width = lanes/2, lanes/4, ..., 1). This is the
    order of a vector loop over `lanes`-wide registers followed by a halving reduction."""
    x = np.moveaxis(np.asarray(x), axis, -1)
    n = x.shape[-1]
    acc = np.zeros(x.shape[:-1] + (lanes,), x.dtype)
    for start in range(0, n, lanes):
        chunk = x[..., start:start + lanes]
        if chunk.shape[-1] < lanes:
            acc[..., :chunk.shape[-1]] = acc[..., :chunk.shape[-1]] + chunk
        else:
            acc = acc + chunk
    width = lanes // 2
    while width:
        acc = acc[..., :width] + acc[..., width:2 * width]
        width //= 2
    return acc[..., 0]


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax of float32 x along `axis`: m = max (NaN if the slice has one), d = x - m,
    e = exp(d), s = lane_sum(e), y = e * (1 / s)."""
    x = _f32(x)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        m = np.max(x, axis=axis, keepdims=True)
        e = exp(x - m)
        s = np.expand_dims(lane_sum(e, axis), axis)
        return (e * (F32(1) / s)).astype(F32)

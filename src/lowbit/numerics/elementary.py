"""Float functions with a defined evaluation: exp, the Gaussian tail Phi(-a), GELU (erf and tanh
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
1.3 ulp; `gauss_tail` within 6 ulp below 8; `gelu` (erf form) within 6 ulp over normal results
for |x| < 8 (x <= -8 gives -0, where the exact |GELU| is below 5e-15; x >= 8 gives x); `gelu`
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

# GELU erf form: the Gaussian tail h(a) = Phi(-a) = erfc(a / sqrt 2) / 2 for a < GELU_TAIL_END
# by 32 polynomials of degree 7, one per interval [j / 4, (j + 1) / 4), in u = a - (j / 4 + 1 / 8)
# (coefficients fitted to float64 ndtr with relative weights, then rounded to float32); 0 beyond.
GELU_TAIL_END = F32(8.0)
GELU_TAIL_PIECES = 32
GELU_TAIL_WIDTH = F32(0.25)
GELU_TAIL_COEFFS = tuple(tuple(_hex(h) for h in row) for row in (
    # c0
    ("0x1.cd116cp-2", "0x1.6a527ap-2", "0x1.105e82p-2", "0x1.86bb5p-3", "0x1.0ad7dap-3",
     "0x1.5a6196p-4", "0x1.aaa65cp-5", "0x1.f20394p-6", "0x1.13243cp-6", "0x1.1f85a2p-7",
     "0x1.1bee6cp-8", "0x1.08c89p-9", "0x1.d21af4p-11", "0x1.8301bep-12", "0x1.2eff8p-13",
     "0x1.bf3766p-15", "0x1.36feaep-16", "0x1.9775b4p-18", "0x1.f6c708p-20", "0x1.24149ap-21",
     "0x1.3f7a8ep-23", "0x1.48eb8cp-25", "0x1.3eb346p-27", "0x1.229364p-29", "0x1.f289d4p-32",
     "0x1.9256fcp-34", "0x1.317156p-36", "0x1.b437p-39", "0x1.24f60ap-41", "0x1.721278p-44",
     "0x1.b79cfep-47", "0x1.eb0feap-50"),
    # c1
    ("-0x1.95567ap-2", "-0x1.7cc794p-2", "-0x1.50096ep-2", "-0x1.169596p-2", "-0x1.b1ec62p-3",
     "-0x1.3d7712p-3", "-0x1.b46178p-4", "-0x1.19bfa4p-4", "-0x1.55c74p-5", "-0x1.857a94p-6",
     "-0x1.a0f22cp-7", "-0x1.a34ea6p-8", "-0x1.8c2226p-9", "-0x1.5f90f6p-10", "-0x1.251bf8p-11",
     "-0x1.cb2208p-13", "-0x1.51cfa6p-14", "-0x1.d2fa44p-16", "-0x1.2f35fcp-17",
     "-0x1.71e578p-19", "-0x1.a7e888p-21", "-0x1.c85f9ep-23", "-0x1.cd8ea4p-25",
     "-0x1.b6848cp-27", "-0x1.8762dcp-29", "-0x1.4827fp-31", "-0x1.027894p-33", "-0x1.7e7fa8p-36",
     "-0x1.09df8cp-38", "-0x1.5b388ep-41", "-0x1.a9fc06p-44", "-0x1.eaf37ep-47"),
    # c2
    ("0x1.95567ap-6", "0x1.1d95bp-4", "0x1.a40bcap-4", "0x1.e785c6p-4", "0x1.e829eep-4",
     "0x1.b483b8p-4", "0x1.628f32p-4", "0x1.0823aap-4", "0x1.6b23b4p-5", "0x1.ce819p-6",
     "0x1.119eecp-6", "0x1.2d6086p-7", "0x1.357aaep-8", "0x1.28a25p-9", "0x1.09a158p-10",
     "0x1.bcc8f8p-12", "0x1.5c5e24p-13", "0x1.fec1bcp-15", "0x1.5e966cp-16", "0x1.c2cfaep-18",
     "0x1.0f90fcp-19", "0x1.32a046p-21", "0x1.448856p-23", "0x1.420966p-25", "0x1.2ba7c4p-27",
     "0x1.057feap-29", "0x1.ac17e6p-32", "0x1.48b5e4p-34", "0x1.d99686p-37", "0x1.40186ap-39",
     "0x1.9604a6p-42", "0x1.e34852p-45"),
    # c3
    ("0x1.0a00cp-4", "0x1.b44f5ap-5", "0x1.1107a8p-5", "0x1.5c3afap-7", "-0x1.335cc6p-7",
     "-0x1.78fd64p-6", "-0x1.dd4a9cp-6", "-0x1.d8840ep-6", "-0x1.90857ep-6", "-0x1.2d3ccep-6",
     "-0x1.99586cp-7", "-0x1.fbc13ep-8", "-0x1.215cf4p-8", "-0x1.306a86p-9", "-0x1.288b4cp-10",
     "-0x1.0c205ep-11", "-0x1.c2dac8p-13", "-0x1.60f824p-14", "-0x1.019c54p-15",
     "-0x1.5edf14p-17", "-0x1.be431ep-19", "-0x1.092d68p-20", "-0x1.26a1e4p-22",
     "-0x1.3230b2p-24", "-0x1.29bdfcp-26", "-0x1.0f0112p-28", "-0x1.cde92ep-31",
     "-0x1.70ac32p-33", "-0x1.13a5e4p-35", "-0x1.8234dep-38", "-0x1.fb1702p-41", "-0x1.3806fap-43"),
    # c4
    ("-0x1.93396p-8", "-0x1.103246p-6", "-0x1.6d59d2p-6", "-0x1.6b1a06p-6", "-0x1.1a3836p-6",
     "-0x1.42d718p-7", "-0x1.53cb26p-9", "0x1.6b2f7ap-9", "0x1.6eebb4p-8", "0x1.971a0ep-8",
     "0x1.62da52p-8", "0x1.087dap-8", "0x1.5cf8bp-9", "0x1.9ed356p-10", "0x1.c0f186p-11",
     "0x1.bd5d06p-12", "0x1.96e144p-13", "0x1.577e22p-14", "0x1.0ca41ap-15", "0x1.860b6cp-17",
     "0x1.073e98p-18", "0x1.4ac296p-20", "0x1.83408cp-22", "0x1.a6d6a2p-24", "0x1.aee492p-26",
     "0x1.9a0f12p-28", "0x1.6c9d9cp-30", "0x1.2f10b6p-32", "0x1.d724a8p-35", "0x1.5697d6p-37",
     "0x1.d23d34p-40", "0x1.28f6b4p-42"),
    # c5
    ("-0x1.3a2934p-7", "-0x1.b9e818p-8", "-0x1.21e8bp-9", "0x1.2b68eep-9", "0x1.5a3464p-8",
     "0x1.93c024p-8", "0x1.5595aap-8", "0x1.aed06cp-9", "0x1.517a56p-10", "-0x1.94290ep-13",
     "-0x1.fbeeeep-11", "-0x1.2faa4ep-10", "-0x1.0696c2p-10", "-0x1.795b84p-11",
     "-0x1.d909f8p-12", "-0x1.08b8eep-12", "-0x1.0c0ef4p-13", "-0x1.ef41eep-15",
     "-0x1.a3c02ap-16", "-0x1.47b786p-17", "-0x1.d8d1a8p-19", "-0x1.3be298p-20",
     "-0x1.879d5cp-22", "-0x1.c3201ep-24", "-0x1.e378fep-26", "-0x1.e2871p-28", "-0x1.c0de3cp-30",
     "-0x1.85792cp-32", "-0x1.3b6828p-34", "-0x1.dd0d2ep-37", "-0x1.510f3ep-39", "-0x1.bd2e8p-42"),
    # c6
    ("0x1.0a60dcp-10", "0x1.584d96p-9", "0x1.a283c8p-9", "0x1.56c44ep-9", "0x1.563b94p-10",
     "-0x1.8a98bap-14", "-0x1.15e612p-10", "-0x1.6cdcfep-10", "-0x1.3aa032p-10",
     "-0x1.8a4636p-11", "-0x1.39f112p-12", "0x1.0364c2p-16", "0x1.5b6216p-13", "0x1.957456p-13",
     "0x1.4be2a2p-13", "0x1.bea8fcp-14", "0x1.04a022p-14", "0x1.0e744ap-15", "0x1.fa3f14p-17",
     "0x1.af279cp-18", "0x1.502ca2p-19", "0x1.e2064cp-21", "0x1.3ec82ap-22", "0x1.85ed3cp-24",
     "0x1.b9f15ap-26", "0x1.d0e046p-28", "0x1.c66e38p-30", "0x1.9d4518p-32", "0x1.5dfa04p-34",
     "0x1.1433dap-36", "0x1.968fdep-39", "0x1.173664p-41"),
    # c7
    ("0x1.25360ep-10", "0x1.58874ap-11", "-0x1.a4e692p-16", "-0x1.3a311cp-11", "-0x1.b66026p-11",
     "-0x1.7483p-11", "-0x1.83ea06p-12", "-0x1.05169cp-16", "0x1.bc4774p-13", "0x1.228f56p-12",
     "0x1.d98bbp-13", "0x1.10472ep-13", "0x1.726beep-15", "-0x1.0d5adep-17", "-0x1.da854p-16",
     "-0x1.e1b0e2p-16", "-0x1.6335eep-16", "-0x1.b222a4p-17", "-0x1.cd1b92p-18",
     "-0x1.b3a252p-19", "-0x1.730882p-20", "-0x1.1f58fap-21", "-0x1.971a2p-23", "-0x1.08e958p-24",
     "-0x1.3dbbccp-26", "-0x1.601696p-28", "-0x1.6930aap-30", "-0x1.5793acp-32",
     "-0x1.2f75b6p-34", "-0x1.f24c5p-37", "-0x1.7caacep-39", "-0x1.0ece52p-41"),
))
"""GELU_TAIL_COEFFS[k][j]: coefficient of u**k on interval j."""

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


def gauss_tail(a: np.ndarray) -> np.ndarray:
    """h(a) = Phi(-a) = erfc(a / sqrt 2) / 2 in float32 for a >= 0 (NaN gives NaN), in float32
    steps: j = min(trunc(min(a, GELU_TAIL_END) * 4), 31), u = a - (j * 0.25 + 0.125) (the centre
    is exact), p = c7[j], then p = p * u + c_k[j] for k = 6 .. 0 (each product and sum
    rounded); h = p where a < GELU_TAIL_END, else 0."""
    a = _f32(a)
    with np.errstate(invalid="ignore", over="ignore"):
        inside = np.where(np.isnan(a), F32(0), np.minimum(a, GELU_TAIL_END))
        j = np.minimum((inside * F32(1 / GELU_TAIL_WIDTH)).astype(np.int32),
                       GELU_TAIL_PIECES - 1)
        centre = j.astype(F32) * GELU_TAIL_WIDTH + GELU_TAIL_WIDTH * F32(0.5)
        u = a - centre
        table = np.asarray(GELU_TAIL_COEFFS, F32)
        p = table[-1][j]
        for row in table[-2::-1]:
            p = p * u + row[j]
    h = np.where(a < GELU_TAIL_END, p, F32(0))
    return np.where(np.isnan(a), a, h).astype(F32)


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    """GELU in float32.

    erf form ("none"): h = gauss_tail(|x|), y = x * (1 - h) for x >= 0 and x * h otherwise
    (Phi(x) = 1 - Phi(-x), or Phi(-|x|) itself without cancellation).
    tanh form: u = GELU_TANH_K0 * (x + GELU_TANH_K1 * ((x * x) * x)), y = x / (1 + exp(-2 * u))
    (= x (1 + tanh u) / 2)."""
    x = _f32(x)
    with np.errstate(all="ignore"):
        if approximate == "tanh":
            u = GELU_TANH_K0 * (x + GELU_TANH_K1 * ((x * x) * x))
            return (x / (F32(1) + exp(F32(-2) * u))).astype(F32)
        h = gauss_tail(np.abs(x))
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

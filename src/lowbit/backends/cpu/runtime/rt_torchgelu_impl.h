/* The erf-form GELU pass of rt_torchgelu.c, portable C compiled once per instruction set
 * (define LB_TGELU_SUFFIX and LB_TGELU_TARGET before including).
 *
 * e = (float)erf((double)d) is the Erf kernel's value (libm's erf, rounded once to float32).
 * Most values take a fast path that gives the same float32 without calling libm: for |d| <= 2
 * the Taylor series of erf in double (32 terms, relative error below 1e-15 on [-2, 2]), whose
 * float32 rounding is kept only when p * (1 - 1e-12) and p * (1 + 1e-12) round to the same
 * float32 (then so do libm's erf and the exact erf, both far closer to p than 1e-12 |p|:
 * rounding is monotonic); for |d| >= 4, erf(d) is within 1.6e-8 of +-1, closer than half a
 * float32 ulp below 1 (2.98e-8), so e = +-1. Every other value (2 < |d| < 4, a p near a
 * rounding boundary, NaN) calls erf. Then y = (x * (e + one)) * half in float32. */

#define LB_TGELU_CAT2(a, b) a##_##b
#define LB_TGELU_CAT(a, b) LB_TGELU_CAT2(a, b)
#define LB_TGELU_FN(name) LB_TGELU_CAT(name, LB_TGELU_SUFFIX)

LB_TGELU_TARGET void LB_TGELU_FN(lb_tgelu_span)(int64_t n, const float *x, float divisor,
                                                float one, float half, float *y) {
    float e[LB_TGELU_CHUNK];
    int32_t slow[LB_TGELU_CHUNK];
    for (int64_t k = 0; k < n; k++) {
        float d = x[k] / divisor;
        double dd = (double)d, a = fabs(dd), t = dd * dd;
        double p = -0x1.7298e545013acp-119;
        p = p * t + 0x1.72c97f9dd3b8dp-114;
        p = p * t + -0x1.67657a57148a3p-109;
        p = p * t + 0x1.512193be51298p-104;
        p = p * t + -0x1.31b7776e54127p-99;
        p = p * t + 0x1.0baeaddb047b0p-94;
        p = p * t + -0x1.c40abff27ce65p-90;
        p = p * t + 0x1.6f928977a0028p-85;
        p = p * t + -0x1.1f690c2b2753ap-80;
        p = p * t + 0x1.af83c2fb19fa6p-76;
        p = p * t + -0x1.3676fc48c133cp-71;
        p = p * t + 0x1.ab5cc31489f29p-67;
        p = p * t + -0x1.18cc8a061c479p-62;
        p = p * t + 0x1.5f7919bc67b8cp-58;
        p = p * t + -0x1.a2007af3447f6p-54;
        p = p * t + 0x1.d70b3537f4765p-50;
        p = p * t + -0x1.f56f071a885cfp-46;
        p = p * t + 0x1.f683ae4a97007p-42;
        p = p * t + -0x1.d8453cb0c46eap-38;
        p = p * t + 0x1.9e6ad5e55a730p-34;
        p = p * t + -0x1.51d7181c5d36dp-30;
        p = p * t + 0x1.fcc5720624c1cp-27;
        p = p * t + -0x1.5f742ec43e71ap-23;
        p = p * t + 0x1.b9e6c9dc651a3p-20;
        p = p * t + -0x1.f4d25c3e0c2ebp-17;
        p = p * t + 0x1.f9a326f9b89b7p-14;
        p = p * t + -0x1.c02db40040b86p-11;
        p = p * t + 0x1.565bcd0e6a53fp-8;
        p = p * t + -0x1.b82ce31288b51p-6;
        p = p * t + 0x1.ce2f21a042be2p-4;
        p = p * t + -0x1.812746b0379e7p-2;
        p = p * t + 0x1.20dd750429b6dp+0;
        p = p * dd;
        float lo = (float)(p * (1.0 - 1e-12)), hi = (float)(p * (1.0 + 1e-12));
        int32_t big = a >= 4.0;
        e[k] = big ? (dd > 0.0 ? 1.0f : -1.0f) : lo;
        slow[k] = !(big | ((a <= 2.0) & (lo == hi)));
    }
    for (int64_t k = 0; k < n; k++)
        if (slow[k]) e[k] = (float)erf((double)(x[k] / divisor));
    for (int64_t k = 0; k < n; k++) {
        float a = e[k] + one;
        float m = x[k] * a;
        y[k] = m * half;
    }
}

#undef LB_TGELU_FN
#undef LB_TGELU_CAT
#undef LB_TGELU_CAT2

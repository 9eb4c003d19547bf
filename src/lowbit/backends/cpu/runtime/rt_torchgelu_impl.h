/* The erf-form GELU pass of rt_torchgelu.c, portable C compiled for the scalar and AVX2 paths
 * (define LB_TGELU_SUFFIX and LB_TGELU_TARGET before including).
 *
 * e = (float)erf((double)d) is the Erf kernel's value (libm's erf, rounded once to float32).
 * Most values get the same float32 without calling libm, from a polynomial p in double whose
 * relative error is below 1e-15 (checked against mpmath on dense grids when the coefficients
 * were made): p's float32 rounding is kept only when p * (1 - 1e-12) and p * (1 + 1e-12)
 * round to the same float32 (then so do libm's erf and the exact erf, both far closer to p
 * than 1e-12 |p|: rounding is monotonic). The polynomials: for |d| <= 2 the Taylor series of
 * erf at 0 (32 terms, in d^2); for 2 < |d| < 4 its Taylor series at 2.5 or 3.5 (22 terms, in
 * |d| - centre, exact in double; erf is odd, and so are libm's and the reference's), computed
 * over a packed list of those values. For |d| >= 4, erf(d) is within 1.6e-8 of +-1, closer
 * than half a float32 ulp below 1 (2.98e-8), so e = +-1. The rest (a p near a rounding
 * boundary, NaN) calls erf. Then y = (x * (e + one)) * half in float32.
 * The includer defines LB_TGELU_MAD(a, b, c), the polynomials' step a * b + c: fused (one
 * rounding) on the vector paths, two operations on the scalar one. Either way p stays far
 * within 1e-12 |p| of erf, so each value's e is the same float32 on every path. */

#define LB_TGELU_CAT2(a, b) a##_##b
#define LB_TGELU_CAT(a, b) LB_TGELU_CAT2(a, b)
#define LB_TGELU_FN(name) LB_TGELU_CAT(name, LB_TGELU_SUFFIX)

LB_TGELU_TARGET void LB_TGELU_FN(lb_tgelu_span)(int64_t n, const float *x, float divisor,
                                                float one, float half, float *y) {
    float e[LB_TGELU_CHUNK], em[LB_TGELU_CHUNK];
    int32_t slow[LB_TGELU_CHUNK], mid[LB_TGELU_CHUNK], idx[LB_TGELU_CHUNK];
    double am[LB_TGELU_CHUNK];
    for (int64_t k = 0; k < n; k++) {
        float d = x[k] / divisor;
        double dd = (double)d, a = fabs(dd), t = dd * dd;
        double p = -0x1.7298e545013acp-119;
        p = LB_TGELU_MAD(p, t, 0x1.72c97f9dd3b8dp-114);
        p = LB_TGELU_MAD(p, t, -0x1.67657a57148a3p-109);
        p = LB_TGELU_MAD(p, t, 0x1.512193be51298p-104);
        p = LB_TGELU_MAD(p, t, -0x1.31b7776e54127p-99);
        p = LB_TGELU_MAD(p, t, 0x1.0baeaddb047b0p-94);
        p = LB_TGELU_MAD(p, t, -0x1.c40abff27ce65p-90);
        p = LB_TGELU_MAD(p, t, 0x1.6f928977a0028p-85);
        p = LB_TGELU_MAD(p, t, -0x1.1f690c2b2753ap-80);
        p = LB_TGELU_MAD(p, t, 0x1.af83c2fb19fa6p-76);
        p = LB_TGELU_MAD(p, t, -0x1.3676fc48c133cp-71);
        p = LB_TGELU_MAD(p, t, 0x1.ab5cc31489f29p-67);
        p = LB_TGELU_MAD(p, t, -0x1.18cc8a061c479p-62);
        p = LB_TGELU_MAD(p, t, 0x1.5f7919bc67b8cp-58);
        p = LB_TGELU_MAD(p, t, -0x1.a2007af3447f6p-54);
        p = LB_TGELU_MAD(p, t, 0x1.d70b3537f4765p-50);
        p = LB_TGELU_MAD(p, t, -0x1.f56f071a885cfp-46);
        p = LB_TGELU_MAD(p, t, 0x1.f683ae4a97007p-42);
        p = LB_TGELU_MAD(p, t, -0x1.d8453cb0c46eap-38);
        p = LB_TGELU_MAD(p, t, 0x1.9e6ad5e55a730p-34);
        p = LB_TGELU_MAD(p, t, -0x1.51d7181c5d36dp-30);
        p = LB_TGELU_MAD(p, t, 0x1.fcc5720624c1cp-27);
        p = LB_TGELU_MAD(p, t, -0x1.5f742ec43e71ap-23);
        p = LB_TGELU_MAD(p, t, 0x1.b9e6c9dc651a3p-20);
        p = LB_TGELU_MAD(p, t, -0x1.f4d25c3e0c2ebp-17);
        p = LB_TGELU_MAD(p, t, 0x1.f9a326f9b89b7p-14);
        p = LB_TGELU_MAD(p, t, -0x1.c02db40040b86p-11);
        p = LB_TGELU_MAD(p, t, 0x1.565bcd0e6a53fp-8);
        p = LB_TGELU_MAD(p, t, -0x1.b82ce31288b51p-6);
        p = LB_TGELU_MAD(p, t, 0x1.ce2f21a042be2p-4);
        p = LB_TGELU_MAD(p, t, -0x1.812746b0379e7p-2);
        p = LB_TGELU_MAD(p, t, 0x1.20dd750429b6dp+0);
        p = p * dd;
        float lo = (float)(p * (1.0 - 1e-12)), hi = (float)(p * (1.0 + 1e-12));
        int32_t big = a >= 4.0;
        e[k] = big ? (dd > 0.0 ? 1.0f : -1.0f) : lo;
        mid[k] = (a > 2.0) & (a < 4.0);
        slow[k] = !(big | ((a <= 2.0) & (lo == hi)));
    }
    int64_t m = 0;
    for (int64_t k = 0; k < n; k++)
        if (mid[k]) {
            idx[m] = (int32_t)k;
            am[m++] = fabs((double)(x[k] / divisor));
        }
    for (int64_t j = 0; j < m; j++) {
        double a = am[j];
        int32_t lo = a <= 3.0;
        double h = a - (lo ? 2.5 : 3.5);
        double p = lo ? -0x1.7252f2fffa4fbp-31 : -0x1.c8ba5cb7c5732p-36;
        p = LB_TGELU_MAD(p, h, (lo ? 0x1.37fdd82118ebcp-30 : 0x1.ff57d7bf24effp-34));
        p = LB_TGELU_MAD(p, h, (lo ? 0x1.325fcf01c60fap-28 : -0x1.36f12f03e5c6bp-33));
        p = LB_TGELU_MAD(p, h, (lo ? -0x1.97f31e43731b3p-26 : -0x1.837fcf76d39fbp-31));
        p = LB_TGELU_MAD(p, h, (lo ? 0x1.356cf87d24464p-26 : 0x1.153e8c87cc9cbp-28));
        p = LB_TGELU_MAD(p, h, (lo ? 0x1.80e36bab128b3p-23 : -0x1.1be8ea4e7bf8ep-27));
        p = LB_TGELU_MAD(p, h, (lo ? -0x1.584349ead6a3ep-21 : -0x1.89d268eba17d8p-28));
        p = LB_TGELU_MAD(p, h, (lo ? 0x1.857cc63e5cc55p-23 : 0x1.8c7db95907d1cp-24));
        p = LB_TGELU_MAD(p, h, (lo ? 0x1.3acdbedf3bf9dp-18 : -0x1.43ea60cc4f9a7p-22));
        p = LB_TGELU_MAD(p, h, (lo ? -0x1.d87265f65a35ap-17 : 0x1.dc7faa4de456ap-22));
        p = LB_TGELU_MAD(p, h, (lo ? 0x1.58bd113f5a0acp-18 : 0x1.dd7f3b681270fp-22));
        p = LB_TGELU_MAD(p, h, (lo ? 0x1.4a84485ac08c0p-14 : -0x1.377413bec5d3bp-18));
        p = LB_TGELU_MAD(p, h, (lo ? -0x1.067178c82ec16p-12 : 0x1.013525f7fb03fp-16));
        p = LB_TGELU_MAD(p, h, (lo ? 0x1.11551df364bafp-12 : -0x1.1f6304de1316ep-15));
        p = LB_TGELU_MAD(p, h, (lo ? 0x1.1c610bcb9f2f4p-11 : 0x1.e827fafaa2516p-15));
        p = LB_TGELU_MAD(p, h, (lo ? -0x1.6ecdbf67c97f8p-9 : -0x1.46153fb989863p-14));
        p = LB_TGELU_MAD(p, h, (lo ? 0x1.90e81283faacep-8 : 0x1.586bafc9b9889p-14));
        p = LB_TGELU_MAD(p, h, (lo ? -0x1.1a89b97ceac69p-7 : -0x1.1c07721ac7fe5p-14));
        p = LB_TGELU_MAD(p, h, (lo ? 0x1.119da0c46ccb1p-7 : 0x1.62ccea63cb0c5p-15));
        p = LB_TGELU_MAD(p, h, (lo ? -0x1.64e3dcd3af4bap-8 : -0x1.3d0e43d67415ep-16));
        p = LB_TGELU_MAD(p, h, (lo ? 0x1.1d83170fbf6fbp-9 : 0x1.6a597219a93dap-18));
        p = LB_TGELU_MAD(p, h, (lo ? 0x1.ffcaa8f4c9beap-1 : 0x1.ffffe710d565ep-1));
        float l = (float)(p * (1.0 - 1e-12)), u = (float)(p * (1.0 + 1e-12));
        em[j] = l == u ? l : -2.0f; /* -2: not decided (erf is above 0 here) */
    }
    for (int64_t j = 0; j < m; j++) {
        int32_t k = idx[j];
        if (em[j] > -1.0f) {
            e[k] = x[k] / divisor > 0.0f ? em[j] : -em[j];
            slow[k] = 0;
        }
    }
    for (int64_t k = 0; k < n; k++)
        if (slow[k]) e[k] = (float)erf((double)(x[k] / divisor));
    for (int64_t k = 0; k < n; k++) {
        float a = e[k] + one;
        float mm = x[k] * a;
        y[k] = mm * half;
    }
}

#undef LB_TGELU_FN
#undef LB_TGELU_CAT
#undef LB_TGELU_CAT2

/* The float32 functions of lowbit.numerics.elementary, one IEEE operation per step, as scalar
 * C. The AVX-512 kernels compute the same steps on 16 lanes. */
#ifndef LOWBIT_RT_ELEMENTARY_H
#define LOWBIT_RT_ELEMENTARY_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define LB_LOG2E 0x1.715476p+0f
#define LB_LN2_HI 0x1.63p-1f
#define LB_LN2_LO -0x1.bd0106p-13f
#define LB_EXP_C0 0x1p+0f
#define LB_EXP_C1 0x1p+0f
#define LB_EXP_C2 0x1.fffffap-2f
#define LB_EXP_C3 0x1.55540ap-3f
#define LB_EXP_C4 0x1.55586ep-5f
#define LB_EXP_C5 0x1.126d54p-7f
#define LB_EXP_C6 0x1.6ad80ap-10f
#define LB_EXP_MIN -104.0f
#define LB_EXP_MAX 89.0f

/* elementary.gauss_tail: 32 polynomials of degree 7 on [j / 4, (j + 1) / 4), 0 from 8 on;
 * lb_gelu_tail_c[k][j] is the coefficient of u**k on interval j */
#define LB_GELU_TAIL_END 8.0f
static const float lb_gelu_tail_c[8][32] = {
    {0x1.cd116cp-2f, 0x1.6a527ap-2f, 0x1.105e82p-2f, 0x1.86bb5p-3f, 0x1.0ad7dap-3f,
     0x1.5a6196p-4f, 0x1.aaa65cp-5f, 0x1.f20394p-6f, 0x1.13243cp-6f, 0x1.1f85a2p-7f,
     0x1.1bee6cp-8f, 0x1.08c89p-9f, 0x1.d21af4p-11f, 0x1.8301bep-12f, 0x1.2eff8p-13f,
     0x1.bf3766p-15f, 0x1.36feaep-16f, 0x1.9775b4p-18f, 0x1.f6c708p-20f, 0x1.24149ap-21f,
     0x1.3f7a8ep-23f, 0x1.48eb8cp-25f, 0x1.3eb346p-27f, 0x1.229364p-29f, 0x1.f289d4p-32f,
     0x1.9256fcp-34f, 0x1.317156p-36f, 0x1.b437p-39f, 0x1.24f60ap-41f, 0x1.721278p-44f,
     0x1.b79cfep-47f, 0x1.eb0feap-50f},
    {-0x1.95567ap-2f, -0x1.7cc794p-2f, -0x1.50096ep-2f, -0x1.169596p-2f, -0x1.b1ec62p-3f,
     -0x1.3d7712p-3f, -0x1.b46178p-4f, -0x1.19bfa4p-4f, -0x1.55c74p-5f, -0x1.857a94p-6f,
     -0x1.a0f22cp-7f, -0x1.a34ea6p-8f, -0x1.8c2226p-9f, -0x1.5f90f6p-10f, -0x1.251bf8p-11f,
     -0x1.cb2208p-13f, -0x1.51cfa6p-14f, -0x1.d2fa44p-16f, -0x1.2f35fcp-17f, -0x1.71e578p-19f,
     -0x1.a7e888p-21f, -0x1.c85f9ep-23f, -0x1.cd8ea4p-25f, -0x1.b6848cp-27f, -0x1.8762dcp-29f,
     -0x1.4827fp-31f, -0x1.027894p-33f, -0x1.7e7fa8p-36f, -0x1.09df8cp-38f, -0x1.5b388ep-41f,
     -0x1.a9fc06p-44f, -0x1.eaf37ep-47f},
    {0x1.95567ap-6f, 0x1.1d95bp-4f, 0x1.a40bcap-4f, 0x1.e785c6p-4f, 0x1.e829eep-4f,
     0x1.b483b8p-4f, 0x1.628f32p-4f, 0x1.0823aap-4f, 0x1.6b23b4p-5f, 0x1.ce819p-6f,
     0x1.119eecp-6f, 0x1.2d6086p-7f, 0x1.357aaep-8f, 0x1.28a25p-9f, 0x1.09a158p-10f,
     0x1.bcc8f8p-12f, 0x1.5c5e24p-13f, 0x1.fec1bcp-15f, 0x1.5e966cp-16f, 0x1.c2cfaep-18f,
     0x1.0f90fcp-19f, 0x1.32a046p-21f, 0x1.448856p-23f, 0x1.420966p-25f, 0x1.2ba7c4p-27f,
     0x1.057feap-29f, 0x1.ac17e6p-32f, 0x1.48b5e4p-34f, 0x1.d99686p-37f, 0x1.40186ap-39f,
     0x1.9604a6p-42f, 0x1.e34852p-45f},
    {0x1.0a00cp-4f, 0x1.b44f5ap-5f, 0x1.1107a8p-5f, 0x1.5c3afap-7f, -0x1.335cc6p-7f,
     -0x1.78fd64p-6f, -0x1.dd4a9cp-6f, -0x1.d8840ep-6f, -0x1.90857ep-6f, -0x1.2d3ccep-6f,
     -0x1.99586cp-7f, -0x1.fbc13ep-8f, -0x1.215cf4p-8f, -0x1.306a86p-9f, -0x1.288b4cp-10f,
     -0x1.0c205ep-11f, -0x1.c2dac8p-13f, -0x1.60f824p-14f, -0x1.019c54p-15f, -0x1.5edf14p-17f,
     -0x1.be431ep-19f, -0x1.092d68p-20f, -0x1.26a1e4p-22f, -0x1.3230b2p-24f, -0x1.29bdfcp-26f,
     -0x1.0f0112p-28f, -0x1.cde92ep-31f, -0x1.70ac32p-33f, -0x1.13a5e4p-35f, -0x1.8234dep-38f,
     -0x1.fb1702p-41f, -0x1.3806fap-43f},
    {-0x1.93396p-8f, -0x1.103246p-6f, -0x1.6d59d2p-6f, -0x1.6b1a06p-6f, -0x1.1a3836p-6f,
     -0x1.42d718p-7f, -0x1.53cb26p-9f, 0x1.6b2f7ap-9f, 0x1.6eebb4p-8f, 0x1.971a0ep-8f,
     0x1.62da52p-8f, 0x1.087dap-8f, 0x1.5cf8bp-9f, 0x1.9ed356p-10f, 0x1.c0f186p-11f,
     0x1.bd5d06p-12f, 0x1.96e144p-13f, 0x1.577e22p-14f, 0x1.0ca41ap-15f, 0x1.860b6cp-17f,
     0x1.073e98p-18f, 0x1.4ac296p-20f, 0x1.83408cp-22f, 0x1.a6d6a2p-24f, 0x1.aee492p-26f,
     0x1.9a0f12p-28f, 0x1.6c9d9cp-30f, 0x1.2f10b6p-32f, 0x1.d724a8p-35f, 0x1.5697d6p-37f,
     0x1.d23d34p-40f, 0x1.28f6b4p-42f},
    {-0x1.3a2934p-7f, -0x1.b9e818p-8f, -0x1.21e8bp-9f, 0x1.2b68eep-9f, 0x1.5a3464p-8f,
     0x1.93c024p-8f, 0x1.5595aap-8f, 0x1.aed06cp-9f, 0x1.517a56p-10f, -0x1.94290ep-13f,
     -0x1.fbeeeep-11f, -0x1.2faa4ep-10f, -0x1.0696c2p-10f, -0x1.795b84p-11f, -0x1.d909f8p-12f,
     -0x1.08b8eep-12f, -0x1.0c0ef4p-13f, -0x1.ef41eep-15f, -0x1.a3c02ap-16f, -0x1.47b786p-17f,
     -0x1.d8d1a8p-19f, -0x1.3be298p-20f, -0x1.879d5cp-22f, -0x1.c3201ep-24f, -0x1.e378fep-26f,
     -0x1.e2871p-28f, -0x1.c0de3cp-30f, -0x1.85792cp-32f, -0x1.3b6828p-34f, -0x1.dd0d2ep-37f,
     -0x1.510f3ep-39f, -0x1.bd2e8p-42f},
    {0x1.0a60dcp-10f, 0x1.584d96p-9f, 0x1.a283c8p-9f, 0x1.56c44ep-9f, 0x1.563b94p-10f,
     -0x1.8a98bap-14f, -0x1.15e612p-10f, -0x1.6cdcfep-10f, -0x1.3aa032p-10f, -0x1.8a4636p-11f,
     -0x1.39f112p-12f, 0x1.0364c2p-16f, 0x1.5b6216p-13f, 0x1.957456p-13f, 0x1.4be2a2p-13f,
     0x1.bea8fcp-14f, 0x1.04a022p-14f, 0x1.0e744ap-15f, 0x1.fa3f14p-17f, 0x1.af279cp-18f,
     0x1.502ca2p-19f, 0x1.e2064cp-21f, 0x1.3ec82ap-22f, 0x1.85ed3cp-24f, 0x1.b9f15ap-26f,
     0x1.d0e046p-28f, 0x1.c66e38p-30f, 0x1.9d4518p-32f, 0x1.5dfa04p-34f, 0x1.1433dap-36f,
     0x1.968fdep-39f, 0x1.173664p-41f},
    {0x1.25360ep-10f, 0x1.58874ap-11f, -0x1.a4e692p-16f, -0x1.3a311cp-11f, -0x1.b66026p-11f,
     -0x1.7483p-11f, -0x1.83ea06p-12f, -0x1.05169cp-16f, 0x1.bc4774p-13f, 0x1.228f56p-12f,
     0x1.d98bbp-13f, 0x1.10472ep-13f, 0x1.726beep-15f, -0x1.0d5adep-17f, -0x1.da854p-16f,
     -0x1.e1b0e2p-16f, -0x1.6335eep-16f, -0x1.b222a4p-17f, -0x1.cd1b92p-18f, -0x1.b3a252p-19f,
     -0x1.730882p-20f, -0x1.1f58fap-21f, -0x1.971a2p-23f, -0x1.08e958p-24f, -0x1.3dbbccp-26f,
     -0x1.601696p-28f, -0x1.6930aap-30f, -0x1.5793acp-32f, -0x1.2f75b6p-34f, -0x1.f24c5p-37f,
     -0x1.7caacep-39f, -0x1.0ece52p-41f},
};
#define LB_GELU_K0 0.7978845608028654f
#define LB_GELU_K1 0.044715f

/* 2**e for e in [-126, 127], exact */
static inline float lb_pow2f(int32_t e) {
    uint32_t bits = (uint32_t)(e + 127) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* elementary._exp_parts: e^(hi + lo), (hi + lo) in [-104, 89]. ldexp(p, k) as
 * (p * 2**(k >> 1)) * 2**(k - (k >> 1)): the first product is exact, the second rounds once. */
static inline float lb_exp_parts(float hi, float lo) {
    float k = rintf((hi + lo) * LB_LOG2E);
    float r = hi - k * LB_LN2_HI;
    r = r + lo;
    r = r - k * LB_LN2_LO;
    float p = LB_EXP_C6;
    p = p * r + LB_EXP_C5;
    p = p * r + LB_EXP_C4;
    p = p * r + LB_EXP_C3;
    p = p * r + LB_EXP_C2;
    p = p * r + LB_EXP_C1;
    p = p * r + LB_EXP_C0;
    int32_t ki = (int32_t)k, k1 = ki >> 1;
    return (p * lb_pow2f(k1)) * lb_pow2f(ki - k1);
}

static inline float lb_exp_f32(float x) {
    if (x != x) return x;
    if (x < LB_EXP_MIN) return 0.0f;
    if (x > LB_EXP_MAX) return INFINITY;
    return lb_exp_parts(x, 0.0f);
}

/* elementary.gauss_tail: Phi(-a) for a >= 0 (NaN gives NaN) */
static inline float lb_gauss_tail(float a) {
    if (a != a) return a;
    if (!(a < LB_GELU_TAIL_END)) return 0.0f;
    int32_t j = (int32_t)(a * 4.0f);
    if (j > 31) j = 31;
    float u = a - ((float)j * 0.25f + 0.125f);
    float p = lb_gelu_tail_c[7][j];
    for (int k = 6; k >= 0; k--) p = p * u + lb_gelu_tail_c[k][j];
    return p;
}

/* elementary.gelu */
static inline float lb_gelu_f32(float x, int32_t tanh_form) {
    if (tanh_form) {
        float u = LB_GELU_K0 * (x + LB_GELU_K1 * ((x * x) * x));
        return x / (1.0f + lb_exp_f32(-2.0f * u));
    }
    float h = lb_gauss_tail(fabsf(x));
    return x * (x >= 0.0f ? 1.0f - h : h);
}

#endif /* LOWBIT_RT_ELEMENTARY_H */

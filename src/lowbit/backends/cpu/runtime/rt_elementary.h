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

#define LB_INV_SQRT2 0x1.6a09e6p-1f
#define LB_ERF_SWITCH 0.5f
#define LB_ERFC_ZERO 10.0f
#define LB_ERF_C0 0x1.20dd76p+0f
#define LB_ERF_C1 -0x1.812746p-2f
#define LB_ERF_C2 0x1.ce2ef2p-4f
#define LB_ERF_C3 -0x1.b8201cp-6f
#define LB_ERF_C4 0x1.54cf06p-8f
#define LB_ERF_C5 -0x1.9357eep-11f
#define LB_ERFC_C0 -0x1.43fa4p+0f
#define LB_ERFC_C1 0x1.003004p+0f
#define LB_ERFC_C2 0x1.7675e4p-2f
#define LB_ERFC_C3 0x1.357cb8p-3f
#define LB_ERFC_C4 -0x1.96cd26p-2f
#define LB_ERFC_C5 0x1.956462p-1f
#define LB_ERFC_C6 -0x1.ebb42p+0f
#define LB_ERFC_C7 0x1.1ca94ap+1f
#define LB_ERFC_C8 -0x1.34d19cp+0f
#define LB_ERFC_C9 0x1.06ce2ep-2f
#define LB_SPLIT_MASK 0xFFFFF000u
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

/* elementary.erfc_scaled: erfc(a / sqrt 2) for a >= 0. */
static inline float lb_erfc_scaled(float a) {
    if (a != a) return a;
    float z = a * LB_INV_SQRT2;
    if (z < LB_ERF_SWITCH) {
        float s = z * z, p = LB_ERF_C5;
        p = p * s + LB_ERF_C4;
        p = p * s + LB_ERF_C3;
        p = p * s + LB_ERF_C2;
        p = p * s + LB_ERF_C1;
        p = p * s + LB_ERF_C0;
        return 1.0f - z * p;
    }
    if (!(z < LB_ERFC_ZERO)) return 0.0f;
    float t = 1.0f / (1.0f + 0.5f * z);
    uint32_t bits;
    memcpy(&bits, &a, 4);
    bits &= LB_SPLIT_MASK;
    float ah;
    memcpy(&ah, &bits, 4);
    float hi = -(ah * ah) * 0.5f;
    float q = LB_ERFC_C9;
    q = q * t + LB_ERFC_C8;
    q = q * t + LB_ERFC_C7;
    q = q * t + LB_ERFC_C6;
    q = q * t + LB_ERFC_C5;
    q = q * t + LB_ERFC_C4;
    q = q * t + LB_ERFC_C3;
    q = q * t + LB_ERFC_C2;
    q = q * t + LB_ERFC_C1;
    q = q * t + LB_ERFC_C0;
    float lo = q - ((a - ah) * (a + ah)) * 0.5f;
    return t * lb_exp_parts(hi, lo);
}

/* elementary.gelu */
static inline float lb_gelu_f32(float x, int32_t tanh_form) {
    if (tanh_form) {
        float u = LB_GELU_K0 * (x + LB_GELU_K1 * ((x * x) * x));
        return x / (1.0f + lb_exp_f32(-2.0f * u));
    }
    float h = 0.5f * lb_erfc_scaled(fabsf(x));
    return x * (x >= 0.0f ? 1.0f - h : h);
}

#endif /* LOWBIT_RT_ELEMENTARY_H */

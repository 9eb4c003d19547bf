/* PyTorch's erf-form GELU on the AVX-512 path (lb_torch_gelu, rt_torchgelu.c): per value
 * d = x / divisor, e = (float)erf((double)d) (the Erf kernel's libm value), y = (x * (e + one))
 * * half, in float32 steps, 16 values a vector.
 *
 * e without libm for most values, as the portable span (rt_torchgelu_impl.h) but from one
 * polynomial per lane: a = |d| < 4 falls in interval i = floor(2a) of 8, whose Taylor
 * coefficients (scripts/erf_series.py: relative error <= 1.4e-14 against libm and mpmath) are
 * picked per lane by one permute per step: p = a * P0(a^2) for i = 0, Pi(a - i/2 - 1/4)
 * otherwise, 15 fused multiply-adds in double. p's float32 rounding is kept only when
 * p * (1 - 1e-12) and p * (1 + 1e-12) round to the same float32 (then so do libm's erf and the
 * exact erf, both far closer to p than 1e-12 |p|); e takes d's sign (erf and libm's erf are
 * odd). |d| >= 4: e = +-1 (erf within 1.6e-8 of 1, below half a float32 ulp). The lanes left
 * (a p near a rounding boundary, NaN) call erf. So each value's e, and y, are the portable
 * span's bits. */
#include "rt_tf_internal.h"

#include <math.h>

#if LB_HAVE_AVX512
#include "rt_vec512.h"

void lb_tgelu_span_avx512(int64_t n, const float *x, float divisor, float one, float half,
                          float *y);

#define LB_TGELU_TERMS 15

/* [step][interval], Horner order: scripts/erf_series.py's output */
static const double lb_tgelu_series[LB_TGELU_TERMS][8] __attribute__((aligned(64))) = {
    {0x0.0p+0, 0x1.7313fb66f36f6p-16, -0x1.94a53c645ccdbp-19, -0x1.3668d56f09b00p-18, 0x1.cb0718bc6dc96p-19, -0x1.eb027532f1e9dp-21, 0x1.d56060892daf5p-29, 0x1.6df3b136b9415p-25},
    {0x0.0p+0, -0x1.3db33dbe2237ep-14, 0x1.d4520093cdd9ep-15, -0x1.294d49e1a631dp-16, -0x1.65937983af9a4p-20, 0x1.68b7ad440ba03p-19, -0x1.26552b63b3912p-21, -0x1.ec7d23a1cdfffp-25},
    {0x0.0p+0, -0x1.bd5eea735c608p-14, -0x1.ba66102895704p-15, 0x1.2007a6d7935c6p-14, -0x1.7ca5429a38511p-16, -0x1.1f87c15445595p-20, 0x1.ff3236f426a50p-20, -0x1.833324e429526p-24},
    {-0x1.51d7181c5d36dp-30, 0x1.4725abcb993b6p-11, -0x1.53b177f074426p-12, -0x1.6d70cffe71229p-18, 0x1.11321ce0dc8f3p-14, -0x1.09d09f8254931p-16, -0x1.8070948011d1bp-19, 0x1.a0431133a7b2dp-21},
    {0x1.fcc5720624c1cp-27, 0x1.86234ec3372d9p-13, 0x1.a0074f860d925p-11, -0x1.d041eea2258aep-12, -0x1.80c1330a27b22p-17, 0x1.cd592454e7d28p-15, -0x1.38933c0f0c9fap-19, -0x1.5d6903bb02d10p-19},
    {-0x1.5f742ec43e71ap-23, -0x1.04105cd6d527ep-8, 0x1.cc22555d6cd4ep-11, 0x1.d4cf0ad2e6ca3p-11, -0x1.8352cd05696b8p-12, -0x1.2abb3cb37d67fp-14, 0x1.b2c3201a66dd9p-16, 0x1.99f5c54c5ea75p-18},
    {0x1.b9e6c9dc651a3p-20, 0x1.2db332f9e64d4p-9, -0x1.75672cebadac5p-8, 0x1.7ec1d1d8d3387p-11, 0x1.0602e33b9ef4ap-10, -0x1.7557726380065p-14, -0x1.567479c97cce7p-14, -0x1.7566beee1bb2fp-17},
    {-0x1.f4d25c3e0c2ebp-17, 0x1.2e0afb0bb961ep-6, 0x1.db43c97264485p-9, -0x1.8d10fb6b8006fp-8, -0x1.5f8313b6fdd59p-11, 0x1.52b6263f0c0e7p-11, 0x1.647f721c135ebp-13, 0x1.110de49c0acd0p-16},
    {0x1.f9a326f9b89b7p-14, -0x1.b8477966b3381p-6, 0x1.5d0003af70568p-6, 0x1.25b378c92a6c0p-7, -0x1.7cae0d45b1a6ap-9, -0x1.b2755bfd73556p-10, -0x1.145464ea2872bp-12, -0x1.4357b5546e9f3p-16},
    {-0x1.c02db40040b86p-11, -0x1.b42a1890ce411p-5, -0x1.8281ce0b34fa4p-5, 0x1.b22257dd01249p-8, 0x1.5d3b17bbe0f22p-7, 0x1.6935960664d74p-9, 0x1.490a4d230eab9p-12, 0x1.3436bc9fc46f6p-16},
    {0x1.565bcd0e6a53fp-8, 0x1.349b5eaa14598p-3, -0x1.93a9a7bb7ed94p-8, -0x1.8a0da54306154p-5, -0x1.38a98327890e6p-6, -0x1.ab0c273ac263ep-9, -0x1.2c7d5ef053eb0p-12, -0x1.d06f586093ea7p-17},
    {-0x1.b82ce31288b51p-6, 0x1.b6e8591f66e5bp-6, 0x1.571d01c5c56bep-3, 0x1.7148c3d57c312p-4, 0x1.63ef61e824425p-6, 0x1.69cf466ccdf62p-9, 0x1.9aa489e3cad21p-13, 0x1.0b6a7b0f1b586p-17},
    {0x1.ce2f21a042be2p-4, -0x1.edc5644353c27p-2, -0x1.2ebf3dcc9f22fp-2, -0x1.7a4a8a2bdce13p-4, -0x1.074b60f8df349p-6, -0x1.a6a519a114d70p-10, -0x1.8de3cd290a7c0p-14, -0x1.bba3ac4cf8472p-19},
    {-0x1.812746b0379e7p-2, 0x1.492e42d78d2c5p-1, 0x1.e4652fadcb6b2p-3, 0x1.b055303221015p-5, 0x1.d4143a9dfe965p-8, 0x1.3360ccd23db3ap-11, 0x1.e9b5e8d00ce77p-16, 0x1.d9371e2ff7c35p-21},
    {0x1.20dd750429b6dp+0, 0x1.6c1c9759d0e5fp-1, 0x1.d8865d98abe01p-1, 0x1.f92d077f8d56dp-1, 0x1.ff404760319b4p-1, 0x1.fff2cfb0453d9p-1, 0x1.ffff6f9f67e55p-1, 0x1.fffffc2f171e3p-1},
};

/* e of 8 values d (float32), and the lanes it leaves to libm */
LB_V512 __m256 lb_tgelu_erf8(__m256 d, __mmask8 *slow) {
    const __m512d dd = _mm512_cvtps_pd(d);
    const __m512d a = _mm512_abs_pd(dd);
    const __m256i i32 = _mm256_min_epu32(_mm512_cvttpd_epu32(_mm512_add_pd(a, a)),
                                         _mm256_set1_epi32(7));
    const __m512i idx = _mm512_cvtepu32_epi64(i32);
    const __mmask8 first = _mm512_cmpeq_epi64_mask(idx, _mm512_setzero_si512());
    const __m512d centre = _mm512_add_pd(_mm512_mul_pd(_mm512_cvtepi64_pd(idx),
                                                       _mm512_set1_pd(0.5)),
                                         _mm512_set1_pd(0.25));
    const __m512d h = _mm512_mask_mul_pd(_mm512_sub_pd(a, centre), first, a, a);
    __m512d p = _mm512_permutexvar_pd(idx, _mm512_load_pd(lb_tgelu_series[0]));
#pragma GCC unroll 16
    for (int s = 1; s < LB_TGELU_TERMS; s++)
        p = _mm512_fmadd_pd(p, h, _mm512_permutexvar_pd(idx, _mm512_load_pd(lb_tgelu_series[s])));
    p = _mm512_mask_mul_pd(p, first, p, a);
    const __m256 lo = _mm512_cvtpd_ps(_mm512_mul_pd(p, _mm512_set1_pd(1.0 - 1e-12)));
    const __m256 hi = _mm512_cvtpd_ps(_mm512_mul_pd(p, _mm512_set1_pd(1.0 + 1e-12)));
    const __mmask8 big = _mm512_cmp_pd_mask(a, _mm512_set1_pd(4.0), _CMP_GE_OQ);
    const __mmask8 small = _mm512_cmp_pd_mask(a, _mm512_set1_pd(4.0), _CMP_LT_OQ);
    const __mmask8 same = _mm256_cmp_ps_mask(lo, hi, _CMP_EQ_OQ);
    *slow = (__mmask8)~(big | (small & same));
    const __m256 mag = _mm256_mask_blend_ps(big, lo, _mm256_set1_ps(1.0f));
    const __m256 sign = _mm256_and_ps(d, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN)));
    return _mm256_or_ps(mag, sign);
}

LB_TARGET_AVX512 void lb_tgelu_span_avx512(int64_t n, const float *x, float divisor, float one,
                                           float half, float *y) {
    const __m512 vdiv = _mm512_set1_ps(divisor), vone = _mm512_set1_ps(one),
                 vhalf = _mm512_set1_ps(half);
    for (int64_t k = 0; k < n; k += 16) {
        const int64_t left = n - k;
        const __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
        const __m512 xv = _mm512_maskz_loadu_ps(m, x + k);
        const __m512 d = _mm512_div_ps(xv, vdiv);
        __mmask8 s0, s1;
        const __m256 e0 = lb_tgelu_erf8(_mm512_castps512_ps256(d), &s0);
        const __m256 e1 = lb_tgelu_erf8(_mm512_extractf32x8_ps(d, 1), &s1);
        __m512 e = _mm512_insertf32x8(_mm512_castps256_ps512(e0), e1, 1);
        const __mmask16 slow = (__mmask16)(((unsigned)s1 << 8 | s0) & m);
        if (slow) {
            float dv[16], ev[16];
            _mm512_storeu_ps(dv, d);
            _mm512_storeu_ps(ev, e);
            for (int i = 0; i < 16; i++)
                if (slow >> i & 1) ev[i] = (float)erf((double)dv[i]);
            e = _mm512_loadu_ps(ev);
        }
        const __m512 mm = _mm512_mul_ps(xv, _mm512_add_ps(e, vone));
        _mm512_mask_storeu_ps(y + k, m, _mm512_mul_ps(mm, vhalf));
    }
}
#endif

/* AVX-512 LayerNorm, Softmax, GELU and exp: the steps of rt_elementary.h on 16 float lanes
 * (LayerNorm: on 2 x 8 double lanes, which are exactly lane_sum's 16 lanes). */
#include "rt_tf_internal.h"
#include "rt_elementary.h"

#if LB_HAVE_AVX512
#include "rt_vec512.h"

#define LB_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

LB_V512 __mmask16 lb_tf_mask(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

LB_V512 __m512 lb_horner_v(__m512 x, const float *c, int n) {
    __m512 p = _mm512_set1_ps(c[n - 1]);
    for (int i = n - 2; i >= 0; i--) p = _mm512_add_ps(_mm512_mul_ps(p, x), _mm512_set1_ps(c[i]));
    return p;
}

/* 2**e for integer lanes e in [-126, 127] */
LB_V512 __m512 lb_pow2_v(__m512i e) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(127)),
                                                 23));
}

static const float lb_exp_c[7] = {LB_EXP_C0, LB_EXP_C1, LB_EXP_C2, LB_EXP_C3,
                                  LB_EXP_C4, LB_EXP_C5, LB_EXP_C6};
/* lb_exp_parts on 16 lanes (hi + lo must lie in [-104, 89] where the result is used). */
LB_V512 __m512 lb_exp_parts_v(__m512 hi, __m512 lo) {
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_add_ps(hi, lo),
                                                  _mm512_set1_ps(LB_LOG2E)), LB_RNE);
    __m512 r = _mm512_sub_ps(hi, _mm512_mul_ps(k, _mm512_set1_ps(LB_LN2_HI)));
    r = _mm512_add_ps(r, lo);
    r = _mm512_sub_ps(r, _mm512_mul_ps(k, _mm512_set1_ps(LB_LN2_LO)));
    __m512 p = lb_horner_v(r, lb_exp_c, 7);
    __m512i ki = _mm512_cvtps_epi32(k);
    /* clamp the exponent into the range where 2**(k>>1), 2**(k-(k>>1)) are normal; lanes
     * outside are not used */
    ki = _mm512_max_epi32(_mm512_min_epi32(ki, _mm512_set1_epi32(200)), _mm512_set1_epi32(-200));
    __m512i k1 = _mm512_srai_epi32(ki, 1);
    return _mm512_mul_ps(_mm512_mul_ps(p, lb_pow2_v(k1)), lb_pow2_v(_mm512_sub_epi32(ki, k1)));
}

LB_V512 __m512 lb_exp_v(__m512 x) {
    const __m512 lo = _mm512_set1_ps(LB_EXP_MIN), hi = _mm512_set1_ps(LB_EXP_MAX);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    __mmask16 over = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ);
    __m512 inside = _mm512_min_ps(_mm512_max_ps(x, lo), hi); /* NaN lanes become lo */
    __m512 y = lb_exp_parts_v(inside, _mm512_setzero_ps());
    y = _mm512_mask_blend_ps(under, y, _mm512_setzero_ps());
    y = _mm512_mask_blend_ps(over, y, _mm512_set1_ps(INFINITY));
    return _mm512_mask_blend_ps(nan, y, x);
}

/* lb_exp_v for lanes x <= 0 or -inf, never NaN (x - max of a row whose max is finite), in
 * fewer operations with the same result: the NaN and overflow blends and the exponent clamp
 * change no such lane (k >= -151 there), so they are left out; the two adds of 0 are left
 * out (they change only a -0, and r is +0 either way); and p 2**(k >> 1) 2**(k - (k >> 1))
 * is vscalefps(p, k): both are p 2**k rounded once (the first product is exact), which is
 * the reference's ldexp(p, k). lb_exp_nonpos_xn: n <= 4 vectors at once, step by step (each
 * step's n operations are independent, so one vector's long dependent chain does not fill
 * the scheduler). */
LB_V512 void lb_exp_nonpos_xn(const __m512 *x, __m512 *y, const int n) {
    const __m512 lo = _mm512_set1_ps(LB_EXP_MIN);
    __mmask16 keep[4];
    __m512 hi[4], k[4], r[4], p[4];
    for (int j = 0; j < n; j++) keep[j] = _mm512_cmp_ps_mask(x[j], lo, _CMP_NLT_UQ);
    for (int j = 0; j < n; j++) hi[j] = _mm512_max_ps(x[j], lo);
    for (int j = 0; j < n; j++) k[j] = _mm512_mul_ps(hi[j], _mm512_set1_ps(LB_LOG2E));
    for (int j = 0; j < n; j++) k[j] = _mm512_roundscale_ps(k[j], LB_RNE);
    for (int j = 0; j < n; j++)
        r[j] = _mm512_sub_ps(hi[j], _mm512_mul_ps(k[j], _mm512_set1_ps(LB_LN2_HI)));
    for (int j = 0; j < n; j++)
        r[j] = _mm512_sub_ps(r[j], _mm512_mul_ps(k[j], _mm512_set1_ps(LB_LN2_LO)));
    for (int j = 0; j < n; j++) p[j] = _mm512_set1_ps(lb_exp_c[6]);
    for (int i = 5; i >= 0; i--)
        for (int j = 0; j < n; j++)
            p[j] = _mm512_add_ps(_mm512_mul_ps(p[j], r[j]), _mm512_set1_ps(lb_exp_c[i]));
    for (int j = 0; j < n; j++) y[j] = _mm512_maskz_scalef_ps(keep[j], p[j], k[j]);
}

LB_V512 __m512 lb_exp_nonpos_v(__m512 x) {
    __m512 y;
    lb_exp_nonpos_xn(&x, &y, 1);
    return y;
}

/* elementary.gauss_tail on 16 lanes: the interval's coefficients picked from the 32-entry
 * tables by vpermt2ps (lanes past the end, and NaN, take interval 31 and are zeroed after). */
LB_V512 __m512 lb_gauss_tail_v(__m512 a) {
    const __m512 end = _mm512_set1_ps(LB_GELU_TAIL_END);
    const __m512i j = _mm512_min_epi32(
        _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_min_ps(a, end), _mm512_set1_ps(4.0f))),
        _mm512_set1_epi32(31));
    const __m512 centre = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(j),
                                                      _mm512_set1_ps(0.25f)),
                                        _mm512_set1_ps(0.125f));
    const __m512 u = _mm512_sub_ps(a, centre);
#define LB_TAIL_C(k) \
    _mm512_permutex2var_ps(_mm512_loadu_ps(lb_gelu_tail_c[k]), j, \
                           _mm512_loadu_ps(lb_gelu_tail_c[k] + 16))
    __m512 p = LB_TAIL_C(7);
    p = _mm512_add_ps(_mm512_mul_ps(p, u), LB_TAIL_C(6));
    p = _mm512_add_ps(_mm512_mul_ps(p, u), LB_TAIL_C(5));
    p = _mm512_add_ps(_mm512_mul_ps(p, u), LB_TAIL_C(4));
    p = _mm512_add_ps(_mm512_mul_ps(p, u), LB_TAIL_C(3));
    p = _mm512_add_ps(_mm512_mul_ps(p, u), LB_TAIL_C(2));
    p = _mm512_add_ps(_mm512_mul_ps(p, u), LB_TAIL_C(1));
    p = _mm512_add_ps(_mm512_mul_ps(p, u), LB_TAIL_C(0));
#undef LB_TAIL_C
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, end, _CMP_LT_OQ), p);
}

LB_V512 __m512 lb_gelu_v(__m512 x, int32_t tanh_form) {
    if (tanh_form) {
        __m512 u = _mm512_mul_ps(_mm512_set1_ps(LB_GELU_K0),
                                 _mm512_add_ps(x, _mm512_mul_ps(_mm512_set1_ps(LB_GELU_K1),
                                                                _mm512_mul_ps(_mm512_mul_ps(x, x),
                                                                              x))));
        __m512 e = lb_exp_v(_mm512_mul_ps(_mm512_set1_ps(-2.0f), u));
        return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    }
    __m512 h = lb_gauss_tail_v(_mm512_abs_ps(x));
    __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
    __m512 phi = _mm512_mask_blend_ps(pos, h, _mm512_sub_ps(_mm512_set1_ps(1.0f), h));
    return _mm512_mul_ps(x, phi);
}

LB_TARGET_AVX512 void lb_gelu_span_avx512(int64_t n, const float *x, int32_t tanh_form,
                                          float *y) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = lb_tf_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, lb_gelu_v(_mm512_maskz_loadu_ps(m, x + i), tanh_form));
    }
}

LB_TARGET_AVX512 void lb_exp_span_avx512(int64_t n, const float *x, float *y) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = lb_tf_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, lb_exp_v(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

/* lane_sum's halving of 16 float lanes */
LB_V512 float lb_halve16_v(__m512 acc) {
    __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
    __m128 a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
    __m128 a1 = _mm_add_ss(a2, _mm_shuffle_ps(a2, a2, 1));
    return _mm_cvtss_f32(a1);
}

/* 16 double lanes as (lanes 0-7, lanes 8-15) */
LB_V512 double lb_halve16_d(__m512d lo, __m512d hi) {
    __m512d a8 = _mm512_add_pd(lo, hi);
    __m256d a4 = _mm256_add_pd(_mm512_castpd512_pd256(a8), _mm512_extractf64x4_pd(a8, 1));
    __m128d a2 = _mm_add_pd(_mm256_castpd256_pd128(a4), _mm256_extractf128_pd(a4, 1));
    __m128d a1 = _mm_add_sd(a2, _mm_unpackhi_pd(a2, a2));
    return _mm_cvtsd_f64(a1);
}

LB_TARGET_AVX512 void lb_softmax_rows_avx512(int64_t r0, int64_t r1, int64_t n, const float *x,
                                             int64_t ldx, float *y, int64_t ldy) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * ldx;
        float *yr = y + r * ldy;
        __m512 mv = _mm512_set1_ps(-INFINITY);
        __mmask16 nan = 0;
        for (int64_t i = 0; i < n; i += 16) {
            __mmask16 k = lb_tf_mask(n - i);
            __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, xr + i);
            nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
            mv = _mm512_max_ps(mv, v);
        }
        float m = nan ? NAN : _mm512_reduce_max_ps(mv);
        const __m512 vm = _mm512_set1_ps(m);
        __m512 acc = _mm512_setzero_ps();
        if (m - m == 0.0f) { /* finite max: lb_exp_v's steps that can change a lane */
            int64_t i = 0;
            for (; i + 64 <= n; i += 64) { /* four vectors in step, summed in order */
                __m512 d[4], e[4];
                for (int j = 0; j < 4; j++)
                    d[j] = _mm512_sub_ps(_mm512_loadu_ps(xr + i + 16 * j), vm);
                lb_exp_nonpos_xn(d, e, 4);
                for (int j = 0; j < 4; j++) {
                    _mm512_storeu_ps(yr + i + 16 * j, e[j]);
                    acc = _mm512_add_ps(acc, e[j]);
                }
            }
            for (; i + 16 <= n; i += 16) {
                const __m512 e = lb_exp_nonpos_v(_mm512_sub_ps(_mm512_loadu_ps(xr + i), vm));
                _mm512_storeu_ps(yr + i, e);
                acc = _mm512_add_ps(acc, e);
            }
            if (i < n) {
                __mmask16 k = lb_tf_mask(n - i);
                __m512 e = lb_exp_nonpos_v(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xr + i), vm));
                e = _mm512_maskz_mov_ps(k, e);
                _mm512_mask_storeu_ps(yr + i, k, e);
                acc = _mm512_add_ps(acc, e);
            }
        } else
        for (int64_t i = 0; i < n; i += 16) {
            __mmask16 k = lb_tf_mask(n - i);
            __m512 e = lb_exp_v(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xr + i), vm));
            e = _mm512_maskz_mov_ps(k, e);
            _mm512_mask_storeu_ps(yr + i, k, e);
            acc = _mm512_add_ps(acc, e);
        }
        const __m512 inv = _mm512_set1_ps(1.0f / lb_halve16_v(acc));
        for (int64_t i = 0; i < n; i += 16) {
            __mmask16 k = lb_tf_mask(n - i);
            _mm512_mask_storeu_ps(yr + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, yr + i), inv));
        }
    }
}

/* Rows of at most LB_LN_KEEP values keep x - mean (float64) from the second pass for the
 * third, and gamma and beta are widened to float64 once per call: the same values enter the
 * same operations. */
#define LB_LN_KEEP 1024

LB_TARGET_AVX512 void lb_layernorm_rows_avx512(int64_t r0, int64_t r1, int64_t n,
                                               const float *x, int64_t ldx, const float *gamma,
                                               const float *beta, double eps, float *y,
                                               int64_t ldy) {
    const int keep = n <= LB_LN_KEEP;
    double dk[LB_LN_KEEP], gk[LB_LN_KEEP], bk[LB_LN_KEEP];
    const int64_t nfull = n / 16 * 16;
    if (keep)
        for (int64_t i = 0; i < n; i++) {
            gk[i] = (double)gamma[i];
            bk[i] = beta ? (double)beta[i] : 0.0;
        }
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * ldx;
        float *yr = y + r * ldy;
        __m512d lo = _mm512_setzero_pd(), hi = lo;
        for (int64_t i = 0; i < n; i += 16) {
            __m512 v = _mm512_maskz_loadu_ps(lb_tf_mask(n - i), xr + i);
            lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
            hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)));
        }
        const double mean = lb_halve16_d(lo, hi) / (double)n;
        const __m512d vmean = _mm512_set1_pd(mean);
        lo = hi = _mm512_setzero_pd();
        for (int64_t i = 0; i < n; i += 16) {
            __mmask16 k = lb_tf_mask(n - i);
            __m512 v = _mm512_maskz_loadu_ps(k, xr + i);
            __m512d d0 = _mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), vmean);
            __m512d d1 = _mm512_sub_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)), vmean);
            if (i >= nfull) { /* lanes past n add exactly 0 */
                d0 = _mm512_maskz_mov_pd((__mmask8)(k & 0xFF), d0);
                d1 = _mm512_maskz_mov_pd((__mmask8)(k >> 8), d1);
            }
            if (keep) {
                _mm512_mask_storeu_pd(dk + i, (__mmask8)(k & 0xFF), d0);
                _mm512_mask_storeu_pd(dk + i + 8, (__mmask8)(k >> 8), d1);
            }
            lo = _mm512_add_pd(lo, _mm512_mul_pd(d0, d0));
            hi = _mm512_add_pd(hi, _mm512_mul_pd(d1, d1));
        }
        const double inv = 1.0 / sqrt(lb_halve16_d(lo, hi) / (double)n + eps);
        const __m512d vinv = _mm512_set1_pd(inv);
        if (keep) {
            for (int64_t i = 0; i < n; i += 16) {
                __mmask16 k = lb_tf_mask(n - i);
                const __mmask8 k0 = (__mmask8)(k & 0xFF), k1 = (__mmask8)(k >> 8);
                __m512d y0 = _mm512_mul_pd(_mm512_mul_pd(_mm512_maskz_loadu_pd(k0, dk + i), vinv),
                                           _mm512_maskz_loadu_pd(k0, gk + i));
                __m512d y1 = _mm512_mul_pd(
                    _mm512_mul_pd(_mm512_maskz_loadu_pd(k1, dk + i + 8), vinv),
                    _mm512_maskz_loadu_pd(k1, gk + i + 8));
                if (beta) {
                    y0 = _mm512_add_pd(y0, _mm512_maskz_loadu_pd(k0, bk + i));
                    y1 = _mm512_add_pd(y1, _mm512_maskz_loadu_pd(k1, bk + i + 8));
                }
                __m512 out = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(y0)),
                                                _mm512_cvtpd_ps(y1), 1);
                _mm512_mask_storeu_ps(yr + i, k, out);
            }
            continue;
        }
        for (int64_t i = 0; i < n; i += 16) {
            __mmask16 k = lb_tf_mask(n - i);
            __m512 v = _mm512_maskz_loadu_ps(k, xr + i), g = _mm512_maskz_loadu_ps(k, gamma + i);
            __m512d y0 = _mm512_mul_pd(
                _mm512_mul_pd(_mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), vmean),
                              vinv),
                _mm512_cvtps_pd(_mm512_castps512_ps256(g)));
            __m512d y1 = _mm512_mul_pd(
                _mm512_mul_pd(_mm512_sub_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)), vmean),
                              vinv),
                _mm512_cvtps_pd(_mm512_extractf32x8_ps(g, 1)));
            if (beta) {
                __m512 b = _mm512_maskz_loadu_ps(k, beta + i);
                y0 = _mm512_add_pd(y0, _mm512_cvtps_pd(_mm512_castps512_ps256(b)));
                y1 = _mm512_add_pd(y1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(b, 1)));
            }
            __m512 out = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(y0)),
                                            _mm512_cvtpd_ps(y1), 1);
            _mm512_mask_storeu_ps(yr + i, k, out);
        }
    }
}
#endif /* LB_HAVE_AVX512 */

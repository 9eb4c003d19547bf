/* AVX-512 dynamic quantization: the operations of rt_dq_impl.h on 16 lanes. Ranges are min
 * and max over lanes (order does not matter), and every rounding step is the same IEEE
 * operation: division, round to nearest even (vrndscaleps), exact integer adds and clamps. */
#include "rt_tf_internal.h"

#if LB_HAVE_AVX512
#include "rt_vec512.h"

#define LB_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

LB_V512 __mmask16 lb_dq_mask(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

/* 16 values of the slice (x / cs when cs is set); lanes outside `m` are 0. */
LB_V512 __m512 lb_dq_load(const float *x, const float *cs, int64_t i, __mmask16 m) {
    __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    if (cs) v = _mm512_div_ps(v, _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), m, cs + i));
    return v;
}

/* NaN lanes to 0 (they count as 0 in the range). */
LB_V512 __m512 lb_dq_nan0(__m512 v) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v,
                                _mm512_setzero_ps());
}

/* Codes of 16 values: clamp(rint(v / scale) + zero, qlo, top), NaN giving `zero`. */
LB_V512 __m512i lb_dq_codes(__m512 v, __m512 scale, __m512 zero, __m512 qlo, __m512 top) {
    __m512 r = _mm512_roundscale_ps(_mm512_div_ps(v, scale), LB_RNE);
    r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), r, _mm512_setzero_ps());
    r = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(r, zero), qlo), top);
    return _mm512_cvtps_epi32(r);
}

/* Scale and zero point of a slice from its range (scalar: the same expressions as C). */
LB_V512 void lb_dq_params(float lo, float hi, int32_t qmax, int32_t symmetric, float *scale,
                          float *zero) {
    const float top = (float)qmax;
    if (symmetric) {
        *scale = hi == 0.0f ? 1.0f : hi / top;
        *zero = 0.0f;
    } else {
        *scale = hi == lo ? 1.0f : (hi - lo) / top;
        *zero = lb_rint_f32(lb_clampf(0.0f - lo / *scale, 0.0f, top));
    }
}

#define LB_DQ_KEEP 8 /* slices up to 8 x 16 values stay in registers between the two passes */

LB_TARGET_AVX512 static void lb_dq_slice_v512(const float *x, const float *cs, int64_t len,
                                              int32_t qmax, int32_t symmetric, void *q,
                                              float *scale_out, void *zero_out) {
    __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
    __m512 kept[LB_DQ_KEEP];
    int64_t chunks = (len + 15) / 16;
    for (int64_t c = 0; c < chunks; c++) {
        __m512 v = lb_dq_load(x, cs, c * 16, lb_dq_mask(len - c * 16));
        if (c < LB_DQ_KEEP) kept[c] = v;
        v = lb_dq_nan0(v);
        if (symmetric) v = _mm512_abs_ps(v);
        lo = _mm512_min_ps(lo, v);
        hi = _mm512_max_ps(hi, v);
    }
    float scale, zero;
    lb_dq_params(_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi), qmax, symmetric, &scale,
                 &zero);
    *scale_out = scale;
    if (symmetric)
        *(int8_t *)zero_out = 0;
    else
        *(uint8_t *)zero_out = (uint8_t)zero;
    const __m512 vs = _mm512_set1_ps(scale), vz = _mm512_set1_ps(zero);
    const __m512 top = _mm512_set1_ps((float)qmax);
    const __m512 qlo = symmetric ? _mm512_set1_ps(-(float)qmax) : _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; c++) {
        __mmask16 m = lb_dq_mask(len - c * 16);
        __m512 v = c < LB_DQ_KEEP ? kept[c] : lb_dq_load(x, cs, c * 16, m);
        __m512i codes = lb_dq_codes(v, vs, vz, qlo, top);
        _mm_mask_storeu_epi8((uint8_t *)q + c * 16, m, _mm512_cvtepi32_epi8(codes));
    }
}

LB_TARGET_AVX512 void lb_dq_rows_avx512(const lb_dq_rows *p, int64_t r0, int64_t r1) {
    int64_t G = (p->k + p->group - 1) / p->group;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t j = 0; j < G; j++) {
            int64_t k0 = j * p->group, len = LB_MIN(p->group, p->k - k0);
            lb_dq_slice_v512(p->x + r * p->ldx + k0,
                             p->channel_scale ? p->channel_scale + k0 : NULL, len, p->qmax,
                             p->symmetric, (uint8_t *)p->q + r * p->ldq + k0,
                             p->scale + r * p->ldp + j, (uint8_t *)p->zero + r * p->ldp + j);
        }
}

/* Columns [c0, c1) of block o, 16 at a time: ranges over the rows of each group elementwise. */
LB_TARGET_AVX512 void lb_dq_cols_avx512(const lb_dq_cols *p, int64_t o, int64_t c0,
                                        int64_t c1) {
    int64_t G = (p->r + p->group - 1) / p->group;
    const __m512 top = _mm512_set1_ps((float)p->qmax), one = _mm512_set1_ps(1.0f);
    const __m512 zero_v = _mm512_setzero_ps();
    const __m512 qlo = p->symmetric ? _mm512_set1_ps(-(float)p->qmax) : zero_v;
    for (int64_t c = c0; c < c1; c += 16) {
        __mmask16 m = lb_dq_mask(c1 - c);
        for (int64_t j = 0; j < G; j++) {
            int64_t rr0 = j * p->group, len = LB_MIN(p->group, p->r - rr0);
            const float *x = p->x + (o * p->r + rr0) * p->c + c;
            __m512 lo = zero_v, hi = zero_v;
            for (int64_t i = 0; i < len; i++) {
                __m512 v = lb_dq_nan0(_mm512_maskz_loadu_ps(m, x + i * p->c));
                if (p->symmetric) v = _mm512_abs_ps(v);
                lo = _mm512_min_ps(lo, v);
                hi = _mm512_max_ps(hi, v);
            }
            __m512 scale, zero = zero_v;
            if (p->symmetric) {
                scale = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(hi, zero_v, _CMP_EQ_OQ),
                                             _mm512_div_ps(hi, top), one);
            } else {
                scale = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(hi, lo, _CMP_EQ_OQ),
                                             _mm512_div_ps(_mm512_sub_ps(hi, lo), top), one);
                zero = _mm512_sub_ps(zero_v, _mm512_div_ps(lo, scale));
                zero = _mm512_roundscale_ps(_mm512_min_ps(_mm512_max_ps(zero, zero_v), top),
                                            LB_RNE);
            }
            int64_t pat = (o * G + j) * p->c + c;
            _mm512_mask_storeu_ps(p->scale + pat, m, scale);
            _mm_mask_storeu_epi8((uint8_t *)p->zero + pat, m,
                                 _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(zero)));
            uint8_t *q = (uint8_t *)p->q + (o * p->r + rr0) * p->c + c;
            for (int64_t i = 0; i < len; i++) {
                __m512 v = _mm512_maskz_loadu_ps(m, x + i * p->c);
                _mm_mask_storeu_epi8(q + i * p->c, m,
                                     _mm512_cvtepi32_epi8(lb_dq_codes(v, scale, zero, qlo, top)));
            }
        }
    }
}
#endif /* LB_HAVE_AVX512 */

/* AVX-512 paths of lb_qconv16 (rt_qconv16.c): the product tile by vpdpwssd (16 int32 lanes,
 * each adding a pair of int16 x int16 products; wrap-around arithmetic, exact because the
 * code generator bounds every sum below 2**31), 8 rows x 16 output channels; the depthwise
 * row as rt_qconv16_impl.h compiled for AVX-512. */
#include "rt_qconv16.h"

#if LB_HAVE_AVX512
#include "rt_vec512.h"

/* Pair i of an int16 row, broadcast to every int32 lane. */
LB_TARGET_AVX512 static inline __m512i lb_c16_pair512(const int16_t *a, int64_t i) {
    int32_t v;
    memcpy(&v, a + 2 * i, 4);
    return _mm512_set1_epi32(v);
}

LB_TARGET_AVX512 void lb_c16_tile_avx512(const int16_t *A, int64_t lda, int64_t rows,
                                         int64_t kpairs, const int16_t *wb, int split,
                                         int32_t *acc, int32_t *acc_hi) {
    const int16_t *a[LB_C16_MR];
    for (int r = 0; r < LB_C16_MR; r++) a[r] = A + LB_MIN(r, rows - 1) * lda;
    __m512i c[LB_C16_MR];
    for (int r = 0; r < LB_C16_MR; r++) c[r] = _mm512_setzero_si512();
    if (!split) {
        for (int64_t i = 0; i < kpairs; i++) {
            const __m512i wv = _mm512_loadu_si512(wb + i * 32);
            for (int r = 0; r < LB_C16_MR; r++)
                c[r] = _mm512_dpwssd_epi32(c[r], lb_c16_pair512(a[r], i), wv);
        }
    } else {
        const __m512i low = _mm512_set1_epi16(255);
        __m512i h[LB_C16_MR];
        for (int r = 0; r < LB_C16_MR; r++) h[r] = _mm512_setzero_si512();
        for (int64_t i = 0; i < kpairs; i++) {
            const __m512i wv = _mm512_loadu_si512(wb + i * 32);
            for (int r = 0; r < LB_C16_MR; r++) {
                __m512i b = lb_c16_pair512(a[r], i);
                c[r] = _mm512_dpwssd_epi32(c[r], _mm512_and_si512(b, low), wv);
                h[r] = _mm512_dpwssd_epi32(h[r], _mm512_srai_epi16(b, 8), wv);
            }
        }
        for (int r = 0; r < rows; r++) _mm512_storeu_si512(acc_hi + r * 16, h[r]);
    }
    for (int r = 0; r < rows; r++) _mm512_storeu_si512(acc + r * 16, c[r]);
}

/* The requantization parameters of channels c.. under mask k (the arrays are not padded for
 * blocks that start inside a group). */
LB_V512 lb_rq512 lb_c16_rq512_load(const lb_requant *rq, int64_t c, __mmask16 k) {
    lb_rq512 v;
    v.zp = _mm512_maskz_loadu_epi32(k, rq->zero_point + c);
    v.p0 = v.p1 = v.p2 = v.p3 = _mm512_setzero_si512();
    v.fmul = _mm512_setzero_ps();
    if (rq->method == LB_RQ_FLOAT32) {
        v.fmul = _mm512_maskz_loadu_ps(k, rq->fmul + c);
        return v;
    }
    v.p0 = _mm512_maskz_loadu_epi32(k, rq->p0 + c);
    v.p1 = _mm512_maskz_loadu_epi32(k, rq->p1 + c);
    v.p2 = _mm512_maskz_loadu_epi32(k, rq->p2 + c);
    if (rq->method == LB_RQ_PRESCALE) v.p3 = _mm512_maskz_loadu_epi32(k, rq->p3 + c);
    return v;
}

/* 8 exact accumulators narrowed by r (rounding half up) and saturated to int32. */
LB_V512 __m256i lb_c16_narrow512(__m512i a, int r) {
    if (r > 0)
        a = _mm512_srai_epi64(_mm512_add_epi64(a, _mm512_set1_epi64((int64_t)1 << (r - 1))),
                              (unsigned)r);
    a = _mm512_max_epi64(a, _mm512_set1_epi64(INT32_MIN));
    a = _mm512_min_epi64(a, _mm512_set1_epi64(INT32_MAX));
    return _mm512_cvtepi64_epi32(a);
}

/* rt_qconv16_impl.h's lb_c16_finish_row, 16 channels a step. */
LB_TARGET_AVX512 void lb_c16_finish_row_avx512(const lb_qconv16 *p, int64_t m0, int64_t n,
                                               const int64_t *acc, int64_t at, void *out) {
    const lb_requant *rq = &p->rq;
    int32_t t = p->out_type;
    if (rq->method == LB_RQ_DEQUANT || (t != LB_U8 && t != LB_I16 && t != LB_U16 && t != LB_I32)) {
        lb_c16_finish_row_scalar(p, m0, n, acc, at, out); /* float results, other types */
        return;
    }
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = lb_tail_mask(n - i);
        __m512i lo = _mm512_maskz_loadu_epi64((__mmask8)k, acc + i);
        __m512i hi = _mm512_maskz_loadu_epi64((__mmask8)(k >> 8), acc + i + 8);
        __m512i x = _mm512_inserti64x4(_mm512_castsi256_si512(
            lb_c16_narrow512(lo, p->narrow_shift)), lb_c16_narrow512(hi, p->narrow_shift), 1);
        if (p->out_type == LB_I32) {
            _mm512_mask_storeu_epi32((int32_t *)out + at + i, k, x);
            continue;
        }
        lb_rq512 v = lb_c16_rq512_load(rq, m0 + i, k);
        lb_store_v512(out, p->out_type, at + i, lb_requant_v512(rq, &v, x), k);
    }
}

#define LB_C16_OWN_FINISH
#define LB_C16_SUFFIX avx512
#define LB_C16_TARGET LB_TARGET_AVX512
#include "rt_qconv16_impl.h"

#endif

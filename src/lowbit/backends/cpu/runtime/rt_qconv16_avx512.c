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

/* 16 input codes of channels c.. (under mask k) as int32 lanes of a (uint16 codes - 32768). */
LB_V512 __m512i lb_c16_load512(const char *x, int32_t type, int64_t c, __mmask16 k) {
    if (type == LB_U8) return _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, x + c));
    __m512i v = _mm512_cvtepi16_epi32(_mm256_maskz_loadu_epi16(k, (const int16_t *)x + c));
    if (type == LB_I16) return v;
    return _mm512_sub_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0xFFFF)),
                            _mm512_set1_epi32(32768));
}

/* rt_qconv16_impl.h's depthwise row, 16 channels a vector: each tap's int32 product (exact:
 * |a w| <= 2**30) added in int32 lanes (LB_C16_INT32) or widened to int64 lanes. */
LB_TARGET_AVX512 void lb_c16_dw_row_avx512(const lb_qconv16 *p, const void *in, void *out,
                                           int64_t n, int64_t oy) {
    const lb_window *w = &p->win;
    int64_t taps = w->kh * w->kw, c = w->c, esize = lb_c16_esize(p->a_type);
    const char *tap[LB_DW_MAX_TAPS];
    int64_t sums[64];
    int wide = p->mode != LB_C16_INT32;
    for (int64_t ox = 0; ox < w->ow; ox++) {
        lb_c16_taps(w, (const char *)in, (const char *)p->zero_row, esize, n, oy, ox, tap);
        int64_t at0 = ((n * w->oh + oy) * w->ow + ox) * c;
        for (int64_t c0 = 0; c0 < c; c0 += 64) {
            int64_t cn = LB_MIN(64, c - c0);
            for (int64_t b = 0; b < cn; b += 16) {
                __mmask16 k = lb_tail_mask(cn - b);
                __m512i acc = _mm512_setzero_si512(), lo = acc, hi = acc;
                for (int64_t t = 0; t < taps; t++) {
                    __m512i x = lb_c16_load512(tap[t], p->a_type, c0 + b, k);
                    __m512i wt = _mm512_cvtepi16_epi32(
                        _mm256_maskz_loadu_epi16(k, p->w + t * c + c0 + b));
                    __m512i prod = _mm512_mullo_epi32(x, wt);
                    if (!wide) {
                        acc = _mm512_add_epi32(acc, prod);
                    } else {
                        lo = _mm512_add_epi64(lo, _mm512_cvtepi32_epi64(
                                                      _mm512_castsi512_si256(prod)));
                        hi = _mm512_add_epi64(hi, _mm512_cvtepi32_epi64(
                                                      _mm512_extracti64x4_epi64(prod, 1)));
                    }
                }
                if (!wide) {
                    lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(acc));
                    hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(acc, 1));
                }
                const int64_t *off = p->offset + c0 + b;
                lo = _mm512_add_epi64(lo, _mm512_maskz_loadu_epi64((__mmask8)k, off));
                hi = _mm512_add_epi64(hi, _mm512_maskz_loadu_epi64((__mmask8)(k >> 8), off + 8));
                _mm512_storeu_si512(sums + b, lo);
                _mm512_storeu_si512(sums + b + 8, hi);
            }
            lb_c16_finish_row_avx512(p, c0, cn, sums, at0 + c0, out);
        }
    }
}

#define LB_C16_OWN_FINISH
#define LB_C16_OWN_DW
#define LB_C16_SUFFIX avx512
#define LB_C16_TARGET LB_TARGET_AVX512
#include "rt_qconv16_impl.h"

#endif

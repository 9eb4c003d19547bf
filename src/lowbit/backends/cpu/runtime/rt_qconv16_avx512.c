/* AVX-512 paths of lb_qconv16 (rt_qconv16.c): the product tile by vpdpwssd (16 int32 lanes,
 * each adding a pair of int16 x int16 products; wrap-around arithmetic, exact because the
 * code generator bounds every sum below 2**31), 8 rows x 16 output channels; the depthwise
 * row as rt_qconv16_impl.h compiled for AVX-512. */
#include "rt_qconv16.h"

#if LB_HAVE_AVX512
#include <immintrin.h>

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

#define LB_C16_SUFFIX avx512
#define LB_C16_TARGET LB_TARGET_AVX512
#include "rt_qconv16_impl.h"

#endif

/* AVX2 paths of lb_qconv16 (rt_qconv16.c): the product tile by vpmaddwd (8 int32 lanes, each
 * the sum of a pair of int16 x int16 products, then vpaddd; exact because the code generator
 * bounds every sum below 2**31, so no pair reaches the one case vpmaddwd wraps), 4 rows x 16
 * output channels at a time; the depthwise row as rt_qconv16_impl.h compiled for AVX2. */
#include "rt_qconv16.h"

#if LB_HAVE_AVX2
#include <immintrin.h>

LB_TARGET_AVX2 static inline __m256i lb_c16_pair256(const int16_t *a, int64_t i) {
    int32_t v;
    memcpy(&v, a + 2 * i, 4);
    return _mm256_set1_epi32(v);
}

/* Rows [r0, r0 + 4) (clamped to rows), one sum (lo or, with `hi`, the a >> 8 part). */
LB_TARGET_AVX2 static void lb_c16_tile4_avx2(const int16_t *A, int64_t lda, int64_t rows,
                                            int64_t r0, int64_t kpairs, const int16_t *wb,
                                            int part, int32_t *acc) {
    const int16_t *a[4];
    for (int r = 0; r < 4; r++) a[r] = A + LB_MIN(r0 + r, rows - 1) * lda;
    __m256i c[4][2];
    for (int r = 0; r < 4; r++) c[r][0] = c[r][1] = _mm256_setzero_si256();
    const __m256i low = _mm256_set1_epi16(255);
    for (int64_t i = 0; i < kpairs; i++) {
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)(wb + i * 32));
        const __m256i w1 = _mm256_loadu_si256((const __m256i *)(wb + i * 32 + 16));
        for (int r = 0; r < 4; r++) {
            __m256i b = lb_c16_pair256(a[r], i);
            if (part == 1) b = _mm256_and_si256(b, low);
            if (part == 2) b = _mm256_srai_epi16(b, 8);
            c[r][0] = _mm256_add_epi32(c[r][0], _mm256_madd_epi16(b, w0));
            c[r][1] = _mm256_add_epi32(c[r][1], _mm256_madd_epi16(b, w1));
        }
    }
    for (int r = 0; r < 4 && r0 + r < rows; r++) {
        _mm256_storeu_si256((__m256i *)(acc + (r0 + r) * 16), c[r][0]);
        _mm256_storeu_si256((__m256i *)(acc + (r0 + r) * 16 + 8), c[r][1]);
    }
}

LB_TARGET_AVX2 void lb_c16_tile_avx2(const int16_t *A, int64_t lda, int64_t rows,
                                     int64_t kpairs, const int16_t *wb, int split,
                                     int32_t *acc, int32_t *acc_hi) {
    for (int64_t r0 = 0; r0 < rows; r0 += 4) {
        lb_c16_tile4_avx2(A, lda, rows, r0, kpairs, wb, split ? 1 : 0, acc);
        if (split) lb_c16_tile4_avx2(A, lda, rows, r0, kpairs, wb, 2, acc_hi);
    }
}

#define LB_C16_SUFFIX avx2
#define LB_C16_TARGET LB_TARGET_AVX2
#include "rt_qconv16_impl.h"

#endif

/* AVX2 micro-kernel of the int8 product, on the same packed weights as the VNNI one.
 *
 * `vpmaddubsw` would multiply uint8 by int8 and add pairs into int16 with saturation (255 * 127
 * * 2 = 64770 does not fit), so both operands are widened to int16 first and multiplied by
 * `vpmaddwd`, whose pair sums are exact in int32. One 16-byte piece of a packed group (4
 * columns x 4 steps) becomes 16 int16; the 4 bytes of a row of A become (a0, a1, a2, a3)
 * repeated; `vpmaddwd` gives each column two partial sums (steps 0-1 and 2-3), kept apart until
 * the end of the reduction and then added pairwise (hadd). */
#include "rt_internal.h"

#if LB_HAVE_AVX2
#include <immintrin.h>

#define LB_AVX2_MR 2

/* Up to LB_AVX2_MR rows x 16 columns. */
LB_TARGET_AVX2 static void lb_tile_avx2(const lb_gemm_tile *t, int64_t m, int mr, int64_t nb) {
    const lb_packed_b *B = t->B;
    const int8_t *b = B->data + nb * B->k4 * 64;
    __m256i acc[LB_AVX2_MR][4];
    for (int r = 0; r < LB_AVX2_MR; r++)
        for (int i = 0; i < 4; i++) acc[r][i] = _mm256_setzero_si256();
    for (int64_t g = 0; g < B->k4; g++) {
        __m256i w[4];
        for (int i = 0; i < 4; i++)
            w[i] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + g * 64 + i * 16)));
        for (int r = 0; r < mr; r++) {
            int32_t a4 = lb_load4_packed(t->A + (m + r) * t->lda, g, t->K);
            __m256i av = _mm256_cvtepu8_epi16(_mm_set1_epi32(a4));
            for (int i = 0; i < 4; i++)
                acc[r][i] = _mm256_add_epi32(acc[r][i], _mm256_madd_epi16(av, w[i]));
        }
    }
    int64_t n0 = nb * 16, ncols = LB_MIN(16, t->N - n0);
    for (int r = 0; r < mr; r++) {
        int32_t out[16];
        __m256i lo = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[r][0], acc[r][1]), 0xD8);
        __m256i hi = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[r][2], acc[r][3]), 0xD8);
        _mm256_storeu_si256((__m256i *)out, lo);
        _mm256_storeu_si256((__m256i *)(out + 8), hi);
        lb_epilogue_row(t, m + r, n0, ncols, out);
    }
}

LB_TARGET_AVX2 void lb_gemm_block_avx2(const lb_gemm_tile *t, int64_t m0, int64_t m1,
                                       int64_t nb0, int64_t nb1) {
    for (int64_t nb = nb0; nb < nb1; nb++)
        for (int64_t m = m0; m < m1; m += LB_AVX2_MR)
            lb_tile_avx2(t, m, (int)LB_MIN(LB_AVX2_MR, m1 - m), nb);
}
#endif /* LB_HAVE_AVX2 */

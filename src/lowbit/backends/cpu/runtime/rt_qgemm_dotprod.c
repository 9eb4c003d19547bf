/* 64-bit ARM int8 product with the dot-product instructions (ARMv8.2 `sdot`), on the same packed
 * weights as the other paths.
 *
 * `sdot` multiplies signed bytes only, so each byte a of A (uint8) enters as a - 128 (its bits
 * XOR 0x80), and 128 times each column's sum of weights is added back:
 *     sum_k a w = sum_k (a - 128) w + 128 sum_k w.
 * A packed group (16 columns x 4 steps, 64 bytes) is 4 vectors of 4 columns x 4 steps, exactly
 * what `sdot` by lane takes; 16 bytes of a row of A hold 4 groups, one per lane. Tiles: 4 rows x
 * 16 columns; the column sums of a block are computed once per call (with `sdot` against ones).
 * Sums wrap in int32 like every path's: the exact result is in range (lb_qgemm). */
#include "rt_internal.h"

#if LB_HAVE_DOTPROD
#include "rt_vec_neon.h"

/* Bytes k..k+15 of row `a`, XOR 0x80 (zero bytes past K, -128 once flipped: their weights are
 * zero). */
LB_TARGET_DOTPROD static inline int8x16_t lb_a16_flip(const uint8_t *a, int64_t k, int64_t K) {
    uint8x16_t v;
    if (k + 16 <= K) {
        v = vld1q_u8(a + k);
    } else {
        uint8_t b[16] = {0};
        for (int64_t i = k; i < K; i++) b[i - k] = a[i];
        v = vld1q_u8(b);
    }
    return vreinterpretq_s8_u8(veorq_u8(v, vdupq_n_u8(0x80)));
}

#define LB_DOT_GROUP(s)                                                                   \
    if (g + s < k4) {                                                                     \
        const int8_t *pg = panel + (g + s) * 64;                                          \
        int8x16_t b0 = vld1q_s8(pg), b1 = vld1q_s8(pg + 16), b2 = vld1q_s8(pg + 32),      \
                  b3 = vld1q_s8(pg + 48);                                                 \
        for (int r = 0; r < 4; r++) {                                                     \
            acc[r][0] = vdotq_laneq_s32(acc[r][0], b0, av[r], s);                         \
            acc[r][1] = vdotq_laneq_s32(acc[r][1], b1, av[r], s);                         \
            acc[r][2] = vdotq_laneq_s32(acc[r][2], b2, av[r], s);                         \
            acc[r][3] = vdotq_laneq_s32(acc[r][3], b3, av[r], s);                         \
        }                                                                                 \
    }

LB_TARGET_DOTPROD static void lb_tile_dot(const lb_gemm_tile *t, const int8_t *panel,
                                          const int32x4_t *sums128, int64_t m, int mr,
                                          int32_t out[4][16]) {
    const int64_t k4 = t->B->k4, K = t->K;
    const uint8_t *a[4];
    int32x4_t acc[4][4];
    for (int r = 0; r < 4; r++) {
        a[r] = t->A + (m + (r < mr ? r : 0)) * t->lda;
        for (int q = 0; q < 4; q++) acc[r][q] = sums128[q];
    }
    for (int64_t g = 0; g < k4; g += 4) {
        int8x16_t av[4];
        for (int r = 0; r < 4; r++) av[r] = lb_a16_flip(a[r], g * 4, K);
        LB_DOT_GROUP(0)
        LB_DOT_GROUP(1)
        LB_DOT_GROUP(2)
        LB_DOT_GROUP(3)
    }
    for (int r = 0; r < mr; r++)
        for (int q = 0; q < 4; q++) vst1q_s32(out[r] + 4 * q, acc[r][q]);
}

LB_TARGET_DOTPROD void lb_gemm_block_dotprod(const lb_gemm_tile *t, int64_t m0, int64_t m1,
                                             int64_t nb0, int64_t nb1) {
    int32_t out[4][16];
    const int8x16_t ones = vdupq_n_s8(1);
    for (int64_t nb = nb0; nb < nb1; nb++) {
        const int8_t *panel = t->B->data + nb * t->B->k4 * 64;
        int32x4_t sums128[4];
        for (int q = 0; q < 4; q++) {
            int32x4_t s = vdupq_n_s32(0);
            for (int64_t g = 0; g < t->B->k4; g++)
                s = vdotq_s32(s, vld1q_s8(panel + g * 64 + 16 * q), ones);
            sums128[q] = vshlq_n_s32(s, 7);
        }
        int64_t n0 = nb * 16, ncols = LB_MIN(16, t->N - n0);
        for (int64_t m = m0; m < m1; m += 4) {
            int mr = (int)LB_MIN(4, m1 - m);
            lb_tile_dot(t, panel, sums128, m, mr, out);
            for (int r = 0; r < mr; r++) lb_epilogue_row_neon(t, m + r, n0, ncols, out[r]);
        }
    }
}
#endif /* LB_HAVE_DOTPROD */

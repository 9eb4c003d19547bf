/* 64-bit ARM NEON kernels of the int8 product and the depthwise convolution, on the same
 * packed weights and layouts as the other paths.
 *
 * NEON has no unsigned x signed byte multiply, so both operands are widened to int16 and
 * multiplied with `smlal` (int16 x int16 added to int32 lanes, exact). A packed group of 16
 * columns x 4 steps of K is deinterleaved by `ld4` into the 4 steps' rows of 16 columns; each
 * row of A contributes its 4 bytes of the group as lanes. Tiles: 4 rows x 16 columns, 16
 * accumulators. The epilogue is the vector one of rt_vec_neon.h. */
#include "rt_internal.h"

#if LB_HAVE_NEON
#include "rt_vec_neon.h"

/* Bytes k..k+3 of row `a` widened to int16 lanes (zero past K: the packed weights are zero
 * there too). */
static inline int16x4_t lb_a4_neon(const uint8_t *a, int64_t k, int64_t K) {
    uint8_t b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (k + 4 <= K)
        memcpy(b, a + k, 4);
    else
        for (int64_t i = k; i < K; i++) b[i - k] = a[i];
    return vreinterpret_s16_u16(vget_low_u16(vmovl_u8(vld1_u8(b))));
}

/* acc[r][0..3] (columns 0-3, 4-7, 8-11, 12-15) += step `s` of the group for row r. */
#define LB_NEON_STEP(acc, av, lo, hi, s)                                        \
    do {                                                                        \
        acc[0] = vmlal_lane_s16(acc[0], vget_low_s16(lo[s]), av, s);            \
        acc[1] = vmlal_high_lane_s16(acc[1], lo[s], av, s);                     \
        acc[2] = vmlal_lane_s16(acc[2], vget_low_s16(hi[s]), av, s);            \
        acc[3] = vmlal_high_lane_s16(acc[3], hi[s], av, s);                     \
    } while (0)

/* Rows m..m+mr-1 (mr <= 4) x 16 columns of block `panel` into out[r][16]. */
static void lb_tile_neon(const lb_gemm_tile *t, const int8_t *panel, int64_t m, int mr,
                         int32_t out[4][16]) {
    const int64_t k4 = t->B->k4, K = t->K;
    const uint8_t *a[4];
    int32x4_t acc[4][4];
    for (int r = 0; r < 4; r++) {
        a[r] = t->A + (m + (r < mr ? r : 0)) * t->lda;
        for (int q = 0; q < 4; q++) acc[r][q] = vdupq_n_s32(0);
    }
    for (int64_t g = 0; g < k4; g++) {
        int8x16x4_t b = vld4q_s8(panel + g * 64); /* b.val[s][j] = W[j][4g + s] */
        int16x8_t lo[4], hi[4];
        for (int s = 0; s < 4; s++) {
            lo[s] = vmovl_s8(vget_low_s8(b.val[s]));
            hi[s] = vmovl_high_s8(b.val[s]);
        }
        for (int r = 0; r < 4; r++) {
            int16x4_t av = lb_a4_neon(a[r], g * 4, K);
            LB_NEON_STEP(acc[r], av, lo, hi, 0);
            LB_NEON_STEP(acc[r], av, lo, hi, 1);
            LB_NEON_STEP(acc[r], av, lo, hi, 2);
            LB_NEON_STEP(acc[r], av, lo, hi, 3);
        }
    }
    for (int r = 0; r < mr; r++)
        for (int q = 0; q < 4; q++) vst1q_s32(out[r] + 4 * q, acc[r][q]);
}

void lb_gemm_block_neon(const lb_gemm_tile *t, int64_t m0, int64_t m1, int64_t nb0,
                        int64_t nb1) {
    int32_t out[4][16];
    for (int64_t nb = nb0; nb < nb1; nb++) {
        const int8_t *panel = t->B->data + nb * t->B->k4 * 64;
        int64_t n0 = nb * 16, ncols = LB_MIN(16, t->N - n0);
        for (int64_t m = m0; m < m1; m += 4) {
            int mr = (int)LB_MIN(4, m1 - m);
            lb_tile_neon(t, panel, m, mr, out);
            for (int r = 0; r < mr; r++) lb_epilogue_row_neon(t, m + r, n0, ncols, out[r]);
        }
    }
}

/* ---- depthwise ---------------------------------------------------------------------------- */

typedef struct lb_dwneon_job {
    const lb_dwconv *p;
    const uint8_t *in;
    lb_gemm_tile tile; /* for the epilogue: row = output pixel, column = channel */
    const int64_t *offsets;
} lb_dwneon_job;

/* One output row (n, oy): per pixel, 16 channels at a time, uint8 inputs widened to int16 and
 * multiplied with the int16 weights (w - zw) by smlal; the last channels in scalar code. */
static void lb_dw_task_neon(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_dwneon_job *j = (const lb_dwneon_job *)arg;
    const lb_dwconv *p = j->p;
    const lb_window *w = &p->win;
    int64_t n = t / w->oh, oy = t % w->oh, taps = w->kh * w->kw, c = w->c;
    const uint8_t *tap[LB_DW_MAX_TAPS];
    int32_t acc[64];
    for (int64_t ox = 0; ox < w->ow; ox++) {
        lb_dw_taps(w, j->in, p->zero_row, j->offsets, n, oy, ox, tap);
        int64_t m = (n * w->oh + oy) * w->ow + ox;
        for (int64_t c0 = 0; c0 < c; c0 += 64) {
            int64_t cn = LB_MIN(64, c - c0), i = 0;
            for (; i + 16 <= cn; i += 16) {
                int32x4_t a0 = vdupq_n_s32(0), a1 = a0, a2 = a0, a3 = a0;
                for (int64_t k = 0; k < taps; k++) {
                    uint8x16_t x = vld1q_u8(tap[k] + c0 + i);
                    int16x8_t xl = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(x)));
                    int16x8_t xh = vreinterpretq_s16_u16(vmovl_high_u8(x));
                    const int16_t *wk = p->w_plain + k * c + c0 + i;
                    int16x8_t wl = vld1q_s16(wk), wh = vld1q_s16(wk + 8);
                    a0 = vmlal_s16(a0, vget_low_s16(xl), vget_low_s16(wl));
                    a1 = vmlal_high_s16(a1, xl, wl);
                    a2 = vmlal_s16(a2, vget_low_s16(xh), vget_low_s16(wh));
                    a3 = vmlal_high_s16(a3, xh, wh);
                }
                vst1q_s32(acc + i, a0);
                vst1q_s32(acc + i + 4, a1);
                vst1q_s32(acc + i + 8, a2);
                vst1q_s32(acc + i + 12, a3);
            }
            for (; i < cn; i++) {
                int32_t s = 0;
                for (int64_t k = 0; k < taps; k++)
                    s += (int32_t)tap[k][c0 + i] * p->w_plain[k * c + c0 + i];
                acc[i] = s;
            }
            lb_epilogue_row_neon(&j->tile, m, c0, cn, acc);
        }
    }
}

void lb_dwconv_neon(const lb_ctx *ctx, const lb_dwconv *p, const uint8_t *in, void *out,
                    const int64_t *offsets) {
    const lb_window *w = &p->win;
    lb_dwneon_job j;
    memset(&j, 0, sizeof(j));
    j.p = p;
    j.in = in;
    j.offsets = offsets;
    j.tile.M = w->n * w->oh * w->ow;
    j.tile.N = w->c;
    j.tile.ep = &p->ep;
    j.tile.C = out;
    j.tile.ldc = w->c;
    lb_parallel_for(ctx, w->n * w->oh, lb_dw_task_neon, &j);
}
#endif /* LB_HAVE_NEON */

/* 16-bit quantized convolutions (lb_qconv16_run, lowbit_rt.h): the im2col rows of one output
 * row as int16, then int16 x int16 products summed in int32 per tile of 8 pixels x 16 output
 * channels (rt_qconv16_avx512.c: vpdpwssd, rt_qconv16_avx2.c: vpmaddwd, portable C here);
 * depthwise ones per output row from the input codes (rt_qconv16_impl.h). Every path computes
 * the same exact integers; the code generator chooses the mode that keeps them exact. */
#include "rt_qconv16.h"

/* ---- portable paths ------------------------------------------------------------------------ */

void lb_c16_tile_scalar(const int16_t *A, int64_t lda, int64_t rows, int64_t kpairs,
                        const int16_t *wb, int split, int32_t *acc, int32_t *acc_hi) {
    for (int64_t r = 0; r < rows; r++) {
        const int16_t *a = A + r * lda;
        int32_t lo[16] = {0}, hi[16] = {0};
        for (int64_t i = 0; i < kpairs; i++) {
            const int16_t *wi = wb + i * 32;
            int32_t a0 = a[2 * i], a1 = a[2 * i + 1];
            if (split) {
                int32_t h0 = a0 >> 8, h1 = a1 >> 8, l0 = a0 & 255, l1 = a1 & 255;
                for (int j = 0; j < 16; j++) {
                    lo[j] += l0 * wi[2 * j] + l1 * wi[2 * j + 1];
                    hi[j] += h0 * wi[2 * j] + h1 * wi[2 * j + 1];
                }
            } else {
                for (int j = 0; j < 16; j++) lo[j] += a0 * wi[2 * j] + a1 * wi[2 * j + 1];
            }
        }
        memcpy(acc + r * 16, lo, sizeof(lo));
        if (split) memcpy(acc_hi + r * 16, hi, sizeof(hi));
    }
}

#define LB_C16_SUFFIX scalar
#define LB_C16_TARGET
#include "rt_qconv16_impl.h"
#undef LB_C16_SUFFIX
#undef LB_C16_TARGET

/* ---- the general convolution ------------------------------------------------------------ */

typedef struct lb_c16_job {
    const lb_qconv16 *p;
    const void *in;
    void *out;
    int16_t *scratch;
    int64_t n;
    int direct; /* the input rows are the product's rows (int16, pointwise, one group) */
    lb_c16_tile_fn tile;
    lb_c16_dw_fn dw;
    lb_c16_finish_fn finish;
} lb_c16_job;

/* dst[ci] = the int16 code a of src[ci] for ci < cg. */
static void lb_c16_convert(int32_t type, const void *src, int64_t cg, int16_t *dst) {
    if (type == LB_U8) {
        const uint8_t *x = (const uint8_t *)src;
        for (int64_t ci = 0; ci < cg; ci++) dst[ci] = (int16_t)x[ci];
    } else if (type == LB_I16) {
        memcpy(dst, src, (size_t)cg * 2);
    } else {
        const uint16_t *x = (const uint16_t *)src;
        for (int64_t ci = 0; ci < cg; ci++) dst[ci] = (int16_t)(x[ci] ^ 0x8000u);
    }
}

/* The im2col row of output pixel (n, oy, ox): per group, its taps' cg codes (za in the
 * padding), then zeros up to kp. */
static void lb_c16_im2col(const lb_qconv16 *p, const void *in, int64_t n, int64_t oy,
                          int64_t ox, int16_t *dst) {
    const lb_window *w = &p->win;
    int64_t esize = lb_c16_esize(p->a_type), cg = p->cg, kt = w->kh * w->kw * cg;
    const char *img = (const char *)in + n * w->ih * w->iw * w->c * esize;
    for (int64_t g = 0; g < p->groups; g++) {
        int16_t *d = dst + g * p->kp;
        for (int64_t ky = 0; ky < w->kh; ky++) {
            int64_t iy = oy * w->sh - w->pt + ky * w->dh;
            for (int64_t kx = 0; kx < w->kw; kx++, d += cg) {
                int64_t ix = ox * w->sw - w->pl + kx * w->dw;
                if (iy < 0 || iy >= w->ih || ix < 0 || ix >= w->iw) {
                    for (int64_t ci = 0; ci < cg; ci++) d[ci] = (int16_t)p->za;
                    continue;
                }
                lb_c16_convert(p->a_type, img + ((iy * w->iw + ix) * w->c + g * cg) * esize,
                               cg, d);
            }
        }
        for (int64_t k = kt; k < p->kp; k++) dst[g * p->kp + k] = 0;
    }
}

/* Output row oy of image j->n: its im2col rows (unless direct), then per group, per 16
 * output channels, per 8 pixels one tile and its epilogue. */
static void lb_c16_task(void *arg, int64_t oy, int worker) {
    (void)worker;
    const lb_c16_job *j = (const lb_c16_job *)arg;
    const lb_qconv16 *p = j->p;
    const lb_window *w = &p->win;
    if (j->dw) {
        j->dw(p, j->in, j->out, j->n, oy);
        return;
    }
    int64_t lda = p->groups * p->kp, mout = p->groups * p->mg;
    int64_t kpairs = p->kp / 2, blocks = (p->mg + 15) / 16;
    const int16_t *A;
    if (j->direct) {
        A = (const int16_t *)j->in + (j->n * w->oh + oy) * w->ow * lda;
    } else {
        int16_t *rows = j->scratch + oy * w->ow * lda;
        for (int64_t ox = 0; ox < w->ow; ox++)
            lb_c16_im2col(p, j->in, j->n, oy, ox, rows + ox * lda);
        A = rows;
    }
    int split = p->mode == LB_C16_SPLIT;
    int32_t acc[LB_C16_MR * 16], acc_hi[LB_C16_MR * 16];
    int64_t at_row = (j->n * w->oh + oy) * w->ow * mout;
    for (int64_t g = 0; g < p->groups; g++) {
        for (int64_t nb = 0; nb < blocks; nb++) {
            const int16_t *wb = p->w + (g * blocks + nb) * kpairs * 32;
            int64_t cols = LB_MIN(16, p->mg - nb * 16), m0 = g * p->mg + nb * 16;
            int64_t off[16] = {0};
            memcpy(off, p->offset + m0, (size_t)cols * 8);
            for (int64_t r0 = 0; r0 < w->ow; r0 += LB_C16_MR) {
                int64_t rows = LB_MIN(LB_C16_MR, w->ow - r0);
                j->tile(A + r0 * lda + g * p->kp, lda, rows, kpairs, wb, split, acc, acc_hi);
                for (int64_t r = 0; r < rows; r++) {
                    int64_t sums[16];
                    for (int64_t c = 0; c < 16; c++)
                        sums[c] = (int64_t)acc[r * 16 + c] + off[c];
                    if (split)
                        for (int64_t c = 0; c < 16; c++)
                            sums[c] += (int64_t)acc_hi[r * 16 + c] * 256;
                    j->finish(p, m0, cols, sums, at_row + (r0 + r) * mout + m0, j->out);
                }
            }
        }
    }
}

void lb_qconv16_run(const lb_ctx *ctx, const lb_qconv16 *p, const void *in, void *out,
                    int16_t *scratch) {
    const lb_window *w = &p->win;
    lb_c16_job j = {p, in, out, scratch, 0, 0, lb_c16_tile_scalar, NULL,
                    lb_c16_finish_row_scalar};
    j.direct = p->direct;
#if LB_HAVE_AVX2
    if (ctx->isa == LB_ISA_AVX2) {
        j.tile = lb_c16_tile_avx2;
        j.finish = lb_c16_finish_row_avx2;
    }
#endif
#if LB_HAVE_AVX512
    if (ctx->isa == LB_ISA_AVX512VNNI) {
        j.tile = lb_c16_tile_avx512;
        j.finish = lb_c16_finish_row_avx512;
    }
#endif
    if (p->depthwise) {
        j.dw = lb_c16_dw_row_scalar;
#if LB_HAVE_AVX2
        if (ctx->isa == LB_ISA_AVX2) j.dw = lb_c16_dw_row_avx2;
#endif
#if LB_HAVE_AVX512
        if (ctx->isa == LB_ISA_AVX512VNNI) j.dw = lb_c16_dw_row_avx512;
#endif
    }
    for (int64_t n = 0; n < w->n; n++) {
        j.n = n;
        lb_parallel_for(ctx, w->oh, lb_c16_task, &j);
    }
}

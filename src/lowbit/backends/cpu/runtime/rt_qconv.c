/* Quantized convolutions of NHWC uint8 activations: pointwise ones are one product over all
 * pixels; others gather each image's windows (im2col) and multiply per group; depthwise ones
 * have their own kernels (portable here, AVX-512 in rt_dw_avx512.c). */
#include "rt_internal.h"

static int64_t lb_type_size(int32_t type) {
    switch (type) {
    case LB_U8:
    case LB_I8:
    case LB_BOOL:
        return 1;
    case LB_I16:
    case LB_U16:
        return 2;
    case LB_I64:
    case LB_F64:
        return 8;
    default:
        return 4;
    }
}

/* The epilogue of output channels [g*mg, ...) as one of mg channels. */
static lb_epilogue lb_epilogue_slice(const lb_epilogue *ep, int64_t off) {
    lb_epilogue e = *ep;
    e.col_offset += off;
    if (e.col_zb) e.col_zb += off;
    lb_requant *rq = &e.rq;
    if (rq->p0) rq->p0 += off;
    if (rq->p1) rq->p1 += off;
    if (rq->p2) rq->p2 += off;
    if (rq->p3) rq->p3 += off;
    if (rq->zero_point) rq->zero_point += off;
    if (rq->fmul) rq->fmul += off;
    if (rq->dscale) rq->dscale += off;
    if (e.residual) e.residual += off;
    if (e.bounded) /* per block of 16 channels */
        e.bounded = off % 16 ? NULL : e.bounded + off / 16 * 64;
    return e;
}

/* Bytes of im2col rows per band of lb_qconv_run (half of a 1 MB level-2 cache). */
#define LB_IM2COL_BAND_BYTES ((int64_t)1 << 19)

/* Output rows [oy0, oy0 + rows) of image b: im2col of their windows into `scratch` (unless
 * pointwise) and the product of each group, on the threads of `ctx`. */
static void lb_qconv_band(const lb_ctx *ctx, const lb_qconv *p, const uint8_t *in, void *out,
                          uint8_t *scratch, int32_t *row_sums, int64_t b, int64_t oy0,
                          int64_t rows, int pointwise) {
    const lb_window *w = &p->win;
    int64_t K = p->packed[0].k, mout = p->groups * p->mg;
    int64_t pix_in = w->ih * w->iw, pix_out = w->oh * w->ow, pix = rows * w->ow;
    int64_t osize = lb_type_size(p->ep.out_type);
    int64_t lda = pointwise ? w->c : p->groups * K;
    const uint8_t *A = in + b * pix_in * w->c;
    int64_t gstep = p->cg;
    if (!pointwise) {
        lb_window one = *w;
        one.n = 1;
        one.oh = rows;
        one.pt = w->pt - oy0 * w->sh; /* output row oy of the band is oy0 + oy */
        lb_im2col_u8(ctx, &one, p->groups, p->cg, K, A, p->pad, scratch);
        A = scratch;
        gstep = K;
    }
    lb_epilogue ep = p->ep;
    int64_t p0 = b * pix_out + oy0 * w->ow; /* the band's first output pixel */
    if (ep.residual) ep.residual += p0 * ep.ld_residual;
    for (int64_t g = 0; g < p->groups; g++) {
        lb_epilogue eg = lb_epilogue_slice(&ep, g * p->mg);
        char *o = (char *)out + (p0 * mout + g * p->mg) * osize;
        lb_qgemm(ctx, pix, p->mg, K, A + g * gstep, lda, &p->packed[g], &eg, o, mout,
                 row_sums);
    }
}

typedef struct lb_band_job {
    const lb_qconv *p;
    const uint8_t *in;
    void *out;
    uint8_t *scratch;
    int32_t *row_sums;
    int64_t band, bands; /* output rows per band, bands per image */
    int isa, amx; /* of the context */
} lb_band_job;

/* One band on one thread: its im2col rows and row sums go to the worker's own part of
 * `scratch` and `row_sums` (band rows each; threads * band <= oh, checked by the caller). */
static void lb_band_task(void *arg, int64_t t, int worker) {
    const lb_band_job *j = (const lb_band_job *)arg;
    const lb_window *w = &j->p->win;
    lb_ctx one = {j->isa, 1, NULL, j->amx};
    int64_t b = t / j->bands, oy0 = t % j->bands * j->band;
    int64_t rows = LB_MIN(j->band, w->oh - oy0), lda = j->p->groups * j->p->packed[0].k;
    lb_qconv_band(&one, j->p, j->in, j->out, j->scratch + worker * j->band * w->ow * lda,
                  j->row_sums ? j->row_sums + worker * j->band * w->ow : NULL, b, oy0, rows, 0);
}

void lb_qconv_run(const lb_ctx *ctx, const lb_qconv *p, const uint8_t *in, void *out,
                  uint8_t *scratch, int32_t *row_sums) {
    const lb_window *w = &p->win;
    int64_t K = p->packed[0].k, pix_in = w->ih * w->iw;
    int pointwise = w->kh == 1 && w->kw == 1 && w->sh == 1 && w->sw == 1 && w->pt == 0 &&
                    w->pl == 0 && w->oh == w->ih && w->ow == w->iw;
    if (pointwise && p->groups == 1) {
        lb_qgemm(ctx, w->n * pix_in, p->mg, p->cg, in, w->c, &p->packed[0], &p->ep, out,
                 p->groups * p->mg, row_sums);
        return;
    }
    /* im2col and product by bands of output rows whose windows fit in a core's cache, so
     * the product reads them from there, not from memory (the result is the same) */
    int64_t lda = pointwise ? w->c : p->groups * K;
    int64_t band = pointwise ? w->oh : LB_MAX(1, LB_IM2COL_BAND_BYTES / (w->ow * lda));
    int64_t bands = (w->oh + band - 1) / band;
    if (!pointwise && ctx->threads > 1 && bands >= 2 * (int64_t)ctx->threads) {
        /* each thread takes whole bands (one parallel loop instead of two per band, whose
         * waits cost more than the bands' work when another process shares the cores) */
        lb_band_job j = {p, in, out, scratch, row_sums, band, bands, ctx->isa, ctx->amx};
        lb_parallel_for(ctx, w->n * bands, lb_band_task, &j);
        return;
    }
    if (band > 1 && band < w->oh) band &= ~(int64_t)1; /* even: 2 threads share a band's rows */
    for (int64_t b = 0; b < w->n; b++)
        for (int64_t oy0 = 0; oy0 < w->oh; oy0 += band)
            lb_qconv_band(ctx, p, in, out, scratch, row_sums, b, oy0,
                          LB_MIN(band, w->oh - oy0), pointwise);
}

/* ---- depthwise --------------------------------------------------------------------------- */

void lb_dw_offsets(const lb_window *w, int64_t *offsets) {
    for (int64_t ky = 0; ky < w->kh; ky++)
        for (int64_t kx = 0; kx < w->kw; kx++)
            offsets[ky * w->kw + kx] = (ky * w->dh * w->iw + kx * w->dw) * w->c;
}

typedef struct lb_dw_job {
    const lb_dwconv *p;
    const uint8_t *in;
    void *out;
    lb_gemm_tile tile; /* for the shared epilogue: row = output pixel, column = channel */
    int64_t offsets[LB_DW_MAX_TAPS];
} lb_dw_job;

static void lb_dw_task_scalar(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_dw_job *j = (const lb_dw_job *)arg;
    const lb_dwconv *p = j->p;
    const lb_window *w = &p->win;
    int64_t n = t / w->oh, oy = t % w->oh, taps = w->kh * w->kw, c = w->c;
    const uint8_t *tap[LB_DW_MAX_TAPS];
    int32_t acc[64];
    for (int64_t ox = 0; ox < w->ow; ox++) {
        lb_dw_taps(w, j->in, p->zero_row, j->offsets, n, oy, ox, tap);
        int64_t m = (n * w->oh + oy) * w->ow + ox;
        for (int64_t c0 = 0; c0 < c; c0 += 64) {
            int64_t cn = LB_MIN(64, c - c0);
            for (int64_t i = 0; i < cn; i++) acc[i] = 0;
            for (int64_t k = 0; k < taps; k++) {
                const uint8_t *x = tap[k] + c0;
                const int16_t *wk = p->w_plain + k * c + c0;
                for (int64_t i = 0; i < cn; i++) acc[i] += (int32_t)x[i] * wk[i];
            }
            lb_epilogue_row(&j->tile, m, c0, cn, acc);
        }
    }
}

void lb_dwconv_run(const lb_ctx *ctx, const lb_dwconv *p, const uint8_t *in, void *out) {
    const lb_window *w = &p->win;
    lb_dw_job j;
    memset(&j, 0, sizeof(j));
    j.p = p;
    j.in = in;
    j.out = out;
    j.tile.M = w->n * w->oh * w->ow;
    j.tile.N = w->c;
    j.tile.ep = &p->ep;
    j.tile.C = out;
    j.tile.ldc = w->c;
    lb_dw_offsets(w, j.offsets);
#if LB_HAVE_NEON
    if (ctx->isa == LB_ISA_NEON || ctx->isa == LB_ISA_DOTPROD) {
        lb_dwconv_neon(ctx, p, in, out, j.offsets);
        return;
    }
#endif
#if LB_HAVE_AVX512
    if (ctx->isa == LB_ISA_AVX512VNNI) {
        lb_dwconv_avx512(ctx, p, in, out, j.offsets);
        return;
    }
#endif
    lb_parallel_for(ctx, w->n * w->oh, lb_dw_task_scalar, &j);
}

/* ---- the wide convolution ---------------------------------------------------------------- */

typedef struct lb_cw_job {
    const lb_qconv_wide *p;
    const void *in;
    void *out;
} lb_cw_job;

/* acc + the sum over ci < cg of (x[base + ci] - za) * wk[ci], in int64 and in ci order (the
 * same integers as one lb_load_int a code): one loop per input type, which the compiler
 * vectorises, instead of a switch on the type for every code. */
#define LB_CW_DOT(T)                                                                        \
    do {                                                                                    \
        const T *x = (const T *)in + base;                                                  \
        for (int64_t ci = 0; ci < cg; ci++) acc += ((int64_t)x[ci] - za) * (int64_t)wk[ci]; \
    } while (0)

static inline int64_t lb_cw_dot(const void *in, int32_t type, int64_t base, int64_t za,
                                const int32_t *wk, int64_t cg, int64_t acc) {
    switch (type) {
    case LB_U8:
        LB_CW_DOT(uint8_t);
        break;
    case LB_I8:
        LB_CW_DOT(int8_t);
        break;
    case LB_I16:
        LB_CW_DOT(int16_t);
        break;
    case LB_U16:
        LB_CW_DOT(uint16_t);
        break;
    case LB_I32:
        LB_CW_DOT(int32_t);
        break;
    default:
        for (int64_t ci = 0; ci < cg; ci++)
            acc += (lb_load_int(in, type, base + ci) - za) * (int64_t)wk[ci];
    }
    return acc;
}
#undef LB_CW_DOT

static void lb_cw_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_cw_job *j = (const lb_cw_job *)arg;
    const lb_qconv_wide *cw = j->p;
    const lb_window *w = &cw->win;
    const lb_wide_params *p = &cw->p;
    int64_t n = t / w->oh, oy = t % w->oh, taps = w->kh * w->kw, mout = cw->groups * cw->mg;
    for (int64_t ox = 0; ox < w->ow; ox++) {
        int64_t at0 = ((n * w->oh + oy) * w->ow + ox) * mout;
        for (int64_t m = 0; m < mout; m++) {
            int64_t g = m / cw->mg, acc = p->bias ? p->bias[m] : 0;
            const int32_t *wm = p->w + m * taps * cw->cg;
            for (int64_t ky = 0; ky < w->kh; ky++) {
                int64_t iy = oy * w->sh - w->pt + ky * w->dh;
                if (iy < 0 || iy >= w->ih) continue;
                for (int64_t kx = 0; kx < w->kw; kx++) {
                    int64_t ix = ox * w->sw - w->pl + kx * w->dw;
                    if (ix < 0 || ix >= w->iw) continue;
                    int64_t base = ((n * w->ih + iy) * w->iw + ix) * w->c + g * cw->cg;
                    const int32_t *wk = wm + (ky * w->kw + kx) * cw->cg;
                    acc = lb_cw_dot(j->in, p->a_type, base, p->za, wk, cw->cg, acc);
                }
            }
            int64_t at = at0 + m;
            if (p->rq.method == LB_RQ_DEQUANT) {
                float v = (float)((double)acc * p->rq.dscale[m]);
                if (v < p->rq.fmin) v = p->rq.fmin;
                if (v > p->rq.fmax) v = p->rq.fmax;
                ((float *)j->out)[at] = v;
                continue;
            }
            if (p->narrow_shift > 0)
                acc = (acc + ((int64_t)1 << (p->narrow_shift - 1))) >> p->narrow_shift;
            int32_t x = lb_clamp32(acc, INT32_MIN, INT32_MAX);
            if (p->out_type == LB_I32)
                ((int32_t *)j->out)[at] = x;
            else
                lb_store(j->out, p->out_type, at, lb_requant_scalar(&p->rq, m, x));
        }
    }
}

void lb_qconv_wide_run(const lb_ctx *ctx, const lb_qconv_wide *p, const void *in, void *out) {
    lb_cw_job j = {p, in, out};
    lb_parallel_for(ctx, p->win.n * p->win.oh, lb_cw_task, &j);
}

/* Float kernels: the product (lb_fgemm), convolutions (im2col + product, depthwise), with
 * double accumulation (per-ISA bodies in rt_float_impl.h), or as float32 fused multiply-add
 * chains (lb_fgemm_fma, lb_fconv.fma; rt_ffma_impl.h). */
#include "rt_internal.h"

#if LB_HAVE_X86
#include <immintrin.h>
#endif

typedef struct lb_fgemm_job {
    int64_t M, N, K;
    const float *A;
    int64_t lda;
    const float *B;
    int64_t ldb;
    const float *bias;
    float lo, hi;
    float *C;
    int64_t ldc;
    int64_t rows_per_task, cols_per_task, mtasks;
    int fma; /* the float32 chain (rt_ffma_impl.h) instead of double sums */
} lb_fgemm_job;

/* Round the double sum (plus bias) once to float, then clamp (a fused Relu/Clip). */
static inline void lb_fgemm_store(const lb_fgemm_job *j, int64_t m, int64_t n, double v) {
    if (j->bias) v += (double)j->bias[n];
    float f = (float)v;
    if (f < j->lo) f = j->lo;
    if (f > j->hi) f = j->hi;
    j->C[m * j->ldc + n] = f;
}

typedef struct lb_fdw_job {
    const lb_fconv *p;
    const float *in;
    float *out;
    int64_t c;
    const float *w;
    int64_t offsets[LB_DW_MAX_TAPS];
} lb_fdw_job;

static inline void lb_fdw_store(const lb_fdw_job *j, float *out, int64_t ch, double v) {
    if (j->p->bias) v += (double)j->p->bias[ch];
    float f = (float)v;
    if (f < j->p->lo) f = j->p->lo;
    if (f > j->p->hi) f = j->p->hi;
    out[ch] = f;
}

#if defined(__clang__)
#define LB_FL_CONTRACT
#define LB_FL_PRAGMA _Pragma("clang fp contract(fast)")
#else
#define LB_FL_CONTRACT __attribute__((optimize("fp-contract=fast")))
#endif

/* Output pixels of one depthwise row computed together by the float32 chain kernel. */
#define LB_FDW_PIXELS 4

/* The product's blocks: rows a task (a multiple of every LB_FL_MR), steps of k packed at once. */
#define LB_FG_ROWS 96
#define LB_FG_KC 256

#define LB_FL_SUFFIX scalar
#define LB_FL_TARGET
#define LB_FL_LANES 2
#define LB_FL_MR 4
#include "rt_float_impl.h"
#undef LB_FL_SUFFIX
#undef LB_FL_TARGET
#undef LB_FL_LANES
#undef LB_FL_MR

/* The portable chain: fmaf lane by lane (a libm call where the target has no FMA: slower,
 * the same bits). */
typedef float lb_vff4 __attribute__((vector_size(16)));
static inline lb_vff4 lb_ff_fma4(lb_vff4 a, lb_vff4 b, lb_vff4 c) {
    for (int i = 0; i < 4; i++) c[i] = fmaf(a[i], b[i], c[i]);
    return c;
}
#define LB_FF_SUFFIX scalar
#define LB_FF_TARGET
#define LB_FF_LANES 4
#define LB_FF_MR 4
#define LB_FF_FMA(a, b, c) lb_ff_fma4(a, b, c)
#include "rt_ffma_impl.h"
#undef LB_FF_SUFFIX
#undef LB_FF_TARGET
#undef LB_FF_LANES
#undef LB_FF_MR
#undef LB_FF_FMA

#if LB_HAVE_AVX2
#define LB_FL_SUFFIX avx2
#define LB_FL_TARGET LB_TARGET_AVX2
#define LB_FL_LANES 4
#define LB_FL_MR 4
#include "rt_float_impl.h"
#undef LB_FL_SUFFIX
#undef LB_FL_TARGET
#undef LB_FL_LANES
#undef LB_FL_MR

#define LB_FF_SUFFIX avx2
#define LB_FF_TARGET LB_TARGET_AVX2
#define LB_FF_LANES 8
#define LB_FF_MR 4
#define LB_FF_FMA(a, b, c) ((lb_vff_avx2)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#include "rt_ffma_impl.h"
#undef LB_FF_SUFFIX
#undef LB_FF_TARGET
#undef LB_FF_LANES
#undef LB_FF_MR
#undef LB_FF_FMA
#endif

#if LB_HAVE_AVX512
#define LB_FL_SUFFIX avx512
#define LB_FL_TARGET LB_TARGET_AVX512
#define LB_FL_LANES 8
#define LB_FL_MR 12
#include "rt_float_impl.h"
#undef LB_FL_SUFFIX
#undef LB_FL_TARGET
#undef LB_FL_LANES
#undef LB_FL_MR

#define LB_FF_SUFFIX avx512
#define LB_FF_TARGET LB_TARGET_AVX512
#define LB_FF_LANES 16
#define LB_FF_MR 12
#define LB_FF_FMA(a, b, c) \
    ((lb_vff_avx512)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#include "rt_ffma_impl.h"
#undef LB_FF_SUFFIX
#undef LB_FF_TARGET
#undef LB_FF_LANES
#undef LB_FF_MR
#undef LB_FF_FMA
#endif

static void lb_fgemm_task(void *arg, int64_t task, int worker) {
    (void)worker;
    const lb_fgemm_job *j = (const lb_fgemm_job *)((const void *const *)arg)[0];
    int isa = *(const int *)((const void *const *)arg)[1];
    int64_t mi = task % j->mtasks, ni = task / j->mtasks;
    int64_t m0 = mi * j->rows_per_task, m1 = LB_MIN(j->M, m0 + j->rows_per_task);
    int64_t n0 = ni * j->cols_per_task, n1 = LB_MIN(j->N, n0 + j->cols_per_task);
    if (m0 >= m1 || n0 >= n1) return;
    switch (isa) {
#if LB_HAVE_AVX512
    case LB_ISA_AVX512VNNI:
        (j->fma ? lb_ffgemm_block_avx512 : lb_fgemm_block_avx512)(j, m0, m1, n0, n1);
        break;
#endif
#if LB_HAVE_AVX2
    case LB_ISA_AVX2:
        (j->fma ? lb_ffgemm_block_avx2 : lb_fgemm_block_avx2)(j, m0, m1, n0, n1);
        break;
#endif
    default:
        (j->fma ? lb_ffgemm_block_scalar : lb_fgemm_block_scalar)(j, m0, m1, n0, n1);
    }
}

static void lb_fgemm_any(const lb_ctx *ctx, int64_t M, int64_t N, int64_t K, const float *A,
                         int64_t lda, const float *B, int64_t ldb, const float *bias, float lo,
                         float hi, float *C, int64_t ldc, int fma) {
    if (M <= 0 || N <= 0) return;
    lb_fgemm_job j = {M, N, K, A, lda, B, ldb, bias, lo, hi, C, ldc, 0, 0, 0, fma};
    /* B is packed once a task: longer tasks when no partial sums are kept between blocks */
    j.rows_per_task = LB_MIN(M, K <= LB_FG_KC ? 4 * LB_FG_ROWS : LB_FG_ROWS);
    j.mtasks = (M + j.rows_per_task - 1) / j.rows_per_task;
    j.cols_per_task = N;
    int64_t want = ctx->threads > 1 ? 4 * (int64_t)ctx->threads : 1;
    while (j.mtasks * ((N + j.cols_per_task - 1) / j.cols_per_task) < want && j.cols_per_task > 16)
        j.cols_per_task = (j.cols_per_task / 2 + 15) / 16 * 16;
    int64_t ntasks = j.mtasks * ((N + j.cols_per_task - 1) / j.cols_per_task);
    const void *args[2] = {&j, &ctx->isa};
    lb_parallel_for(ctx, ntasks, lb_fgemm_task, (void *)args);
}

void lb_fgemm(const lb_ctx *ctx, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
              const float *B, int64_t ldb, const float *bias, float lo, float hi, float *C,
              int64_t ldc) {
    lb_fgemm_any(ctx, M, N, K, A, lda, B, ldb, bias, lo, hi, C, ldc, 0);
}

void lb_fgemm_fma(const lb_ctx *ctx, int64_t M, int64_t N, int64_t K, const float *A,
                  int64_t lda, const float *B, int64_t ldb, const float *bias, float lo,
                  float hi, float *C, int64_t ldc) {
    lb_fgemm_any(ctx, M, N, K, A, lda, B, ldb, bias, lo, hi, C, ldc, 1);
}

/* ---- convolutions ------------------------------------------------------------------------ */

/* The taps of output pixel (oy, ox) of image `img`: the padded ones point at `zeros`. */
static inline void lb_fdw_taps(const lb_window *w, const float *img, const float *zeros,
                               int64_t oy, int64_t ox, const float **kept) {
    const int64_t c = w->c;
    for (int64_t ky = 0; ky < w->kh; ky++) {
        int64_t iy = oy * w->sh - w->pt + ky * w->dh;
        for (int64_t kx = 0; kx < w->kw; kx++) {
            int64_t ix = ox * w->sw - w->pl + kx * w->dw;
            int inside = iy >= 0 && iy < w->ih && ix >= 0 && ix < w->iw;
            /* padded taps add x * w = 0 * w: a row of zeros stands in for them */
            kept[ky * w->kw + kx] = inside ? img + (iy * w->iw + ix) * c : zeros;
        }
    }
}

static void lb_fdw_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_fdw_job *j = (const lb_fdw_job *)((const void *const *)arg)[0];
    int isa = *(const int *)((const void *const *)arg)[1];
    const lb_window *w = &j->p->win;
    int64_t n = t / w->oh, oy = t % w->oh, taps = w->kh * w->kw, c = w->c;
    const float *img = j->in + n * w->ih * w->iw * c, *zeros = j->w + taps * c;
    float *row = j->out + (n * w->oh + oy) * w->ow * c;
    if (j->p->fma) {
        const float *kept[LB_FDW_PIXELS * LB_DW_MAX_TAPS];
        float *out[LB_FDW_PIXELS];
        for (int64_t ox = 0; ox < w->ow; ox += LB_FDW_PIXELS) {
            const int np = (int)LB_MIN(LB_FDW_PIXELS, w->ow - ox);
            for (int p = 0; p < LB_FDW_PIXELS; p++) {
                const int64_t x = ox + LB_MIN(p, np - 1);
                lb_fdw_taps(w, img, zeros, oy, x, kept + p * taps);
                out[p] = row + x * c;
            }
            switch (isa) {
#if LB_HAVE_AVX512
            case LB_ISA_AVX512VNNI:
                lb_ffdw_pixels_avx512(j, kept, taps, np, out);
                break;
#endif
#if LB_HAVE_AVX2
            case LB_ISA_AVX2:
                lb_ffdw_pixels_avx2(j, kept, taps, np, out);
                break;
#endif
            default:
                lb_ffdw_pixels_scalar(j, kept, taps, np, out);
            }
        }
        return;
    }
    for (int64_t ox = 0; ox < w->ow; ox++) {
        const float *kept[LB_DW_MAX_TAPS];
        lb_fdw_taps(w, img, zeros, oy, ox, kept);
        float *out = row + ox * c;
        switch (isa) {
#if LB_HAVE_AVX512
        case LB_ISA_AVX512VNNI:
            lb_fdw_pixel_avx512(j, kept, taps, out);
            break;
#endif
#if LB_HAVE_AVX2
        case LB_ISA_AVX2:
            lb_fdw_pixel_avx2(j, kept, taps, out);
            break;
#endif
        default:
            lb_fdw_pixel_scalar(j, kept, taps, out);
        }
    }
}

void lb_fconv_run(const lb_ctx *ctx, const lb_fconv *p, const float *in, float *out,
                  float *scratch) {
    const lb_window *w = &p->win;
    int64_t taps = w->kh * w->kw, K = taps * p->cg, mout = p->groups * p->mg;
    int64_t pix_in = w->ih * w->iw, pix_out = w->oh * w->ow;
    if (p->cg == 1 && p->mg == 1 && taps <= LB_DW_MAX_TAPS) {
        /* depthwise: p->w is [taps][c] followed by c zeros (the padded taps' row) */
        lb_fdw_job j;
        memset(&j, 0, sizeof(j));
        j.p = p;
        j.in = in;
        j.out = out;
        j.c = w->c;
        j.w = p->w;
        const void *args[2] = {&j, &ctx->isa};
        lb_parallel_for(ctx, w->n * w->oh, lb_fdw_task, (void *)args);
        return;
    }
    int pointwise = w->kh == 1 && w->kw == 1 && w->sh == 1 && w->sw == 1 && w->pt == 0 &&
                    w->pl == 0 && w->oh == w->ih && w->ow == w->iw;
    if (pointwise && p->groups == 1) {
        lb_fgemm_any(ctx, w->n * pix_in, p->mg, p->cg, in, w->c, p->w, p->cg, p->bias, p->lo,
                     p->hi, out, mout, p->fma);
        return;
    }
    for (int64_t b = 0; b < w->n; b++) {
        const float *A = in + b * pix_in * w->c;
        int64_t lda = w->c, gstep = p->cg;
        if (!pointwise) {
            lb_window one = *w;
            one.n = 1;
            lb_im2col_f32(ctx, &one, p->groups, p->cg, A, scratch);
            A = scratch;
            lda = p->groups * K;
            gstep = K;
        }
        for (int64_t g = 0; g < p->groups; g++)
            lb_fgemm_any(ctx, pix_out, p->mg, K, A + g * gstep, lda, p->w + g * p->mg * K, K,
                         p->bias ? p->bias + g * p->mg : NULL, p->lo, p->hi,
                         out + b * pix_out * mout + g * p->mg, mout, p->fma);
    }
}

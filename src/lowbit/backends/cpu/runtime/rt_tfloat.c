/* Float ops of transformer encoders: LayerNorm, Softmax, GELU, exp (lowbit.numerics.elementary
 * and the reference's LayerNormalization), with the dispatch per instruction set. The portable
 * C (rt_tfloat_impl.h) serves the scalar and AVX2 paths; rt_tfloat_avx512.c has the AVX-512
 * kernels. All compute the same IEEE steps in the same order. */
#include "rt_tf_internal.h"
#include "rt_elementary.h"

/* lane_sum's final halving: lanes 0-7 += 8-15, 0-3 += 4-7, 0-1 += 2-3, 0 += 1 */
static inline double lb_halve16(double *a) {
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) a[i] = a[i] + a[i + w];
    return a[0];
}

static inline float lb_halve16f(float *a) {
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) a[i] = a[i] + a[i + w];
    return a[0];
}

#define LB_TF_SUFFIX scalar
#define LB_TF_TARGET
#include "rt_tfloat_impl.h"
#undef LB_TF_SUFFIX
#undef LB_TF_TARGET

#if LB_HAVE_AVX2
#define LB_TF_SUFFIX avx2
#define LB_TF_TARGET LB_TARGET_AVX2
#include "rt_tfloat_impl.h"
#undef LB_TF_SUFFIX
#undef LB_TF_TARGET
#endif

/* ---- dispatch ------------------------------------------------------------------------ */

typedef struct lb_rows_job {
    int isa;
    int64_t rows, per_task, n;
    const float *x;
    int64_t ldx;
    const float *gamma, *beta;
    double eps;
    float *y;
    int64_t ldy;
    int32_t flag;
} lb_rows_job;

static void lb_layernorm_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_rows_job *j = (const lb_rows_job *)arg;
    int64_t r0 = t * j->per_task, r1 = LB_MIN(j->rows, r0 + j->per_task);
#if LB_HAVE_AVX512
    if (j->isa == LB_ISA_AVX512VNNI) {
        lb_layernorm_rows_avx512(r0, r1, j->n, j->x, j->ldx, j->gamma, j->beta, j->eps, j->y,
                                 j->ldy);
        return;
    }
#endif
#if LB_HAVE_AVX2
    if (j->isa == LB_ISA_AVX2) {
        lb_layernorm_rows_avx2(r0, r1, j->n, j->x, j->ldx, j->gamma, j->beta, j->eps, j->y,
                               j->ldy);
        return;
    }
#endif
    lb_layernorm_rows_scalar(r0, r1, j->n, j->x, j->ldx, j->gamma, j->beta, j->eps, j->y,
                             j->ldy);
}

static int64_t lb_rows_per_task(int64_t n) { return LB_MAX(1, 8192 / LB_MAX(1, n)); }

void lb_layernorm(const lb_ctx *ctx, int64_t rows, int64_t n, const float *x, int64_t ldx,
                  const float *gamma, const float *beta, double eps, float *y, int64_t ldy) {
    if (rows <= 0 || n <= 0) return;
    lb_rows_job j = {ctx->isa, rows, lb_rows_per_task(n), n, x, ldx, gamma, beta, eps, y, ldy,
                     0};
    lb_parallel_for(ctx, (rows + j.per_task - 1) / j.per_task, lb_layernorm_task, &j);
}

static void lb_softmax_rows(const lb_rows_job *j, int64_t r0, int64_t r1, const float *x,
                            int64_t ldx) {
#if LB_HAVE_AVX512
    if (j->isa == LB_ISA_AVX512VNNI) {
        lb_softmax_rows_avx512(r0, r1, j->n, x, ldx, j->y, j->ldy);
        return;
    }
#endif
#if LB_HAVE_AVX2
    if (j->isa == LB_ISA_AVX2) {
        lb_softmax_rows_avx2(r0, r1, j->n, x, ldx, j->y, j->ldy);
        return;
    }
#endif
    lb_softmax_rows_scalar(r0, r1, j->n, x, ldx, j->y, j->ldy);
}

/* y = x + bias over one row (restrict: the compiler vectorises; one IEEE add each) */
static void lb_add_bias_row(int64_t n, const float *restrict x, const float *restrict bias,
                            float *restrict y) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] + bias[i];
}

/* lb_softmax_bias: each row's sums into y, then its softmax in place while in cache */
static void lb_softmax_bias_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_rows_job *j = (const lb_rows_job *)arg;
    int64_t r0 = t * j->per_task, r1 = LB_MIN(j->rows, r0 + j->per_task);
    for (int64_t r = r0; r < r1; r++) {
        lb_add_bias_row(j->n, j->x + r * j->ldx, j->gamma, j->y + r * j->ldy);
        lb_softmax_rows(j, r, r + 1, j->y, j->ldy);
    }
}

void lb_softmax_bias(const lb_ctx *ctx, int64_t rows, int64_t n, const float *x, int64_t ldx,
                     const float *bias, float *y, int64_t ldy) {
    if (rows <= 0 || n <= 0) return;
    lb_rows_job j = {ctx->isa, rows, lb_rows_per_task(n), n, x, ldx, bias, NULL, 0, y, ldy, 0};
    lb_parallel_for(ctx, (rows + j.per_task - 1) / j.per_task, lb_softmax_bias_task, &j);
}

static void lb_softmax_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_rows_job *j = (const lb_rows_job *)arg;
    int64_t r0 = t * j->per_task, r1 = LB_MIN(j->rows, r0 + j->per_task);
    lb_softmax_rows(j, r0, r1, j->x, j->ldx);
}

void lb_softmax(const lb_ctx *ctx, int64_t rows, int64_t n, const float *x, int64_t ldx,
                float *y, int64_t ldy) {
    if (rows <= 0 || n <= 0) return;
    lb_rows_job j = {ctx->isa, rows, lb_rows_per_task(n), n, x, ldx, NULL, NULL, 0, y, ldy, 0};
    lb_parallel_for(ctx, (rows + j.per_task - 1) / j.per_task, lb_softmax_task, &j);
}

#define LB_SPAN 8192

static void lb_gelu_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_rows_job *j = (const lb_rows_job *)arg;
    int64_t i0 = t * LB_SPAN, n = LB_MIN(j->n - i0, LB_SPAN);
#if LB_HAVE_AVX512
    if (j->isa == LB_ISA_AVX512VNNI) {
        if (j->flag >= 0)
            lb_gelu_span_avx512(n, j->x + i0, j->flag, j->y + i0);
        else
            lb_exp_span_avx512(n, j->x + i0, j->y + i0);
        return;
    }
#endif
#if LB_HAVE_AVX2
    if (j->isa == LB_ISA_AVX2) {
        if (j->flag >= 0)
            lb_gelu_span_avx2(n, j->x + i0, j->flag, j->y + i0);
        else
            lb_exp_span_avx2(n, j->x + i0, j->y + i0);
        return;
    }
#endif
    if (j->flag >= 0)
        lb_gelu_span_scalar(n, j->x + i0, j->flag, j->y + i0);
    else
        lb_exp_span_scalar(n, j->x + i0, j->y + i0);
}

void lb_gelu(const lb_ctx *ctx, int64_t n, const float *x, int32_t tanh_form, float *y) {
    if (n <= 0) return;
    lb_rows_job j = {ctx->isa, 0, 0, n, x, 0, NULL, NULL, 0, y, 0, tanh_form ? 1 : 0};
    lb_parallel_for(ctx, (n + LB_SPAN - 1) / LB_SPAN, lb_gelu_task, &j);
}

void lb_exp(const lb_ctx *ctx, int64_t n, const float *x, float *y) {
    if (n <= 0) return;
    lb_rows_job j = {ctx->isa, 0, 0, n, x, 0, NULL, NULL, 0, y, 0, -1};
    lb_parallel_for(ctx, (n + LB_SPAN - 1) / LB_SPAN, lb_gelu_task, &j);
}

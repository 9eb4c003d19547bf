/* Calibration statistics for lowbit.profile (not used by compiled models).
 *
 * Two kernels, each the C form of a Python definition it equals bit for bit:
 *
 *   lb_gridsum_add      lowbit.numerics.exact_sum.GridSum.add: each value, scaled by the
 *                       power of two `first * second` (in float64), is cut into three 32-bit
 *                       windows by truncation toward zero, each added to its int64 limb.
 *   lb_dw_moments       lowbit.quant.input_moments.depthwise_moments: per channel of a
 *                       depthwise convolution (one input channel per group), the upper triangle
 *                       of S = sum over output positions of v v^T, v the channel's receptive
 *                       field (taps row-major, zero outside the input), summed in float64 in
 *                       position order (batch item, output row, output column).
 *
 * Every value is computed by the same IEEE operations in the same order whatever the vector
 * width: lanes are elements (GridSum) or channels (moments), never partial sums of one
 * result. Products of two float32 values are exact in float64, so a fused multiply-add
 * rounds them as a multiply then an add does. No allocation: the accumulators live on the
 * stack (at most LB_MOMENT_TAPS taps). */
#include "rt_internal.h"

#define LB_MOMENT_TAPS 25
#define LB_MOMENT_LANES 8
#define LB_MOMENT_PAIRS (LB_MOMENT_TAPS * (LB_MOMENT_TAPS + 1) / 2)

LB_API int lb_stats_maxabs(const void *x, int f64, int64_t n, double *out);
LB_API int lb_stats_maxabs_upper(const void *x, int f64, int64_t groups, int64_t k,
                                 double *out);
LB_API void lb_gridsum_add(const lb_ctx *ctx, int64_t *limbs, int64_t n, const void *x,
                           int f64, double first, double second);
LB_API void lb_gridsum_add_upper(const lb_ctx *ctx, int64_t *limbs, const void *x, int f64,
                                 int64_t groups, int64_t k, double first, double second);
LB_API int lb_dw_moments(const lb_ctx *ctx, const float *x, const int64_t *geometry,
                         double *out);

LB_INLINE double lb_stats_load(const void *x, int f64, int64_t i) {
    return f64 ? ((const double *)x)[i] : (double)((const float *)x)[i];
}

/* Largest |x| of n values into *out; returns 0 when a value is NaN or infinite. */
LB_API int lb_stats_maxabs(const void *x, int f64, int64_t n, double *out) {
    double m = 0.0;
    int finite = 1;
    if (f64) {
        const double *p = (const double *)x;
        for (int64_t i = 0; i < n; i++) {
            double a = fabs(p[i]);
            finite &= a <= 1.7976931348623157e308;
            m = a > m ? a : m;
        }
    } else {
        const float *p = (const float *)x;
        float mf = 0.0f;
        for (int64_t i = 0; i < n; i++) {
            float a = fabsf(p[i]);
            finite &= a <= 3.40282346638528859812e+38f;
            mf = a > mf ? a : mf;
        }
        m = (double)mf;
    }
    *out = m;
    return finite;
}

/* lb_stats_maxabs over the upper triangles (diagonal included) of `groups` k x k matrices. */
LB_API int lb_stats_maxabs_upper(const void *x, int f64, int64_t groups, int64_t k,
                                 double *out) {
    double m = 0.0;
    int finite = 1;
    for (int64_t g = 0; g < groups; g++) {
        for (int64_t r = 0; r < k; r++) {
            double row;
            int64_t at = (g * k + r) * k + r;
            const void *p = f64 ? (const void *)((const double *)x + at)
                                : (const void *)((const float *)x + at);
            finite &= lb_stats_maxabs(p, f64, k - r, &row);
            m = row > m ? row : m;
        }
    }
    *out = m;
    return finite;
}

/* Adds n values, the first at x, into the limbs of elements [0, n) (limb j of element i at
 * limbs[j * stride + i]). */
static void lb_gridsum_run(int64_t *limbs, int64_t stride, int64_t n, const void *x, int f64,
                           double first, double second) {
    int64_t *l0 = limbs, *l1 = limbs + stride, *l2 = limbs + 2 * stride;
    const double window = 4294967296.0;
    if (f64) {
        const double *p = (const double *)x;
        for (int64_t i = 0; i < n; i++) {
            double y = p[i] * first;
            y = y * second;
            double w = trunc(y);
            l2[i] += (int64_t)w;
            y = (y - w) * window;
            w = trunc(y);
            l1[i] += (int64_t)w;
            y = (y - w) * window;
            l0[i] += (int64_t)trunc(y);
        }
    } else {
        const float *p = (const float *)x;
        for (int64_t i = 0; i < n; i++) {
            double y = (double)p[i] * first;
            y = y * second;
            double w = trunc(y);
            l2[i] += (int64_t)w;
            y = (y - w) * window;
            w = trunc(y);
            l1[i] += (int64_t)w;
            y = (y - w) * window;
            l0[i] += (int64_t)trunc(y);
        }
    }
}

#define LB_GRID_TASK 65536

typedef struct lb_gridsum_job {
    int64_t *limbs;
    int64_t n;
    const void *x;
    int f64;
    double first, second;
} lb_gridsum_job;

static void lb_gridsum_task(void *arg, int64_t task, int worker) {
    (void)worker;
    const lb_gridsum_job *j = (const lb_gridsum_job *)arg;
    int64_t start = task * LB_GRID_TASK, len = LB_MIN(LB_GRID_TASK, j->n - start);
    const void *x = j->f64 ? (const void *)((const double *)j->x + start)
                           : (const void *)((const float *)j->x + start);
    lb_gridsum_run(j->limbs + start, j->n, len, x, j->f64, j->first, j->second);
}

/* GridSum.add of n values: limbs [3][n] int64, x float32 or float64 (f64 = 1). */
LB_API void lb_gridsum_add(const lb_ctx *ctx, int64_t *limbs, int64_t n, const void *x,
                           int f64, double first, double second) {
    lb_gridsum_job j = {limbs, n, x, f64, first, second};
    int64_t tasks = (n + LB_GRID_TASK - 1) / LB_GRID_TASK;
    if (ctx != NULL && tasks > 1)
        lb_parallel_for(ctx, tasks, lb_gridsum_task, &j);
    else if (n > 0)
        lb_gridsum_run(limbs, n, n, x, f64, first, second);
}

typedef struct lb_upper_job {
    int64_t *limbs;
    const void *x;
    int f64;
    int64_t groups, k, per_group;
    double first, second;
} lb_upper_job;

/* Task: one group's upper triangle, row by row (element index = row-major triangle order). */
static void lb_upper_task(void *arg, int64_t g, int worker) {
    (void)worker;
    const lb_upper_job *j = (const lb_upper_job *)arg;
    int64_t stride = j->groups * j->per_group, at = g * j->per_group;
    for (int64_t r = 0; r < j->k; r++) {
        int64_t from = (g * j->k + r) * j->k + r;
        const void *x = j->f64 ? (const void *)((const double *)j->x + from)
                               : (const void *)((const float *)j->x + from);
        lb_gridsum_run(j->limbs + at, stride, j->k - r, x, j->f64, j->first, j->second);
        at += j->k - r;
    }
}

/* GridSum.add of the upper triangles of `groups` k x k matrices (row-major, diagonal
 * included: numpy's triu_indices order), limbs [3][groups * k (k + 1) / 2]. */
LB_API void lb_gridsum_add_upper(const lb_ctx *ctx, int64_t *limbs, const void *x, int f64,
                                 int64_t groups, int64_t k, double first, double second) {
    lb_upper_job j = {limbs, x, f64, groups, k, k * (k + 1) / 2, first, second};
    if (ctx != NULL && groups > 1 && groups * j.per_group > LB_GRID_TASK) {
        lb_parallel_for(ctx, groups, lb_upper_task, &j);
    } else {
        for (int64_t g = 0; g < groups; g++) lb_upper_task(&j, g, 0);
    }
}

/* ---- depthwise input moments --------------------------------------------------------------- */

typedef struct lb_dwm_job {
    const float *x; /* [N, H, W, C] channel-last */
    int64_t n, c, h, w, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow;
    double *out; /* [C, T] */
} lb_dwm_job;

/* Task: channels [8 t, 8 t + 8) of every position, summed in position order per channel. */
static void lb_dwm_task(void *arg, int64_t task, int worker) {
    (void)worker;
    const lb_dwm_job *j = (const lb_dwm_job *)arg;
    const int64_t taps = j->kh * j->kw, pairs = taps * (taps + 1) / 2;
    const int64_t c0 = task * LB_MOMENT_LANES;
    const int64_t lanes = LB_MIN(LB_MOMENT_LANES, j->c - c0);
    double acc[LB_MOMENT_PAIRS][LB_MOMENT_LANES];
    double v[LB_MOMENT_TAPS][LB_MOMENT_LANES];
    memset(acc, 0, sizeof acc);
    for (int64_t b = 0; b < j->n; b++) {
        const float *item = j->x + b * j->h * j->w * j->c;
        for (int64_t oy = 0; oy < j->oh; oy++) {
            for (int64_t ox = 0; ox < j->ow; ox++) {
                for (int64_t ky = 0; ky < j->kh; ky++) {
                    int64_t iy = oy * j->sh + ky * j->dh - j->pt;
                    for (int64_t kx = 0; kx < j->kw; kx++) {
                        int64_t ix = ox * j->sw + kx * j->dw - j->pl;
                        double *t = v[ky * j->kw + kx];
                        if (iy < 0 || iy >= j->h || ix < 0 || ix >= j->w) {
                            for (int l = 0; l < LB_MOMENT_LANES; l++) t[l] = 0.0;
                        } else {
                            const float *src = item + (iy * j->w + ix) * j->c + c0;
                            for (int l = 0; l < LB_MOMENT_LANES; l++)
                                t[l] = l < lanes ? (double)src[l] : 0.0;
                        }
                    }
                }
                int64_t p = 0;
                for (int64_t a = 0; a < taps; a++) {
                    for (int64_t bb = a; bb < taps; bb++, p++) {
                        for (int l = 0; l < LB_MOMENT_LANES; l++)
                            acc[p][l] = acc[p][l] + v[a][l] * v[bb][l];
                    }
                }
            }
        }
    }
    for (int64_t l = 0; l < lanes; l++)
        for (int64_t q = 0; q < pairs; q++) j->out[(c0 + l) * pairs + q] = acc[q][l];
}

/* Depthwise moments (file comment) of x [N, H, W, C] float32 into out [C, T] float64 (T =
 * taps (taps + 1) / 2, overwritten). geometry: N C H W kh kw sh sw dh dw pad_top pad_left
 * out_h out_w. Returns 0, or -1 when the kernel has more than LB_MOMENT_TAPS taps. */
LB_API int lb_dw_moments(const lb_ctx *ctx, const float *x, const int64_t *geometry,
                         double *out) {
    const int64_t *g = geometry;
    if (g[4] * g[5] > LB_MOMENT_TAPS || g[4] < 1 || g[5] < 1) return -1;
    lb_dwm_job j = {x, g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10],
                    g[11], g[12], g[13], out};
    int64_t tasks = (j.c + LB_MOMENT_LANES - 1) / LB_MOMENT_LANES;
    if (ctx != NULL && tasks > 1)
        lb_parallel_for(ctx, tasks, lb_dwm_task, &j);
    else
        for (int64_t t = 0; t < tasks; t++) lb_dwm_task(&j, t, 0);
    return 0;
}

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
 *                       field (taps row-major, zero outside the input): each product rounded
 *                       to float32 and summed in float32 in position order (batch item,
 *                       output row, output column) over blocks of whole output rows (at most
 *                       256 positions, at least a row), the blocks' sums added in float64.
 *
 * Every value is computed by the same IEEE operations in the same order whatever the vector
 * width: lanes are elements (GridSum) or channels (moments), never partial sums of one
 * result. Products of two float32 values are exact in float64, so a fused multiply-add
 * rounds them as a multiply then an add does (GridSum); the depthwise moments' float32
 * products are rounded, then added (never fused). No allocation: the accumulators live on the
 * stack (at most LB_MOMENT_TAPS taps). */
#include "rt_internal.h"

#define LB_MOMENT_TAPS 25
#define LB_MOMENT_LANES 16

LB_API int lb_stats_maxabs(const void *x, int f64, int64_t n, double *out);
LB_API int lb_stats_maxabs_upper(const void *x, int f64, int64_t groups, int64_t k,
                                 double *out);
LB_API void lb_gridsum_add(const lb_ctx *ctx, int64_t *limbs, int64_t n, const void *x,
                           int f64, double first, double second);
LB_API void lb_gridsum_add_many(const lb_ctx *ctx, int64_t *limbs, int64_t n,
                                const float *const *xs, int64_t m, double first, double second);
LB_API void lb_gridsum_add_upper(const lb_ctx *ctx, int64_t *limbs, const void *x, int f64,
                                 int64_t groups, int64_t k, double first, double second);
LB_API int lb_dw_moments(const lb_ctx *ctx, const float *xp, const int64_t *geometry,
                         double *out);
LB_API int lb_dw_moments_f32(const lb_ctx *ctx, const float *xp, const int64_t *geometry,
                             float *out);

LB_INLINE double lb_stats_load(const void *x, int f64, int64_t i) {
    return f64 ? ((const double *)x)[i] : (double)((const float *)x)[i];
}

/* Largest |x| of n values into *out; returns 0 when a value is NaN or infinite. The maximum is
   the same whatever the order its values are compared in, so one running maximum per vector
   lane (GCC vector types: positions modulo the lanes, independent) is taken, then the largest
   of them; a NaN fails the finiteness test and is never taken as a maximum (`a > m` is false).
   The magnitude is the value with its sign bit cleared, as fabs gives it. */
typedef double lb_mx_vd __attribute__((vector_size(64)));
typedef int64_t lb_mx_vl __attribute__((vector_size(64)));
typedef float lb_mx_vf __attribute__((vector_size(64)));
typedef int32_t lb_mx_vi __attribute__((vector_size(64)));
LB_API int lb_stats_maxabs(const void *x, int f64, int64_t n, double *out) {
    int64_t i = 0;
    int finite = 1;
    if (f64) {
        const double *p = (const double *)x;
        const lb_mx_vl magnitude = (lb_mx_vl){0} + INT64_MAX;
        const lb_mx_vd largest = (lb_mx_vd){0} + 1.7976931348623157e308;
        lb_mx_vd mv = {0};
        lb_mx_vl bad = {0};
        for (; i + 8 <= n; i += 8) {
            lb_mx_vd v;
            memcpy(&v, p + i, sizeof v);
            const lb_mx_vd a = (lb_mx_vd)((lb_mx_vl)v & magnitude);
            bad |= ~(a <= largest); /* NaN or an infinity */
            const lb_mx_vl gt = a > mv;
            mv = (lb_mx_vd)(((lb_mx_vl)a & gt) | ((lb_mx_vl)mv & ~gt));
        }
        double m = 0.0;
        for (int l = 0; l < 8; l++) {
            finite &= bad[l] == 0;
            m = mv[l] > m ? mv[l] : m;
        }
        for (; i < n; i++) {
            const double a = fabs(p[i]);
            finite &= a <= 1.7976931348623157e308;
            m = a > m ? a : m;
        }
        *out = m;
    } else {
        const float *p = (const float *)x;
        const lb_mx_vi magnitude = (lb_mx_vi){0} + INT32_MAX;
        const lb_mx_vf largest = (lb_mx_vf){0} + 3.40282346638528859812e+38f;
        lb_mx_vf mv = {0};
        lb_mx_vi bad = {0};
        for (; i + 16 <= n; i += 16) {
            lb_mx_vf v;
            memcpy(&v, p + i, sizeof v);
            const lb_mx_vf a = (lb_mx_vf)((lb_mx_vi)v & magnitude);
            bad |= ~(a <= largest);
            const lb_mx_vi gt = a > mv;
            mv = (lb_mx_vf)(((lb_mx_vi)a & gt) | ((lb_mx_vi)mv & ~gt));
        }
        float m = 0.0f;
        for (int l = 0; l < 16; l++) {
            finite &= bad[l] == 0;
            m = mv[l] > m ? mv[l] : m;
        }
        for (; i < n; i++) {
            const float a = fabsf(p[i]);
            finite &= a <= 3.40282346638528859812e+38f;
            m = a > m ? a : m;
        }
        *out = (double)m;
    }
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

/* Eight elements at a time (GCC vector types, any target): a value's three windows are the
 * same integers whatever the width, so every ISA path gives the same limbs. Converting a double
 * of magnitude below 2**32 to int64 truncates toward zero, as trunc() does, and converting the
 * integer back is exact: (int64_t)trunc(y) and trunc(y) at once. */
typedef double lb_gs_vd __attribute__((vector_size(64)));
typedef int64_t lb_gs_vl __attribute__((vector_size(64)));
typedef float lb_gs_vf __attribute__((vector_size(32)));
#define LB_GS_LANES 8

/* a2, a1, a0 (lb_gs_vl) += the windows of y (lb_gs_vd, scaled to units of the top window). */
#define LB_GS_CUT(y, a0, a1, a2)                                                               \
    do {                                                                                       \
        lb_gs_vl w_ = __builtin_convertvector(y, lb_gs_vl);                                    \
        a2 += w_;                                                                              \
        y = (y - __builtin_convertvector(w_, lb_gs_vd)) * 4294967296.0;                        \
        w_ = __builtin_convertvector(y, lb_gs_vl);                                             \
        a1 += w_;                                                                              \
        y = (y - __builtin_convertvector(w_, lb_gs_vd)) * 4294967296.0;                        \
        a0 += __builtin_convertvector(y, lb_gs_vl);                                            \
    } while (0)

/* Adds n values, the first at x, into the limbs of elements [0, n) (limb j of element i at
 * limbs[j * stride + i]). */
static void lb_gridsum_run(int64_t *limbs, int64_t stride, int64_t n, const void *x, int f64,
                           double first, double second) {
    int64_t *l0 = limbs, *l1 = limbs + stride, *l2 = limbs + 2 * stride;
    const double window = 4294967296.0;
    int64_t i = 0;
    for (; i + LB_GS_LANES <= n; i += LB_GS_LANES) {
        lb_gs_vd y;
        if (f64) {
            memcpy(&y, (const double *)x + i, sizeof y);
        } else {
            lb_gs_vf v;
            memcpy(&v, (const float *)x + i, sizeof v);
            y = __builtin_convertvector(v, lb_gs_vd);
        }
        y = y * first;
        y = y * second;
        lb_gs_vl a0, a1, a2;
        memcpy(&a0, l0 + i, sizeof a0);
        memcpy(&a1, l1 + i, sizeof a1);
        memcpy(&a2, l2 + i, sizeof a2);
        LB_GS_CUT(y, a0, a1, a2);
        memcpy(l0 + i, &a0, sizeof a0);
        memcpy(l1 + i, &a1, sizeof a1);
        memcpy(l2 + i, &a2, sizeof a2);
    }
    for (; i < n; i++) {
        double y = f64 ? ((const double *)x)[i] : (double)((const float *)x)[i];
        y = y * first;
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

/* Adds m float32 arrays of n values each (xs[b][i]), all scaled by the same powers of two, into
 * the limbs of elements [0, n): per element the limbs are read and written once, each value's
 * windows cut as lb_gridsum_run cuts them (integer additions: the same limbs as m calls). */
static void lb_gridsum_many_run(int64_t *limbs, int64_t stride, int64_t start, int64_t n,
                                const float *const *xs, int64_t m, double first,
                                double second) {
    int64_t *l0 = limbs + start, *l1 = limbs + stride + start, *l2 = limbs + 2 * stride + start;
    const double window = 4294967296.0;
    int64_t i = 0;
    for (; i + LB_GS_LANES <= n; i += LB_GS_LANES) {
        lb_gs_vl a0, a1, a2;
        memcpy(&a0, l0 + i, sizeof a0);
        memcpy(&a1, l1 + i, sizeof a1);
        memcpy(&a2, l2 + i, sizeof a2);
        for (int64_t b = 0; b < m; b++) {
            lb_gs_vf v;
            memcpy(&v, xs[b] + start + i, sizeof v);
            lb_gs_vd y = __builtin_convertvector(v, lb_gs_vd) * first;
            y = y * second;
            LB_GS_CUT(y, a0, a1, a2);
        }
        memcpy(l0 + i, &a0, sizeof a0);
        memcpy(l1 + i, &a1, sizeof a1);
        memcpy(l2 + i, &a2, sizeof a2);
    }
    for (; i < n; i++) {
        int64_t a0 = l0[i], a1 = l1[i], a2 = l2[i];
        for (int64_t b = 0; b < m; b++) {
            double y = (double)xs[b][start + i] * first;
            y = y * second;
            double w = trunc(y);
            a2 += (int64_t)w;
            y = (y - w) * window;
            w = trunc(y);
            a1 += (int64_t)w;
            y = (y - w) * window;
            a0 += (int64_t)trunc(y);
        }
        l0[i] = a0, l1[i] = a1, l2[i] = a2;
    }
}

typedef struct lb_gridsum_many_job {
    int64_t *limbs;
    int64_t n, m;
    const float *const *xs;
    double first, second;
} lb_gridsum_many_job;

static void lb_gridsum_many_task(void *arg, int64_t task, int worker) {
    (void)worker;
    const lb_gridsum_many_job *j = (const lb_gridsum_many_job *)arg;
    int64_t start = task * LB_GRID_TASK, len = LB_MIN(LB_GRID_TASK, j->n - start);
    lb_gridsum_many_run(j->limbs, j->n, start, len, j->xs, j->m, j->first, j->second);
}

/* GridSum.add of m float32 arrays of n values (limbs [3][n] int64), the caller having counted
 * the m additions and raised the top for all of them (`first * second` scales to its units). */
LB_API void lb_gridsum_add_many(const lb_ctx *ctx, int64_t *limbs, int64_t n,
                                const float *const *xs, int64_t m, double first, double second) {
    lb_gridsum_many_job j = {limbs, n, m, xs, first, second};
    int64_t tasks = (n + LB_GRID_TASK - 1) / LB_GRID_TASK;
    if (ctx != NULL && tasks > 1)
        lb_parallel_for(ctx, tasks, lb_gridsum_many_task, &j);
    else if (n > 0 && m > 0)
        lb_gridsum_many_run(limbs, n, 0, n, xs, m, first, second);
}

typedef struct lb_upper_job {
    int64_t *limbs;
    const void *x;
    int f64;
    int64_t groups, k, per_group, rows, blocks; /* a task: `rows` rows of one group */
    double first, second;
} lb_upper_job;

/* Task: rows [b rows, (b + 1) rows) of group g's upper triangle (element index: row-major
 * triangle order, row r starting at r k - r (r - 1) / 2). */
static void lb_upper_task(void *arg, int64_t task, int worker) {
    (void)worker;
    const lb_upper_job *j = (const lb_upper_job *)arg;
    int64_t g = task / j->blocks, r0 = (task % j->blocks) * j->rows;
    int64_t r1 = LB_MIN(j->k, r0 + j->rows);
    int64_t stride = j->groups * j->per_group;
    int64_t at = g * j->per_group + r0 * j->k - r0 * (r0 - 1) / 2;
    for (int64_t r = r0; r < r1; r++) {
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
    int64_t rows = LB_MAX(1, LB_GRID_TASK / LB_MAX(k, 1));
    lb_upper_job j = {limbs, x, f64, groups, k, k * (k + 1) / 2, rows, (k + rows - 1) / rows,
                      first, second};
    int64_t tasks = groups * j.blocks;
    if (ctx != NULL && tasks > 1 && groups * j.per_group > LB_GRID_TASK) {
        lb_parallel_for(ctx, tasks, lb_upper_task, &j);
    } else {
        for (int64_t t = 0; t < tasks; t++) lb_upper_task(&j, t, 0);
    }
}

/* ---- per-element exact sums ------------------------------------------------------------------ */

LB_API int lb_exactsum_add(int64_t *limbs, int64_t *top, int64_t n, const double *x);

#define LB_EXACT_NONE (INT64_MIN / 2)

/* lowbit.numerics.exact_sum.ExactSum.add of n finite float64 values: limbs [3][n], top [n].
 * Per element: its top window rises to the one holding x's leading bit (limbs shifted down
 * whole windows, the lowest dropped), then x, scaled to units of the lowest kept window and
 * truncated, is cut into three 32-bit windows, each added to its limb. Returns 0 (nothing
 * changed) when a value is NaN or infinite. */
LB_API int lb_exactsum_add(int64_t *limbs, int64_t *top, int64_t n, const double *x) {
    for (int64_t i = 0; i < n; i++)
        if (!(x[i] - x[i] == 0.0)) return 0;
    for (int64_t i = 0; i < n; i++) {
        const double v = x[i];
        if (v != 0.0) {
            int e;
            (void)frexp(v, &e);
            const int64_t t = e - 1 >= 0 ? (e - 1) / 32 : -((32 - e) / 32); /* floor((e-1)/32) */
            if (t > top[i]) {
                const int64_t shift = t - top[i];
                for (int64_t j = 0; j < 3; j++)
                    limbs[j * n + i] = j + shift < 3 ? limbs[(j + shift) * n + i] : 0;
                top[i] = t;
            }
        }
        const int64_t kept = top[i] == LB_EXACT_NONE ? 2 : top[i];
        const int base = (int)((kept - 2) * 32);
        double rest = trunc(ldexp(v, -base));
        for (int j = 2; j > 0; j--) {
            const double part = trunc(ldexp(rest, -32 * j));
            limbs[j * n + i] += (int64_t)part;
            rest = rest - ldexp(part, 32 * j);
        }
        limbs[i] += (int64_t)rest;
    }
    return 1;
}

/* ---- depthwise input moments --------------------------------------------------------------- */

/* The input is given zero-padded and channel-last in float32: xp [N][Hp][Wp][Cp] (Cp a
 * multiple of 16), so that tap t of output position (oy, ox) of channels [c, c + 16) is the 16
 * values at ((oy sh) Wp + ox sw) Cp + off[t] + c, off[t] = (ky dh Wp + kx dw) Cp. Blocks are
 * whole output rows of one batch item, max(1, LB_DWM_BLOCK / out_w) rows a block. The
 * triangle is cut into R x R tiles (R = 3 up to 9 taps, else 5) of (row tap a, column tap b);
 * a task (16 channels) keeps one tile's float32 sums in registers over one block's positions
 * in order (each product rounded to float32, then added: no fused multiply-add), then adds
 * them to the tile's float64 totals, so every pair's sums run over the blocks in order. Taps
 * past the last (the tiles' padding) read tap 0 and their sums are dropped. The same vector
 * code on every ISA path (GCC vector types: lanes are channels), so the bits are the same.
 * When every input value is finite, a tile skips the output rows where all its row taps or
 * all its column taps fall in the zero padding above or below the input (rows top .. top + h
 * - 1 of xp hold the input): their products are zeros, and adding a zero leaves each sum as it
 * is (a sum from +0 is never -0), so the sums are the same bits. */
typedef struct lb_dwm_job {
    const float *x;
    int64_t n, c, hp, wp, cp, kh, kw, sh, sw, dh, dw, oh, ow, top, h;
    int skip; /* 1: skip the padding rows (every value finite) */
    double *out;  /* [C, T] */
    float *out32; /* non-NULL: [C, T] here instead, each total rounded to float32 */
} lb_dwm_job;

typedef float lb_dwm_vec __attribute__((vector_size(4 * LB_MOMENT_LANES)));

#define LB_DWM_TILES 15 /* 5 x 6 / 2 tiles of 5 x 5 for 25 taps; 6 of 3 x 3 for up to 9 */
#define LB_DWM_BLOCK 256

LB_INLINE void lb_dwm_store(const lb_dwm_job *j, int64_t c0, const int R, int64_t taps,
                            int64_t nt, double acc[][25][LB_MOMENT_LANES]) {
    const int64_t lanes = LB_MIN(LB_MOMENT_LANES, j->c - c0), pairs = taps * (taps + 1) / 2;
    int64_t tile = 0;
    for (int64_t ra = 0; ra < nt; ra++) {
        for (int64_t rb = ra; rb < nt; rb++, tile++) {
            for (int i = 0; i < R; i++) {
                for (int k = 0; k < R; k++) {
                    int64_t a = ra * R + i, b = rb * R + k;
                    if (a > b || b >= taps) continue;
                    int64_t q = a * taps - a * (a - 1) / 2 + (b - a);
                    for (int64_t l = 0; l < lanes; l++) {
                        if (j->out32 != NULL)
                            j->out32[(c0 + l) * pairs + q] = (float)acc[tile][i * R + k][l];
                        else
                            j->out[(c0 + l) * pairs + q] = acc[tile][i * R + k][l];
                    }
                }
            }
        }
    }
}

/* Element offsets of the first `count` taps (taps past the kernel repeat tap 0, so that tiles
   of R taps read valid memory) from an output pixel's window corner, channel block c0. */
static void lb_dwm_offsets(const lb_dwm_job *j, int64_t c0, int64_t count, int64_t *off) {
    const int64_t taps = j->kh * j->kw;
    for (int64_t t = 0; t < count; t++) {
        int64_t u = t < taps ? t : 0;
        off[t] = ((u / j->kw) * j->dh * j->wp + (u % j->kw) * j->dw) * j->cp + c0;
    }
}

/* One tile of R x R tap pairs over output rows [r0, r1) of one batch item (one block):
   s[i R + k] += x[tap a_i] * x[tap b_k] in float32, sixteen channels a vector, then each sum
   added to acc in float64. Inlined with R a constant (3 or 5) so the sums stay in
   registers. */
static inline __attribute__((always_inline)) void lb_dwm_tile(
    const int R, const int diagonal, const lb_dwm_job *j, const float *item, int64_t r0,
    int64_t r1, const int64_t *oa, const int64_t *ob, double (*acc)[LB_MOMENT_LANES]) {
    lb_dwm_vec s[25], b[5];
    for (int q = 0; q < R * R; q++) s[q] = (lb_dwm_vec){0};
    const int64_t step = j->sw * j->cp, rows = j->sh * j->wp * j->cp;
    for (int64_t oy = r0; oy < r1; oy++) {
        const float *p = item + oy * rows;
        for (int64_t ox = 0; ox < j->ow; ox++, p += step) {
            for (int k = 0; k < R; k++) memcpy(&b[k], p + ob[k], sizeof(lb_dwm_vec));
            for (int i = 0; i < R; i++) {
                lb_dwm_vec a;
                memcpy(&a, p + oa[i], sizeof a);
                /* on the diagonal, pairs below it (dropped by lb_dwm_store) are not summed */
                for (int k = diagonal ? i : 0; k < R; k++) {
                    const lb_dwm_vec product = a * b[k];
                    s[i * R + k] = s[i * R + k] + product;
                }
            }
        }
    }
    for (int q = 0; q < R * R; q++) {
        float f[LB_MOMENT_LANES];
        memcpy(f, &s[q], sizeof f);
        for (int l = 0; l < LB_MOMENT_LANES; l++) acc[q][l] += (double)f[l];
    }
}

/* The output rows [lo, hi) outside which the taps [t0, t1) all read padding rows (the
   rows of the kernel rows t0 / kw .. (t1 - 1) / kw), as far as the tile skips them. */
static void lb_dwm_rows(const lb_dwm_job *j, int64_t t0, int64_t t1, int64_t *lo,
                        int64_t *hi) {
    if (!j->skip) {
        *lo = 0, *hi = j->oh;
        return;
    }
    const int64_t first = t0 / j->kw, last = (t1 - 1) / j->kw;
    /* kernel row ky reads input row oy sh + ky dh - top: some row of [first, last] is in
       [0, h) only for oy sh in [top - last dh, h - 1 + top - first dh] */
    const int64_t from = j->top - last * j->dh, to = j->h - 1 + j->top - first * j->dh;
    *lo = from <= 0 ? 0 : (from + j->sh - 1) / j->sh;
    *hi = to < 0 ? 0 : LB_MIN(j->oh, to / j->sh + 1);
}

static void lb_dwm_task(void *arg, int64_t task, int worker) {
    (void)worker;
    const lb_dwm_job *j = (const lb_dwm_job *)arg;
    const int R = j->kh * j->kw <= 9 ? 3 : 5;
    const int64_t taps = j->kh * j->kw, nt = (taps + R - 1) / R;
    const int64_t c0 = task * LB_MOMENT_LANES;
    const int64_t block = LB_MAX(1, LB_DWM_BLOCK / j->ow);
    int64_t off[LB_MOMENT_TAPS + 5];
    lb_dwm_offsets(j, c0, nt * R, off);
    double acc[LB_DWM_TILES][25][LB_MOMENT_LANES];
    memset(acc, 0, sizeof acc);
    int64_t lo[LB_DWM_TILES / 3 + 1], hi[LB_DWM_TILES / 3 + 1]; /* per tile row or column */
    for (int64_t t = 0; t < nt; t++) lb_dwm_rows(j, t * R, LB_MIN(taps, t * R + R), lo + t, hi + t);
    for (int64_t b = 0; b < j->n; b++) {
        const float *item = j->x + b * j->hp * j->wp * j->cp;
        for (int64_t r0 = 0; r0 < j->oh; r0 += block) {
            const int64_t r1 = LB_MIN(j->oh, r0 + block);
            int64_t tile = 0;
            for (int64_t ra = 0; ra < nt; ra++) {
                for (int64_t rb = ra; rb < nt; rb++, tile++) {
                    const int64_t *oa = off + ra * R, *ob = off + rb * R;
                    const int64_t y0 = LB_MAX(r0, LB_MAX(lo[ra], lo[rb]));
                    const int64_t y1 = LB_MIN(r1, LB_MIN(hi[ra], hi[rb]));
                    if (y0 >= y1) continue; /* all zeros: the sums stay as they are */
                    if (R == 5 && ra == rb)
                        lb_dwm_tile(5, 1, j, item, y0, y1, oa, ob, acc[tile]);
                    else if (R == 5)
                        lb_dwm_tile(5, 0, j, item, y0, y1, oa, ob, acc[tile]);
                    else if (ra == rb)
                        lb_dwm_tile(3, 1, j, item, y0, y1, oa, ob, acc[tile]);
                    else
                        lb_dwm_tile(3, 0, j, item, y0, y1, oa, ob, acc[tile]);
                }
            }
        }
    }
    lb_dwm_store(j, c0, R, taps, nt, acc);
}

/* Whether the n values (a multiple of LB_MOMENT_LANES) are all finite: v - v is 0 for a
   finite v, NaN otherwise, and NaN stays in a sum. */
static int lb_dwm_finite(const float *x, int64_t n) {
    lb_dwm_vec z = {0};
    for (int64_t i = 0; i < n; i += LB_MOMENT_LANES) {
        lb_dwm_vec v;
        memcpy(&v, x + i, sizeof v);
        z = z + (v - v);
    }
    int finite = 1;
    for (int l = 0; l < LB_MOMENT_LANES; l++) finite &= z[l] == 0.0f;
    return finite;
}

static int lb_dw_moments_into(const lb_ctx *ctx, const float *xp, const int64_t *geometry,
                              double *out, float *out32) {
    const int64_t *g = geometry;
    if (g[5] * g[6] > LB_MOMENT_TAPS || g[5] < 1 || g[6] < 1 || g[4] % LB_MOMENT_LANES ||
        g[4] < g[1] || g[12] < 1 || g[7] < 1 || g[13] < 0 || g[14] < 0 ||
        g[13] + g[14] > g[2])
        return -1;
    lb_dwm_job j = {xp, g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10],
                    g[11], g[12], g[13], g[14], lb_dwm_finite(xp, g[0] * g[2] * g[3] * g[4]),
                    out, out32};
    int64_t tasks = (j.c + LB_MOMENT_LANES - 1) / LB_MOMENT_LANES;
    if (ctx != NULL && tasks > 1)
        lb_parallel_for(ctx, tasks, lb_dwm_task, &j);
    else
        for (int64_t t = 0; t < tasks; t++) lb_dwm_task(&j, t, 0);
    return 0;
}

/* Depthwise moments (file comment) of xp [N][Hp][Wp][Cp] float32 (zero-padded, channel-last,
 * Cp >= C a multiple of 16) into out [C, T] float64 (T = taps (taps + 1) / 2, overwritten).
 * geometry: N C Hp Wp Cp kh kw sh sw dh dw out_h out_w top h (the input's rows in xp: top ..
 * top + h - 1; every other row zero). Returns 0, or -1 when the kernel has
 * more than LB_MOMENT_TAPS taps or Cp is not a multiple of 16. */
LB_API int lb_dw_moments(const lb_ctx *ctx, const float *xp, const int64_t *geometry,
                         double *out) {
    return lb_dw_moments_into(ctx, xp, geometry, out, NULL);
}

/* lb_dw_moments with each total rounded to float32 (exact when the positions are one block:
 * the total is then one float32 sum), into out [C, T] float32. */
LB_API int lb_dw_moments_f32(const lb_ctx *ctx, const float *xp, const int64_t *geometry,
                             float *out) {
    return lb_dw_moments_into(ctx, xp, geometry, NULL, out);
}

/* ---- observers ----------------------------------------------------------------------------- */

LB_API int lb_observe_f32(const float *x, int64_t outer, int64_t channels, int64_t inner,
                          double *chmin, double *chmax, double *chsum, int64_t *zeros);
LB_API void lb_histogram_f32(const float *x, int64_t n, float scale, float offset,
                             int64_t *counts, int64_t bins);
LB_API int lb_range_f32(const float *x, int64_t n, double *lohi, int64_t *zeros);

/* One pass over x [outer][channels][inner] float32: per channel its minimum, maximum and sum
 * (float64, the values added in order: outer index, then inner), and the number of zeros in
 * *zeros. Returns 0 (outputs unspecified) when a value is NaN or infinite. */
LB_API int lb_observe_f32(const float *x, int64_t outer, int64_t channels, int64_t inner,
                          double *chmin, double *chmax, double *chsum, int64_t *zeros) {
    int64_t z = 0;
    int finite = 1;
    for (int64_t c = 0; c < channels; c++) {
        chmin[c] = INFINITY;
        chmax[c] = -INFINITY;
        chsum[c] = 0.0;
    }
    if (inner == 1) { /* channels last: the channels of one position side by side */
        for (int64_t o = 0; o < outer; o++) {
            const float *p = x + o * channels;
            for (int64_t c = 0; c < channels; c++) {
                const float v = p[c];
                const double d = (double)v;
                chsum[c] = chsum[c] + d;
                chmin[c] = d < chmin[c] ? d : chmin[c];
                chmax[c] = d > chmax[c] ? d : chmax[c];
                z += v == 0.0f;
            }
        }
        for (int64_t c = 0; c < channels; c++) finite &= chsum[c] - chsum[c] == 0.0;
        *zeros = z;
        return finite;
    }
    for (int64_t o = 0; o < outer; o++) {
        int64_t c = 0;
        if (inner > 1)
            for (; c + 4 <= channels; c += 4) {
                /* four channels at once: four sums in flight, each still in order */
                const float *p = x + (o * channels + c) * inner;
                float lo[4], hi[4];
                double s[4];
                int64_t zc = 0;
                for (int u = 0; u < 4; u++) {
                    lo[u] = INFINITY;
                    hi[u] = -INFINITY;
                    s[u] = chsum[c + u];
                }
                for (int64_t i = 0; i < inner; i++) {
                    for (int u = 0; u < 4; u++) {
                        float v = p[u * inner + i];
                        lo[u] = v < lo[u] ? v : lo[u];
                        hi[u] = v > hi[u] ? v : hi[u];
                        zc += v == 0.0f;
                        s[u] = s[u] + (double)v;
                    }
                }
                for (int u = 0; u < 4; u++) {
                    finite &= s[u] - s[u] == 0.0;
                    chsum[c + u] = s[u];
                    chmin[c + u] = (double)lo[u] < chmin[c + u] ? (double)lo[u] : chmin[c + u];
                    chmax[c + u] = (double)hi[u] > chmax[c + u] ? (double)hi[u] : chmax[c + u];
                }
                z += zc;
            }
        for (; c < channels; c++) {
            const float *p = x + (o * channels + c) * inner;
            float lo = INFINITY, hi = -INFINITY;
            double s = chsum[c];
            int64_t zc = 0;
            for (int64_t i = 0; i < inner; i++) {
                float v = p[i];
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
                zc += v == 0.0f;
                s = s + (double)v;
            }
            finite &= s - s == 0.0; /* NaN or an infinity makes the sum NaN or infinite */
            chsum[c] = s;
            z += zc;
            chmin[c] = (double)lo < chmin[c] ? (double)lo : chmin[c];
            chmax[c] = (double)hi > chmax[c] ? (double)hi : chmax[c];
        }
    }
    *zeros = z;
    return finite;
}

#define LB_RANGE_LANES 16

/* The value v of x[0..n) that `v < lo ? v : lo` keeps (lo from +inf, in order): the smallest,
 * and among equal values the first; only 0 and -0 are equal values with different bits. */
static float lb_first_zero(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (x[i] == 0.0f) return x[i];
    return 0.0f;
}

/* lb_observe_f32 of x as one channel without the sum: minimum and maximum (those of the
 * values in order: the first of equal ones, which only matters for 0 and -0) in lohi[0..1]
 * and the number of zeros; returns 0 (outputs unspecified) when a value is NaN or infinite.
 * Sixteen lanes, each an in-order minimum and maximum of every sixteenth value. */
LB_API int lb_range_f32(const float *x, int64_t n, double *lohi, int64_t *zeros) {
    float lo[LB_RANGE_LANES], hi[LB_RANGE_LANES], bad[LB_RANGE_LANES];
    int64_t zc[LB_RANGE_LANES];
    for (int l = 0; l < LB_RANGE_LANES; l++) lo[l] = INFINITY, hi[l] = -INFINITY, bad[l] = 0.0f,
                                             zc[l] = 0;
    int64_t i = 0;
    for (; i + LB_RANGE_LANES <= n; i += LB_RANGE_LANES) {
        for (int l = 0; l < LB_RANGE_LANES; l++) {
            const float v = x[i + l];
            lo[l] = v < lo[l] ? v : lo[l];
            hi[l] = v > hi[l] ? v : hi[l];
            bad[l] = bad[l] + (v - v); /* NaN from a NaN or an infinity, else 0 */
            zc[l] += v == 0.0f;
        }
    }
    for (; i < n; i++) {
        const float v = x[i];
        lo[0] = v < lo[0] ? v : lo[0];
        hi[0] = v > hi[0] ? v : hi[0];
        bad[0] = bad[0] + (v - v);
        zc[0] += v == 0.0f;
    }
    float fl = INFINITY, fh = -INFINITY;
    int64_t z = 0;
    int finite = 1;
    for (int l = 0; l < LB_RANGE_LANES; l++) {
        fl = lo[l] < fl ? lo[l] : fl;
        fh = hi[l] > fh ? hi[l] : fh;
        finite &= bad[l] == 0.0f;
        z += zc[l];
    }
    if (fl == 0.0f) fl = lb_first_zero(x, n);
    if (fh == 0.0f) fh = lb_first_zero(x, n);
    lohi[0] = (double)fl;
    lohi[1] = (double)fh;
    *zeros = z;
    return finite;
}

/* Histogram counts: value v (finite, in the window) goes to bin floor(v * scale) - offset,
 * computed in float32 (exact: module docstring of lowbit.quant.observers). */
LB_API void lb_histogram_f32(const float *x, int64_t n, float scale, float offset,
                             int64_t *counts, int64_t bins) {
    for (int64_t i = 0; i < n; i++) {
        float y = floorf(x[i] * scale) - offset;
        int64_t k = (int64_t)y;
        if (k >= 0 && k < bins) counts[k]++;
    }
}

/* ---- GPTQ ---------------------------------------------------------------------------------- */

LB_API void lb_gptq_block(double *w, const double *original, double *codes, double *errors,
                          const double *scale, const double *zero, const double *ratios,
                          int64_t groups, int64_t k, int64_t n, int64_t first, int64_t last,
                          double qmin, double qmax);

/* The in-block columns of lowbit.quant.weight_rounding._gptq: for columns j in [first, last)
 * of each group, w, original, codes, errors [G][K][N] and scale, zero [G][N], ratios [G][K][K]:
 *   q = clip(rint(w[j] / s + z), qmin, qmax)        (rint: ties to even)
 *   e = original[j] - (q - z) s
 *   w[c] = w[c] + ratios[j][c] e                      for c in (j, last)
 * each an IEEE double operation in the order numpy does them. */
LB_API void lb_gptq_block(double *w, const double *original, double *codes, double *errors,
                          const double *scale, const double *zero, const double *ratios,
                          int64_t groups, int64_t k, int64_t n, int64_t first, int64_t last,
                          double qmin, double qmax) {
    for (int64_t g = 0; g < groups; g++) {
        double *wg = w + g * k * n, *cg = codes + g * k * n, *eg = errors + g * k * n;
        const double *og = original + g * k * n, *rg = ratios + g * k * k;
        const double *s = scale + g * n, *z = zero + g * n;
        for (int64_t j = first; j < last; j++) {
            double *q = cg + j * n, *e = eg + j * n;
            const double *wj = wg + j * n, *oj = og + j * n;
            for (int64_t i = 0; i < n; i++) {
                double v = wj[i] / s[i];
                v = v + z[i];
                v = rint(v);
                v = v < qmin ? qmin : v;
                v = v > qmax ? qmax : v;
                q[i] = v;
                double d = v - z[i];
                d = d * s[i];
                e[i] = oj[i] - d;
            }
            for (int64_t c = j + 1; c < last; c++) {
                const double r = rg[j * k + c];
                double *wc = wg + c * n;
                for (int64_t i = 0; i < n; i++) wc[i] = wc[i] + r * e[i];
            }
        }
    }
}

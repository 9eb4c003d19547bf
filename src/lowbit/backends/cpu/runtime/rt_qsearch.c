/* Searches of lowbit.quantize (not used by compiled models).
 *
 * Each kernel is the C form of a Python definition it equals bit for bit:
 *
 *   lb_round_exhaustive     lowbit.quant.weight_rounding._exhaustive: every floor/ceil choice
 *                           of a row of at most LB_EXHAUSTIVE_MAX weights scored by d^T H d,
 *                           summed over (k, l) row-major from 0, each term (d_k H_kl) d_l.
 *   lb_mse_search           the asymmetric search of lowbit.quant.calibration.mse: every
 *                           window (a, b) scored from per-end terms, first minimum in (a, b)
 *                           order.
 *   lb_gridsum_unpack_upper lowbit.numerics.exact_sum.GridSum.value followed by
 *                           lowbit.quant.input_moments.unpack_upper.
 *   lb_sym_gather           H[back][:, back] (divided by a count) of weight_rounding._Solver.
 *
 * Lanes are rows or elements, never partial sums of one result, so every value is computed by
 * the same IEEE operations in the same order whatever the vector width (the library is built
 * with -ffp-contract=off). No allocation: scratch lives on the stack. */
#include "rt_internal.h"

#define LB_EXHAUSTIVE_MAX 9
#define LB_EX_LANES 8
#define LB_EX_CHOICES 4 /* choices summed at once (k >= 2: a multiple of 4 or 2) */

LB_API void lb_round_exhaustive(const lb_ctx *ctx, const double *rows, const double *scale,
                                const double *zero, const double *h, int64_t nrows, int64_t k,
                                int64_t per_group, double qmin, double qmax, int64_t *codes);
LB_API int lb_mse_search(const double *below, const double *above, const double *m0,
                         const double *step, int64_t a_max, int64_t b_lo, int64_t n,
                         int64_t *best);
LB_API void lb_gridsum_unpack_upper(const lb_ctx *ctx, const int64_t *limbs, int64_t groups,
                                    int64_t k, int64_t base, double *out);
LB_API void lb_sym_gather(const lb_ctx *ctx, const double *m, int64_t groups, int64_t k,
                          const int64_t *back, double count, int divide, double *out);

/* ---- exhaustive rounding --------------------------------------------------------------------- */

typedef struct lb_exhaustive_job {
    const double *rows, *scale, *zero, *h;
    int64_t nrows, k, per_group;
    double qmin, qmax;
    int64_t *codes;
} lb_exhaustive_job;

/* Rows [task * 8, task * 8 + 8): lane i is row r0 + i (the last row again past nrows). For
 * choice c (binary, the first weight the most significant bit; 1 = the code above floor),
 * cost[c] = sum over k, l (row-major) of (d_k H_kl) d_l, d_k = (cand_k - z) s - w_k,
 * cand_k = clip(floor(w_k / s + z) + bit_k(c), qmin, qmax); the first c of least cost wins. */
static void lb_exhaustive_task(void *arg, int64_t task, int worker) {
    (void)worker;
    const lb_exhaustive_job *j = (const lb_exhaustive_job *)arg;
    const int64_t k = j->k, choices = (int64_t)1 << k;
    double cand[LB_EXHAUSTIVE_MAX][2][LB_EX_LANES], d[LB_EXHAUSTIVE_MAX][2][LB_EX_LANES];
    double terms[LB_EXHAUSTIVE_MAX * LB_EXHAUSTIVE_MAX][4][LB_EX_LANES];
    int64_t row[LB_EX_LANES];
    for (int i = 0; i < LB_EX_LANES; i++) row[i] = LB_MIN(task * LB_EX_LANES + i, j->nrows - 1);
    for (int64_t a = 0; a < k; a++) {
        for (int i = 0; i < LB_EX_LANES; i++) {
            const double w = j->rows[row[i] * k + a], s = j->scale[row[i]], z = j->zero[row[i]];
            double v = w / s;
            v = v + z;
            v = floor(v);
            for (int b = 0; b < 2; b++) {
                double c = v + (double)b;
                c = c < j->qmin ? j->qmin : c;
                c = c > j->qmax ? j->qmax : c;
                cand[a][b][i] = c;
                double e = c - z;
                e = e * s;
                d[a][b][i] = e - w;
            }
        }
    }
    for (int64_t a = 0; a < k; a++) {
        for (int64_t l = 0; l < k; l++) {
            double hal[LB_EX_LANES];
            for (int i = 0; i < LB_EX_LANES; i++)
                hal[i] = j->h[((row[i] / j->per_group) * k + a) * k + l];
            for (int ba = 0; ba < 2; ba++)
                for (int bl = 0; bl < 2; bl++)
                    for (int i = 0; i < LB_EX_LANES; i++)
                        terms[a * k + l][ba * 2 + bl][i] = (d[a][ba][i] * hal[i]) * d[l][bl][i];
        }
    }
    /* four choices at a time, their sums in registers, each over the pairs in order */
    int shift_a[LB_EXHAUSTIVE_MAX * LB_EXHAUSTIVE_MAX];
    int shift_l[LB_EXHAUSTIVE_MAX * LB_EXHAUSTIVE_MAX];
    for (int64_t t = 0; t < k * k; t++) {
        shift_a[t] = (int)(k - 1 - t / k);
        shift_l[t] = (int)(k - 1 - t % k);
    }
    double least[LB_EX_LANES];
    int64_t best[LB_EX_LANES];
    for (int i = 0; i < LB_EX_LANES; i++) {
        least[i] = INFINITY;
        best[i] = -1;
    }
    for (int64_t c0 = 0; c0 < choices; c0 += LB_EX_CHOICES) {
        double acc[LB_EX_CHOICES][LB_EX_LANES];
        for (int u = 0; u < LB_EX_CHOICES; u++)
            for (int i = 0; i < LB_EX_LANES; i++) acc[u][i] = 0.0;
        for (int64_t t = 0; t < k * k; t++) {
            const int sa = shift_a[t], sl = shift_l[t];
            for (int u = 0; u < LB_EX_CHOICES; u++) {
                const int64_t c = c0 + u;
                const double *tv = terms[t][((c >> sa) & 1) * 2 + ((c >> sl) & 1)];
                for (int i = 0; i < LB_EX_LANES; i++) acc[u][i] = acc[u][i] + tv[i];
            }
        }
        for (int u = 0; u < LB_EX_CHOICES && c0 + u < choices; u++) {
            for (int i = 0; i < LB_EX_LANES; i++) {
                const double v = acc[u][i];
                /* numpy argmin: the first least, a NaN counting as least */
                if (best[i] < 0 || v < least[i] || (v != v && least[i] == least[i])) {
                    least[i] = v;
                    best[i] = c0 + u;
                }
            }
        }
    }
    for (int i = 0; i < LB_EX_LANES; i++) {
        const int64_t r = task * LB_EX_LANES + i;
        if (r >= j->nrows) break;
        for (int64_t a = 0; a < k; a++)
            j->codes[r * k + a] = (int64_t)cand[a][(best[i] >> (k - 1 - a)) & 1][i];
    }
}

/* rows [nrows][k] (k <= LB_EXHAUSTIVE_MAX), scale and zero [nrows], h [nrows / per_group][k][k]
 * (row r uses h[r / per_group]); codes [nrows][k]. */
LB_API void lb_round_exhaustive(const lb_ctx *ctx, const double *rows, const double *scale,
                                const double *zero, const double *h, int64_t nrows, int64_t k,
                                int64_t per_group, double qmin, double qmax, int64_t *codes) {
    if (nrows <= 0 || k < 1 || k > LB_EXHAUSTIVE_MAX) return;
    lb_exhaustive_job j = {rows, scale, zero, h, nrows, k, per_group, qmin, qmax, codes};
    const int64_t tasks = (nrows + LB_EX_LANES - 1) / LB_EX_LANES;
    if (ctx != NULL && tasks > 1)
        lb_parallel_for_sized(ctx, tasks, tasks * (k * 4 + 8) << (k + 3), lb_exhaustive_task,
                              &j);
    else
        for (int64_t t = 0; t < tasks; t++) lb_exhaustive_task(&j, t, 0);
}

/* ---- MSE range search ------------------------------------------------------------------------ */

#define LB_MSE_CHUNK 256

/* Windows (a, b), a in [0, a_max], b in [b_lo, n], b > a:
 *   e = (below[a] + above[b]) + (((m0[b] - m0[a]) step[b - a]) step[b - a]) / 12
 * best = the first (a, b) of least e in (a, b) order; returns 0 (best untouched) when no
 * window has a finite e. The rounding term is >= 0 and rounding is monotonic, so no e of row
 * a is below fl(below[a] + min above[b]): rows where that is not below the least e so far
 * are skipped (they could not replace it). */
LB_API int lb_mse_search(const double *below, const double *above, const double *m0,
                         const double *step, int64_t a_max, int64_t b_lo, int64_t n,
                         int64_t *best) {
    double e[LB_MSE_CHUNK];
    double least = INFINITY, lowest = INFINITY;
    int found = 0;
    for (int64_t b = b_lo; b <= n; b++) lowest = above[b] < lowest ? above[b] : lowest;
    for (int64_t a = 0; a <= a_max; a++) {
        const double ba = below[a], ma = m0[a];
        if (!(ba + lowest < least)) continue;
        for (int64_t b0 = LB_MAX(b_lo, a + 1); b0 <= n; b0 += LB_MSE_CHUNK) {
            const int64_t len = LB_MIN(LB_MSE_CHUNK, n + 1 - b0);
            const double *ab = above + b0, *mb = m0 + b0, *sb = step + (b0 - a);
            for (int64_t i = 0; i < len; i++) {
                double t = mb[i] - ma;
                t = t * sb[i];
                t = t * sb[i];
                t = t / 12.0;
                e[i] = (ba + ab[i]) + t;
            }
            for (int64_t i = 0; i < len; i++) {
                if (e[i] < least) {
                    least = e[i];
                    best[0] = a;
                    best[1] = b0 + i;
                    found = 1;
                }
            }
        }
    }
    return found;
}

/* ---- exact sums to matrices ------------------------------------------------------------------ */

/* x 2^e as ldexp rounds it: an integer-valued x times a normal power of two is exact or
 * overflows as ldexp does (|x| >= 1), so the product replaces the call where 2^e is normal
 * (`f` = 2^e then, else 0). */
LB_INLINE double lb_scale2(double x, double f, int e) { return f != 0.0 ? x * f : ldexp(x, e); }

LB_INLINE double lb_pow2_normal(int e) { return e >= -1022 && e <= 1023 ? ldexp(1.0, e) : 0.0; }

/* GridSum.value of one element: carry limb 0 into 1 and 1 into 2 (floor division by 2^32),
 * then 0 + l0 2^base + l1 2^(base + 32) + l2 2^(base + 64), rounded after each addition
 * (f[j] = lb_pow2_normal(base + 32 j)). */
LB_INLINE double lb_gridsum_value(int64_t l0, int64_t l1, int64_t l2, int base,
                                  const double *f) {
    int64_t c = l0 >> 32;
    l0 = (int64_t)((uint64_t)l0 - ((uint64_t)c << 32));
    l1 = (int64_t)((uint64_t)l1 + (uint64_t)c);
    c = l1 >> 32;
    l1 = (int64_t)((uint64_t)l1 - ((uint64_t)c << 32));
    l2 = (int64_t)((uint64_t)l2 + (uint64_t)c);
    double t = 0.0 + lb_scale2((double)l0, f[0], base);
    t = t + lb_scale2((double)l1, f[1], base + 32);
    return t + lb_scale2((double)l2, f[2], base + 64);
}

#define LB_UNPACK_ROWS 8

typedef struct lb_unpack_job {
    const int64_t *limbs;
    int64_t groups, k, per_group, blocks;
    int base;
    double *out;
} lb_unpack_job;

/* Rows [r0, r0 + 8) of group g: element (p, q), q >= p, at p k - p (p - 1) / 2 + q - p of the
 * group's triangle, written to out[p][q] and out[q][p]. */
static void lb_unpack_task(void *arg, int64_t task, int worker) {
    (void)worker;
    const lb_unpack_job *j = (const lb_unpack_job *)arg;
    const int64_t k = j->k, g = task / j->blocks, r0 = (task % j->blocks) * LB_UNPACK_ROWS;
    const int64_t r1 = LB_MIN(k, r0 + LB_UNPACK_ROWS), stride = j->groups * j->per_group;
    const int64_t *l0 = j->limbs + g * j->per_group, *l1 = l0 + stride, *l2 = l1 + stride;
    double *out = j->out + g * k * k;
    const double f[3] = {lb_pow2_normal(j->base), lb_pow2_normal(j->base + 32),
                         lb_pow2_normal(j->base + 64)};
    for (int64_t p = r0; p < r1; p++) {
        const int64_t at = p * k - p * (p - 1) / 2 - p;
        for (int64_t q = p; q < k; q++)
            out[p * k + q] = lb_gridsum_value(l0[at + q], l1[at + q], l2[at + q], j->base, f);
    }
    for (int64_t q = r0; q < k; q++) /* the mirror, a row of 8 at a time */
        for (int64_t p = r0; p < LB_MIN(r1, q + 1); p++) out[q * k + p] = out[p * k + q];
}

/* limbs [3][groups][k (k + 1) / 2] of a GridSum whose lowest window starts at 2^base; out
 * [groups][k][k] symmetric. */
LB_API void lb_gridsum_unpack_upper(const lb_ctx *ctx, const int64_t *limbs, int64_t groups,
                                    int64_t k, int64_t base, double *out) {
    const int64_t blocks = (k + LB_UNPACK_ROWS - 1) / LB_UNPACK_ROWS;
    lb_unpack_job j = {limbs, groups, k, k * (k + 1) / 2, blocks, (int)base, out};
    const int64_t tasks = groups * blocks;
    if (ctx != NULL && tasks > 1)
        lb_parallel_for_sized(ctx, tasks, groups * k * k * 40, lb_unpack_task, &j);
    else
        for (int64_t t = 0; t < tasks; t++) lb_unpack_task(&j, t, 0);
}

typedef struct lb_gather_job {
    const double *m;
    int64_t k, rows;
    const int64_t *back;
    double count;
    int divide;
    double *out;
} lb_gather_job;

static void lb_gather_task(void *arg, int64_t task, int worker) {
    (void)worker;
    const lb_gather_job *j = (const lb_gather_job *)arg;
    const int64_t k = j->k, g = task / j->rows, i = task % j->rows;
    const int64_t *back = j->back + g * k;
    const double *src = j->m + (g * k + back[i]) * k;
    double *dst = j->out + (g * k + i) * k;
    if (j->divide)
        for (int64_t c = 0; c < k; c++) dst[c] = src[back[c]] / j->count;
    else
        for (int64_t c = 0; c < k; c++) dst[c] = src[back[c]];
}

/* out[g][i][c] = m[g][back[g][i]][back[g][c]] (divided by count when `divide`). */
LB_API void lb_sym_gather(const lb_ctx *ctx, const double *m, int64_t groups, int64_t k,
                          const int64_t *back, double count, int divide, double *out) {
    lb_gather_job j = {m, k, k, back, count, divide, out};
    const int64_t tasks = groups * k;
    if (ctx != NULL && tasks > 1)
        lb_parallel_for_sized(ctx, tasks, groups * k * k * 16, lb_gather_task, &j);
    else
        for (int64_t t = 0; t < tasks; t++) lb_gather_task(&j, t, 0);
}

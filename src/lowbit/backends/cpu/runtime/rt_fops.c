/* Float elementwise ops, reductions, Softmax, LayerNormalization and average pooling, with
 * the reference's formulas (float32 where numpy computes in float32, double where the
 * reference widens to float64). */
#include "rt_internal.h"

#define LB_FCHUNK 16384

/* ---- binary ------------------------------------------------------------------------------ */

typedef struct lb_fb_job {
    const lb_bcast *bc;
    int op;
    const float *a, *b;
    float *out;
    int64_t rows, last, per, pieces; /* a task: `per` units of (row, piece of LB_FCHUNK) */
} lb_fb_job;

static inline float lb_fb_one(int op, float x, float y) {
    switch (op) {
    case LB_FADD:
        return x + y;
    case LB_FSUB:
        return x - y;
    case LB_FMUL:
        return x * y;
    case LB_FDIV:
        return x / y;
    case LB_FMAX:
        return (x != x || y != y) ? x + y : (x > y ? x : y);
    case LB_FMIN:
        return (x != x || y != y) ? x + y : (x < y ? x : y);
    default:
        return powf(x, y);
    }
}

static void lb_fbinary_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_fb_job *j = (const lb_fb_job *)arg;
    const lb_bcast *bc = j->bc;
    int nd = bc->nd;
    int64_t u1 = LB_MIN(j->rows * j->pieces, (t + 1) * j->per);
    for (int64_t u = t * j->per; u < u1; u++) {
        int64_t r = u / j->pieces, i0 = (u % j->pieces) * LB_FCHUNK;
        int64_t rest = r, oa = 0, ob = 0;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t i = rest % bc->shape[d];
            rest /= bc->shape[d];
            oa += i * bc->sa[d];
            ob += i * bc->sb[d];
        }
        int64_t sa = bc->sa[nd - 1], sb = bc->sb[nd - 1], n = LB_MIN(LB_FCHUNK, j->last - i0);
        const float *a = j->a + oa + i0 * sa, *b = j->b + ob + i0 * sb;
        float *o = j->out + r * j->last + i0;
        if (sa == 1 && sb == 1) {
            switch (j->op) { /* contiguous rows: loops the compiler vectorises */
            case LB_FADD:
                for (int64_t i = 0; i < n; i++) o[i] = a[i] + b[i];
                continue;
            case LB_FMUL:
                for (int64_t i = 0; i < n; i++) o[i] = a[i] * b[i];
                continue;
            case LB_FSUB:
                for (int64_t i = 0; i < n; i++) o[i] = a[i] - b[i];
                continue;
            default:
                break;
            }
        } else if (sa == 1 && sb == 0 && j->op <= LB_FDIV) {
            const float y = b[0];
            for (int64_t i = 0; i < n; i++) o[i] = lb_fb_one(j->op, a[i], y);
            continue;
        }
        for (int64_t i = 0; i < n; i++) o[i] = lb_fb_one(j->op, a[i * sa], b[i * sb]);
    }
}

void lb_fbinary_run(const lb_ctx *ctx, const lb_bcast *bc, int op, const float *a,
                    const float *b, float *out) {
    int64_t rows = 1;
    for (int d = 0; d < bc->nd - 1; d++) rows *= bc->shape[d];
    int64_t last = bc->shape[bc->nd - 1];
    if (rows * last == 0) return;
    /* long rows (an image plus an image of the same shape is one row) in pieces, so that
     * every thread shares them; short rows grouped about LB_FCHUNK elements a task */
    int64_t pieces = (last + LB_FCHUNK - 1) / LB_FCHUNK;
    int64_t per = pieces > 1 ? 1 : LB_MAX(1, LB_FCHUNK / LB_MAX(1, last));
    lb_fb_job j = {bc, op, a, b, out, rows, last, per, pieces};
    lb_parallel_for(ctx, (rows * pieces + per - 1) / per, lb_fbinary_task, &j);
}

/* ---- unary ------------------------------------------------------------------------------- */

typedef struct lb_fu_job {
    int64_t n;
    int op;
    float alpha, beta;
    const float *x;
    float *out;
} lb_fu_job;

static inline float lb_clampf(float v, float lo, float hi) {
    v = v < lo ? lo : v; /* NaN stays NaN, as numpy's clip */
    return v > hi ? hi : v;
}

static inline float lb_fu_one(const lb_fu_job *j, float x) {
    switch (j->op) {
    case LB_FRELU:
        return x < 0 ? 0.0f : x; /* np.maximum(x, 0): NaN stays */
    case LB_FLEAKY:
        return x >= 0 ? x : x * j->alpha;
    case LB_FSIGMOID: {
        float e = expf(-fabsf(x));
        return x >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
    }
    case LB_FHARDSIGMOID:
        return lb_clampf(x * j->alpha + j->beta, 0.0f, 1.0f);
    case LB_FHARDSWISH:
        return x * lb_clampf(x * (float)(1.0 / 6.0) + 0.5f, 0.0f, 1.0f);
    case LB_FTANH:
        return tanhf(x);
    case LB_FEXP:
        return expf(x);
    case LB_FLOG:
        return logf(x);
    case LB_FSQRT:
        return sqrtf(x);
    case LB_FABS:
        return fabsf(x);
    case LB_FNEG:
        return -x;
    case LB_FRECIP:
        return 1.0f / x;
    case LB_FCLIP:
        return lb_clampf(x, j->alpha, j->beta);
    case LB_FERF:
        return (float)erf((double)x);
    case LB_FGELU:
        return (float)(0.5 * (double)x * erfc(-(double)x / sqrt(2.0)));
    case LB_FGELU_TANH: {
        const float k = (float)0.7978845608028654;
        return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
    }
    case LB_FFLOOR:
        return floorf(x);
    case LB_FCEIL:
        return ceilf(x);
    case LB_FROUND:
        return nearbyintf(x);
    case LB_FSOFTPLUS:
        return x > 0 ? x + log1pf(expf(-x)) : log1pf(expf(x));
    case LB_FELU:
        return x >= 0 ? x : j->alpha * expm1f(x);
    default:
        return x;
    }
}

static void lb_funary_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_fu_job *j = (const lb_fu_job *)arg;
    int64_t i1 = LB_MIN(j->n, (t + 1) * LB_FCHUNK);
    const float *x = j->x;
    float *o = j->out;
    if (j->op == LB_FHARDSWISH) { /* the most common one, vectorised */
        for (int64_t i = t * LB_FCHUNK; i < i1; i++) {
            float s = x[i] * (float)(1.0 / 6.0) + 0.5f;
            s = s < 0.0f ? 0.0f : s;
            s = s > 1.0f ? 1.0f : s;
            o[i] = x[i] * s;
        }
        return;
    }
    if (j->op == LB_FRELU) { /* vectorised too (a detector's float head: 614400 values) */
        for (int64_t i = t * LB_FCHUNK; i < i1; i++) o[i] = x[i] < 0 ? 0.0f : x[i];
        return;
    }
    if (j->op == LB_FCLIP) { /* a fused Relu/Clip after a float product: vectorised */
        const float lo = j->alpha, hi = j->beta;
        for (int64_t i = t * LB_FCHUNK; i < i1; i++) o[i] = lb_clampf(x[i], lo, hi);
        return;
    }
    for (int64_t i = t * LB_FCHUNK; i < i1; i++) o[i] = lb_fu_one(j, x[i]);
}

void lb_funary(const lb_ctx *ctx, int64_t n, int op, float alpha, float beta, const float *x,
               float *out) {
    lb_fu_job j = {n, op, alpha, beta, x, out};
    lb_parallel_for(ctx, (n + LB_FCHUNK - 1) / LB_FCHUNK, lb_funary_task, &j);
}

/* ---- row means ------------------------------------------------------------------------- */

typedef struct lb_rows_job {
    int64_t rows, cols, per;
    const float *x;
    float *out;
} lb_rows_job;

static void lb_fmean_rows_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_rows_job *j = (const lb_rows_job *)arg;
    int64_t r1 = LB_MIN(j->rows, (t + 1) * j->per), n = j->cols;
    for (int64_t r = t * j->per; r < r1; r++) {
        const float *x = j->x + r * n;
        double s = 0;
        for (int64_t i = 0; i < n; i++) s += x[i];
        j->out[r] = (float)(s / (double)n);
    }
}

void lb_fmean_rows(const lb_ctx *ctx, int64_t rows, int64_t cols, const float *x, float *out) {
    /* about LB_FCHUNK elements a task, but at least 8 tasks when there are 8 rows */
    int64_t per = LB_MAX(1, LB_MIN(LB_FCHUNK / LB_MAX(1, cols), (rows + 7) / 8));
    lb_rows_job j = {rows, cols, per, x, out};
    lb_parallel_for(ctx, (rows + per - 1) / per, lb_fmean_rows_task, &j);
}

typedef struct lb_gm_job {
    int64_t pixels, c;
    const float *x;
    float *out;
} lb_gm_job;

static void lb_fmean_nhwc_task(void *arg, int64_t n, int worker) {
    (void)worker;
    const lb_gm_job *j = (const lb_gm_job *)arg;
    double acc[256];
    for (int64_t c0 = 0; c0 < j->c; c0 += 256) {
        int64_t cn = LB_MIN(256, j->c - c0);
        for (int64_t i = 0; i < cn; i++) acc[i] = 0;
        for (int64_t p = 0; p < j->pixels; p++) {
            const float *x = j->x + (n * j->pixels + p) * j->c + c0;
            for (int64_t i = 0; i < cn; i++) acc[i] += x[i];
        }
        for (int64_t i = 0; i < cn; i++)
            j->out[n * j->c + c0 + i] = (float)(acc[i] / (double)j->pixels);
    }
}

void lb_fmean_nhwc(const lb_ctx *ctx, int64_t n, int64_t pixels, int64_t c, const float *x,
                   float *out) {
    lb_gm_job j = {pixels, c, x, out};
    lb_parallel_for(ctx, n, lb_fmean_nhwc_task, &j);
}

/* ---- float average pooling --------------------------------------------------------------- */

typedef struct lb_fap_job {
    const lb_window *w;
    int count_pad;
    int64_t pb, pr;
    const float *in;
    float *out;
} lb_fap_job;

static void lb_favgpool_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_fap_job *j = (const lb_fap_job *)arg;
    const lb_window *w = j->w;
    int64_t n = t / w->oh, oy = t % w->oh, c = w->c;
    double acc[256];
    for (int64_t ox = 0; ox < w->ow; ox++) {
        for (int64_t c0 = 0; c0 < c; c0 += 256) {
            int64_t cn = LB_MIN(256, c - c0), count = 0;
            for (int64_t i = 0; i < cn; i++) acc[i] = 0;
            for (int64_t ky = 0; ky < w->kh; ky++) {
                int64_t iy = oy * w->sh - w->pt + ky * w->dh;
                for (int64_t kx = 0; kx < w->kw; kx++) {
                    int64_t ix = ox * w->sw - w->pl + kx * w->dw;
                    int inside = iy >= 0 && iy < w->ih && ix >= 0 && ix < w->iw;
                    if (!inside) {
                        int in_pads = iy >= -w->pt && iy < w->ih + j->pb && ix >= -w->pl &&
                                      ix < w->iw + j->pr;
                        count += j->count_pad && in_pads;
                        continue;
                    }
                    count++;
                    const float *x = j->in + ((n * w->ih + iy) * w->iw + ix) * c + c0;
                    for (int64_t i = 0; i < cn; i++) acc[i] += x[i];
                }
            }
            float *o = j->out + ((n * w->oh + oy) * w->ow + ox) * c + c0;
            for (int64_t i = 0; i < cn; i++) o[i] = (float)(acc[i] / (double)count);
        }
    }
}

void lb_favgpool(const lb_ctx *ctx, const lb_window *w, int count_pad, int64_t pb, int64_t pr,
                 const float *in, float *out) {
    lb_fap_job j = {w, count_pad, pb, pr, in, out};
    lb_parallel_for(ctx, w->n * w->oh, lb_favgpool_task, &j);
}

/* ---- Resize (nearest), BatchNormalization, ConvTranspose ---------------------------------- */

typedef struct lb_rs_job {
    int64_t ih, iw, c, oh, ow;
    const int64_t *iy, *ix;
    int esize;
    const char *in;
    char *out;
} lb_rs_job;

static void lb_resize_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_rs_job *j = (const lb_rs_job *)arg;
    int64_t n = t / j->oh, y = t % j->oh, row = j->c * j->esize;
    const char *src = j->in + (n * j->ih + j->iy[y]) * j->iw * row;
    char *dst = j->out + (n * j->oh + y) * j->ow * row;
    for (int64_t x = 0; x < j->ow; x++) memcpy(dst + x * row, src + j->ix[x] * row, (size_t)row);
}

void lb_resize_nearest(const lb_ctx *ctx, int64_t n, int64_t ih, int64_t iw, int64_t c,
                       int64_t oh, int64_t ow, const int64_t *iy, const int64_t *ix, int esize,
                       const void *in, void *out) {
    lb_rs_job j = {ih, iw, c, oh, ow, iy, ix, esize, (const char *)in, (char *)out};
    lb_parallel_for(ctx, n * oh, lb_resize_task, &j);
}

typedef struct lb_bn_job {
    int64_t rows, c, per;
    const float *x;
    const double *mean, *k, *b;
    float *out;
} lb_bn_job;

static void lb_bn_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_bn_job *j = (const lb_bn_job *)arg;
    int64_t r1 = LB_MIN(j->rows, (t + 1) * j->per);
    for (int64_t r = t * j->per; r < r1; r++) {
        const float *x = j->x + r * j->c;
        float *o = j->out + r * j->c;
        for (int64_t i = 0; i < j->c; i++)
            o[i] = (float)(((double)x[i] - j->mean[i]) * j->k[i] + j->b[i]);
    }
}

void lb_fbatchnorm(const lb_ctx *ctx, int64_t rows, int64_t c, const float *x,
                   const double *mean, const double *k, const double *b, float *out) {
    int64_t per = LB_MAX(1, LB_FCHUNK / LB_MAX(1, c));
    lb_bn_job j = {rows, c, per, x, mean, k, b, out};
    lb_parallel_for(ctx, (rows + per - 1) / per, lb_bn_task, &j);
}

typedef struct lb_ct_job {
    const lb_fconvt *p;
    const float *in;
    float *out;
    int nonoverlapping, isa; /* taps never overlap: lb_fconvt_row1_* */
} lb_ct_job;

#define LB_CT_BLOCK lb_fconvt_block_c
#define LB_CT_SUFFIX scalar
#define LB_CT_TARGET
#include "rt_convt_impl.h"
#undef LB_CT_SUFFIX
#undef LB_CT_TARGET

#if LB_HAVE_AVX2
#define LB_CT_SUFFIX avx2
#define LB_CT_TARGET LB_TARGET_AVX2
#include "rt_convt_impl.h"
#undef LB_CT_SUFFIX
#undef LB_CT_TARGET
#endif
#undef LB_CT_BLOCK

#if LB_HAVE_AVX512
void lb_fconvt_row_avx512(const lb_fconvt *p, const float *in, float *out, int64_t n,
                          int64_t y); /* rt_convt_avx512.c */
#endif

/* Task = one output row: each output gathers the input pixels whose kernel taps land on it,
 * taps in (ky, kx) order as the reference adds them, each tap's products summed over input
 * channels in order. Up to LB_CT_X neighbouring outputs with as many taps each, and up to
 * LB_CT_M output channels, go at once: with 8 or more channels the channel loop vectorises
 * (weights [taps][c][m]); with fewer, the outputs' independent sums are interleaved to hide
 * the latency of the double additions. Every (output, channel) sum still adds the same terms
 * in the same order. */
#define LB_CT_M 64
#define LB_CT_X 8
#define LB_CT_TAPS 64

/* The taps landing on output (fy, fx): input pixels and weight offsets, in (ky, kx) order. */
static int64_t lb_fconvt_taps(const lb_ct_job *j, int64_t n, int64_t fy, int64_t fx,
                              const float **xs, int64_t *ws) {
    const lb_fconvt *p = j->p;
    int64_t cnt = 0;
    if (fy < 0 || fy >= p->fh || fx < 0 || fx >= p->fw) return 0;
    for (int64_t ky = 0; ky < p->kh; ky++) {
        int64_t ry = fy - ky * p->dh;
        if (ry < 0 || ry % p->sh || ry / p->sh >= p->ih) continue;
        for (int64_t kx = 0; kx < p->kw; kx++) {
            int64_t rx = fx - kx * p->dw;
            if (rx < 0 || rx % p->sw || rx / p->sw >= p->iw) continue;
            xs[cnt] = j->in + ((n * p->ih + ry / p->sh) * p->iw + rx / p->sw) * p->c;
            ws[cnt++] = (ky * p->kw + kx) * p->c * p->m;
        }
    }
    return cnt;
}

/* The sums of tap q for fewer than 8 output channels: the block's inputs and weights are
 * copied in [channel][output] order (missing outputs zero) so that one vector holds the 8
 * outputs' sums of one channel, each summed over the input channels in order. */
static void lb_fconvt_few(const lb_fconvt *p, const float *const *xs, const int64_t *ws, int64_t q,
                           int64_t nx, int64_t m0, int64_t mn, double *s) {
    float xt[LB_CT_M][LB_CT_X], wt[LB_CT_M][LB_CT_X];
    double sv[8][LB_CT_X];
    memset(sv, 0, sizeof(sv));
    for (int64_t c0 = 0; c0 < p->c; c0 += LB_CT_M) {
        int64_t cn = LB_MIN(LB_CT_M, p->c - c0);
        for (int64_t ci = 0; ci < cn; ci++)
            for (int64_t k = 0; k < LB_CT_X; k++)
                xt[ci][k] = k < nx ? xs[k * LB_CT_TAPS + q][c0 + ci] : 0.0f;
        for (int64_t mi = 0; mi < mn; mi++) {
            for (int64_t ci = 0; ci < cn; ci++)
                for (int64_t k = 0; k < LB_CT_X; k++)
                    wt[ci][k] = k < nx ? p->w[ws[k * LB_CT_TAPS + q] + (c0 + ci) * p->m + m0 + mi]
                                     : 0.0f;
            double *v = sv[mi];
            for (int64_t ci = 0; ci < cn; ci++)
                for (int64_t k = 0; k < LB_CT_X; k++) v[k] += (double)xt[ci][k] * (double)wt[ci][k];
        }
    }
    for (int64_t k = 0; k < nx; k++)
        for (int64_t mi = 0; mi < mn; mi++) s[k * mn + mi] = sv[mi][k];
}

static void lb_fconvt_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_ct_job *j = (const lb_ct_job *)arg;
    const lb_fconvt *p = j->p;
    int64_t n = t / p->oh, y = t % p->oh, fy = y + p->by, M = p->m, C = p->c;
    if (j->nonoverlapping) {
#if LB_HAVE_AVX512
        if (j->isa == LB_ISA_AVX512VNNI) {
            lb_fconvt_row_avx512(p, j->in, j->out, n, y);
            return;
        }
#endif
#if LB_HAVE_AVX2
        if (j->isa == LB_ISA_AVX2 || j->isa == LB_ISA_AVX512VNNI) {
            lb_fconvt_row1_avx2(p, j->in, j->out, n, y);
            return;
        }
#endif
        lb_fconvt_row1_scalar(p, j->in, j->out, n, y);
        return;
    }
    int64_t mc = LB_MIN(M, LB_CT_M);
    double s[LB_CT_X * LB_CT_M], acc[LB_CT_X * LB_CT_M];
    const float *xs[LB_CT_X][LB_CT_TAPS];
    int64_t ws[LB_CT_X][LB_CT_TAPS];
    for (int64_t x0 = 0; x0 < p->ow;) {
        /* a block of outputs with the same number of taps */
        int64_t taps = lb_fconvt_taps(j, n, fy, x0 + p->bx, xs[0], ws[0]), nx = 1;
        while (nx < LB_CT_X && x0 + nx < p->ow &&
               lb_fconvt_taps(j, n, fy, x0 + nx + p->bx, xs[nx], ws[nx]) == taps)
            nx++;
        for (int64_t m0 = 0; m0 < M; m0 += mc) {
            int64_t mn = LB_MIN(mc, M - m0);
            for (int64_t i = 0; i < nx * mn; i++) acc[i] = 0;
            for (int64_t q = 0; q < taps; q++) {
                for (int64_t i = 0; i < nx * mn; i++) s[i] = 0;
                if (mn >= 8) {
                    for (int64_t ci = 0; ci < C; ci++)
                        for (int64_t k = 0; k < nx; k++) {
                            double xv = (double)xs[k][q][ci];
                            const float *w = p->w + ws[k][q] + ci * M + m0;
                            double *sk = s + k * mn;
                            for (int64_t mi = 0; mi < mn; mi++) sk[mi] += xv * (double)w[mi];
                        }
                } else {
                    lb_fconvt_few(p, &xs[0][0], &ws[0][0], q, nx, m0, mn, s);
                }
                for (int64_t i = 0; i < nx * mn; i++) acc[i] += s[i];
            }
            for (int64_t k = 0; k < nx; k++) {
                float *o = j->out + ((n * p->oh + y) * p->ow + x0 + k) * M + m0;
                for (int64_t mi = 0; mi < mn; mi++) {
                    double a = acc[k * mn + mi];
                    if (p->bias) a += (double)p->bias[m0 + mi];
                    o[mi] = (float)a;
                }
            }
        }
        x0 += nx;
    }
}

void lb_fconvt_run(const lb_ctx *ctx, const lb_fconvt *p, const float *in, float *out) {
    int nonoverlapping = p->kh <= p->sh && p->kw <= p->sw && p->dh == 1 && p->dw == 1 &&
                         (p->m >= 8 || p->m * p->kw <= LB_CT_SUMS);
    lb_ct_job j = {p, in, out, nonoverlapping, ctx->isa};
    lb_parallel_for(ctx, p->n * p->oh, lb_fconvt_task, &j);
}

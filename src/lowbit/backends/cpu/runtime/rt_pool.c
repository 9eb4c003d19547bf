/* Pooling over NHWC tensors: max (codes or floats) and the quantized average. */
#include "rt_internal.h"

typedef struct lb_pool_job {
    const lb_window *w;
    int32_t type, in_type, out_type, zin, count_pad;
    const lb_requant *rq;
    const void *in;
    void *out;
} lb_pool_job;

static inline double lb_loadv(const void *p, int32_t type, int64_t i) {
    return type == LB_F32 ? (double)((const float *)p)[i] : (double)lb_load_int(p, type, i);
}

/* Task = one output row (n, oy). */
static void lb_maxpool_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_pool_job *j = (const lb_pool_job *)arg;
    const lb_window *w = j->w;
    int64_t n = t / w->oh, oy = t % w->oh, c = w->c;
    const char *img = (const char *)j->in;
    for (int64_t ox = 0; ox < w->ow; ox++) {
        int64_t o = ((n * w->oh + oy) * w->ow + ox) * c;
        if (j->type == LB_U8) {
            uint8_t *dst = (uint8_t *)j->out + o;
            int first = 1;
            for (int64_t ky = 0; ky < w->kh; ky++) {
                int64_t iy = oy * w->sh - w->pt + ky * w->dh;
                if (iy < 0 || iy >= w->ih) continue;
                for (int64_t kx = 0; kx < w->kw; kx++) {
                    int64_t ix = ox * w->sw - w->pl + kx * w->dw;
                    if (ix < 0 || ix >= w->iw) continue;
                    const uint8_t *src = (const uint8_t *)img + ((n * w->ih + iy) * w->iw + ix) * c;
                    if (first) {
                        memcpy(dst, src, (size_t)c);
                        first = 0;
                    } else {
                        for (int64_t i = 0; i < c; i++) dst[i] = src[i] > dst[i] ? src[i] : dst[i];
                    }
                }
            }
            if (first) memset(dst, 0, (size_t)c); /* the lowest stored code */
            continue;
        }
        if (j->type == LB_F32) { /* NaN wins, as numpy's max */
            float *dst = (float *)j->out + o;
            int first = 1;
            for (int64_t ky = 0; ky < w->kh; ky++) {
                int64_t iy = oy * w->sh - w->pt + ky * w->dh;
                if (iy < 0 || iy >= w->ih) continue;
                for (int64_t kx = 0; kx < w->kw; kx++) {
                    int64_t ix = ox * w->sw - w->pl + kx * w->dw;
                    if (ix < 0 || ix >= w->iw) continue;
                    const float *src = (const float *)img + ((n * w->ih + iy) * w->iw + ix) * c;
                    if (first) {
                        memcpy(dst, src, (size_t)c * sizeof(float));
                        first = 0;
                    } else {
                        for (int64_t i = 0; i < c; i++)
                            dst[i] = (src[i] > dst[i] || src[i] != src[i]) ? src[i] : dst[i];
                    }
                }
            }
            for (int64_t i = 0; first && i < c; i++) dst[i] = -INFINITY;
            continue;
        }
        for (int64_t ch = 0; ch < c; ch++) {
            double best = j->type == LB_F32 ? -INFINITY : (j->type == LB_I16 ? -32768 : 0);
            int first = 1;
            for (int64_t ky = 0; ky < w->kh; ky++) {
                int64_t iy = oy * w->sh - w->pt + ky * w->dh;
                if (iy < 0 || iy >= w->ih) continue;
                for (int64_t kx = 0; kx < w->kw; kx++) {
                    int64_t ix = ox * w->sw - w->pl + kx * w->dw;
                    if (ix < 0 || ix >= w->iw) continue;
                    double v = lb_loadv(j->in, j->type, ((n * w->ih + iy) * w->iw + ix) * c + ch);
                    if (first || v > best || v != v) best = v;
                    first = 0;
                }
            }
            if (j->type == LB_F32)
                ((float *)j->out)[o + ch] = (float)best;
            else
                lb_store(j->out, j->type, o + ch, (int32_t)best);
        }
    }
}

void lb_maxpool(const lb_ctx *ctx, const lb_window *w, int32_t type, const void *in,
                void *out) {
    lb_pool_job j = {w, type, type, type, 0, 0, NULL, in, out};
    int64_t es = type == LB_U8 ? 1 : type == LB_F32 ? 4 : 2; /* the types it takes */
    lb_parallel_for_sized(ctx, w->n * w->oh, es * w->n * w->c * (w->ih * w->iw + w->oh * w->ow),
                          lb_maxpool_task, &j);
}

/* Task = one output row (n, oy); accumulators per channel in int32 (|sum| < 2**31 for any
 * window of fewer than 32768 16-bit codes; the code generator checks). */
static void lb_avgpool_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_pool_job *j = (const lb_pool_job *)arg;
    const lb_window *w = j->w;
    int64_t n = t / w->oh, oy = t % w->oh, c = w->c;
    int32_t acc[256];
    for (int64_t ox = 0; ox < w->ow; ox++) {
        int64_t o = ((n * w->oh + oy) * w->ow + ox) * c;
        for (int64_t c0 = 0; c0 < c; c0 += 256) {
            int64_t cn = LB_MIN(256, c - c0);
            int64_t count = 0;
            for (int64_t i = 0; i < cn; i++) acc[i] = 0;
            for (int64_t ky = 0; ky < w->kh; ky++) {
                int64_t iy = oy * w->sh - w->pt + ky * w->dh;
                for (int64_t kx = 0; kx < w->kw; kx++) {
                    int64_t ix = ox * w->sw - w->pl + kx * w->dw;
                    int inside = iy >= 0 && iy < w->ih && ix >= 0 && ix < w->iw;
                    if (!inside) {
                        count += j->count_pad;
                        continue;
                    }
                    count++;
                    int64_t base = ((n * w->ih + iy) * w->iw + ix) * c + c0;
                    if (j->in_type == LB_U8) {
                        const uint8_t *src = (const uint8_t *)j->in + base;
                        for (int64_t i = 0; i < cn; i++) acc[i] += (int32_t)src[i] - j->zin;
                    } else {
                        for (int64_t i = 0; i < cn; i++)
                            acc[i] += (int32_t)lb_loadv(j->in, j->in_type, base + i) - j->zin;
                    }
                }
            }
            if (count == 0) count = 1;
            const lb_requant *rq = j->rq + (count - 1);
            for (int64_t i = 0; i < cn; i++)
                lb_store(j->out, j->out_type, o + c0 + i, lb_requant_scalar(rq, 0, acc[i]));
        }
    }
}

/* Global average (one window over the whole image): task = (n, block of 64 channels), summing
 * over pixels with the channel innermost. */
static void lb_gavg_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_pool_job *j = (const lb_pool_job *)arg;
    const lb_window *w = j->w;
    int64_t c = w->c, blocks = (c + 63) / 64;
    int64_t n = t / blocks, c0 = (t % blocks) * 64, cn = LB_MIN(64, c - c0);
    int64_t pixels = w->ih * w->iw;
    int32_t acc[64] = {0};
    for (int64_t p = 0; p < pixels; p++) {
        int64_t base = (n * pixels + p) * c + c0;
        if (j->in_type == LB_U8) {
            const uint8_t *src = (const uint8_t *)j->in + base;
            for (int64_t i = 0; i < cn; i++) acc[i] += (int32_t)src[i] - j->zin;
        } else {
            for (int64_t i = 0; i < cn; i++)
                acc[i] += (int32_t)lb_loadv(j->in, j->in_type, base + i) - j->zin;
        }
    }
    const lb_requant *rq = j->rq; /* the one element count of a global average */
    for (int64_t i = 0; i < cn; i++)
        lb_store(j->out, j->out_type, n * c + c0 + i, lb_requant_scalar(rq, 0, acc[i]));
}

void lb_qavgpool(const lb_ctx *ctx, const lb_window *w, int32_t in_type, int32_t zin,
                 int count_pad, const lb_requant *rq_for_count, int32_t out_type,
                 const void *in, void *out) {
    lb_pool_job j = {w, in_type, in_type, out_type, zin, count_pad, rq_for_count, in, out};
    int global = w->oh == 1 && w->ow == 1 && w->kh == w->ih && w->kw == w->iw && w->pt == 0 &&
                 w->pl == 0;
    if (global)
        lb_parallel_for(ctx, w->n * ((w->c + 63) / 64), lb_gavg_task, &j);
    else
        lb_parallel_for(ctx, w->n * w->oh, lb_avgpool_task, &j);
}

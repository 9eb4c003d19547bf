/* ONNX DynamicQuantizeLinear of a whole tensor on several threads (lb_dq_rows_run sends it
 * here: one row of uint8 codes, no groups, no channel divisors). The row's parameters need
 * the minimum and maximum of all values: each task finds them over its chunk (strict
 * comparisons from 0, NaN skipped, as the row kernel's loop), the chunks' results are
 * combined by the same rule (min and max do not depend on the order: the same floats, the
 * same +0.0 start), then scale and zero point follow the row kernel's formulas and each task
 * writes its chunk's codes, round(x / scale) + zero clamped to [0, qmax], NaN to the zero
 * point. So the codes and parameters are the row kernel's bits. No allocation. */
#include "rt_tf_internal.h"

#define LB_DQT_CHUNKS 64
#define LB_DQT_MIN_CHUNK 16384

static void lb_dqt_range_scalar(const float *x, int64_t n, float *lo, float *hi) {
    float l = 0.0f, h = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        if (v != v) continue;
        if (v < l) l = v;
        if (v > h) h = v;
    }
    *lo = l;
    *hi = h;
}

static void lb_dqt_codes_scalar(const float *x, int64_t n, float scale, float zero, float top,
                                uint8_t *q) {
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        float r = lb_rint_f32(v / scale);
        if (v != v) r = 0.0f;
        r = lb_clampf(r + zero, 0.0f, top);
        q[i] = (uint8_t)(int32_t)r;
    }
}

typedef struct lb_dqt_job {
    const lb_dq_rows *p;
    int isa;
    int64_t chunk, chunks;
    float scale, zero, top;
    float lo[LB_DQT_CHUNKS], hi[LB_DQT_CHUNKS];
} lb_dqt_job;

static void lb_dqt_range_task(void *arg, int64_t t, int worker) {
    (void)worker;
    lb_dqt_job *j = (lb_dqt_job *)arg;
    const int64_t i0 = t * j->chunk, n = LB_MIN(j->p->k, i0 + j->chunk) - i0;
#if LB_HAVE_AVX512
    if (j->isa == LB_ISA_AVX512VNNI) {
        lb_dqt_range_avx512(j->p->x + i0, n, &j->lo[t], &j->hi[t]);
        return;
    }
#endif
    lb_dqt_range_scalar(j->p->x + i0, n, &j->lo[t], &j->hi[t]);
}

static void lb_dqt_codes_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_dqt_job *j = (const lb_dqt_job *)arg;
    const int64_t i0 = t * j->chunk, n = LB_MIN(j->p->k, i0 + j->chunk) - i0;
    uint8_t *q = (uint8_t *)j->p->q + i0;
#if LB_HAVE_AVX512
    if (j->isa == LB_ISA_AVX512VNNI) {
        lb_dqt_codes_avx512(j->p->x + i0, n, j->scale, j->zero, j->top, q);
        return;
    }
#endif
    lb_dqt_codes_scalar(j->p->x + i0, n, j->scale, j->zero, j->top, q);
}

int lb_dq_tensor_fits(const lb_ctx *ctx, const lb_dq_rows *p) {
    return ctx->threads > 1 && p->rows == 1 && p->group >= p->k && !p->channel_scale &&
           !p->symmetric && p->k >= 2 * LB_DQT_MIN_CHUNK;
}

void lb_dq_tensor_run(const lb_ctx *ctx, const lb_dq_rows *p) {
    lb_dqt_job j;
    const int64_t n = p->k;
    j.p = p;
    j.isa = ctx->isa;
    j.chunks = LB_MAX(1, LB_MIN(LB_DQT_CHUNKS, n / LB_DQT_MIN_CHUNK));
    j.chunk = ((n + j.chunks - 1) / j.chunks + 15) / 16 * 16;
    j.chunks = (n + j.chunk - 1) / j.chunk;
    lb_parallel_for(ctx, j.chunks, lb_dqt_range_task, &j);
    float lo = 0.0f, hi = 0.0f;
    for (int64_t t = 0; t < j.chunks; t++) {
        if (j.lo[t] < lo) lo = j.lo[t];
        if (j.hi[t] > hi) hi = j.hi[t];
    }
    /* the row kernel's parameters (asymmetric) */
    j.top = (float)p->qmax;
    j.scale = hi == lo ? 1.0f : (hi - lo) / j.top;
    j.zero = lb_rint_f32(lb_clampf(0.0f - lo / j.scale, 0.0f, j.top));
    p->scale[0] = j.scale;
    *(uint8_t *)p->zero = (uint8_t)j.zero;
    lb_parallel_for(ctx, j.chunks, lb_dqt_codes_task, &j);
}

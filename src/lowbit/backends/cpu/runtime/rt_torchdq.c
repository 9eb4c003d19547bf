/* PyTorch's dynamic activation quantization (lowbit TorchDynamicQuantize; the formula is
 * lowbit/numerics/torch_params.py): the range of the whole tensor (parallel, then combined),
 * fbgemm's scale and zero point from it (scalar, the reference's steps in the same float32 and
 * float64 operations, NaN propagating through min, max and clamp as numpy's do), then the codes
 * (parallel). No allocation: the partial ranges live in the caller's frame. */
#include "rt_tf_internal.h"

#include <math.h>

#define LB_TDQ_SUFFIX scalar
#define LB_TDQ_TARGET
#include "rt_torchdq_impl.h"
#undef LB_TDQ_SUFFIX
#undef LB_TDQ_TARGET

#if LB_HAVE_AVX2
#define LB_TDQ_SUFFIX avx2
#define LB_TDQ_TARGET LB_TARGET_AVX2
#include "rt_torchdq_impl.h"
#undef LB_TDQ_SUFFIX
#undef LB_TDQ_TARGET
#endif

#if LB_HAVE_AVX512 /* rt_torchdq_avx512.c */
int lb_tdq_range_avx512(const float *x, int64_t n, float *lo, float *hi);
void lb_tdq_codes_avx512(const float *x, int64_t n, double inv, double z, uint8_t *q);
#endif

#define LB_TDQ_TASKS 64
#define LB_TDQ_MIN_TASK 65536 /* values per task, at least (smaller: not worth a wake-up) */

typedef struct lb_tdq_job {
    const lb_torch_dq *p;
    int isa;
    int64_t per_task;
    float lo[LB_TDQ_TASKS], hi[LB_TDQ_TASKS];
    int nan[LB_TDQ_TASKS];
    double inv, z;
} lb_tdq_job;

static void lb_tdq_range_task(void *arg, int64_t t, int worker) {
    (void)worker;
    lb_tdq_job *j = (lb_tdq_job *)arg;
    int64_t i0 = t * j->per_task, n = LB_MIN(j->p->n, i0 + j->per_task) - i0;
    const float *x = j->p->x + i0;
    j->lo[t] = INFINITY;
    j->hi[t] = -INFINITY;
#if LB_HAVE_AVX512
    if (j->isa == LB_ISA_AVX512VNNI) {
        j->nan[t] = lb_tdq_range_avx512(x, n, &j->lo[t], &j->hi[t]);
        return;
    }
#endif
#if LB_HAVE_AVX2
    if (j->isa == LB_ISA_AVX2) {
        j->nan[t] = lb_tdq_range_avx2(x, n, &j->lo[t], &j->hi[t]);
        return;
    }
#endif
    j->nan[t] = lb_tdq_range_scalar(x, n, &j->lo[t], &j->hi[t]);
}

static void lb_tdq_codes_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_tdq_job *j = (const lb_tdq_job *)arg;
    int64_t i0 = t * j->per_task, n = LB_MIN(j->p->n, i0 + j->per_task) - i0;
#if LB_HAVE_AVX512
    if (j->isa == LB_ISA_AVX512VNNI) {
        lb_tdq_codes_avx512(j->p->x + i0, n, j->inv, j->z, j->p->q + i0);
        return;
    }
#endif
#if LB_HAVE_AVX2
    if (j->isa == LB_ISA_AVX2) {
        lb_tdq_codes_avx2(j->p->x + i0, n, j->inv, j->z, j->p->q + i0);
        return;
    }
#endif
    lb_tdq_codes_scalar(j->p->x + i0, n, j->inv, j->z, j->p->q + i0);
}

/* numpy's minimum / maximum / clip: NaN if an operand is NaN. */
static float lb_tdq_fmin(float a, float b) { return a != a ? a : (b != b ? b : (b < a ? b : a)); }
static float lb_tdq_fmax(float a, float b) { return a != a ? a : (b != b ? b : (b > a ? b : a)); }
static double lb_tdq_clip(double v, double lo, double hi) {
    return v != v ? v : (v < lo ? lo : (v > hi ? hi : v));
}

void lb_torch_dq_params(float lo, float hi, int32_t qmax, float *scale, double *zero) {
    const float small = 6.1e-5f;
    const double top = (double)qmax;
    float mn = lb_tdq_fmin(lo, 0.0f), mx = lb_tdq_fmax(hi, 0.0f);
    double s = ((double)mx - (double)mn) / top;
    float sf = (float)s;
    if (sf == 0.0f || isinf(1.0f / sf)) s = 0.1;
    if (s < (double)small) {
        float amp = small / (float)s, edge = small * (float)top;
        if (mn == 0.0f)
            mx = edge;
        else if (mx == 0.0f)
            mn = -edge;
        else {
            mn = mn * amp;
            mx = mx * amp;
        }
        s = (double)small;
    }
    double r_mn = (double)mn / s, r_mx = (double)mx / s;
    double z = -fabs(r_mn) < top - fabs(r_mx) ? -r_mn : top - r_mx;
    *zero = lb_tdq_clip(nearbyint(z), 0.0, top);
    *scale = (float)s;
}

void lb_torch_dq_run(const lb_ctx *ctx, const lb_torch_dq *p) {
    lb_tdq_job j;
    j.p = p;
    j.isa = ctx->isa;
    int64_t tasks = LB_MAX(1, LB_MIN(LB_TDQ_TASKS, p->n / LB_TDQ_MIN_TASK));
    j.per_task = LB_MAX(1, (p->n + tasks - 1) / tasks);
    tasks = p->n > 0 ? (p->n + j.per_task - 1) / j.per_task : 0;
    float lo = INFINITY, hi = -INFINITY;
    int nan = 0;
    if (tasks > 0) {
        lb_parallel_for(ctx, tasks, lb_tdq_range_task, &j);
        for (int64_t t = 0; t < tasks; t++) {
            lo = j.lo[t] < lo ? j.lo[t] : lo;
            hi = j.hi[t] > hi ? j.hi[t] : hi;
            nan |= j.nan[t];
        }
    }
    if (nan) lo = hi = NAN; /* numpy's min and max of a tensor holding NaN */
    float scale;
    double z;
    lb_torch_dq_params(lo, hi, p->qmax, &scale, &z);
    *p->scale = scale;
    *p->zero = z != z ? (uint8_t)0 : (uint8_t)(int32_t)z;
    j.inv = (double)(1.0f / scale);
    j.z = z;
    if (tasks > 0) lb_parallel_for(ctx, tasks, lb_tdq_codes_task, &j);
}

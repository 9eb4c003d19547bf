/* Dynamic quantization (lowbit.numerics.dynamic_params): run-time parameters per slice and
 * the codes. The portable C (rt_dq_impl.h) is compiled for the scalar and the AVX2 paths;
 * the AVX-512 path has its own kernels (rt_dq_avx512.c). */
#include "rt_tf_internal.h"

#define LB_DQ_SUFFIX scalar
#define LB_DQ_TARGET
#include "rt_dq_impl.h"
#undef LB_DQ_SUFFIX
#undef LB_DQ_TARGET

#if LB_HAVE_AVX2
#define LB_DQ_SUFFIX avx2
#define LB_DQ_TARGET LB_TARGET_AVX2
#include "rt_dq_impl.h"
#undef LB_DQ_SUFFIX
#undef LB_DQ_TARGET
#endif

/* ---- dispatch ------------------------------------------------------------------------ */

typedef struct lb_dq_job {
    const void *p;
    int isa;
    int64_t per_task, tasks_per_outer;
} lb_dq_job;

static void lb_dq_rows_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_dq_job *j = (const lb_dq_job *)arg;
    const lb_dq_rows *p = (const lb_dq_rows *)j->p;
    int64_t r0 = t * j->per_task, r1 = LB_MIN(p->rows, r0 + j->per_task);
#if LB_HAVE_AVX512
    if (j->isa == LB_ISA_AVX512VNNI) {
        lb_dq_rows_avx512(p, r0, r1);
        return;
    }
#endif
#if LB_HAVE_AVX2
    if (j->isa == LB_ISA_AVX2) {
        lb_dq_rows_avx2(p, r0, r1);
        return;
    }
#endif
    lb_dq_rows_scalar(p, r0, r1);
}

void lb_dq_rows_run(const lb_ctx *ctx, const lb_dq_rows *p) {
    if (p->rows <= 0 || p->k <= 0) return;
    if (lb_dq_tensor_fits(ctx, p)) { /* one long row (DynamicQuantizeLinear): split it */
        lb_dq_tensor_run(ctx, p);
        return;
    }
    /* about 16k values per task */
    int64_t per = LB_MAX(1, 16384 / LB_MAX(1, p->k));
    lb_dq_job j = {p, ctx->isa, per, 0};
    lb_parallel_for(ctx, (p->rows + per - 1) / per, lb_dq_rows_task, &j);
}

static void lb_dq_cols_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_dq_job *j = (const lb_dq_job *)arg;
    const lb_dq_cols *p = (const lb_dq_cols *)j->p;
    int64_t o = t / j->tasks_per_outer, c0 = (t % j->tasks_per_outer) * j->per_task;
    int64_t c1 = LB_MIN(p->c, c0 + j->per_task);
#if LB_HAVE_AVX512
    if (j->isa == LB_ISA_AVX512VNNI) {
        lb_dq_cols_avx512(p, o, c0, c1);
        return;
    }
#endif
#if LB_HAVE_AVX2
    if (j->isa == LB_ISA_AVX2) {
        lb_dq_cols_avx2(p, o, c0, c1);
        return;
    }
#endif
    lb_dq_cols_scalar(p, o, c0, c1);
}

void lb_dq_cols_run(const lb_ctx *ctx, const lb_dq_cols *p) {
    if (p->outer <= 0 || p->r <= 0 || p->c <= 0) return;
    int64_t per = LB_MAX(16, (16384 / LB_MAX(1, p->r)) / 16 * 16);
    int64_t tasks = (p->c + per - 1) / per;
    lb_dq_job j = {p, ctx->isa, per, tasks};
    lb_parallel_for(ctx, p->outer * tasks, lb_dq_cols_task, &j);
}

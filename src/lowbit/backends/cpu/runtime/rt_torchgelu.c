/* The erf form of GELU as PyTorch's exporter writes it (lowbit TorchGelu): per value,
 * d = x / divisor, e = (float)erf((double)d) (the Erf kernel's evaluation, rt_fops.c),
 * y = (x * (e + one)) * half, each step one float32 operation (-ffp-contract=off keeps them
 * apart), so the fused pass gives the bits of the five separate ops. The portable span
 * (rt_torchgelu_impl.h) is compiled for the scalar and AVX2 paths; the AVX-512 path has its
 * own (rt_torchgelu_avx512.c: one polynomial per lane); no allocation. */
#include "rt_tf_internal.h"

#include <math.h>

#define LB_TGELU_CHUNK 1024

#define LB_TGELU_SUFFIX scalar
#define LB_TGELU_TARGET
#define LB_TGELU_MAD(a, b, c) ((a) * (b) + (c))
#include "rt_torchgelu_impl.h"
#undef LB_TGELU_SUFFIX
#undef LB_TGELU_TARGET
#undef LB_TGELU_MAD

#if LB_HAVE_AVX2
#define LB_TGELU_SUFFIX avx2
#define LB_TGELU_TARGET LB_TARGET_AVX2
#define LB_TGELU_MAD(a, b, c) __builtin_fma((a), (b), (c))
#include "rt_torchgelu_impl.h"
#undef LB_TGELU_SUFFIX
#undef LB_TGELU_TARGET
#undef LB_TGELU_MAD
#endif

#if LB_HAVE_AVX512 /* rt_torchgelu_avx512.c */
void lb_tgelu_span_avx512(int64_t n, const float *x, float divisor, float one, float half,
                          float *y);
#endif

typedef struct lb_tgelu_job {
    int64_t n;
    int isa;
    const float *x;
    float *y;
    float divisor, one, half;
} lb_tgelu_job;

static void lb_tgelu_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_tgelu_job *j = (const lb_tgelu_job *)arg;
    int64_t i0 = t * LB_TGELU_CHUNK, n = LB_MIN(j->n, i0 + LB_TGELU_CHUNK) - i0;
#if LB_HAVE_AVX512
    if (j->isa == LB_ISA_AVX512VNNI) {
        lb_tgelu_span_avx512(n, j->x + i0, j->divisor, j->one, j->half, j->y + i0);
        return;
    }
#endif
#if LB_HAVE_AVX2
    if (j->isa == LB_ISA_AVX2) {
        lb_tgelu_span_avx2(n, j->x + i0, j->divisor, j->one, j->half, j->y + i0);
        return;
    }
#endif
    lb_tgelu_span_scalar(n, j->x + i0, j->divisor, j->one, j->half, j->y + i0);
}

void lb_torch_gelu(const lb_ctx *ctx, int64_t n, const float *x, float divisor, float one,
                   float half, float *y) {
    if (n <= 0) return;
    lb_tgelu_job j = {n, ctx->isa, x, y, divisor, one, half};
    lb_parallel_for(ctx, (n + LB_TGELU_CHUNK - 1) / LB_TGELU_CHUNK, lb_tgelu_task, &j);
}

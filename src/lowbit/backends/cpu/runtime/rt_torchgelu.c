/* The erf form of GELU as PyTorch's exporter writes it (lowbit TorchGelu): per value,
 * d = x / divisor, e = (float)erf((double)d) (the Erf kernel's evaluation, rt_fops.c),
 * y = (x * (e + one)) * half, each step one float32 operation (-ffp-contract=off keeps them
 * apart), so the fused pass gives the bits of the five separate ops. */
#include "rt_tf_internal.h"

#include <math.h>

#define LB_TGELU_CHUNK 4096

typedef struct lb_tgelu_job {
    int64_t n;
    const float *x;
    float *y;
    float divisor, one, half;
} lb_tgelu_job;

static void lb_tgelu_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_tgelu_job *j = (const lb_tgelu_job *)arg;
    int64_t i1 = LB_MIN(j->n, (t + 1) * LB_TGELU_CHUNK);
    for (int64_t i = t * LB_TGELU_CHUNK; i < i1; i++) {
        float x = j->x[i];
        float d = x / j->divisor;
        float e = (float)erf((double)d);
        float a = e + j->one;
        float m = x * a;
        j->y[i] = m * j->half;
    }
}

void lb_torch_gelu(const lb_ctx *ctx, int64_t n, const float *x, float divisor, float one,
                   float half, float *y) {
    if (n <= 0) return;
    lb_tgelu_job j = {n, x, y, divisor, one, half};
    lb_parallel_for(ctx, (n + LB_TGELU_CHUNK - 1) / LB_TGELU_CHUNK, lb_tgelu_task, &j);
}

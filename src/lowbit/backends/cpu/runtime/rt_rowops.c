/* Chains of operations on whole rows (lowbit_rt_tf.h, lb_rowops): the elementwise steps are
 * single IEEE operations, LayerNorm, GELU and the dynamic quantization call the per-ISA row
 * kernels, so a fused chain gives the bits of the separate ops. */

#include "rt_tf_internal.h"

static void lb_row_layernorm(int isa, int64_t rows, int64_t n, float *buf, int64_t ldb,
                             const lb_rowop *op) {
    (void)isa;
#if LB_HAVE_AVX512
    if (isa == LB_ISA_AVX512VNNI) {
        lb_layernorm_rows_avx512(0, rows, n, buf, ldb, op->a, op->b, op->eps, buf, ldb);
        return;
    }
#endif
#if LB_HAVE_AVX2
    if (isa == LB_ISA_AVX2) {
        lb_layernorm_rows_avx2(0, rows, n, buf, ldb, op->a, op->b, op->eps, buf, ldb);
        return;
    }
#endif
    lb_layernorm_rows_scalar(0, rows, n, buf, ldb, op->a, op->b, op->eps, buf, ldb);
}

static void lb_row_gelu(int isa, int64_t n, float *row, int32_t tanh_form) {
    (void)isa;
#if LB_HAVE_AVX512
    if (isa == LB_ISA_AVX512VNNI) {
        lb_gelu_span_avx512(n, row, tanh_form, row);
        return;
    }
#endif
#if LB_HAVE_AVX2
    if (isa == LB_ISA_AVX2) {
        lb_gelu_span_avx2(n, row, tanh_form, row);
        return;
    }
#endif
    lb_gelu_span_scalar(n, row, tanh_form, row);
}

static void lb_row_dq(int isa, int64_t m0, int64_t m1, int64_t n, float *buf, int64_t ldb,
                      const lb_rowop *op) {
    (void)isa;
    lb_dq_rows dq;
    dq.rows = m1 - m0;
    dq.k = n;
    dq.group = op->count > 0 ? op->count : n;
    dq.x = buf;
    dq.ldx = ldb;
    dq.channel_scale = op->b;
    dq.q = (uint8_t *)op->out + m0 * op->ld;
    dq.ldq = op->ld;
    dq.scale = op->scale + m0 * op->ldp;
    dq.zero = (uint8_t *)op->zero + m0 * op->ldp;
    dq.ldp = op->ldp;
    dq.qmax = op->qmax;
    dq.symmetric = op->flag;
#if LB_HAVE_AVX512
    if (isa == LB_ISA_AVX512VNNI) {
        lb_dq_rows_avx512(&dq, 0, dq.rows);
        return;
    }
#endif
#if LB_HAVE_AVX2
    if (isa == LB_ISA_AVX2) {
        lb_dq_rows_avx2(&dq, 0, dq.rows);
        return;
    }
#endif
    lb_dq_rows_scalar(&dq, 0, dq.rows);
}

/* v = v + a or v * a over one row (the row buffer never overlaps the operands: restrict
 * lets the compiler vectorise) */
static void lb_row_fvec(int64_t n, float *restrict v, const float *restrict a, int mul) {
    if (mul)
        for (int64_t c = 0; c < n; c++) v[c] = v[c] * a[c];
    else
        for (int64_t c = 0; c < n; c++) v[c] = v[c] + a[c];
}

void lb_rowops_apply(int isa, int64_t m0, int64_t m1, int64_t n, float *buf, int64_t ldb,
                     const lb_rowops *ops) {
    const int64_t rows = m1 - m0;
    for (int32_t i = 0; i < ops->count; i++) {
        const lb_rowop *op = &ops->op[i];
        switch (op->kind) {
        case LB_ROW_ADD_VEC:
            for (int64_t r = 0; r < rows; r++) lb_row_fvec(n, buf + r * ldb, op->a, 0);
            break;
        case LB_ROW_ADD_ROWS:
            for (int64_t r = 0; r < rows; r++)
                lb_row_fvec(n, buf + r * ldb, op->a + (m0 + r) * op->ld, 0);
            break;
        case LB_ROW_MUL_VEC:
            for (int64_t r = 0; r < rows; r++) lb_row_fvec(n, buf + r * ldb, op->a, 1);
            break;
        case LB_ROW_LAYERNORM:
            lb_row_layernorm(isa, rows, n, buf, ldb, op);
            break;
        case LB_ROW_GELU:
            for (int64_t r = 0; r < rows; r++) lb_row_gelu(isa, n, buf + r * ldb, op->flag);
            break;
        case LB_ROW_STORE:
            for (int64_t r = 0; r < rows; r++)
                memcpy((float *)op->out + (m0 + r) * op->ld, buf + r * ldb,
                       (size_t)n * sizeof(float));
            break;
        case LB_ROW_GATHER:
            /* runs of consecutive indices (the columns around a few outliers) are copies */
            for (int64_t c = 0; c < op->count;) {
                int64_t len = 1;
                while (c + len < op->count && op->idx[c + len] == op->idx[c] + len) len++;
                for (int64_t r = 0; r < rows; r++)
                    memcpy((float *)op->out + (m0 + r) * op->ld + c, buf + r * ldb + op->idx[c],
                           (size_t)len * sizeof(float));
                c += len;
            }
            break;
        case LB_ROW_DQ:
            lb_row_dq(isa, m0, m1, n, buf, ldb, op);
            break;
        default:
            break;
        }
    }
}

typedef struct lb_rowops_job {
    int isa;
    int64_t rows, n, per_task;
    const float *x;
    int64_t ldx;
    const lb_rowops *ops;
    float *scratch;
    int per_worker;
} lb_rowops_job;

static void lb_rowops_task(void *arg, int64_t t, int worker) {
    const lb_rowops_job *j = (const lb_rowops_job *)arg;
    int64_t m0 = t * j->per_task, m1 = LB_MIN(j->rows, m0 + j->per_task);
    /* the task's rows of the caller's scratch, or the worker's own part of it (which stays
     * in its cache) when the scratch holds one per worker */
    float *buf = j->scratch + (j->per_worker ? (int64_t)worker * j->per_task : m0) * j->n;
    for (int64_t r = m0; r < m1; r++)
        memcpy(buf + (r - m0) * j->n, j->x + r * j->ldx, (size_t)j->n * sizeof(float));
    lb_rowops_apply(j->isa, m0, m1, j->n, buf, j->n, j->ops);
}

void lb_rowops_run(const lb_ctx *ctx, int64_t rows, int64_t n, const float *x, int64_t ldx,
                   const lb_rowops *ops, float *scratch) {
    if (rows <= 0 || n <= 0) return;
    int64_t per = LB_MAX(1, LB_MIN(16, 8192 / n));
    int64_t want = ctx->threads > 1 ? 4 * (int64_t)ctx->threads : 1;
    while (per > 1 && (rows + per - 1) / per < want) per /= 2;
    lb_rowops_job j = {ctx->isa, rows, n, per, x, ldx, ops, scratch,
                       ctx->threads * per <= rows};
    lb_parallel_for(ctx, (rows + per - 1) / per, lb_rowops_task, &j);
}

/* Products of two activations (attention): batches of lb_qgemm on B packed at run time, or
 * int64 sums for wide operands; the float version on lb_fgemm. */
#include "rt_internal.h"

static int64_t lb_esize(int32_t type) {
    switch (type) {
    case LB_U8:
    case LB_I8:
        return 1;
    case LB_I16:
    case LB_U16:
        return 2;
    default:
        return 4;
    }
}

typedef struct lb_qmw_job {
    const lb_qmatmul *p;
    const void *A, *B;
    void *C;
} lb_qmw_job;

/* Wide path, task = one row of one batch matrix. */
static void lb_qmatmul_wide_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_qmw_job *j = (const lb_qmw_job *)arg;
    const lb_qmatmul *p = j->p;
    int64_t b = t / p->M, m = t % p->M;
    const lb_requant *rq = &p->ep.rq;
    for (int64_t n = 0; n < p->N; n++) {
        int64_t acc = 0;
        for (int64_t k = 0; k < p->K; k++)
            acc += (lb_load_int(j->A, p->a_type, b * p->a_bstride + m * p->K + k) - p->za) *
                   (lb_load_int(j->B, p->b_type, b * p->b_bstride + k * p->N + n) - p->zb_raw);
        int64_t at = b * p->c_bstride + m * p->N + n;
        if (rq->method == LB_RQ_DEQUANT) {
            float v = (float)((double)acc * rq->dscale[0]);
            if (v < rq->fmin) v = rq->fmin;
            if (v > rq->fmax) v = rq->fmax;
            ((float *)j->C)[at] = v;
            continue;
        }
        if (p->narrow_shift > 0)
            acc = (acc + ((int64_t)1 << (p->narrow_shift - 1))) >> p->narrow_shift;
        int32_t x = lb_clamp32(acc, INT32_MIN, INT32_MAX);
        lb_store(j->C, p->ep.out_type, at, lb_requant_scalar(rq, 0, x));
    }
}

void lb_qmatmul_run(const lb_ctx *ctx, const lb_qmatmul *p, const void *A, const void *B,
                    void *C, int8_t *packed, int32_t *offsets, int32_t *row_sums) {
    if (p->wide) {
        lb_qmw_job j = {p, A, B, C};
        lb_parallel_for(ctx, p->batch * p->M, lb_qmatmul_wide_task, &j);
        return;
    }
    int64_t k4 = (p->K + 3) / 4, nb = (p->N + 15) / 16, osize = lb_esize(p->ep.out_type);
    lb_packed_b pb = {packed, p->N, p->K, k4};
    lb_epilogue ep = p->ep;
    ep.col_offset = offsets;
    ep.bounded = NULL; /* derived from the constant offsets only */
    for (int64_t b = 0; b < p->batch; b++) {
        const uint8_t *Bb = (const uint8_t *)B + b * p->b_bstride;
        if (b == 0 || p->b_bstride) {
            lb_pack_b(p->N, p->K, Bb, 1, p->N, p->flip, packed);
            /* offset[n] = -za * sum_k w[k, n] + K * za * zb */
            for (int64_t n = 0; n < nb * 16; n++) offsets[n] = 0;
            for (int64_t blk = 0; blk < nb; blk++)
                for (int64_t g = 0; g < k4; g++) {
                    const int8_t *src = packed + (blk * k4 + g) * 64;
                    for (int jn = 0; jn < 16; jn++)
                        offsets[blk * 16 + jn] += src[jn * 4] + src[jn * 4 + 1] + src[jn * 4 + 2] +
                                                  src[jn * 4 + 3];
                }
            for (int64_t n = 0; n < p->N; n++)
                offsets[n] = lb_wrap_add(lb_wrap_mul(-p->za, offsets[n]),
                                         lb_wrap_mul((int32_t)p->K, lb_wrap_mul(p->za, p->zb)));
        }
        lb_qgemm(ctx, p->M, p->N, p->K, (const uint8_t *)A + b * p->a_bstride, p->K, &pb, &ep,
                 (char *)C + b * p->c_bstride * osize, p->N, row_sums);
    }
}

#if LB_HAVE_AVX512
void lb_fmatmul_rows_avx512(const float *A, const float *B, float *C, int64_t m0, int64_t m1,
                            int64_t N, int64_t K); /* rt_fmatmul_avx512.c */

typedef struct lb_fmm_job {
    int64_t M, N, K, rows, mtasks;
    const float *A, *B;
    float *C;
    int64_t a_bstride, b_bstride, c_bstride;
} lb_fmm_job;

static void lb_fmm_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_fmm_job *j = (const lb_fmm_job *)arg;
    const int64_t b = t / j->mtasks, m0 = (t % j->mtasks) * j->rows;
    lb_fmatmul_rows_avx512(j->A + b * j->a_bstride, j->B + b * j->b_bstride,
                           j->C + b * j->c_bstride, m0, LB_MIN(j->M, m0 + j->rows), j->N, j->K);
}
#endif

void lb_fmatmul_run(const lb_ctx *ctx, int64_t batch, int64_t M, int64_t N, int64_t K,
                    const float *A, int64_t a_bstride, const float *B, int64_t b_bstride,
                    float *C, int64_t c_bstride, float *scratch) {
#if LB_HAVE_AVX512
    if (ctx->isa == LB_ISA_AVX512VNNI && batch > 0 && M > 0 && N > 0) {
        /* B as it lies, every matrix of the batch in one parallel loop of row blocks */
        lb_fmm_job j = {M, N, K, LB_MIN(M, 48), 0, A, B, C, a_bstride, b_bstride, c_bstride};
        const int64_t want = ctx->threads > 1 ? 4 * (int64_t)ctx->threads : 1;
        while (j.rows > 6 && batch * ((M + j.rows - 1) / j.rows) < want)
            j.rows = (j.rows / 2 + 5) / 6 * 6;
        j.mtasks = (M + j.rows - 1) / j.rows;
        lb_parallel_for(ctx, batch * j.mtasks, lb_fmm_task, &j);
        return;
    }
#endif
    int64_t shape[2] = {N, K}, strides[2] = {1, N};
    for (int64_t b = 0; b < batch; b++) {
        if (b == 0 || b_bstride) lb_permute(ctx, 2, shape, strides, 4, B + b * b_bstride, scratch);
        lb_fgemm(ctx, M, N, K, A + b * a_bstride, K, scratch, K, NULL, -INFINITY, INFINITY,
                 C + b * c_bstride, N);
    }
}

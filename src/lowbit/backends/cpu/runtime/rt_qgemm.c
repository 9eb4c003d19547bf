/* The int8 product driver: tiling, threads, ISA dispatch, the portable micro-kernel and the
 * shared epilogue; plus the wide (int64) product and packing at run time.
 *
 * The accumulator of output (m, n) is
 *     acc = sum_k A[m, k] * B[k, n] + col_offset[n] - zb[n] * row_sum[m]
 * in wrapping int32 arithmetic. The code generator folds the bias and the zero points into
 * col_offset (bias - za * colsum(B) + K * za * zb) and proves |acc| < 2**31, so the wrapped
 * value is the exact one the reference computes. */
#include <stdatomic.h>
#include <stdlib.h>

#include "rt_internal.h"

/* ---- requantization entry points --------------------------------------------------------- */

int32_t lb_requant_one(const lb_requant *rq, int64_t c, int32_t acc) {
    return lb_requant_scalar(rq, c, acc);
}

float lb_dequant_one(const lb_requant *rq, int64_t c, int32_t acc) {
    return lb_dequant_scalar(rq, c, acc);
}

typedef struct lb_rq_job {
    int64_t n;
    const int32_t *acc;
    const lb_requant *rq;
    int32_t out_type;
    void *out;
} lb_rq_job;

#define LB_ELEMENT_CHUNK 16384

static void lb_requant_task(void *arg, int64_t task, int worker) {
    (void)worker;
    const lb_rq_job *j = (const lb_rq_job *)arg;
    int64_t i0 = task * LB_ELEMENT_CHUNK, i1 = LB_MIN(j->n, i0 + LB_ELEMENT_CHUNK);
    for (int64_t i = i0; i < i1; i++) {
        if (j->rq->method == LB_RQ_DEQUANT)
            ((float *)j->out)[i] = lb_dequant_scalar(j->rq, 0, j->acc[i]);
        else
            lb_store(j->out, j->out_type, i, lb_requant_scalar(j->rq, 0, j->acc[i]));
    }
}

void lb_requant_i32(const lb_ctx *ctx, int64_t n, const int32_t *acc, const lb_requant *rq,
                    int32_t out_type, void *out) {
    lb_rq_job j = {n, acc, rq, out_type, out};
    lb_parallel_for(ctx, (n + LB_ELEMENT_CHUNK - 1) / LB_ELEMENT_CHUNK, lb_requant_task, &j);
}

/* ---- the shared epilogue ----------------------------------------------------------------- */

void lb_epilogue_row(const lb_gemm_tile *t, int64_t m, int64_t n0, int64_t n,
                     const int32_t *acc) {
    const lb_epilogue *ep = t->ep;
    for (int64_t j = 0; j < n; j++) {
        int64_t c = n0 + j;
        int32_t x = lb_wrap_add(acc[j], ep->col_offset[c]);
        if (ep->col_zb) x = lb_wrap_add(x, -lb_wrap_mul(ep->col_zb[c], t->row_sums[m]));
        int64_t at = m * t->ldc + c;
        if (ep->out_type == LB_I32) {
            ((int32_t *)t->C)[at] = x;
        } else if (ep->rq.method == LB_RQ_DEQUANT || ep->out_type == LB_F32) {
            ((float *)t->C)[at] = lb_dequant_scalar(&ep->rq, c, x);
        } else {
            int32_t y = lb_requant_scalar(&ep->rq, c, x);
            if (ep->residual) y = lb_add_scalar(ep->add, y, ep->residual[m * ep->ld_residual + c]);
            if (ep->post) y = lb_post_scalar(ep->post, c, y);
            lb_store(t->C, ep->out_type, at, y);
        }
    }
}

/* ---- portable micro-kernel --------------------------------------------------------------- */

/* Four bytes of row `a` starting at k (zero past K: the packed weights are zero there too). */
static inline void lb_load4(const uint8_t *a, int64_t k, int64_t K, int32_t out[4]) {
    for (int t = 0; t < 4; t++) out[t] = (k + t < K) ? a[k + t] : 0;
}

void lb_gemm_block_scalar(const lb_gemm_tile *t, int64_t m0, int64_t m1, int64_t nb0,
                          int64_t nb1) {
    const lb_packed_b *B = t->B;
    int32_t acc[16];
    for (int64_t nb = nb0; nb < nb1; nb++) {
        const int8_t *panel = B->data + nb * B->k4 * 64;
        int64_t n0 = nb * 16, ncols = LB_MIN(16, t->N - n0);
        for (int64_t m = m0; m < m1; m++) {
            const uint8_t *a = t->A + m * t->lda;
            memset(acc, 0, sizeof(acc));
            for (int64_t g = 0; g < B->k4; g++) {
                int32_t a4[4];
                lb_load4(a, g * 4, t->K, a4);
                const int8_t *b = panel + g * 64;
                for (int j = 0; j < 16; j++) {
                    int32_t s = a4[0] * b[j * 4] + a4[1] * b[j * 4 + 1] + a4[2] * b[j * 4 + 2] +
                                a4[3] * b[j * 4 + 3];
                    acc[j] = lb_wrap_add(acc[j], s);
                }
            }
            lb_epilogue_row(t, m, n0, ncols, acc);
        }
    }
}

/* ---- the driver -------------------------------------------------------------------------- */

typedef struct lb_gemm_job {
    lb_gemm_tile tile;
    int isa, amx;
    uint64_t product; /* lb_amx_product_id, with amx */
    int64_t rows_per_task, blocks_per_task, mtasks, ntasks;
    atomic_int_fast64_t front, back; /* tasks handed out from each end (lb_gemm_task) */
} lb_gemm_job;

/* One task of the product. The pool's task number only counts the calls: the calling thread
 * (worker 0) takes the tasks in order from the front, the workers from the back, so that with
 * two threads each one computes about the same half of the columns (with their part of B and
 * of C in its own cache) from one call to the next. There are exactly ntasks calls, so the
 * ends meet without overlapping. */
static void lb_gemm_task(void *arg, int64_t call, int worker) {
    (void)call;
    lb_gemm_job *j = (lb_gemm_job *)arg;
    const int64_t task = worker == 0 ? atomic_fetch_add(&j->front, 1)
                                     : j->ntasks - 1 - atomic_fetch_add(&j->back, 1);
    int64_t mi = task % j->mtasks, ni = task / j->mtasks;
    int64_t m0 = mi * j->rows_per_task, m1 = LB_MIN(j->tile.M, m0 + j->rows_per_task);
    int64_t nblocks = (j->tile.N + 15) / 16;
    int64_t nb0 = ni * j->blocks_per_task, nb1 = LB_MIN(nblocks, nb0 + j->blocks_per_task);
    if (m0 >= m1 || nb0 >= nb1) return;
#if LB_HAVE_AMX
    if (j->amx && j->isa == LB_ISA_AVX512VNNI) {
        lb_gemm_block_amx(&j->tile, j->product, m0, m1, nb0, nb1);
        return;
    }
#endif
    switch (j->isa) {
#if LB_HAVE_AVX512
    case LB_ISA_AVX512VNNI:
        lb_gemm_block_avx512(&j->tile, m0, m1, nb0, nb1);
        break;
#endif
#if LB_HAVE_AVX2
    case LB_ISA_AVX2:
        lb_gemm_block_avx2(&j->tile, m0, m1, nb0, nb1);
        break;
#endif
#if LB_HAVE_NEON
    case LB_ISA_NEON:
        lb_gemm_block_neon(&j->tile, m0, m1, nb0, nb1);
        break;
#endif
#if LB_HAVE_DOTPROD
    case LB_ISA_DOTPROD:
        lb_gemm_block_dotprod(&j->tile, m0, m1, nb0, nb1);
        break;
#endif
    default:
        lb_gemm_block_scalar(&j->tile, m0, m1, nb0, nb1);
        break;
    }
}

typedef struct lb_rowsum_job {
    const uint8_t *A;
    int64_t lda, K;
    int32_t *out;
} lb_rowsum_job;

static void lb_rowsum_task(void *arg, int64_t m, int worker) {
    (void)worker;
    const lb_rowsum_job *j = (const lb_rowsum_job *)arg;
    const uint8_t *a = j->A + m * j->lda;
    int32_t s = 0;
    for (int64_t k = 0; k < j->K; k++) s += a[k];
    j->out[m] = s;
}

/* Rows per task: at most 96 (16 tiles of 6 rows), split evenly, so that one task's rows of A
 * stay in L2 while it walks its column panels; on AMX at most LB_AMX_TASK_ROWS (8 of its tiles
 * of 16: a 128-row product then reads each column panel of B once, not twice); then columns
 * (blocks of 16) and, when there are still fewer than 4 tasks per thread, rows split further,
 * halving each until the tasks would fall below about 64k multiply-adds. Tasks are claimed
 * in turn by whichever thread is free, so many equal tasks balance the threads. */
#define LB_MIN_TASK_MACS 65536
#define LB_AMX_MIN_K 64

/* v rounded up to a multiple of the kernel's rows per tile. */
static int64_t lb_round_rows(int64_t v, int64_t unit) { return (v + unit - 1) / unit * unit; }

void lb_qgemm(const lb_ctx *ctx, int64_t M, int64_t N, int64_t K, const uint8_t *A,
              int64_t lda, const lb_packed_b *B, const lb_epilogue *ep, void *C, int64_t ldc,
              int32_t *row_sums) {
    if (M <= 0 || N <= 0) return;
    if (ep->col_zb) {
        lb_rowsum_job rj = {A, lda, K, row_sums};
        lb_parallel_for(ctx, M, lb_rowsum_task, &rj);
    }
    lb_gemm_job j;
    j.tile.M = M;
    j.tile.N = N;
    j.tile.K = K;
    j.tile.A = A;
    j.tile.lda = lda;
    j.tile.B = B;
    j.tile.ep = ep;
    j.tile.C = C;
    j.tile.ldc = ldc;
    j.tile.row_sums = row_sums;
    j.isa = ctx->isa;
    /* AMX when K has at least one whole step of 64: below that the tiles' stores and the
     * epilogue from memory cost more than the products save (EfficientNet-Lite0's convs of
     * K 16-32 ran 1.2-1.5x slower on AMX, those of K 112-1152 1.3-2x faster) */
    j.amx = ctx->amx && K >= LB_AMX_MIN_K;
    j.product = 0;
#if LB_HAVE_AMX
    if (j.amx) j.product = lb_amx_product_id();
#endif
    const int64_t unit = j.amx ? 16 : 6; /* rows of the kernel's tiles */
    const int64_t maxrows = j.amx ? LB_AMX_TASK_ROWS : 96;
    int64_t nblocks = (N + 15) / 16, kk = LB_MAX(K, 1);
    int64_t mtasks = (M + maxrows - 1) / maxrows;
    int64_t rows = LB_MIN(M, lb_round_rows((M + mtasks - 1) / mtasks, unit));
    int64_t want = ctx->threads > 1 ? 4 * (int64_t)ctx->threads : 1, cs = 1;
    for (;;) {
        int64_t bpt = (nblocks + cs - 1) / cs, ctasks = (nblocks + bpt - 1) / bpt;
        if (mtasks * ctasks >= want) break;
        int64_t bpt2 = (nblocks + 2 * cs - 1) / (2 * cs);
        if (bpt2 < bpt && rows * kk * 16 * bpt2 >= LB_MIN_TASK_MACS) {
            cs *= 2;
            continue;
        }
        int64_t r2 = lb_round_rows((rows + 1) / 2, unit);
        if (r2 < rows && r2 * kk * 16 * bpt >= LB_MIN_TASK_MACS) {
            mtasks = (M + r2 - 1) / r2;
            rows = LB_MIN(M, lb_round_rows((M + mtasks - 1) / mtasks, unit));
            continue;
        }
        break;
    }
    j.rows_per_task = rows;
    j.mtasks = (M + rows - 1) / rows;
    j.blocks_per_task = (nblocks + cs - 1) / cs;
    j.ntasks = j.mtasks * ((nblocks + j.blocks_per_task - 1) / j.blocks_per_task);
    atomic_init(&j.front, 0);
    atomic_init(&j.back, 0);
    lb_parallel_for(ctx, j.ntasks, lb_gemm_task, &j);
}

/* ---- packing at run time ----------------------------------------------------------------- */

void lb_pack_b(int64_t n, int64_t k, const uint8_t *W, int64_t ldw, int64_t ldk, int flip,
               int8_t *out) {
    int64_t k4 = (k + 3) / 4, nblocks = (n + 15) / 16;
    for (int64_t nb = 0; nb < nblocks; nb++)
        for (int64_t g = 0; g < k4; g++) {
            int8_t *dst = out + (nb * k4 + g) * 64;
            for (int j = 0; j < 16; j++)
                for (int t = 0; t < 4; t++) {
                    int64_t row = nb * 16 + j, col = g * 4 + t;
                    int8_t v = 0;
                    if (row < n && col < k) {
                        uint8_t raw = W[row * ldw + col * ldk];
                        v = flip ? (int8_t)(raw ^ 0x80) : (int8_t)raw;
                    }
                    dst[j * 4 + t] = v;
                }
        }
}

/* ---- the wide product -------------------------------------------------------------------- */

typedef struct lb_wide_job {
    int64_t M, N, K;
    const void *A;
    int64_t lda;
    const lb_wide_params *p;
    void *C;
    int64_t ldc;
} lb_wide_job;

static void lb_wide_task(void *arg, int64_t m, int worker) {
    (void)worker;
    const lb_wide_job *j = (const lb_wide_job *)arg;
    const lb_wide_params *p = j->p;
    for (int64_t c = 0; c < j->N; c++) {
        const int32_t *w = p->w + c * j->K;
        int64_t acc = p->bias ? p->bias[c] : 0;
        for (int64_t k = 0; k < j->K; k++)
            acc += (lb_load_int(j->A, p->a_type, m * j->lda + k) - p->za) * (int64_t)w[k];
        int64_t at = m * j->ldc + c;
        if (p->rq.method == LB_RQ_DEQUANT) {
            float v = (float)((double)acc * p->rq.dscale[c]);
            if (v < p->rq.fmin) v = p->rq.fmin;
            if (v > p->rq.fmax) v = p->rq.fmax;
            ((float *)j->C)[at] = v;
            continue;
        }
        if (p->narrow_shift > 0)
            acc = (acc + ((int64_t)1 << (p->narrow_shift - 1))) >> p->narrow_shift;
        int32_t x = lb_clamp32(acc, INT32_MIN, INT32_MAX);
        if (p->out_type == LB_I32)
            ((int32_t *)j->C)[at] = x;
        else
            lb_store(j->C, p->out_type, at, lb_requant_scalar(&p->rq, c, x));
    }
}

void lb_qgemm_wide(const lb_ctx *ctx, int64_t M, int64_t N, int64_t K, const void *A,
                   int64_t lda, const lb_wide_params *p, void *C, int64_t ldc) {
    lb_wide_job j = {M, N, K, A, lda, p, C, ldc};
    lb_parallel_for(ctx, M, lb_wide_task, &j);
}

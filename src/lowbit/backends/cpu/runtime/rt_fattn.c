/* Fused float attention (lowbit_rt_tf.h, lb_fattn): the float32 scores, scale, mask, softmax
 * and P.V of one head at a time, computed where they stay in cache. Task = a scratch slot,
 * which takes heads (b, h) slot, slot + slots, ...: K^T and V of the head converted to float64
 * once, then per block of LB_FATTN_ROWS queries: Q rows in float64, scores by the per-ISA
 * product (float64 sums over D in order, rounded once to float32: the MatMul reference's
 * value), scores * scale or / scale, + mask, softmax (the Softmax kernel's rows), P in float64,
 * P.V by the same product into the output rows (the heads' transpose back). Every step is the
 * separate op's, so results keep the reference's bits; nothing is allocated while running. */
#include "rt_tf_internal.h"

#define LB_FATTN_ROWS 32  /* queries per block */
#define LB_FATTN_SLOTS 32 /* most scratch slots (tasks) */

#define LB_FATTN_SUFFIX scalar
#define LB_FATTN_TARGET static
#include "rt_fattn_impl.h"
#undef LB_FATTN_SUFFIX
#undef LB_FATTN_TARGET

#if LB_HAVE_AVX2
#define LB_FATTN_SUFFIX avx2
#define LB_FATTN_TARGET static LB_TARGET_AVX2
#include "rt_fattn_impl.h"
#undef LB_FATTN_SUFFIX
#undef LB_FATTN_TARGET
#endif

#if LB_HAVE_AVX512 /* rt_fattn_avx512.c */
void lb_fattn_gemm_avx512(int64_t M, int64_t N, int64_t K, const double *A, int64_t lda,
                          const double *B, int64_t ldb, float *C, int64_t ldc, double *acc);
#endif

static inline int64_t lb_fattn_al64(int64_t n) { return (n + 63) / 64 * 64; }

/* One slot of the scratch: K^T [D][S] and V [S][D] in float64, a block's Q [R][D] in
 * float64, its scores [R][S] in float32 and P [R][S] in float64, the portable product's row
 * of sums (max(S, D) doubles). */
typedef struct lb_fattn_layout {
    int64_t kt, vd, qd, sc, pd, acc, slot, slots;
} lb_fattn_layout;

static lb_fattn_layout lb_fattn_sizes(const lb_fattn *p) {
    const int64_t S = p->S, D = p->D, R = LB_MIN(LB_FATTN_ROWS, p->S);
    lb_fattn_layout l;
    l.kt = lb_fattn_al64(S * D * 8);
    l.vd = lb_fattn_al64(S * D * 8);
    l.qd = lb_fattn_al64(R * D * 8);
    l.sc = lb_fattn_al64(R * S * 4);
    l.pd = lb_fattn_al64(R * S * 8);
    l.acc = lb_fattn_al64(LB_MAX(S, D) * 8);
    l.slot = l.kt + l.vd + l.qd + l.sc + l.pd + l.acc;
    l.slots = LB_MIN(p->batch * p->heads, LB_FATTN_SLOTS);
    return l;
}

int64_t lb_fattn_scratch(const lb_fattn *p) {
    if (p->batch <= 0 || p->heads <= 0 || p->S <= 0) return 64;
    lb_fattn_layout l = lb_fattn_sizes(p);
    return l.slots * l.slot + 64;
}

typedef struct lb_fattn_job {
    const lb_fattn *p;
    lb_fattn_layout l;
    uint8_t *scratch;
    int isa;
} lb_fattn_job;

static void lb_fattn_gemm(int isa, int64_t M, int64_t N, int64_t K, const double *A,
                          int64_t lda, const double *B, int64_t ldb, float *C, int64_t ldc,
                          double *acc) {
    (void)isa;
#if LB_HAVE_AVX512
    if (isa == LB_ISA_AVX512VNNI) {
        lb_fattn_gemm_avx512(M, N, K, A, lda, B, ldb, C, ldc, acc);
        return;
    }
#endif
#if LB_HAVE_AVX2
    if (isa == LB_ISA_AVX2) {
        lb_fattn_gemm_avx2(M, N, K, A, lda, B, ldb, C, ldc, acc);
        return;
    }
#endif
    lb_fattn_gemm_scalar(M, N, K, A, lda, B, ldb, C, ldc, acc);
}

static void lb_fattn_softmax(int isa, int64_t rows, int64_t n, float *x) {
    (void)isa;
#if LB_HAVE_AVX512
    if (isa == LB_ISA_AVX512VNNI) {
        lb_softmax_rows_avx512(0, rows, n, x, n, x, n);
        return;
    }
#endif
#if LB_HAVE_AVX2
    if (isa == LB_ISA_AVX2) {
        lb_softmax_rows_avx2(0, rows, n, x, n, x, n);
        return;
    }
#endif
    lb_softmax_rows_scalar(0, rows, n, x, n, x, n);
}

static void lb_fattn_head(const lb_fattn_job *j, int64_t bh, uint8_t *mine) {
    const lb_fattn *p = j->p;
    const lb_fattn_layout *l = &j->l;
    const int64_t b = bh / p->heads, h = bh % p->heads, S = p->S, D = p->D;
    double *kt = (double *)mine;
    double *vd = (double *)(mine + l->kt);
    double *qd = (double *)(mine + l->kt + l->vd);
    float *sc = (float *)(mine + l->kt + l->vd + l->qd);
    double *pd = (double *)(mine + l->kt + l->vd + l->qd + l->sc);
    double *acc = (double *)(mine + l->kt + l->vd + l->qd + l->sc + l->pd);
    const float *k = p->k + b * S * p->ldk + h * D;
    const float *v = p->v + b * S * p->ldv + h * D;
    const int64_t ldk = p->ldk, ldv = p->ldv, ldq = p->ldq;
    for (int64_t s = 0; s < S; s++) {
        const float *vs = v + s * ldv;
        double *out = vd + s * D;
        for (int64_t d = 0; d < D; d++) out[d] = (double)vs[d];
    }
    /* K^T in blocks of 8 keys: each d writes one run of 8 doubles (a cache line), where
     * the transposed store of one key at a time hit D lines S * 8 bytes apart */
    int64_t s0 = 0;
    for (; s0 + 8 <= S; s0 += 8) {
        const float *ks = k + s0 * ldk;
        for (int64_t d = 0; d < D; d++) {
            double *out = kt + d * S + s0;
            for (int64_t i = 0; i < 8; i++) out[i] = (double)ks[i * ldk + d];
        }
    }
    for (; s0 < S; s0++)
        for (int64_t d = 0; d < D; d++) kt[d * S + s0] = (double)k[s0 * ldk + d];
    for (int64_t r0 = 0; r0 < S; r0 += LB_FATTN_ROWS) {
        const int64_t R = LB_MIN(LB_FATTN_ROWS, S - r0);
        const float *q = p->q + (b * S + r0) * ldq + h * D;
        for (int64_t r = 0; r < R; r++) {
            const float *qr = q + r * ldq;
            double *out = qd + r * D;
            for (int64_t d = 0; d < D; d++) out[d] = (double)qr[d];
        }
        lb_fattn_gemm(j->isa, R, S, D, qd, D, kt, S, sc, S, acc);
        for (int64_t r = 0; r < R; r++) {
            float *row = sc + r * S;
            if (p->scale_op == 1)
                for (int64_t c = 0; c < S; c++) row[c] = row[c] * p->scale;
            else if (p->scale_op == 2)
                for (int64_t c = 0; c < S; c++) row[c] = row[c] / p->scale;
            if (p->mask) {
                const float *m = p->mask + b * p->mask_s[0] + h * p->mask_s[1] +
                                 (r0 + r) * p->mask_s[2];
                if (p->mask_s[3] == 1)
                    for (int64_t c = 0; c < S; c++) row[c] = row[c] + m[c];
                else
                    for (int64_t c = 0; c < S; c++) row[c] = row[c] + m[c * p->mask_s[3]];
            }
        }
        lb_fattn_softmax(j->isa, R, S, sc);
        for (int64_t i = 0; i < R * S; i++) pd[i] = (double)sc[i];
        lb_fattn_gemm(j->isa, R, D, S, pd, S, vd, D, p->out + (b * S + r0) * p->ldo + h * D,
                      p->ldo, acc);
    }
}

static void lb_fattn_task(void *arg, int64_t slot, int worker) {
    (void)worker;
    const lb_fattn_job *j = (const lb_fattn_job *)arg;
    uint8_t *mine = j->scratch + slot * j->l.slot;
    for (int64_t bh = slot; bh < j->p->batch * j->p->heads; bh += j->l.slots)
        lb_fattn_head(j, bh, mine);
}

void lb_fattn_run(const lb_ctx *ctx, const lb_fattn *p, uint8_t *scratch) {
    if (p->batch <= 0 || p->heads <= 0 || p->S <= 0) return;
    lb_fattn_job j;
    j.p = p;
    j.l = lb_fattn_sizes(p);
    j.scratch = (uint8_t *)(((uintptr_t)scratch + 63) / 64 * 64);
    j.isa = ctx->isa;
    lb_parallel_for(ctx, j.l.slots, lb_fattn_task, &j);
}

/* Fused attention (lowbit_rt_tf.h, lb_attn). Phase 1, one task per (batch, head): quantize
 * the head's K per token and pack it as the B of Q.K^T; quantize V per column over groups of
 * tokens and pack it as the B of P.V; quantize Q per token. Phase 2, one task per (batch,
 * block of queries), all heads in turn: scores of the block by the dynamic-product tiles,
 * scale and mask, softmax, P quantized per row and group, P.V by the tiles into the output
 * rows; then the row chain on those rows. The steps call the same per-ISA kernels as the
 * separate ops, in the same order, so results keep the reference's bits. When the batch
 * elements spread evenly over the threads, one task per batch element runs both phases
 * instead, its heads' K, V and Q in per-worker slots that stay in cache. */
#include "rt_tf_internal.h"

#define LB_ATTN_ROWS 32 /* queries per phase-2 task */

static inline int64_t lb_al64(int64_t n) { return (n + 63) / 64 * 64; }
static inline int64_t lb_ceil(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The scratch: per (b, h) the K pack, V pack, Q codes [S][D], Q scale/zero [S][Gd]
 * (per_head bytes each); then per (b, h) phase 1's temporaries (per_temp: K and V codes,
 * their scales and zero points, a copy of V's columns); then per phase-2 task (b, block of
 * LB_ATTN_ROWS queries) its temporaries (per_block: scores, P codes, scales and zero points,
 * A-side dwords, the output rows for the row chain). Nothing is allocated while running. */
typedef struct lb_attn_layout {
    int64_t gd, gv, kbytes, vbytes, qcodes, qparams, per_head;
    int64_t tparams, per_temp;
    int64_t gp, scores, pcodes, pscale, pzero, azc, per_block;
} lb_attn_layout;

static lb_attn_layout lb_attn_sizes(const lb_attn *p) {
    lb_attn_layout l;
    l.gd = lb_ceil(p->D, p->group);
    l.gv = lb_ceil(p->S, p->vgroup);
    l.kbytes = lb_dmm_pack_bytes(p->S, p->D, p->group);
    l.vbytes = lb_dmm_pack_bytes(p->D, p->S, p->vgroup);
    l.qcodes = lb_al64(p->S * p->D);
    l.qparams = lb_al64(p->S * l.gd * 4);
    l.per_head = lb_al64(l.kbytes) + lb_al64(l.vbytes) + l.qcodes + 2 * l.qparams + 2 * 64;
    l.tparams = p->S * l.gd + l.gv * p->D;
    l.per_temp = lb_al64(p->S * p->D * 2) + lb_al64(l.tparams * 4) + lb_al64(l.tparams) +
                 lb_al64(p->S * p->D * 4);
    const int64_t R = LB_ATTN_ROWS;
    l.gp = lb_ceil(p->S, p->pgroup);
    l.scores = lb_al64(R * p->S * 4);
    l.pcodes = lb_al64(R * p->S);
    l.pscale = lb_al64(R * l.gp * 4);
    l.pzero = lb_al64(R * l.gp);
    l.azc = lb_al64(R * LB_MAX(l.gp, l.gd) * 4);
    l.per_block = l.scores + l.pcodes + l.pscale + l.pzero + l.azc +
                  (p->rows ? lb_al64(R * p->heads * p->D * 4) : 0);
    return l;
}

int64_t lb_attention_scratch(const lb_attn *p) {
    lb_attn_layout l = lb_attn_sizes(p);
    return p->batch * p->heads * (l.per_head + l.per_temp) +
           p->batch * lb_ceil(p->S, LB_ATTN_ROWS) * l.per_block + 64;
}

typedef struct lb_attn_head {
    lb_dmm_b kb, vb;
    uint8_t *qcodes;
    float *qscale;
    uint8_t *qzero;
} lb_attn_head;

static lb_attn_head lb_attn_head_at(const lb_attn *p, const lb_attn_layout *l, uint8_t *scratch,
                                    int64_t bh) {
    uint8_t *base = scratch + bh * l->per_head;
    lb_attn_head h;
    memcpy(&h.kb, base, sizeof(lb_dmm_b));
    memcpy(&h.vb, base + 64, sizeof(lb_dmm_b));
    (void)p;
    uint8_t *data = base + 128;
    h.qcodes = data + lb_al64(l->kbytes) + lb_al64(l->vbytes);
    h.qscale = (float *)(h.qcodes + l->qcodes);
    h.qzero = (uint8_t *)h.qscale + l->qparams;
    return h;
}

static void lb_attn_dq_rows(int isa, const lb_dq_rows *dq) {
    (void)isa;
#if LB_HAVE_AVX512
    if (isa == LB_ISA_AVX512VNNI) {
        lb_dq_rows_avx512(dq, 0, dq->rows);
        return;
    }
#endif
#if LB_HAVE_AVX2
    if (isa == LB_ISA_AVX2) {
        lb_dq_rows_avx2(dq, 0, dq->rows);
        return;
    }
#endif
    lb_dq_rows_scalar(dq, 0, dq->rows);
}

static void lb_attn_dq_cols(int isa, const lb_dq_cols *dq) {
    (void)isa;
#if LB_HAVE_AVX512
    if (isa == LB_ISA_AVX512VNNI) {
        lb_dq_cols_avx512(dq, 0, 0, dq->c);
        return;
    }
#endif
#if LB_HAVE_AVX2
    if (isa == LB_ISA_AVX2) {
        lb_dq_cols_avx2(dq, 0, 0, dq->c);
        return;
    }
#endif
    lb_dq_cols_scalar(dq, 0, 0, dq->c);
}

/* lb_dmm_pack_run_one (matrix 0), by the AVX-512 packing where it applies */
static void lb_attn_pack(int isa, const lb_dmm_pack *pk, uint8_t *base, lb_dmm_b *d) {
    (void)isa;
#if LB_HAVE_AVX512
    if (isa == LB_ISA_AVX512VNNI && lb_attn_pack_avx512(pk, base, d)) return;
#endif
    lb_dmm_pack_run_one(pk, base, d, 0);
}

typedef struct lb_attn_job {
    const lb_attn *p;
    lb_attn_layout l;
    uint8_t *scratch;
    int isa;
    int64_t blocks;
    /* temporaries per worker rather than per task (they stay in the worker's cache), when
     * the scratch holds one set per worker */
    int temp_per_worker, block_per_worker;
    /* 1: one task per batch element (both phases), its heads' K, V and Q in the worker's
     * slots (worker * heads + h), so they stay in the worker's cache between the phases */
    int per_batch;
} lb_attn_job;

/* the scratch slot of head h of batch element b */
static inline int64_t lb_attn_slot(const lb_attn_job *j, int64_t b, int64_t h, int worker) {
    return (j->per_batch ? (int64_t)worker : b) * j->p->heads + h;
}

/* Phase 1: task = (b, h). */
static void lb_attn_prepare(void *arg, int64_t bh, int worker) {
    const lb_attn_job *j = (const lb_attn_job *)arg;
    const lb_attn *p = j->p;
    const lb_attn_layout *l = &j->l;
    const int64_t b = bh / p->heads, h = bh % p->heads, S = p->S, D = p->D;
    const int64_t slot = lb_attn_slot(j, b, h, worker);
    uint8_t *base = j->scratch + slot * l->per_head;
    uint8_t *data = base + 128;
    lb_attn_head hd = lb_attn_head_at(p, l, j->scratch, slot);
    /* temporary codes and parameters of K and V: this head's part of the scratch */
    uint8_t *codes = j->scratch + p->batch * p->heads * l->per_head +
                     (j->temp_per_worker ? (int64_t)worker : bh) * l->per_temp;
    float *scale = (float *)(codes + lb_al64(S * D * 2));
    uint8_t *zero = (uint8_t *)scale + lb_al64(l->tparams * 4);
    float *tmp = (float *)(zero + lb_al64(l->tparams));
    /* K per token over D (groups of `group`), as the graph's K^T DynamicQuantize */
    lb_dq_rows dq = {S, D, p->group, p->k + b * S * p->ldk + h * D, p->ldk, NULL, codes, D,
                     scale, zero, l->gd, p->k_qmax, 0};
    lb_attn_dq_rows(j->isa, &dq);
    lb_dmm_pack pk = {1, S, D, p->group, codes, 0, 1, D, 0, scale, zero, 0, 1, l->gd};
    lb_attn_pack(j->isa, &pk, data, &hd.kb);
    /* V per column over groups of tokens */
    uint8_t *vcodes = codes + S * D;
    float *vscale = scale + S * l->gd;
    uint8_t *vzero = zero + S * l->gd;
    const float *vsrc = p->v + b * S * p->ldv + h * D;
    if (p->ldv == D) {
        lb_dq_cols dc = {1, S, D, p->vgroup, vsrc, vcodes, vscale, vzero, p->v_qmax, 0};
        lb_attn_dq_cols(j->isa, &dc);
    } else { /* copy the head's columns out first (the kernel reads contiguous rows) */
        for (int64_t s = 0; s < S; s++) memcpy(tmp + s * D, vsrc + s * p->ldv, (size_t)D * 4);
        lb_dq_cols dc = {1, S, D, p->vgroup, tmp, vcodes, vscale, vzero, p->v_qmax, 0};
        lb_attn_dq_cols(j->isa, &dc);
    }
    lb_dmm_pack pv = {1, D, S, p->vgroup, vcodes, 0, D, 1, 0, vscale, vzero, 0, D, 1};
    lb_attn_pack(j->isa, &pv, data + lb_al64(l->kbytes), &hd.vb);
    memcpy(base, &hd.kb, sizeof(lb_dmm_b));
    memcpy(base + 64, &hd.vb, sizeof(lb_dmm_b));
    /* Q per token over D */
    lb_dq_rows dqq = {S, D, p->group, p->q + b * S * p->ldq + h * D, p->ldq, NULL, hd.qcodes,
                      D, hd.qscale, hd.qzero, l->gd, p->q_qmax, 0};
    lb_attn_dq_rows(j->isa, &dqq);
}

#if LB_HAVE_X86
/* A-side dwords of rows [0, rows) of codes (stride ld) with per (row, group) zero points
 * (on AVX-512: lb_attn_aside32_avx512 for whole groups of 32, the group sums by
 * lb_group_sums_avx512 for whole groups of 64 or 128). */
static void lb_attn_aside(int isa, int64_t rows, int64_t k, int64_t group,
                          const uint8_t *codes, int64_t ld, const uint8_t *zero, int64_t ldz,
                          int32_t *azc) {
    int64_t G = lb_ceil(k, group);
#if LB_HAVE_AVX512
    if (isa == LB_ISA_AVX512VNNI && group == 32 && k % 32 == 0) {
        lb_attn_aside32_avx512(rows, G, codes, ld, zero, ldz, azc);
        return;
    }
#endif
    const int fast = LB_HAVE_AVX512 && isa == LB_ISA_AVX512VNNI &&
                     (group == 64 || group == 128) && k % group == 0;
    (void)isa;
    for (int64_t r = 0; r < rows; r++) {
#if LB_HAVE_AVX512
        if (fast) lb_group_sums_avx512(codes + r * ld, G, group, azc + r * G);
#endif
        for (int64_t g = 0; g < G; g++) {
            int32_t ra = 0;
            if (fast)
                ra = azc[r * G + g];
            else
                for (int64_t i = g * group; i < LB_MIN(k, (g + 1) * group); i++)
                    ra += codes[r * ld + i];
            int32_t za = zero[r * ldz + g];
            azc[r * G + g] = (int32_t)((uint32_t)(uint16_t)(int16_t)(-za) |
                                       ((uint32_t)(uint16_t)(int16_t)(-ra) << 16));
        }
    }
}
#endif

/* One product of a block: A rows (codes, scale, zero per group), B packed, into y (ldy). */
static void lb_attn_product(int isa, int64_t rows, int64_t n, int64_t k, int64_t group,
                            const uint8_t *a, int64_t lda, const float *ascale,
                            const uint8_t *azero, int32_t *azc, const lb_dmm_b *B, float *y,
                            int64_t ldy) {
    (void)isa;
    int64_t G = lb_ceil(k, group);
    lb_dmm mm;
    memset(&mm, 0, sizeof(mm));
    mm.batch = 1;
    mm.M = rows;
    mm.N = n;
    mm.K = k;
    mm.group = group;
    mm.a = a;
    mm.lda = lda;
    mm.a_scale = ascale;
    mm.a_zero = azero;
    mm.p_row = G;
    mm.p_group = 1;
    mm.b = B;
    mm.y = y;
    mm.ldy = ldy;
    lb_dmm_tile t;
    memset(&t, 0, sizeof(t));
    t.p = &mm;
    t.m0 = 0;
    t.m1 = rows;
    t.nb0 = 0;
    t.nb1 = lb_ceil(n, 16);
    t.a = a;
    t.lda = lda;
    t.y = y;
    t.ldy = ldy;
    t.azc = azc;
    t.asa = ascale;
#if LB_HAVE_AVX512
    if (isa == LB_ISA_AVX512VNNI && group % 4 == 0 && group <= 128) {
        lb_attn_aside(isa, rows, k, group, a, lda, azero, G, azc);
        lb_dmm_tile_avx512(&t);
        return;
    }
#endif
#if LB_HAVE_AVX2
    if (isa == LB_ISA_AVX2 && group % 4 == 0 && group <= 128) {
        lb_attn_aside(isa, rows, k, group, a, lda, azero, G, azc);
        lb_dmm_tile_avx2(&t);
        return;
    }
#endif
    (void)azc;
    lb_dmm_tile_scalar(&t);
}

/* Phase 2: task = (b, block of queries). */
static void lb_attn_block(void *arg, int64_t task, int worker) {
    const lb_attn_job *j = (const lb_attn_job *)arg;
    const lb_attn *p = j->p;
    const lb_attn_layout *l = &j->l;
    const int64_t b = task / j->blocks, r0 = (task % j->blocks) * LB_ATTN_ROWS;
    const int64_t R = LB_MIN(LB_ATTN_ROWS, p->S - r0), S = p->S, D = p->D;
    const int64_t gp = l->gp;
    uint8_t *mine = j->scratch + p->batch * p->heads * (l->per_head + l->per_temp) +
                    (j->block_per_worker ? (int64_t)worker : task) * l->per_block;
    float *scores = (float *)mine;
    uint8_t *pcodes = mine + l->scores;
    float *pscale = (float *)(pcodes + l->pcodes);
    uint8_t *pzero = (uint8_t *)pscale + l->pscale;
    int32_t *azc = (int32_t *)(pzero + l->pzero);
    float *buf = (float *)((uint8_t *)azc + l->azc); /* the block's rows for the chain */
    for (int64_t h = 0; h < p->heads; h++) {
        lb_attn_head hd = lb_attn_head_at(p, l, j->scratch, lb_attn_slot(j, b, h, worker));
        lb_attn_product(j->isa, R, S, D, p->group, hd.qcodes + r0 * D, D,
                        hd.qscale + r0 * l->gd, hd.qzero + r0 * l->gd, azc, &hd.kb, scores, S);
        /* the parameters in locals (a float store could alias p->scale as far as the
         * compiler knows), rows restrict: the loops vectorise */
        const float sc = p->scale;
        const int scale_op = p->scale_op;
        const int64_t ms3 = p->mask_s[3];
        for (int64_t r = 0; r < R; r++) {
            float *restrict row = scores + r * S;
            if (p->mask && ms3 == 1) { /* the same two operations in one pass */
                const float *restrict m = p->mask + b * p->mask_s[0] + h * p->mask_s[1] +
                                          (r0 + r) * p->mask_s[2];
                if (scale_op == 1)
                    for (int64_t c = 0; c < S; c++) row[c] = row[c] * sc + m[c];
                else if (scale_op == 2)
                    for (int64_t c = 0; c < S; c++) row[c] = row[c] / sc + m[c];
                else
                    for (int64_t c = 0; c < S; c++) row[c] = row[c] + m[c];
                continue;
            }
            if (scale_op == 1)
                for (int64_t c = 0; c < S; c++) row[c] = row[c] * sc;
            else if (scale_op == 2)
                for (int64_t c = 0; c < S; c++) row[c] = row[c] / sc;
            if (p->mask) {
                const float *restrict m = p->mask + b * p->mask_s[0] + h * p->mask_s[1] +
                                          (r0 + r) * p->mask_s[2];
                if (ms3 == 1)
                    for (int64_t c = 0; c < S; c++) row[c] = row[c] + m[c];
                else
                    for (int64_t c = 0; c < S; c++) row[c] = row[c] + m[c * ms3];
            }
        }
#if LB_HAVE_AVX512
        if (j->isa == LB_ISA_AVX512VNNI)
            lb_softmax_rows_avx512(0, R, S, scores, S, scores, S);
        else
#endif
#if LB_HAVE_AVX2
        if (j->isa == LB_ISA_AVX2)
            lb_softmax_rows_avx2(0, R, S, scores, S, scores, S);
        else
#endif
            lb_softmax_rows_scalar(0, R, S, scores, S, scores, S);
        lb_dq_rows dq = {R, S, p->pgroup, scores, S, NULL, pcodes, S, pscale, pzero, gp,
                         p->p_qmax, 0};
        lb_attn_dq_rows(j->isa, &dq);
        /* without `out`, the rows only feed the chain: straight into its buffer */
        float *y = p->out ? p->out + (b * S + r0) * p->ldo + h * D : buf + h * D;
        lb_attn_product(j->isa, R, D, S, p->pgroup, pcodes, S, pscale, pzero, azc, &hd.vb, y,
                        p->out ? p->ldo : p->heads * D);
    }
    if (p->rows) {
        const int64_t n = p->heads * D;
        if (p->out)
            for (int64_t r = 0; r < R; r++)
                memcpy(buf + r * n, p->out + (b * S + r0 + r) * p->ldo, (size_t)n * 4);
        lb_rowops_apply(j->isa, b * S + r0, b * S + r0 + R, n, buf, n, p->rows);
    }
}

/* Both phases of batch element b on one worker. */
static void lb_attn_batch(void *arg, int64_t b, int worker) {
    const lb_attn_job *j = (const lb_attn_job *)arg;
    for (int64_t h = 0; h < j->p->heads; h++) lb_attn_prepare(arg, b * j->p->heads + h, worker);
    for (int64_t t = 0; t < j->blocks; t++) lb_attn_block(arg, b * j->blocks + t, worker);
}

void lb_attention_run(const lb_ctx *ctx, const lb_attn *p, uint8_t *scratch) {
    if (p->batch <= 0 || p->S <= 0) return;
    lb_attn_job j;
    j.p = p;
    j.l = lb_attn_sizes(p);
    j.scratch = (uint8_t *)(((uintptr_t)scratch + 63) / 64 * 64);
    j.isa = ctx->isa;
    j.blocks = lb_ceil(p->S, LB_ATTN_ROWS);
    j.temp_per_worker = ctx->threads <= p->batch * p->heads;
    j.block_per_worker = ctx->threads <= p->batch * j.blocks;
    /* batch elements spread evenly over the threads: no task needs another's phase 1 */
    j.per_batch = p->batch > 1 && ctx->threads <= p->batch &&
                  (p->batch % ctx->threads == 0 || p->batch >= 8 * (int64_t)ctx->threads);
    if (j.per_batch) {
        j.temp_per_worker = j.block_per_worker = 1;
        lb_parallel_for(ctx, p->batch, lb_attn_batch, &j);
        return;
    }
    lb_parallel_for(ctx, p->batch * p->heads, lb_attn_prepare, &j);
    lb_parallel_for(ctx, p->batch * j.blocks, lb_attn_block, &j);
}

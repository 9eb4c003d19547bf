/* The dynamic product (lowbit DynamicMatMul): driver, threads, the portable tile, and packing
 * of run-time codes. The integer part is exact (int32 group sums, see lowbit_rt_tf.h); the
 * float part is the reference's sequence of float32 (grouped) or float64 (whole K) steps. */
#include "rt_tf_internal.h"

/* ---- packed B accessors ---------------------------------------------------------------- */

static inline int32_t lb_dmm_bval(const lb_dmm_b *B, int64_t k, int64_t n) {
    return B->data[((n / 16) * B->k4 + k / 4) * 64 + (n % 16) * 4 + k % 4];
}

static inline int64_t lb_dmm_groups(int64_t k, int64_t group) {
    return group > 0 ? (k + group - 1) / group : 1;
}

static inline int64_t lb_dmm_al64(int64_t n) { return (n + 63) / 64 * 64; }

/* A's codes + 128 (signed A on the vector tiles): in the scratch, after the row buffer. */
static inline uint8_t *lb_dmm_flipped(const lb_dmm *p) {
    return p->scratch + (p->rows ? lb_dmm_al64(p->batch * p->M * p->N * 4) : 0);
}

/* ---- the portable tile: the definition, computed directly ----------------------------- */

void lb_dmm_tile_scalar(const lb_dmm_tile *t) {
    const lb_dmm *p = t->p;
    const lb_dmm_b *B = p->b + t->b * p->b_step;
    const int64_t G = lb_dmm_groups(p->K, p->group), g = p->group > 0 ? p->group : p->K;
    for (int64_t m = t->m0; m < t->m1; m++) {
        const uint8_t *a = p->a + t->b * p->a_batch + m * p->lda;
        int64_t pb = t->b * p->p_batch + m * p->p_row;
        for (int64_t n = t->nb0 * 16; n < LB_MIN(p->N, t->nb1 * 16); n++) {
            int64_t blk = (n / 16) * G * 16 + n % 16;
            float y = 0.0f;
            for (int64_t j = 0; j < G; j++) {
                int32_t za = p->a_signed ? ((const int8_t *)p->a_zero)[pb + j * p->p_group] + 128
                                         : ((const uint8_t *)p->a_zero)[pb + j * p->p_group];
                int32_t zb = p->group > 0 ? (int32_t)(int16_t)(B->corr[blk + j * 16] >> 16)
                                          : B->zero[n];
                int32_t acc = 0;
                for (int64_t k = j * g; k < LB_MIN(p->K, (j + 1) * g); k++) {
                    int32_t av = p->a_signed ? (int32_t)(a[k] ^ 0x80) : a[k];
                    acc += (av - za) * (lb_dmm_bval(B, k, n) - zb);
                }
                float sa = p->a_scale[pb + j * p->p_group], sb = B->scale[blk + j * 16];
                if (p->group > 0)
                    y = y + ((float)acc * sb) * sa;
                else
                    y = (float)((double)acc * ((double)sa * (double)sb));
            }
            for (int i = 0; i < 3; i++) {
                const lb_fadd *ad = &p->add[i];
                if (ad->v) y = y + ad->v[t->b * ad->batch + m * ad->ld + n];
            }
            t->y[(m - t->m0) * t->ldy + n] = y;
        }
    }
}

/* ---- the driver ------------------------------------------------------------------------ */

#define LB_DMM_ASIDE 4096 /* rows per task * groups */
#define LB_DMM_ROWS 48    /* rows per task */
#define LB_DMM_AMX_ROWS 8 /* fewest rows per task for the AMX tiles (1 row: 2x slower there) */

typedef struct lb_dmm_job {
    const lb_dmm *p;
    int isa, amx; /* amx: whole-K tiles' sums on AMX (rt_dmm_amx.c) */
    int64_t rows, mtasks, blocks, ntasks_n;
    int per_worker; /* row buffers per worker (rows x N floats each), not per row of Y */
} lb_dmm_job;

static void lb_dmm_task(void *arg, int64_t task, int worker) {
    const lb_dmm_job *j = (const lb_dmm_job *)arg;
    const lb_dmm *p = j->p;
    int64_t per_b = j->mtasks * j->ntasks_n;
    int64_t b = task / per_b, rest = task % per_b;
    int64_t mi = rest % j->mtasks, ni = rest / j->mtasks;
    lb_dmm_tile t;
    t.p = p;
    t.b = b;
    t.m0 = mi * j->rows;
    t.m1 = LB_MIN(p->M, t.m0 + j->rows);
    int64_t nblocks = (p->N + 15) / 16;
    t.nb0 = ni * j->blocks;
    t.nb1 = LB_MIN(nblocks, t.nb0 + j->blocks);
    if (t.m0 >= t.m1 || t.nb0 >= t.nb1) return;
    t.a = p->a + b * p->a_batch + t.m0 * p->lda;
    t.lda = p->lda;
    float *rowbuf = NULL;
    if (p->rows) { /* whole rows go through the scratch (no split over N), then the chain:
                    * each worker's own buffer, which stays in its cache, when the scratch
                    * holds one per worker */
        rowbuf = (float *)p->scratch +
                 (j->per_worker ? (int64_t)worker * j->rows : b * p->M + t.m0) * p->N;
        t.y = rowbuf;
        t.ldy = p->N;
    } else {
        t.y = p->y + b * p->y_batch + t.m0 * p->ldy;
        t.ldy = p->ldy;
    }
    if (j->isa == LB_ISA_SCALAR) {
        lb_dmm_tile_scalar(&t);
        if (rowbuf) lb_rowops_apply(j->isa, t.m0, t.m1, p->N, rowbuf, p->N, p->rows);
        return;
    }
    const int64_t G = lb_dmm_groups(p->K, p->group), g = p->group > 0 ? p->group : p->K;
    int32_t azc[LB_DMM_ASIDE], aza[LB_DMM_ROWS], ara[LB_DMM_ROWS];
    float asa[LB_DMM_ASIDE];
    if (p->a_signed) { /* the vector tiles read uint8: int8 codes + 128, flipped before */
        t.a = lb_dmm_flipped(p) + (b * p->M + t.m0) * p->K;
        t.lda = p->K;
    }
    /* sums of whole groups of 32, 64 or 128 codes by the vector kernel */
    const int fast_sums = LB_HAVE_AVX512 && j->isa == LB_ISA_AVX512VNNI &&
                          (g == 32 || g == 64 || g == 128) && p->K % g == 0;
    for (int64_t m = t.m0; m < t.m1; m++) {
        const uint8_t *a = t.a + (m - t.m0) * t.lda;
        int64_t pb = b * p->p_batch + m * p->p_row, r = m - t.m0;
        int32_t total = 0;
#if LB_HAVE_AVX512
        if (fast_sums) lb_group_sums_avx512(a, G, g, azc + r * G);
#endif
        for (int64_t jj = 0; jj < G; jj++) {
            int32_t za = p->a_signed ? ((const int8_t *)p->a_zero)[pb + jj * p->p_group] + 128
                                     : ((const uint8_t *)p->a_zero)[pb + jj * p->p_group];
            int32_t ra = 0;
            if (fast_sums)
                ra = azc[r * G + jj];
            else
                for (int64_t k = jj * g; k < LB_MIN(p->K, (jj + 1) * g); k++) ra += a[k];
            total += ra;
            azc[r * G + jj] = (int32_t)((uint32_t)(uint16_t)(int16_t)(-za) |
                                        ((uint32_t)(uint16_t)(int16_t)(-ra) << 16));
            asa[r * G + jj] = p->a_scale[pb + jj * p->p_group];
            if (jj == 0) aza[r] = za;
        }
        ara[r] = total;
    }
    t.azc = azc;
    t.asa = asa;
    t.aza = aza;
    t.ara = ara;
#if LB_HAVE_AMX
    if (j->amx && t.m1 - t.m0 >= LB_DMM_AMX_ROWS)
        lb_dmm_tile_amx(&t);
    else
#endif
#if LB_HAVE_AVX512
        if (j->isa == LB_ISA_AVX512VNNI) lb_dmm_tile_avx512(&t);
#endif
#if LB_HAVE_AVX2
    if (j->isa == LB_ISA_AVX2) lb_dmm_tile_avx2(&t);
#endif
    if (rowbuf) lb_rowops_apply(j->isa, t.m0, t.m1, p->N, rowbuf, p->N, p->rows);
}

static void lb_dmm_flip_task(void *arg, int64_t task, int worker) {
    (void)worker;
    const lb_dmm *p = (const lb_dmm *)arg;
    const int64_t b = task / p->M, m = task % p->M;
    const uint8_t *a = p->a + b * p->a_batch + m * p->lda;
    uint8_t *out = lb_dmm_flipped(p) + task * p->K;
    for (int64_t k = 0; k < p->K; k++) out[k] = a[k] ^ 0x80;
}

int64_t lb_dmm_scratch_bytes(const lb_dmm *p) {
    return (p->rows ? lb_dmm_al64(p->batch * p->M * p->N * 4) : 0) +
           (p->a_signed ? p->batch * p->M * p->K : 0);
}

void lb_dmm_run(const lb_ctx *ctx, const lb_dmm *p) {
    if (p->batch <= 0 || p->M <= 0 || p->N <= 0) return;
    const int64_t G = lb_dmm_groups(p->K, p->group);
    lb_dmm_job j;
    j.p = p;
    j.isa = ctx->isa;
    /* vector tiles exist for AVX-512 and AVX2 in builds holding them; every other ISA (64-bit
     * ARM, a bundle's portable x86-64) takes the portable tile */
    if (!((LB_HAVE_AVX512 && j.isa == LB_ISA_AVX512VNNI) || (LB_HAVE_AVX2 && j.isa == LB_ISA_AVX2)))
        j.isa = LB_ISA_SCALAR;
    /* vector tiles need whole groups of 4 steps and 16-bit corrections */
    if (p->group % 4 != 0 || p->group > 128 || p->K > 65536) j.isa = LB_ISA_SCALAR;
    int64_t rows = LB_MIN(p->M, LB_DMM_ROWS);
    const int64_t threads = ctx->threads;
    const int64_t want = threads > 1 ? 4 * threads : 1;
    if (threads > 1 && p->batch * ((p->M + rows - 1) / rows) < want) {
        /* few blocks of rows (batch 1): M cut into a multiple of `threads` blocks of equal
         * height, so that the threads get equal work (11 blocks of 12 rows left one thread
         * with 6 of them). Whole rows per task (a row chain): `want` blocks of >= 6 rows;
         * otherwise blocks of up to 48 rows, and the columns split below. */
        int64_t mt = p->rows ? LB_MAX(1, LB_MIN(want / p->batch, p->M / 6))
                             : (p->M + LB_DMM_ROWS - 1) / LB_DMM_ROWS;
        mt = (mt + threads - 1) / threads * threads;
        rows = LB_MAX(1, (p->M + mt - 1) / mt);
    }
    while (rows * G > LB_DMM_ASIDE && rows > 1) rows /= 2;
    if (rows * G > LB_DMM_ASIDE) j.isa = LB_ISA_SCALAR;
    /* AMX for whole-K products only: with groups, each group's 16 x 16 sums go through memory
     * to the float32 steps, and that measured no faster than the VNNI tiles here */
    j.amx = LB_HAVE_AMX && ctx->amx && j.isa == LB_ISA_AVX512VNNI && p->group == 0 &&
            p->K >= 64;
    j.rows = rows;
    j.mtasks = (p->M + rows - 1) / rows;
    j.per_worker = ctx->threads * rows <= p->batch * p->M;
    int64_t nblocks = (p->N + 15) / 16;
    j.blocks = nblocks;
    j.ntasks_n = 1;
    while (!p->rows && p->batch * j.mtasks * j.ntasks_n < want && j.blocks > 2) {
        j.blocks = (j.blocks + 1) / 2;
        j.ntasks_n = (nblocks + j.blocks - 1) / j.blocks;
    }
    if (p->a_signed && j.isa != LB_ISA_SCALAR)
        lb_parallel_for(ctx, p->batch * p->M, lb_dmm_flip_task, (void *)p);
    lb_parallel_for(ctx, p->batch * j.mtasks * j.ntasks_n, lb_dmm_task, &j);
}

/* ---- packing run-time codes ------------------------------------------------------------- */

static inline int64_t lb_align64(int64_t n) { return (n + 63) / 64 * 64; }

int64_t lb_dmm_pack_bytes(int64_t n, int64_t k, int64_t group) {
    int64_t nblocks = (n + 15) / 16, k4 = (k + 3) / 4, G = lb_dmm_groups(k, group);
    return lb_align64(nblocks * k4 * 64) + 2 * lb_align64(nblocks * G * 16 * 4) +
           lb_align64(nblocks * 16 * 4);
}

typedef struct lb_pack_job {
    const lb_dmm_pack *p;
    uint8_t *scratch;
    lb_dmm_b *out;
} lb_pack_job;

void lb_dmm_pack_run_one(const lb_dmm_pack *p, uint8_t *base, lb_dmm_b *d, int64_t b) {
    const int64_t n = p->n, k = p->k, nblocks = (n + 15) / 16, k4 = (k + 3) / 4;
    const int64_t G = lb_dmm_groups(k, p->group), g = p->group > 0 ? p->group : k;
    int8_t *data = (int8_t *)base;
    float *scale = (float *)(base + lb_align64(nblocks * k4 * 64));
    int32_t *corr = (int32_t *)((uint8_t *)scale + lb_align64(nblocks * G * 16 * 4));
    int32_t *zero = (int32_t *)((uint8_t *)corr + lb_align64(nblocks * G * 16 * 4));
    const uint8_t *src = (const uint8_t *)p->src + b * p->s_batch;
    const int flip = !p->signed_codes;
    const uint8_t fl = flip ? 0x80 : 0;
    memset(base, 0, (size_t)lb_dmm_pack_bytes(n, k, p->group));
    /* per block of 16 columns and group of K: the codes (one pass over the source, in K
     * order), then the group's column sums */
    for (int64_t nb = 0; nb < nblocks; nb++) {
        int8_t *blk = data + nb * k4 * 64;
        const int64_t n0 = nb * 16, nc = LB_MIN(16, n - n0);
        int32_t total[16] = {0};
        for (int64_t jj = 0; jj < G; jj++) {
            int32_t cs[16] = {0};
            const int64_t kb = jj * g, ke = LB_MIN(k, kb + g);
            int64_t kk = kb;
            if (p->s_k == 1 && kb % 4 == 0) /* 4 consecutive bytes of K at a time */
                for (; kk + 4 <= ke; kk += 4) {
                    int8_t *dst = blk + (kk / 4) * 64;
                    const uint8_t *row = src + kk + n0 * p->s_n;
                    for (int64_t i = 0; i < nc; i++) {
                        uint32_t w;
                        memcpy(&w, row + i * p->s_n, 4);
                        w ^= (uint32_t)fl * 0x01010101u;
                        memcpy(dst + i * 4, &w, 4);
                        cs[i] += (int8_t)(w & 0xFF) + (int8_t)((w >> 8) & 0xFF) +
                                 (int8_t)((w >> 16) & 0xFF) + (int8_t)(w >> 24);
                    }
                }
            if (p->s_n == 1 && kb % 4 == 0 && nc == 16) /* 4 rows of 16 contiguous codes */
                for (; kk + 4 <= ke; kk += 4) {
                    uint32_t w[16];
                    const uint8_t *r0 = src + kk * p->s_k + n0, *r1 = r0 + p->s_k,
                                  *r2 = r1 + p->s_k, *r3 = r2 + p->s_k;
                    for (int i = 0; i < 16; i++) {
                        w[i] = ((uint32_t)r0[i] | (uint32_t)r1[i] << 8 | (uint32_t)r2[i] << 16 |
                                (uint32_t)r3[i] << 24) ^ ((uint32_t)fl * 0x01010101u);
                        cs[i] += (int8_t)(r0[i] ^ fl) + (int8_t)(r1[i] ^ fl) +
                                 (int8_t)(r2[i] ^ fl) + (int8_t)(r3[i] ^ fl);
                    }
                    memcpy(blk + (kk / 4) * 64, w, 64);
                }
            for (; kk < ke; kk++) {
                int8_t *dst = blk + (kk / 4) * 64 + kk % 4;
                const uint8_t *row = src + kk * p->s_k + n0 * p->s_n;
                for (int64_t i = 0; i < nc; i++) {
                    int8_t v = (int8_t)(row[i * p->s_n] ^ fl);
                    dst[i * 4] = v;
                    cs[i] += v;
                }
            }
            const int32_t len = (int32_t)(ke - kb);
            for (int64_t i = 0; i < nc; i++) {
                const int64_t nn = n0 + i, blki = nb * G * 16 + i;
                const int64_t at = b * p->p_batch + jj * p->p_group + nn * p->p_n;
                int32_t zb = flip ? (int32_t)((const uint8_t *)p->zero)[at] - 128
                                  : (int32_t)((const int8_t *)p->zero)[at];
                total[i] += cs[i];
                scale[blki + jj * 16] = p->scale[at];
                if (p->group > 0)
                    corr[blki + jj * 16] =
                        (int32_t)((uint32_t)(uint16_t)(int16_t)(cs[i] - len * zb) |
                                  ((uint32_t)(uint16_t)(int16_t)zb << 16));
                else {
                    corr[blki] = total[i];
                    zero[nn] = zb;
                }
            }
        }
    }
    d->data = data;
    d->n = n;
    d->k = k;
    d->k4 = k4;
    d->scale = scale;
    d->corr = corr;
    d->zero = zero;
}

static void lb_dmm_pack_task(void *arg, int64_t b, int worker) {
    (void)worker;
    const lb_pack_job *j = (const lb_pack_job *)arg;
    const lb_dmm_pack *p = j->p;
    lb_dmm_pack_run_one(p, j->scratch + b * lb_dmm_pack_bytes(p->n, p->k, p->group), &j->out[b],
                        b);
}

void lb_dmm_pack_run(const lb_ctx *ctx, const lb_dmm_pack *p, uint8_t *scratch,
                     lb_dmm_b *out) {
    lb_pack_job j = {p, scratch, out};
    lb_parallel_for(ctx, p->batch, lb_dmm_pack_task, &j);
}

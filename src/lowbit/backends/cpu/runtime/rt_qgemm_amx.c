/* AMX-INT8 micro-kernel of the int8 product: up to 2 x 2 tiles of 16 rows x 16 columns of
 * int32, each K step of 64 bytes one `tdpbusd` per tile (uint8 A x int8 B, four products summed
 * straight into each int32 lane, wrapping like vpdpbusd: no saturation).
 *
 * The packed B (lb_pack_b) is already AMX's B tile layout: per block of 16 columns, rows of 64
 * bytes holding 16 columns x 4 consecutive K bytes; 16 such rows are one K step. The tiles load
 * A (row-major uint8, stride lda) itself when it is 64-byte aligned, lda a multiple of 64 and K
 * of whole steps; otherwise a task's rows (up to 128) are copied into an aligned buffer of rows
 * of K rounded up to 64 bytes, zero-padded (with A's rows off 64-byte alignment, tile loads
 * straddle cache lines: a 128x768x768 product loading an unaligned A itself ran 1.35x slower
 * than with the copy). The copy buffer is the thread's own, kept from task to task, and a
 * thread that runs several tasks on the same rows of one product copies them once. The last
 * K step of a column block reads its 16 B rows straight from the packed B (rows past its k4 are
 * the next blocks': they meet the zeros of A's padding and add 0), except in the last blocks,
 * where 16 rows would reach past the packed B: those come from zero-padded copies, so that no
 * tile load reads past a buffer.
 *
 * The tiles are stored into the accumulator layout of the AVX-512 kernel and the AVX-512
 * epilogue (lb_gemm_epilogue_avx512) runs on them, 16 or 32 rows a call: every fused epilogue is
 * the same code as the vnni path's, so the results are bit-identical to it. Raw int32 results
 * without the row-sum term skip it: their tiles start from the column constants and are stored
 * into C (wrapping int32 sums either way). Rows past the last multiple of 16 of a task go to
 * the AVX-512 kernel; columns past N are computed from the zero columns of the packed B and
 * never stored. Each call configures the tiles (ldtilecfg) and releases them at its end, so
 * the tile state is per thread and per task. lb_qgemm takes this kernel for K >= 64 only (see
 * there). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "rt_amx.h"

#if LB_HAVE_AMX

#define LB_ACC_LD 64         /* int32 per accumulator row: LB_NV (4) blocks of 16 columns */

/* Tiles 0..3 accumulate C (tile 2 * i + j: rows 16 i.., column block j), 4 and 5 hold A, 6 and
 * 7 hold B. MT row tiles x NT column blocks (1 or 2 each, constants after inlining). `a`: the
 * tile's first row in the copy of A (rows of `lda` bytes, K rounded up to 64, zero-padded);
 * `last`: the 16 B rows of each column block's last K step when K % 64 != 0. `init`: NULL
 * (the sums start at 0), or the int32 each column's sums start from (32 of them, one row loaded
 * into all 16 rows of a tile with stride 0). Stores C to `out`, rows `ldo` int32 apart. */
LB_TARGET_AMX static inline __attribute__((always_inline)) void lb_amx_tile(
    const lb_gemm_tile *t, const uint8_t *a, int64_t lda, int64_t nb, const int MT,
    const int NT, const int8_t *const last[2], const int32_t *init, int32_t *out, int64_t ldo) {
    const int64_t k4 = t->B->k4, steps = t->K / 64;
    const uint8_t *a0 = a, *a1 = a + 16 * lda;
    const int8_t *b0 = t->B->data + nb * k4 * 64, *b1 = b0 + k4 * 64;
    if (init) {
        _tile_loadd(0, init, 0);
        if (NT > 1) _tile_loadd(1, init + 16, 0);
        if (MT > 1) _tile_loadd(2, init, 0);
        if (MT > 1 && NT > 1) _tile_loadd(3, init + 16, 0);
    } else {
        _tile_zero(0);
        if (NT > 1) _tile_zero(1);
        if (MT > 1) _tile_zero(2);
        if (MT > 1 && NT > 1) _tile_zero(3);
    }
    for (int64_t s = 0; s <= steps; s++) {
        const int8_t *p0 = b0 + s * 1024, *p1 = b1 + s * 1024;
        if (s == steps) { /* the last K % 64 bytes */
            if (t->K % 64 == 0) break;
            p0 = last[0];
            p1 = last[1];
        }
        _tile_loadd(6, p0, 64);
        _tile_loadd(4, a0 + s * 64, lda);
        _tile_dpbusd(0, 4, 6);
        if (MT > 1) {
            _tile_loadd(5, a1 + s * 64, lda);
            _tile_dpbusd(2, 5, 6);
        }
        if (NT > 1) {
            _tile_loadd(7, p1, 64);
            _tile_dpbusd(1, 4, 7);
            if (MT > 1) _tile_dpbusd(3, 5, 7);
        }
    }
    const int64_t ld = ldo * 4;
    _tile_stored(0, out, ld);
    if (NT > 1) _tile_stored(1, out + 16, ld);
    if (MT > 1) _tile_stored(2, out + 16 * ldo, ld);
    if (MT > 1 && NT > 1) _tile_stored(3, out + 16 * ldo + 16, ld);
}

typedef void (*lb_amx_fn)(const lb_gemm_tile *, const uint8_t *, int64_t, int64_t,
                          const int8_t *const *, const int32_t *, int32_t *, int64_t);
#define LB_AMX_FN(MT, NT)                                                                    \
    LB_TARGET_AMX __attribute__((noinline)) static void lb_amx_##MT##_##NT(                 \
        const lb_gemm_tile *t, const uint8_t *a, int64_t lda, int64_t nb,                    \
        const int8_t *const *last, const int32_t *init, int32_t *out, int64_t ldo) {         \
        lb_amx_tile(t, a, lda, nb, MT, NT, last, init, out, ldo);                            \
    }
LB_AMX_FN(1, 1)
LB_AMX_FN(1, 2)
LB_AMX_FN(2, 1)
LB_AMX_FN(2, 2)
static const lb_amx_fn lb_amx_fns[2][2] = {{lb_amx_1_1, lb_amx_1_2}, {lb_amx_2_1, lb_amx_2_2}};

/* Row m of A into `dst`, zero-padded to kpad bytes (a multiple of 64; dst aligned). */
LB_TARGET_AMX static inline void lb_amx_copy_row(uint8_t *dst, const uint8_t *src, int64_t K,
                                                 int64_t kpad) {
    int64_t k = 0;
    for (; k + 64 <= K; k += 64) _mm512_store_si512(dst + k, _mm512_loadu_si512(src + k));
    if (k < kpad) { /* the masked load reads only the bytes inside the row */
        const __mmask64 inside = ~0ULL >> (64 - (K - k));
        _mm512_store_si512(dst + k, _mm512_maskz_loadu_epi8(inside, src + k));
    }
}

/* The 16 B rows of a column block's last K step, from byte `at` of the packed B: there, or
 * when 16 rows would reach past the packed B (brows_all rows), its `brows` rows copied into
 * the zero-padded `buf`. */
static const int8_t *lb_amx_last_rows(const lb_gemm_tile *t, int64_t at, int64_t brows,
                                      int64_t brows_all, int8_t *buf) {
    if (at / 64 + 16 <= brows_all) return t->B->data + at;
    memset(buf, 0, 1024);
    memcpy(buf, t->B->data + at, (size_t)(brows * 64));
    return buf;
}

/* Rows [m0, m1) (a multiple of 16 of them) x column blocks [nb0, nb1), with A's row m0 at
 * `a` and its rows `lda` bytes apart (lda a multiple of 64, a 64-byte aligned, and each row
 * holding K rounded up to 64 bytes, zero-padded past K). */
LB_TARGET_AMX static void lb_amx_rows(const lb_gemm_tile *t, int64_t m0, int64_t m1,
                                      int64_t nb0, int64_t nb1, const uint8_t *a,
                                      int64_t lda) {
    __attribute__((aligned(64))) int32_t acc[32 * LB_ACC_LD];
    __attribute__((aligned(64))) int8_t btail[2][1024];
    lb_amx_configure(8);
    const int64_t K = t->K, k4 = t->B->k4, kdone = K / 64 * 64;
    const int64_t brows = k4 - kdone / 4; /* rows of B in the last step (< 16) */
    const int64_t brows_all = (t->N + 15) / 16 * k4; /* rows of the packed B */
    /* int32 results with no row-sum term: the sums start from col_offset and the tiles are
     * stored straight into C (the same wrapping int32 sums as the epilogue's acc + col_offset),
     * in column blocks inside N; the others through acc and the epilogue */
    const lb_epilogue *ep = t->ep;
    const int raw = ep->out_type == LB_I32 && !ep->col_zb && ep->col_offset;
    for (int64_t nb = nb0; nb < nb1; nb += 2) {
        const int nt = (int)LB_MIN(2, nb1 - nb);
        const int8_t *last[2] = {btail[0], btail[1]};
        if (brows) {
            last[0] = lb_amx_last_rows(t, (nb * k4 + kdone / 4) * 64, brows, brows_all,
                                       btail[0]);
            if (nt > 1)
                last[1] = lb_amx_last_rows(t, ((nb + 1) * k4 + kdone / 4) * 64, brows,
                                           brows_all, btail[1]);
        }
        const int direct = raw && (nb + nt) * 16 <= t->N;
        for (int64_t m = m0; m < m1; m += 32) {
            const int mt = (int)LB_MIN(2, (m1 - m) / 16), rows = mt * 16;
            const uint8_t *am = a + (m - m0) * lda;
            if (direct) {
                lb_amx_fns[mt - 1][nt - 1](t, am, lda, nb, last, ep->col_offset + nb * 16,
                                           (int32_t *)t->C + m * t->ldc + nb * 16, t->ldc);
            } else {
                lb_amx_fns[mt - 1][nt - 1](t, am, lda, nb, last, NULL, acc, LB_ACC_LD);
                lb_gemm_epilogue_avx512(t, m, nb, rows, nt, acc);
            }
        }
    }
    _tile_release();
}

static atomic_uint_fast64_t lb_amx_products;

uint64_t lb_amx_product_id(void) { return atomic_fetch_add(&lb_amx_products, 1) + 1; }

/* Each thread's copy of A: a buffer kept from task to task (grown when a task needs more, freed
 * when the thread exits, through the key's destructor), and what it holds: rows [m0, m1) of
 * the product numbered `product`. A thread that runs several column tasks of one product (two
 * threads split a 128-row product's columns into 8 tasks) copies its rows once, and no task
 * allocates. */
typedef struct lb_amx_acopy {
    uint8_t *buf;
    int64_t cap;
    uint64_t product;
    int64_t m0, m1;
} lb_amx_acopy;

static _Thread_local lb_amx_acopy lb_acopy;
static pthread_key_t lb_acopy_key;
static pthread_once_t lb_acopy_once = PTHREAD_ONCE_INIT;
static int lb_acopy_keyed; /* the key exists */

static void lb_acopy_key_create(void) {
    lb_acopy_keyed = pthread_key_create(&lb_acopy_key, free) == 0;
}

/* The calling thread's copy buffer with at least `bytes` bytes (64-byte aligned), or NULL when
 * there is no memory for it (or no key to free it with). */
static lb_amx_acopy *lb_amx_scratch(int64_t bytes) {
    lb_amx_acopy *c = &lb_acopy;
    if (c->cap >= bytes) return c;
    pthread_once(&lb_acopy_once, lb_acopy_key_create);
    if (!lb_acopy_keyed) return NULL;
    int64_t cap = LB_MAX(bytes, 2 * c->cap);
    uint8_t *buf = (uint8_t *)aligned_alloc(64, (size_t)cap);
    if (!buf) return NULL;
    if (pthread_setspecific(lb_acopy_key, buf) != 0) {
        free(buf);
        return NULL;
    }
    free(c->buf);
    c->buf = buf;
    c->cap = cap;
    c->product = 0;
    return c;
}

LB_TARGET_AMX void lb_gemm_block_amx(const lb_gemm_tile *t, uint64_t product, int64_t m0,
                                     int64_t m1, int64_t nb0, int64_t nb1) {
    const int64_t mamx = m0 + (m1 - m0) / 16 * 16; /* rows [mamx, m1) go to the AVX-512 kernel */
    if (mamx > m0) {
        const int64_t K = t->K, kpad = (K + 63) / 64 * 64;
        if (K % 64 == 0 && t->lda % 64 == 0 && (uintptr_t)t->A % 64 == 0) {
            /* rows of whole K steps on cache lines: the tiles load A itself */
            lb_amx_rows(t, m0, mamx, nb0, nb1, t->A + m0 * t->lda, t->lda);
        } else {
            lb_amx_acopy *c = lb_amx_scratch((mamx - m0) * kpad);
            if (!c) { /* no memory for the copy: the AVX-512 kernel, the same results */
                lb_gemm_block_avx512(t, m0, m1, nb0, nb1);
                return;
            }
            if (!(product && c->product == product && c->m0 == m0 && c->m1 == mamx)) {
                for (int64_t m = m0; m < mamx; m++)
                    lb_amx_copy_row(c->buf + (m - m0) * kpad, t->A + m * t->lda, K, kpad);
                c->product = product;
                c->m0 = m0;
                c->m1 = mamx;
            }
            lb_amx_rows(t, m0, mamx, nb0, nb1, c->buf, kpad);
        }
    }
    if (mamx < m1) lb_gemm_block_avx512(t, mamx, m1, nb0, nb1);
}
#endif /* LB_HAVE_AMX */

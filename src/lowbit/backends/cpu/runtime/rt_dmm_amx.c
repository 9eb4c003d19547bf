/* AMX-INT8 tiles of the whole-K dynamic product (group 0): 16 rows x 16 columns. The packed B
 * of a block of 16 columns is k4 rows of 64 bytes (16 columns x 4 bytes of K), which is AMX's
 * B tile layout, so one `tdpbusd` of a 16 x 64 byte A tile and a 16 x 64 byte B tile adds the
 * 16 x 16 int32 sums a b over 64 bytes of K: uint8 times int8 added in int32 as `vpdpbusd`
 * does (no saturation; wrapping as the VNNI tiles, exact in the end). The tile is stored once
 * (1 KB) and AVX-512 finishes each row as rt_dmm_avx512.c:
 *   acc = sum a b - za sum b - zb ra + K za zb,
 *   y = float32(double(acc) * (double(sa) * double(sb)))
 *
 * Grouped products stay on the VNNI tiles: each group's 16 x 16 sums must go through memory
 * to their float32 steps, and the loads of a tile store wait until it reaches the cache; that
 * version measured no faster than VNNI on this machine (branch amx-dmm-dropped).
 *
 * Edges: a block of fewer than 16 rows, and the last step when K is not a multiple of 64, load
 * their A from a zero-filled copy (16 x 64 bytes) and their B from a zero-filled copy of the
 * rows that exist (masked loads), so that no load reads past the caller's buffers. The tile
 * configuration is loaded at the start of each tile job and released at its end (it is per
 * thread). */
#include "rt_amx.h"
#include "rt_dmm_epi512.h"

#if LB_HAVE_AMX

#define LB_AMX_V LB_TARGET_AMX static inline __attribute__((always_inline))

/* The sources of one block's steps. */
typedef struct lb_dmm_amx_src {
    const uint8_t *a; /* row 0 of the block at K offset 0 */
    int64_t lda, K, k4;
    int64_t mr;       /* rows of the block (<= 16) */
    const int8_t *pb; /* the 16-column block of packed B */
    uint8_t *abuf;    /* 16 x 64 bytes; rows mr.. zero */
    int8_t *bbuf;     /* 16 x 64 bytes */
} lb_dmm_amx_src;

/* Where the step of K offset k0 (a multiple of 64) reads A (stride *lda) and B (stride 64):
 * the caller's buffers, or the zero-filled copies. */
LB_AMX_V void lb_dmm_amx_step(const lb_dmm_amx_src *s, int64_t k0, const void **a,
                              int64_t *lda, const void **b) {
    const int64_t len = LB_MIN(64, s->K - k0);
    if (s->mr == 16 && len == 64) {
        *a = s->a + k0;
        *lda = s->lda;
    } else {
        const __mmask64 km = len >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << len) - 1);
        for (int64_t r = 0; r < s->mr; r++)
            _mm512_store_si512(s->abuf + r * 64,
                               _mm512_maskz_loadu_epi8(km, s->a + r * s->lda + k0));
        *a = s->abuf;
        *lda = 64;
    }
    const int64_t row0 = k0 / 4;
    if (row0 + 16 <= s->k4) {
        *b = s->pb + row0 * 64;
    } else {
        for (int64_t r = 0; r < 16; r++)
            _mm512_store_si512(s->bbuf + r * 64, row0 + r < s->k4
                                                     ? _mm512_loadu_si512(s->pb + (row0 + r) * 64)
                                                     : _mm512_setzero_si512());
        *b = s->bbuf;
    }
}

#define LB_AMX_STEP(TA, TB, s, k0)                         \
    do {                                                   \
        const void *ap_, *bp_;                             \
        int64_t lda_;                                      \
        lb_dmm_amx_step((s), (k0), &ap_, &lda_, &bp_);     \
        _tile_loadd(TA, ap_, lda_);                        \
        _tile_loadd(TB, bp_, 64);                          \
        _tile_dpbusd(0, TA, TB);                           \
    } while (0)

/* One block: rows m .. m + mr - 1 (mr <= 16, a constant 16 for whole blocks), columns
 * nb*16 .. nb*16 + 15. */
LB_AMX_V void lb_dmm_amx_block(const lb_dmm_tile *t, int64_t m, int64_t nb, const int64_t mr,
                               uint8_t *abuf, int8_t *bbuf, int32_t *cbuf) {
    const lb_dmm *p = t->p;
    const lb_dmm_b *B = p->b + t->b * p->b_step;
    const int64_t r0 = m - t->m0;
    lb_dmm_amx_src s = {t->a + r0 * t->lda, t->lda, p->K, B->k4, mr, B->data + nb * B->k4 * 64,
                        abuf, bbuf};
    _tile_zero(0);
    int64_t k0 = 0;
    for (; k0 + 128 <= p->K; k0 += 128) {
        LB_AMX_STEP(1, 2, &s, k0);
        LB_AMX_STEP(3, 4, &s, k0 + 64);
    }
    if (k0 < p->K) LB_AMX_STEP(1, 2, &s, k0);
    if (k0 + 64 < p->K) LB_AMX_STEP(3, 4, &s, k0 + 64);
    _tile_stored(0, cbuf, 64);
    /* lb_dmm_whole512's float result of each row, then the fused Adds */
    const int64_t n0 = nb * 16;
    const __m512i kk = _mm512_set1_epi32((int32_t)p->K);
    const __m512i cs = _mm512_loadu_si512(B->corr + n0);
    const __m512i zb = _mm512_loadu_si512(B->zero + n0);
    __m512d sblo, sbhi;
    lb_dmm_scales_pd(_mm512_loadu_ps(B->scale + n0), &sblo, &sbhi);
    const __mmask16 km = p->N - n0 >= 16 ? (__mmask16)0xFFFF
                                         : (__mmask16)((1u << (p->N - n0)) - 1u);
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++)
        if (r < mr) {
            const __m512 v = lb_dmm_whole512(
                _mm512_load_si512(cbuf + r * 16), _mm512_set1_epi32(t->aza[r0 + r]),
                _mm512_set1_epi32(t->ara[r0 + r]), kk, cs, zb,
                _mm512_set1_pd((double)t->asa[r0 + r]), sblo, sbhi);
            _mm512_mask_storeu_ps(t->y + (r0 + r) * t->ldy + n0, km,
                                  lb_dmm_adds(p, t->b, m + r, n0, km, v));
        }
}

LB_TARGET_AMX __attribute__((noinline)) static void lb_dmm_amx_full(const lb_dmm_tile *t,
                                                                     int64_t m, int64_t nb,
                                                                     uint8_t *abuf, int8_t *bbuf,
                                                                     int32_t *cbuf) {
    lb_dmm_amx_block(t, m, nb, 16, abuf, bbuf, cbuf);
}

LB_TARGET_AMX __attribute__((noinline)) static void lb_dmm_amx_edge(const lb_dmm_tile *t,
                                                                     int64_t m, int64_t nb,
                                                                     int64_t mr, uint8_t *abuf,
                                                                     int8_t *bbuf, int32_t *cbuf) {
    lb_dmm_amx_block(t, m, nb, mr, abuf, bbuf, cbuf);
}

LB_TARGET_AMX void lb_dmm_tile_amx(const lb_dmm_tile *t) {
    _Alignas(64) uint8_t abuf[16 * 64];
    _Alignas(64) int8_t bbuf[16 * 64];
    _Alignas(64) int32_t cbuf[256];
    memset(abuf, 0, sizeof abuf); /* rows of a short block beyond its own stay zero */
    /* tiles: 0 the C sums (16 x 16 int32), 1 and 3 A, 2 and 4 B (16 x 64 bytes each): steps
     * of K take the A and B tiles by turns */
    lb_amx_configure(5);
    for (int64_t m = t->m0; m < t->m1; m += 16) {
        const int64_t mr = LB_MIN(16, t->m1 - m);
        for (int64_t nb = t->nb0; nb < t->nb1; nb++) {
            if (mr == 16)
                lb_dmm_amx_full(t, m, nb, abuf, bbuf, cbuf);
            else
                lb_dmm_amx_edge(t, m, nb, mr, abuf, bbuf, cbuf);
        }
    }
    _tile_release();
}
#endif /* LB_HAVE_AMX */

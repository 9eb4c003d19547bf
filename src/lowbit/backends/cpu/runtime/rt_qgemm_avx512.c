/* AVX-512 VNNI micro-kernels of the int8 product: tiles of up to 6 rows x 64 columns held in
 * 24 zmm accumulators. Each step broadcasts 4 bytes of a row of A (uint8) and multiplies them
 * with 16 columns x 4 int8 weights by `vpdpbusd`, which sums the four products straight into
 * int32 lanes without saturating. The epilogue runs on the registers. */
#include "rt_internal.h"

#if LB_HAVE_X86
#include "rt_vec512.h"

#define LB_MR 6
#define LB_NV 4

/* Four bytes of row `a` at group g, zero past K. */
LB_V512 int32_t lb_a4(const uint8_t *a, int64_t g, int64_t K) {
    int64_t k = g * 4;
    int32_t v = 0;
    if (k + 4 <= K) {
        memcpy(&v, a + k, 4);
    } else {
        uint8_t b[4] = {0, 0, 0, 0};
        for (int64_t i = k; i < K; i++) b[i - k] = a[i];
        memcpy(&v, b, 4);
    }
    return v;
}

LB_V512 void lb_epilogue_v512(const lb_gemm_tile *t, int64_t m, int64_t n0, __m512i x,
                              const lb_rq512 *rv, const lb_add512 *av) {
    const lb_epilogue *ep = t->ep;
    __mmask16 k = lb_tail_mask(t->N - n0);
    x = _mm512_add_epi32(x, _mm512_loadu_si512(ep->col_offset + n0));
    if (ep->col_zb)
        x = _mm512_sub_epi32(x, _mm512_mullo_epi32(_mm512_loadu_si512(ep->col_zb + n0),
                                                   _mm512_set1_epi32(t->row_sums[m])));
    int64_t at = m * t->ldc + n0;
    if (ep->out_type == LB_I32) {
        _mm512_mask_storeu_epi32((int32_t *)t->C + at, k, x);
        return;
    }
    if (ep->rq.method == LB_RQ_DEQUANT) {
        __m512d lo = _mm512_cvtepi32_pd(_mm512_castsi512_si256(x));
        __m512d hi = _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(x, 1));
        lo = _mm512_mul_pd(lo, _mm512_loadu_pd(ep->rq.dscale + n0));
        hi = _mm512_mul_pd(hi, _mm512_loadu_pd(ep->rq.dscale + n0 + 8));
        __m512 f = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)),
                                      _mm512_cvtpd_ps(hi), 1);
        f = _mm512_max_ps(f, _mm512_set1_ps(ep->rq.fmin));
        f = _mm512_min_ps(f, _mm512_set1_ps(ep->rq.fmax));
        _mm512_mask_storeu_ps((float *)t->C + at, k, f);
        return;
    }
    __m512i y = lb_requant_v512(&ep->rq, rv, x);
    if (ep->residual) {
        __m512i r = _mm512_cvtepu8_epi32(
            _mm_maskz_loadu_epi8(k, ep->residual + m * ep->ld_residual + n0));
        y = lb_add_v512(ep->add, av, y, r);
    }
    lb_store_v512(t->C, ep->out_type, at, y, k);
}

/* One tile of MR rows x NV blocks of 16 columns; MR and NV are constants after inlining. */
LB_V512 void lb_tile_v512(const lb_gemm_tile *t, int64_t m, int64_t nb, const int MR,
                          const int NV) {
    const lb_packed_b *B = t->B;
    const int64_t k4 = B->k4, kfull = t->K / 4;
    __m512i acc[LB_MR][LB_NV];
    const uint8_t *a[LB_MR];
    const int8_t *b[LB_NV];
    for (int r = 0; r < MR; r++) {
        a[r] = t->A + (m + r) * t->lda;
        for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_si512();
    }
    for (int v = 0; v < NV; v++) b[v] = B->data + (nb + v) * k4 * 64;
    for (int64_t g = 0; g < kfull; g++) {
        __m512i bv[LB_NV];
        for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_si512(b[v] + g * 64);
        for (int r = 0; r < MR; r++) {
            int32_t a4;
            memcpy(&a4, a[r] + g * 4, 4);
            __m512i av = _mm512_set1_epi32(a4);
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], av, bv[v]);
        }
    }
    if (kfull < k4) {
        __m512i bv[LB_NV];
        for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_si512(b[v] + kfull * 64);
        for (int r = 0; r < MR; r++) {
            __m512i av = _mm512_set1_epi32(lb_a4(a[r], kfull, t->K));
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], av, bv[v]);
        }
    }
    const lb_epilogue *ep = t->ep;
    lb_add512 addv;
    memset(&addv, 0, sizeof(addv));
    if (ep->residual) addv = lb_add512_load(ep->add);
    for (int v = 0; v < NV; v++) {
        int64_t n0 = (nb + v) * 16;
        if (n0 >= t->N) break;
        lb_rq512 rv;
        memset(&rv, 0, sizeof(rv));
        if (ep->out_type != LB_I32 && ep->rq.method != LB_RQ_DEQUANT)
            rv = lb_rq512_load(&ep->rq, n0);
        for (int r = 0; r < MR; r++) lb_epilogue_v512(t, m + r, n0, acc[r][v], &rv, &addv);
    }
}

#define LB_TILE_CASE(MR, NV) \
    case (MR)*8 + (NV):      \
        lb_tile_v512(t, m, nb, MR, NV); \
        break;

#define LB_TILE_ROW(MR) \
    LB_TILE_CASE(MR, 1) LB_TILE_CASE(MR, 2) LB_TILE_CASE(MR, 3) LB_TILE_CASE(MR, 4)

LB_TARGET_AVX512 void lb_gemm_block_avx512(const lb_gemm_tile *t, int64_t m0, int64_t m1,
                                           int64_t nb0, int64_t nb1) {
    for (int64_t nb = nb0; nb < nb1; nb += LB_NV) {
        int nv = (int)LB_MIN(LB_NV, nb1 - nb);
        for (int64_t m = m0; m < m1; m += LB_MR) {
            int mr = (int)LB_MIN(LB_MR, m1 - m);
            switch (mr * 8 + nv) {
                LB_TILE_ROW(1)
                LB_TILE_ROW(2)
                LB_TILE_ROW(3)
                LB_TILE_ROW(4)
                LB_TILE_ROW(5)
                LB_TILE_ROW(6)
            default:
                break;
            }
        }
    }
}
#endif /* LB_HAVE_X86 */

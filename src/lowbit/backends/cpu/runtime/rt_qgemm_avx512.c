/* AVX-512 VNNI micro-kernels of the int8 product: tiles of up to 6 rows x 64 columns held in
 * 24 zmm accumulators. Each step broadcasts 4 bytes of a row of A (uint8) and multiplies them
 * with 16 columns x 4 int8 weights by `vpdpbusd`, which sums the four products straight into
 * int32 lanes without saturating. The epilogue runs on the registers. */
#include "rt_internal.h"

#if LB_HAVE_AVX512
#include "rt_vec512.h"

#define LB_MR 6
#define LB_NV 4

/* The epilogue of one tile, from the accumulators the K loop stored (a separate function so
 * that the K loop keeps all 24 accumulators in registers). The common cases (q31 or prescale
 * into 8- or 16-bit codes, with or without a row-sum term and a residual Add) are compiled
 * apart with their parameters loaded once per 16 columns; others take the general path. */
LB_V512 void lb_tile_epilogue_fast(const lb_gemm_tile *t, int64_t m, int64_t nb, int mr, int nv,
                                   const __m512i *acc, const int METHOD, const int OUT,
                                   const int RES, const int ZB) {
    const lb_epilogue *ep = t->ep;
    const lb_requant *rq = &ep->rq;
    const __m512i qmin = _mm512_set1_epi32(rq->qmin), qmax = _mm512_set1_epi32(rq->qmax);
    const __m512i one = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
    /* locals: the byte stores below may alias any field, which gcc would reload per store */
    char *const C = (char *)t->C;
    const int64_t ldc = t->ldc, N = t->N, ldr = ep->ld_residual;
    const int32_t *const row_sums = t->row_sums;
    const uint8_t *const residual = ep->residual;
    lb_add512 addv;
    memset(&addv, 0, sizeof(addv));
    if (RES) addv = lb_add512_load(ep->add);
    for (int v = 0; v < nv; v++) {
        int64_t n0 = (nb + v) * 16;
        if (n0 >= N) break;
        __mmask16 k = lb_tail_mask(N - n0);
        __m512i off = _mm512_loadu_si512(ep->col_offset + n0);
        __m512i zp = _mm512_loadu_si512(rq->zero_point + n0);
        __m512i p0 = _mm512_loadu_si512(rq->p0 + n0), p1 = _mm512_loadu_si512(rq->p1 + n0);
        __m512i p2 = _mm512_loadu_si512(rq->p2 + n0), clip = zero, negclip = zero, rnd = zero;
        if (METHOD == LB_RQ_PRESCALE) {
            clip = _mm512_loadu_si512(rq->p3 + n0);
            negclip = _mm512_sub_epi32(zero, clip);
            rnd = _mm512_sllv_epi32(one, _mm512_sub_epi32(p2, one));
        }
        __m512i zb = ZB ? _mm512_loadu_si512(ep->col_zb + n0) : zero;
        for (int r = 0; r < mr; r++) {
            __m512i x = _mm512_add_epi32(_mm512_load_si512(acc + r * LB_NV + v), off);
            if (ZB)
                x = _mm512_sub_epi32(x, _mm512_mullo_epi32(zb, _mm512_set1_epi32(row_sums[m + r])));
            __m512i y;
            if (METHOD == LB_RQ_PRESCALE) {
                y = lb_prescale_pre_v512(x, p0, clip, negclip, p1, rnd, p2);
            } else {
                y = lb_q31_v512(x, p0, p1, p2);
            }
            y = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(y, zp), qmin), qmax);
            if (RES) {
                __m512i res = _mm512_cvtepu8_epi32(
                    _mm_maskz_loadu_epi8(k, residual + (m + r) * ldr + n0));
                y = lb_add_v512(ep->add, &addv, y, res);
            }
            int64_t at = (m + r) * ldc + n0;
            if (OUT == LB_U8)
                _mm_mask_storeu_epi8((uint8_t *)C + at, k, _mm512_cvtepi32_epi8(y));
            else
                _mm256_mask_storeu_epi16((int16_t *)C + at, k, _mm512_cvtepi32_epi16(y));
        }
    }
}

#define LB_EPI_FN(METHOD, OUT, RES, ZB)                                                     \
    LB_TARGET_AVX512 __attribute__((noinline)) static void lb_epi_##METHOD##_##OUT##_##RES##_##ZB( \
        const lb_gemm_tile *t, int64_t m, int64_t nb, int mr, int nv, const __m512i *acc) {   \
        lb_tile_epilogue_fast(t, m, nb, mr, nv, acc, METHOD, OUT, RES, ZB);                  \
    }
#define LB_EPI_ZB(M, O, R) LB_EPI_FN(M, O, R, 0) LB_EPI_FN(M, O, R, 1)
#define LB_EPI_RES(M, O) LB_EPI_ZB(M, O, 0) LB_EPI_ZB(M, O, 1)
LB_EPI_RES(0, 0) /* q31 -> uint8 */
LB_EPI_RES(0, 1) /* q31 -> int16 */
LB_EPI_RES(1, 0) /* prescale -> uint8 */
LB_EPI_RES(1, 1) /* prescale -> int16 */
typedef void (*lb_epi_fn)(const lb_gemm_tile *, int64_t, int64_t, int, int, const __m512i *);
#define LB_EPI_NAMES(M, O) \
    {{lb_epi_##M##_##O##_0_0, lb_epi_##M##_##O##_0_1}, {lb_epi_##M##_##O##_1_0, lb_epi_##M##_##O##_1_1}}
static const lb_epi_fn lb_epis[2][2][2][2] = {{LB_EPI_NAMES(0, 0), LB_EPI_NAMES(0, 1)},
                                               {LB_EPI_NAMES(1, 0), LB_EPI_NAMES(1, 1)}};

/* Four rows' 16 codes (int32 lanes holding 0..255) as bytes: lane i of the result holds row
 * i's 16 bytes in order. Two saturating packs (exact here) leave, in each 128-bit lane L, the
 * four bytes of channels 4L..4L+3 of rows 0..3; one dword permutation regroups them by row. */
LB_V512 __m512i lb_rows4_u8(__m512i y0, __m512i y1, __m512i y2, __m512i y3) {
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m512i b = _mm512_packus_epi16(_mm512_packus_epi32(y0, y1), _mm512_packus_epi32(y2, y3));
    return _mm512_permutexvar_epi32(idx, b);
}

LB_V512 void lb_store16_u8(uint8_t *p, __m128i v, __mmask16 k) {
    if (k == 0xFFFF)
        _mm_storeu_si128((__m128i *)p, v);
    else
        _mm_mask_storeu_epi8(p, k, v);
}

/* The bounded form of prescale into uint8 (lb_epilogue.bounded): 5 operations per 16 results
 * when a block's channels have no pre-shift and their offset folded into the constants, 7
 * otherwise, against the 11 of the general form (no clip, zero point or final clamp). */
LB_V512 __m512i lb_bounded_v512(__m512i x, __m512i lo, __m512i hi, __m512i add, __m512i pre,
                                __m512i scale, __m512i cst, __m512i post, const int PLAIN) {
    if (PLAIN) {
        x = _mm512_min_epi32(_mm512_max_epi32(x, lo), hi);
    } else {
        x = _mm512_add_epi32(x, add);
        x = _mm512_srav_epi32(_mm512_min_epi32(_mm512_max_epi32(x, lo), hi), pre);
    }
    return _mm512_srav_epi32(_mm512_add_epi32(_mm512_mullo_epi32(x, scale), cst), post);
}

/* One operand of lb_epilogue.residual_split in registers (its aligned value from a code). */
typedef struct lb_split512 {
    __m512i z, mh, ml, rk, half, neg;
    __m128i k, r;
} lb_split512;

LB_V512 lb_split512 lb_split_load(const int32_t *p) {
    lb_split512 v;
    v.z = _mm512_set1_epi32(p[0]);
    v.mh = _mm512_set1_epi32(p[1]);
    v.ml = _mm512_set1_epi32(p[2]);
    v.k = _mm_cvtsi32_si128(p[3]);
    v.rk = _mm512_set1_epi32(p[4]);
    v.half = _mm512_set1_epi32(p[5]);
    v.neg = _mm512_set1_epi32(p[6]);
    v.r = _mm_cvtsi32_si128(p[7]);
    return v;
}

LB_V512 __m512i lb_split_apply(const lb_split512 *v, __m512i q) {
    __m512i d = _mm512_sub_epi32(q, v->z);
    __m512i lo = _mm512_sra_epi32(_mm512_add_epi32(_mm512_mullo_epi32(d, v->ml), v->rk), v->k);
    __m512i h = _mm512_add_epi32(_mm512_mullo_epi32(d, v->mh), lo);
    h = _mm512_add_epi32(_mm512_add_epi32(h, v->half),
                         _mm512_and_si512(_mm512_srai_epi32(h, 31), v->neg));
    return _mm512_sra_epi32(h, v->r);
}

/* The whole residual Add of lb_epilogue.residual_split in registers. */
typedef struct lb_resadd512 {
    lb_split512 a1, a2;
    __m512i lo, hi, ad, cst, scale;
    __m128i pre, post;
    int sub;
} lb_resadd512;

LB_V512 lb_resadd512 lb_resadd_load(const int32_t *p) {
    lb_resadd512 v;
    v.a1 = lb_split_load(p);
    v.a2 = lb_split_load(p + 8);
    v.sub = p[16];
    v.lo = _mm512_set1_epi32(p[17]);
    v.hi = _mm512_set1_epi32(p[18]);
    v.ad = _mm512_set1_epi32(p[19]);
    v.cst = _mm512_set1_epi32(p[20]);
    v.pre = _mm_cvtsi32_si128(p[21]);
    v.scale = _mm512_set1_epi32(p[22]);
    v.post = _mm_cvtsi32_si128(p[23]);
    return v;
}

/* Codes of the Add of 16 product codes y and 16 residual bytes r. */
LB_V512 __m512i lb_resadd_apply(const lb_resadd512 *v, __m512i y, __m128i r) {
    __m512i a1 = lb_split_apply(&v->a1, y);
    __m512i a2 = lb_split_apply(&v->a2, _mm512_cvtepu8_epi32(r));
    __m512i s = v->sub ? _mm512_sub_epi32(a1, a2) : _mm512_add_epi32(a1, a2);
    s = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(s, v->ad), v->lo), v->hi);
    s = _mm512_sra_epi32(s, v->pre);
    return _mm512_sra_epi32(_mm512_add_epi32(_mm512_mullo_epi32(s, v->scale), v->cst), v->post);
}

/* The bounded epilogue of column block v of a tile's MR rows (y0..y5; those past MR
 * unused), straight from the K loop's registers in lb_tile_v512 with FUSED; with RES, the
 * residual Add of lb_epilogue.residual_split after it. */
LB_V512 void lb_fused_block(const lb_gemm_tile *t, int64_t m, int64_t nb, int v, const int MR,
                            const int RES, __m512i y0, __m512i y1, __m512i y2, __m512i y3,
                            __m512i y4, __m512i y5) {
    const lb_epilogue *ep = t->ep;
    const int64_t n0 = (nb + v) * 16, ldc = t->ldc;
    uint8_t *const C = (uint8_t *)t->C + m * ldc + n0;
    const __mmask16 k = lb_tail_mask(t->N - n0);
    const int32_t *b = ep->bounded + n0 / 16 * 64;
    const __m512i lo = _mm512_loadu_si512(b), hi = _mm512_loadu_si512(b + 16);
    const __m512i add = _mm512_loadu_si512(b + 32), cst = _mm512_loadu_si512(b + 48);
    const __m512i pre = _mm512_loadu_si512(ep->rq.p0 + n0);
    const __m512i scale = _mm512_loadu_si512(ep->rq.p1 + n0);
    const __m512i post = _mm512_loadu_si512(ep->rq.p2 + n0);
    const __m512i either = _mm512_or_si512(add, pre);
    if (!_mm512_test_epi32_mask(either, either)) {
#define LB_FY(y) y = lb_bounded_v512(y, lo, hi, add, pre, scale, cst, post, 1)
        LB_FY(y0); LB_FY(y1); LB_FY(y2); LB_FY(y3); LB_FY(y4); LB_FY(y5); /* rows >= MR: unused */
#undef LB_FY
    } else {
#define LB_FY(y) y = lb_bounded_v512(y, lo, hi, add, pre, scale, cst, post, 0)
        LB_FY(y0); LB_FY(y1); LB_FY(y2); LB_FY(y3); LB_FY(y4); LB_FY(y5); /* rows >= MR: unused */
#undef LB_FY
    }
    if (RES) {
        const lb_resadd512 ra = lb_resadd_load(ep->residual_split);
        const int64_t ldr = ep->ld_residual;
        const uint8_t *res = ep->residual + m * ldr + n0;
#define LB_FR(r, y) \
    if (MR > r) y = lb_resadd_apply(&ra, y, _mm_maskz_loadu_epi8(k, res + r * ldr));
        LB_FR(0, y0) LB_FR(1, y1) LB_FR(2, y2) LB_FR(3, y3) LB_FR(4, y4) LB_FR(5, y5)
#undef LB_FR
    }
    __m512i q = lb_rows4_u8(y0, MR > 1 ? y1 : y0, MR > 2 ? y2 : y0, MR > 3 ? y3 : y0);
    lb_store16_u8(C, _mm512_castsi512_si128(q), k);
    if (MR > 1) lb_store16_u8(C + ldc, _mm512_extracti32x4_epi32(q, 1), k);
    if (MR > 2) lb_store16_u8(C + 2 * ldc, _mm512_extracti32x4_epi32(q, 2), k);
    if (MR > 3) lb_store16_u8(C + 3 * ldc, _mm512_extracti32x4_epi32(q, 3), k);
    if (MR > 4) {
        q = lb_rows4_u8(y4, MR > 5 ? y5 : y4, y4, y4);
        lb_store16_u8(C + 4 * ldc, _mm512_castsi512_si128(q), k);
        if (MR > 5) lb_store16_u8(C + 5 * ldc, _mm512_extracti32x4_epi32(q, 1), k);
    }
}

/* The bounded epilogue from stored accumulators (K % 4 != 0: lb_tile_tail added the last
 * steps in memory; or the AMX kernel's tiles), 6 rows at a time. Rows past the last of a
 * group of 6 repeat it: computed, never stored. */
LB_TARGET_AVX512 __attribute__((noinline)) static void lb_epi_bounded(
    const lb_gemm_tile *t, int64_t m, int64_t nb, int mr, int nv, const __m512i *acc) {
    for (int r0 = 0; r0 < mr; r0 += LB_MR) {
        const int rows = LB_MIN(LB_MR, mr - r0);
        const __m512i *a = acc + r0 * LB_NV;
        for (int v = 0; v < nv && (nb + v) * 16 < t->N; v++) {
#define LB_ACC(r) _mm512_load_si512(a + ((r) < rows ? (r) : rows - 1) * LB_NV + v)
            if (t->ep->residual) /* rows past `rows`: neither read nor stored */
                lb_fused_block(t, m + r0, nb, v, rows, 1, LB_ACC(0), LB_ACC(1), LB_ACC(2),
                               LB_ACC(3), LB_ACC(4), LB_ACC(5));
            else
                lb_fused_block(t, m + r0, nb, v, rows, 0, LB_ACC(0), LB_ACC(1), LB_ACC(2),
                               LB_ACC(3), LB_ACC(4), LB_ACC(5));
#undef LB_ACC
        }
    }
}

/* Raw int32 results (ConvInteger, MatMulInteger): the offset added, stored. */
LB_TARGET_AVX512 __attribute__((noinline)) static void lb_epi_i32(
    const lb_gemm_tile *t, int64_t m, int64_t nb, int mr, int nv, const __m512i *acc) {
    const lb_epilogue *ep = t->ep;
    for (int v = 0; v < nv; v++) {
        int64_t n0 = (nb + v) * 16;
        if (n0 >= t->N) break;
        __mmask16 k = lb_tail_mask(t->N - n0);
        __m512i off = _mm512_loadu_si512(ep->col_offset + n0);
        __m512i zb = ep->col_zb ? _mm512_loadu_si512(ep->col_zb + n0) : _mm512_setzero_si512();
        for (int r = 0; r < mr; r++) {
            __m512i x = _mm512_add_epi32(_mm512_load_si512(acc + r * LB_NV + v), off);
            if (ep->col_zb)
                x = _mm512_sub_epi32(x, _mm512_mullo_epi32(zb, _mm512_set1_epi32(t->row_sums[m + r])));
            _mm512_mask_storeu_epi32((int32_t *)t->C + (m + r) * t->ldc + n0, k, x);
        }
    }
}

/* An epilogue with a post stage (lb_post) for q31 or prescale into 8- or 16-bit codes: the
 * product's codes, then the table (TT: 0 none, 1 uint8 entries, 2 int16, 3 uint16; 4 the
 * float32 HardSwish instead) and the per-channel Mul (MUL), every parameter loaded once per
 * tile or column block. */
LB_V512 void lb_tile_epilogue_post(const lb_gemm_tile *t, int64_t m, int64_t nb, int mr, int nv,
                                   const __m512i *acc, const int METHOD, const int TT,
                                   const int MUL) {
    const lb_epilogue *ep = t->ep;
    const lb_post *post = ep->post;
    const lb_requant *rq = &ep->rq;
    const __m512i qmin = _mm512_set1_epi32(rq->qmin), qmax = _mm512_set1_epi32(rq->qmax);
    const __m512i one = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
    const __m512i tmin = _mm512_set1_epi32(post->table_min), pz = _mm512_set1_epi32(post->z);
    const void *const table = post->table;
    lb_rq512 prv;
    memset(&prv, 0, sizeof(prv));
    if (MUL) prv = lb_rq512_broadcast(&post->rq);
    char *const C = (char *)t->C;
    const int64_t ldc = t->ldc, N = t->N;
    const int32_t *const row_sums = t->row_sums;
    const int out_type = ep->out_type;
    lb_add512 addv;
    memset(&addv, 0, sizeof(addv));
    if (ep->residual) addv = lb_add512_load(ep->add);
    for (int v = 0; v < nv; v++) {
        int64_t n0 = (nb + v) * 16;
        if (n0 >= N) break;
        __mmask16 k = lb_tail_mask(N - n0);
        __m512i off = _mm512_loadu_si512(ep->col_offset + n0);
        __m512i zp = _mm512_loadu_si512(rq->zero_point + n0);
        __m512i p0 = _mm512_loadu_si512(rq->p0 + n0), p1 = _mm512_loadu_si512(rq->p1 + n0);
        __m512i p2 = _mm512_loadu_si512(rq->p2 + n0), clip = zero, negclip = zero, rnd = zero;
        if (METHOD == LB_RQ_PRESCALE) {
            clip = _mm512_loadu_si512(rq->p3 + n0);
            negclip = _mm512_sub_epi32(zero, clip);
            rnd = _mm512_sllv_epi32(one, _mm512_sub_epi32(p2, one));
        }
        __m512i zb = ep->col_zb ? _mm512_loadu_si512(ep->col_zb + n0) : zero;
        __m512i mulv = MUL ? _mm512_loadu_si512(post->mul + n0) : zero;
        for (int r = 0; r < mr; r++) {
            __m512i x = _mm512_add_epi32(_mm512_load_si512(acc + r * LB_NV + v), off);
            if (ep->col_zb)
                x = _mm512_sub_epi32(x, _mm512_mullo_epi32(zb, _mm512_set1_epi32(row_sums[m + r])));
            __m512i y;
            if (METHOD == LB_RQ_PRESCALE) {
                y = lb_prescale_pre_v512(x, p0, clip, negclip, p1, rnd, p2);
            } else {
                y = lb_q31_v512(x, p0, p1, p2);
            }
            y = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(y, zp), qmin), qmax);
            if (ep->residual) {
                __m512i res = _mm512_cvtepu8_epi32(
                    _mm_maskz_loadu_epi8(k, ep->residual + (m + r) * ep->ld_residual + n0));
                y = lb_add_v512(ep->add, &addv, y, res);
            }
            if (TT == 4) {
                y = lb_hsw_v512(post, y);
            } else if (TT) {
                __m512i idx = _mm512_sub_epi32(y, tmin);
                if (TT == 1) {
                    y = _mm512_mask_i32gather_epi32(zero, k, idx, table, 1);
                    y = _mm512_and_si512(y, _mm512_set1_epi32(0xFF));
                } else {
                    y = _mm512_mask_i32gather_epi32(zero, k, idx, table, 2);
                    y = TT == 2 ? _mm512_srai_epi32(_mm512_slli_epi32(y, 16), 16)
                                : _mm512_and_si512(y, _mm512_set1_epi32(0xFFFF));
                }
            }
            if (MUL)
                y = lb_requant_v512(&post->rq, &prv,
                                    _mm512_mullo_epi32(_mm512_sub_epi32(y, pz), mulv));
            lb_store_v512(C, out_type, (m + r) * ldc + n0, y, k);
        }
    }
}

#define LB_POST_FN(METHOD, TT, MUL)                                                          \
    LB_TARGET_AVX512 __attribute__((noinline)) static void lb_post_##METHOD##_##TT##_##MUL(  \
        const lb_gemm_tile *t, int64_t m, int64_t nb, int mr, int nv, const __m512i *acc) {   \
        lb_tile_epilogue_post(t, m, nb, mr, nv, acc, METHOD, TT, MUL);                       \
    }
#define LB_POST_TT(M, TT) LB_POST_FN(M, TT, 0) LB_POST_FN(M, TT, 1)
#define LB_POST_M(M) \
    LB_POST_TT(M, 0) LB_POST_TT(M, 1) LB_POST_TT(M, 2) LB_POST_TT(M, 3) LB_POST_TT(M, 4)
LB_POST_M(0) /* q31 */
LB_POST_M(1) /* prescale */
#define LB_POST_NAMES_TT(M, TT) {lb_post_##M##_##TT##_0, lb_post_##M##_##TT##_1}
#define LB_POST_NAMES(M)                                                                   \
    {LB_POST_NAMES_TT(M, 0), LB_POST_NAMES_TT(M, 1), LB_POST_NAMES_TT(M, 2),                \
     LB_POST_NAMES_TT(M, 3), LB_POST_NAMES_TT(M, 4)}
static const lb_epi_fn lb_posts[2][5][2] = {LB_POST_NAMES(0), LB_POST_NAMES(1)};

/* The epilogue of a product whose post stage is the float32 HardSwish then the per-channel
 * Mul (PP-OCR's Conv -> HardSwish -> equalization Mul), without row sums or residual: the same
 * integer and float32 operations as lb_tile_epilogue_post, in the same order, arranged for
 * speed: every parameter in a register (lb_tile_epilogue_post re-reads the post stage from
 * memory for each 16 codes, since the byte stores may alias it), the branches of q31 taken once
 * per 16 columns instead of per 16 codes, and two rows at a time, so that the long dependent
 * chain of one row's codes overlaps another's. METHOD: the product's requantization (q31 or
 * prescale), PM: the Mul's (per tensor), OUT16: 16-bit results (else uint8). */
typedef struct lb_hm_block {
    __m512i off, zp, p0, p1, p2, clip, negclip, rnd, modd, mask, rrnd, mulv, qmin, qmax;
    __mmask16 rpos;
} lb_hm_block;

/* One row's 16 codes of lb_tile_epilogue_hsw_mul. */
LB_V512 __m512i lb_hm_codes(__m512i x, const lb_hm_consts *c, const lb_hm_block *b,
                            const int METHOD, const int PM, const int LSH, const int RSH,
                            const int PLSH, const int PRSH) {
    x = _mm512_add_epi32(x, b->off);
    __m512i y;
    if (METHOD == LB_RQ_PRESCALE) {
        y = lb_prescale_pre_v512(x, b->p0, b->clip, b->negclip, b->p1, b->rnd, b->p2);
    } else {
        y = lb_q31_pre_v512(x, b->p0, b->p1, b->p2, b->modd, b->mask, b->rrnd, b->rpos, LSH,
                            RSH);
    }
    y = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(y, b->zp), b->qmin), b->qmax);
    return lb_hm_post_v512(y, c, b->mulv, PM, PLSH, PRSH);
}

LB_V512 void lb_hm_store(char *C, int64_t at, __m512i y, __mmask16 k, const int OUT16) {
    if (OUT16)
        _mm256_mask_storeu_epi16((int16_t *)C + at, k, _mm512_cvtepi32_epi16(y));
    else
        _mm_mask_storeu_epi8((uint8_t *)C + at, k, _mm512_cvtepi32_epi8(y));
}

/* The rows of one block of 16 columns, two at a time. */
LB_V512 void lb_hm_rows(char *C, int64_t ldc, int64_t m, int64_t n0, __mmask16 k, int mr,
                        const __m512i *acc, int v, const lb_hm_consts *c, const lb_hm_block *b,
                        const int METHOD, const int PM, const int LSH, const int RSH,
                        const int PLSH, const int PRSH, const int OUT16) {
    int r = 0;
    for (; r + 2 <= mr; r += 2) {
        __m512i y0 = lb_hm_codes(_mm512_load_si512(acc + r * LB_NV + v), c, b, METHOD, PM, LSH,
                                 RSH, PLSH, PRSH);
        __m512i y1 = lb_hm_codes(_mm512_load_si512(acc + (r + 1) * LB_NV + v), c, b, METHOD, PM,
                                 LSH, RSH, PLSH, PRSH);
        lb_hm_store(C, (m + r) * ldc + n0, y0, k, OUT16);
        lb_hm_store(C, (m + r + 1) * ldc + n0, y1, k, OUT16);
    }
    if (r < mr)
        lb_hm_store(C, (m + r) * ldc + n0,
                    lb_hm_codes(_mm512_load_si512(acc + r * LB_NV + v), c, b, METHOD, PM, LSH,
                                RSH, PLSH, PRSH),
                    k, OUT16);
}

LB_V512 void lb_tile_epilogue_hsw_mul(const lb_gemm_tile *t, int64_t m, int64_t nb, int mr,
                                      int nv, const __m512i *acc, const int METHOD,
                                      const int PM, const int OUT16) {
    const lb_epilogue *ep = t->ep;
    const lb_post post = *ep->post;
    const lb_requant rq = ep->rq, prq = post.rq;
    const __m512i one = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
    const lb_hm_consts c = lb_hm_consts_load(&post, PM);
    const int plsh = PM == LB_RQ_Q31 && prq.p1[0] != 0, prsh = PM == LB_RQ_Q31 && prq.p2[0] != 0;
    char *const C = (char *)t->C;
    const int64_t ldc = t->ldc, N = t->N;
    for (int v = 0; v < nv; v++) {
        int64_t n0 = (nb + v) * 16;
        if (n0 >= N) break;
        __mmask16 k = lb_tail_mask(N - n0);
        lb_hm_block b;
        b.qmin = _mm512_set1_epi32(rq.qmin);
        b.qmax = _mm512_set1_epi32(rq.qmax);
        b.off = _mm512_loadu_si512(ep->col_offset + n0);
        b.zp = _mm512_loadu_si512(rq.zero_point + n0);
        b.p0 = _mm512_loadu_si512(rq.p0 + n0);
        b.p1 = _mm512_loadu_si512(rq.p1 + n0);
        b.p2 = _mm512_loadu_si512(rq.p2 + n0);
        b.clip = b.negclip = b.rnd = zero;
        if (METHOD == LB_RQ_PRESCALE) {
            b.clip = _mm512_loadu_si512(rq.p3 + n0);
            b.negclip = _mm512_sub_epi32(zero, b.clip);
            b.rnd = _mm512_sllv_epi32(one, _mm512_sub_epi32(b.p2, one));
        }
        lb_q31_prep(b.p0, b.p2, &b.modd, &b.mask, &b.rrnd, &b.rpos);
        b.mulv = _mm512_loadu_si512(post.mul + n0);
        /* q31's shifts of this block: lanes beyond N hold zeros (arrays padded to 16) */
        int lsh = METHOD == LB_RQ_Q31 && _mm512_test_epi32_mask(b.p1, b.p1) != 0;
        int rsh = METHOD == LB_RQ_Q31 && _mm512_test_epi32_mask(b.p2, b.p2) != 0;
#define LB_HM_ROWS(L, R, PL, PR) \
    lb_hm_rows(C, ldc, m, n0, k, mr, acc, v, &c, &b, METHOD, PM, L, R, PL, PR, OUT16)
        if (METHOD == LB_RQ_Q31 && !lsh && rsh && !plsh && !prsh)
            LB_HM_ROWS(0, 1, 0, 0); /* the common case (PP-OCR's) */
        else if (METHOD == LB_RQ_Q31 && !lsh && rsh && !plsh && prsh)
            LB_HM_ROWS(0, 1, 0, 1);
        else if (!plsh && !prsh)
            LB_HM_ROWS(1, 1, 0, 0);
        else
            LB_HM_ROWS(1, 1, 1, 1); /* every branch's work (the same results when unneeded) */
#undef LB_HM_ROWS
    }
}

#define LB_HSW_MUL_FN(METHOD, PM, OUT16)                                                     \
    LB_TARGET_AVX512 __attribute__((noinline)) static void                                    \
        lb_hsw_mul_##METHOD##_##PM##_##OUT16(const lb_gemm_tile *t, int64_t m, int64_t nb,    \
                                             int mr, int nv, const __m512i *acc) {            \
        lb_tile_epilogue_hsw_mul(t, m, nb, mr, nv, acc, METHOD, PM, OUT16);                  \
    }
#define LB_HSW_MUL_OUT(M, P) LB_HSW_MUL_FN(M, P, 0) LB_HSW_MUL_FN(M, P, 1)
LB_HSW_MUL_OUT(0, 0)
LB_HSW_MUL_OUT(0, 1)
LB_HSW_MUL_OUT(1, 0)
LB_HSW_MUL_OUT(1, 1)
#define LB_HSW_MUL_NAMES(M, P) {lb_hsw_mul_##M##_##P##_0, lb_hsw_mul_##M##_##P##_1}
static const lb_epi_fn lb_hsw_muls[2][2][2] = {
    {LB_HSW_MUL_NAMES(0, 0), LB_HSW_MUL_NAMES(0, 1)},
    {LB_HSW_MUL_NAMES(1, 0), LB_HSW_MUL_NAMES(1, 1)}};

/* The table kind of a post stage for lb_posts: 0 none, 1 uint8, 2 int16, 3 uint16, 4 the
 * float32 HardSwish. */
static int lb_post_tt(const lb_post *p) {
    if (p->hsw) return 4;
    if (!p->table) return 0;
    return p->table_type == LB_U8 ? 1 : p->table_type == LB_I16 ? 2 : 3;
}

/* Other post-stage epilogues: the general epilogue per 16 columns, then the post stage. */
LB_TARGET_AVX512 __attribute__((noinline)) static void lb_epi_post(
    const lb_gemm_tile *t, int64_t m, int64_t nb, int mr, int nv, const __m512i *acc) {
    const lb_epilogue *ep = t->ep;
    lb_add512 addv;
    memset(&addv, 0, sizeof(addv));
    if (ep->residual) addv = lb_add512_load(ep->add);
    for (int v = 0; v < nv; v++) {
        int64_t n0 = (nb + v) * 16;
        if (n0 >= t->N) break;
        lb_rq512 rv;
        memset(&rv, 0, sizeof(rv));
        if (ep->out_type != LB_I32 && ep->out_type != LB_F32) rv = lb_rq512_load(&ep->rq, n0);
        for (int r = 0; r < mr; r++)
            lb_epilogue_v512(t, m + r, n0, _mm512_load_si512(acc + r * LB_NV + v), &rv, &addv);
    }
}

LB_TARGET_AVX512 __attribute__((noinline)) static void lb_tile_epilogue(
    const lb_gemm_tile *t, int64_t m, int64_t nb, int mr, int nv, const __m512i *acc) {
    const lb_epilogue *ep = t->ep;
    int method = ep->rq.method, out = ep->out_type;
    if (out == LB_I32) {
        lb_epi_i32(t, m, nb, mr, nv, acc);
        return;
    }
    if (ep->post) { /* the product's codes, then the post stage */
        const lb_post *p = ep->post;
        if ((method == LB_RQ_Q31 || method == LB_RQ_PRESCALE) && p->hsw && p->mul &&
            (p->rq.method == LB_RQ_Q31 || p->rq.method == LB_RQ_PRESCALE) && !ep->residual &&
            !ep->col_zb && (out == LB_U8 || out == LB_I16 || out == LB_U16)) {
            lb_hsw_muls[method][p->rq.method][out != LB_U8](t, m, nb, mr, nv, acc);
            return;
        }
        if ((method == LB_RQ_Q31 || method == LB_RQ_PRESCALE) &&
            (out == LB_U8 || out == LB_I16 || out == LB_U16) &&
            (!ep->post->mul || ep->post->rq.method == LB_RQ_Q31 ||
             ep->post->rq.method == LB_RQ_PRESCALE))
            lb_posts[method][lb_post_tt(ep->post)][ep->post->mul != NULL](t, m, nb, mr, nv, acc);
        else
            lb_epi_post(t, m, nb, mr, nv, acc);
        return;
    }
    if (ep->bounded && method == LB_RQ_PRESCALE && out == LB_U8 &&
        (!ep->residual || ep->residual_split) && !ep->col_zb) {
        lb_epi_bounded(t, m, nb, mr, nv, acc);
        return;
    }
    if ((method == LB_RQ_Q31 || method == LB_RQ_PRESCALE) &&
        (out == LB_U8 || out == LB_I16 || out == LB_U16)) {
        lb_epis[method][out != LB_U8][ep->residual != NULL][ep->col_zb != NULL](t, m, nb, mr, nv,
                                                                                 acc);
        return;
    }
    lb_add512 addv;
    memset(&addv, 0, sizeof(addv));
    if (ep->residual) addv = lb_add512_load(ep->add);
    for (int v = 0; v < nv; v++) {
        int64_t n0 = (nb + v) * 16;
        if (n0 >= t->N) break;
        lb_rq512 rv;
        memset(&rv, 0, sizeof(rv));
        if (ep->out_type != LB_I32 && ep->out_type != LB_F32)
            rv = lb_rq512_load(&ep->rq, n0);
        for (int r = 0; r < mr; r++)
            lb_epilogue_v512(t, m + r, n0, _mm512_load_si512(acc + r * LB_NV + v), &rv, &addv);
    }
}

/* The epilogue of mr rows (any number) x nv blocks of stored accumulators for other kernels
 * (the AMX one): acc is 64-byte aligned, row r's block v at acc + (r * LB_NV + v) * 16. */
LB_TARGET_AVX512 void lb_gemm_epilogue_avx512(const lb_gemm_tile *t, int64_t m, int64_t nb,
                                              int mr, int nv, const int32_t *acc) {
    lb_tile_epilogue(t, m, nb, mr, nv, (const __m512i *)acc);
}

/* The K loop of one tile of MR rows x NV blocks of 16 columns (constants after inlining);
 * stores the accumulators to out[r * LB_NV + v]. The accumulators are named variables, not an
 * array: gcc keeps named vectors in registers but copied an array of them around. */
#define LB_ROW(r)                                                                  \
    const uint8_t *a##r = t->A + (m + (MR > r ? r : 0)) * t->lda;                  \
    __m512i c##r##0 = _mm512_setzero_si512(), c##r##1 = c##r##0, c##r##2 = c##r##0, \
            c##r##3 = c##r##0;
#define LB_STEP(r, A4)                                                            \
    if (MR > r) {                                                                 \
        __m512i av = _mm512_set1_epi32(A4);                                       \
        c##r##0 = lb_dp_v512(c##r##0, av, b0, HALF && NV == 1);                  \
        if (NV > 1) c##r##1 = lb_dp_v512(c##r##1, av, b1, HALF && NV == 2);      \
        if (NV > 2) c##r##2 = lb_dp_v512(c##r##2, av, b2, HALF && NV == 3);      \
        if (NV > 3) c##r##3 = lb_dp_v512(c##r##3, av, b3, HALF && NV == 4);      \
    }
#define LB_LOADB(g)                                                                        \
    __m512i b0 = lb_loadb_v512(pb + (g) * 64, HALF && NV == 1), b1 = b0, b2 = b0, b3 = b0;  \
    if (NV > 1) b1 = lb_loadb_v512(pb + k4 * 64 + (g) * 64, HALF && NV == 2);             \
    if (NV > 2) b2 = lb_loadb_v512(pb + 2 * k4 * 64 + (g) * 64, HALF && NV == 3);         \
    if (NV > 3) b3 = lb_loadb_v512(pb + 3 * k4 * 64 + (g) * 64, HALF && NV == 4);

/* One K step of a column block: with HALF (a last block of at most 8 columns) on its low 8
 * lanes only, 256 bits wide (half the work where 512-bit operations run as two halves); the
 * upper lanes stay 0, the value a full-width step computes there from the zero-packed B. */
LB_V512 __m512i lb_dp_v512(__m512i c, __m512i a, __m512i b, const int HALF) {
    if (HALF)
        return _mm512_zextsi256_si512(_mm256_dpbusd_epi32(
            _mm512_castsi512_si256(c), _mm512_castsi512_si256(a), _mm512_castsi512_si256(b)));
    return _mm512_dpbusd_epi32(c, a, b);
}

/* 64 bytes of packed B, or with HALF only the 32 that lb_dp_v512 reads (upper lanes unset). */
LB_V512 __m512i lb_loadb_v512(const int8_t *p, const int HALF) {
    if (HALF) return _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_loadu_si512(p);
}
#define LB_STORE(r)                                                          \
    if (MR > r) {                                                            \
        _mm512_store_si512(out + r * LB_NV, c##r##0);                        \
        if (NV > 1) _mm512_store_si512(out + r * LB_NV + 1, c##r##1);        \
        if (NV > 2) _mm512_store_si512(out + r * LB_NV + 2, c##r##2);        \
        if (NV > 3) _mm512_store_si512(out + r * LB_NV + 3, c##r##3);        \
    }

LB_V512 int32_t lb_tail_a4(const uint8_t *p, __mmask16 tail) {
    return _mm_cvtsi128_si32(_mm_maskz_loadu_epi8(tail, p));
}

LB_V512 int32_t lb_load_a4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

LB_V512 void lb_tile_v512(const lb_gemm_tile *t, int64_t m, int64_t nb, const int MR,
                          const int NV, __m512i *out, const int FUSED, const int RES,
                          const int HALF) {
    const int64_t k4 = t->B->k4, kfull = t->K / 4;
    /* the last 1-3 steps of K (if any) are added by lb_tile_tail: with them in this function
     * gcc 12 kept the accumulators on the stack */
    const int8_t *pb = t->B->data + nb * k4 * 64;
    LB_ROW(0) LB_ROW(1) LB_ROW(2) LB_ROW(3) LB_ROW(4) LB_ROW(5)
    for (int64_t g = 0; g < kfull; g++) {
        LB_LOADB(g)
        LB_STEP(0, lb_load_a4(a0 + g * 4))
        LB_STEP(1, lb_load_a4(a1 + g * 4))
        LB_STEP(2, lb_load_a4(a2 + g * 4))
        LB_STEP(3, lb_load_a4(a3 + g * 4))
        LB_STEP(4, lb_load_a4(a4 + g * 4))
        LB_STEP(5, lb_load_a4(a5 + g * 4))
    }
    if (FUSED) { /* the bounded epilogue on the registers (K % 4 == 0) */
        lb_fused_block(t, m, nb, 0, MR, RES, c00, c10, c20, c30, c40, c50);
        if (NV > 1) lb_fused_block(t, m, nb, 1, MR, RES, c01, c11, c21, c31, c41, c51);
        if (NV > 2) lb_fused_block(t, m, nb, 2, MR, RES, c02, c12, c22, c32, c42, c52);
        if (NV > 3) lb_fused_block(t, m, nb, 3, MR, RES, c03, c13, c23, c33, c43, c53);
        return;
    }
    LB_STORE(0) LB_STORE(1) LB_STORE(2) LB_STORE(3) LB_STORE(4) LB_STORE(5)
}

/* Adds the last K % 4 steps to a tile's stored accumulators; a masked load reads only the
 * bytes inside each row. */
LB_TARGET_AVX512 __attribute__((noinline)) static void lb_tile_tail(
    const lb_gemm_tile *t, int64_t m, int64_t nb, int mr, int nv, __m512i *acc) {
    const int64_t k4 = t->B->k4, kfull = t->K / 4;
    const __mmask16 tail = (__mmask16)((1u << (t->K - kfull * 4)) - 1u);
    for (int r = 0; r < mr; r++) {
        __m512i av = _mm512_set1_epi32(lb_tail_a4(t->A + (m + r) * t->lda + kfull * 4, tail));
        for (int v = 0; v < nv; v++) {
            __m512i b = _mm512_loadu_si512(t->B->data + ((nb + v) * k4 + kfull) * 64);
            acc[r * LB_NV + v] = _mm512_dpbusd_epi32(acc[r * LB_NV + v], av, b);
        }
    }
}

/* One non-inlined function per tile shape: compiled alone, each K loop keeps its accumulators
 * in registers (inlined into one dispatcher, gcc 12 shuffled them through the stack). */
typedef void (*lb_tile_fn)(const lb_gemm_tile *, int64_t, int64_t, __m512i *);
#define LB_TILE_FN_H(MR, NV, HALF, SUFFIX)                                              \
    LB_TARGET_AVX512 __attribute__((noinline)) static void lb_tile_##MR##_##NV##SUFFIX( \
        const lb_gemm_tile *t, int64_t m, int64_t nb, __m512i *out) {                 \
        lb_tile_v512(t, m, nb, MR, NV, out, 0, 0, HALF);                              \
    }                                                                                 \
    LB_TARGET_AVX512 __attribute__((noinline)) static void lb_fused_##MR##_##NV##SUFFIX( \
        const lb_gemm_tile *t, int64_t m, int64_t nb, __m512i *out) {                 \
        lb_tile_v512(t, m, nb, MR, NV, out, 1, 0, HALF);                              \
    }                                                                                 \
    LB_TARGET_AVX512 __attribute__((noinline)) static void lb_fusedres_##MR##_##NV##SUFFIX( \
        const lb_gemm_tile *t, int64_t m, int64_t nb, __m512i *out) {                 \
        lb_tile_v512(t, m, nb, MR, NV, out, 1, 1, HALF);                              \
    }
#define LB_TILE_FN(MR, NV) LB_TILE_FN_H(MR, NV, 0, ) LB_TILE_FN_H(MR, NV, 1, _h)
#define LB_TILE_ROW(MR) LB_TILE_FN(MR, 1) LB_TILE_FN(MR, 2) LB_TILE_FN(MR, 3) LB_TILE_FN(MR, 4)
LB_TILE_ROW(1)
LB_TILE_ROW(2)
LB_TILE_ROW(3)
LB_TILE_ROW(4)
LB_TILE_ROW(5)
LB_TILE_ROW(6)
#define LB_NAMES_H(KIND, MR, S) \
    {lb_##KIND##_##MR##_1##S, lb_##KIND##_##MR##_2##S, lb_##KIND##_##MR##_3##S, \
     lb_##KIND##_##MR##_4##S}
#define LB_NAMES(KIND, S)                                                          \
    {LB_NAMES_H(KIND, 1, S), LB_NAMES_H(KIND, 2, S), LB_NAMES_H(KIND, 3, S),      \
     LB_NAMES_H(KIND, 4, S), LB_NAMES_H(KIND, 5, S), LB_NAMES_H(KIND, 6, S)}
/* [half][mr - 1][nv - 1]: half = the last column block has at most 8 columns */
static const lb_tile_fn lb_tiles[2][LB_MR][LB_NV] = {LB_NAMES(tile, ), LB_NAMES(tile, _h)};
static const lb_tile_fn lb_fused[2][LB_MR][LB_NV] = {LB_NAMES(fused, ), LB_NAMES(fused, _h)};
static const lb_tile_fn lb_fusedres[2][LB_MR][LB_NV] = {LB_NAMES(fusedres, ),
                                                        LB_NAMES(fusedres, _h)};

LB_TARGET_AVX512 void lb_gemm_block_avx512(const lb_gemm_tile *t, int64_t m0, int64_t m1,
                                           int64_t nb0, int64_t nb1) {
    __attribute__((aligned(64))) __m512i acc[LB_MR * LB_NV];
    const lb_epilogue *ep = t->ep;
    /* the bounded epilogue straight from the K loop's registers */
    const int fused = ep->bounded && !ep->post && ep->rq.method == LB_RQ_PRESCALE &&
                      ep->out_type == LB_U8 && (!ep->residual || ep->residual_split) &&
                      !ep->col_zb && t->K % 4 == 0;
    for (int64_t nb = nb0; nb < nb1; nb += LB_NV) {
        int nv = (int)LB_MIN(LB_NV, nb1 - nb);
        const int half = t->N - (nb + nv - 1) * 16 <= 8;
        const lb_tile_fn(*fused_fns)[LB_NV] = ep->residual ? lb_fusedres[half] : lb_fused[half];
        for (int64_t m = m0; m < m1; m += LB_MR) {
            int mr = (int)LB_MIN(LB_MR, m1 - m);
            if (fused) {
                fused_fns[mr - 1][nv - 1](t, m, nb, acc);
                continue;
            }
            lb_tiles[half][mr - 1][nv - 1](t, m, nb, acc);
            if (t->K % 4) lb_tile_tail(t, m, nb, mr, nv, acc);
            lb_tile_epilogue(t, m, nb, mr, nv, acc);
        }
    }
}
#endif /* LB_HAVE_AVX512 */

/* AVX-512 VNNI tiles of the dynamic product: up to 6 rows x 32 columns. Per group of K, the
 * int32 sums of 6 x 2 vectors come from `vpdpbusd` (uint8 A broadcast 4 bytes at a time, int8
 * B, no saturation); one `vpdpwssd` adds both zero-point corrections, (-za) (sum b - len zb) +
 * (-ra) zb, from 16-bit pairs prepared per row (driver) and per column (packing). The group's
 * exact sum is then dequantized in float32, y = y + (float(acc) * sb) * sa, in 12 float
 * accumulators that live across the groups. Whole-K products (group 0) dequantize once, in
 * float64, as the reference. */
#include "rt_tf_internal.h"

#if LB_HAVE_AVX512
#include "rt_dmm_epi512.h"

#define LB_DMM_MR 6
#define LB_DMM_NV 2

LB_V512 __mmask16 lb_dmm_mask(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

LB_V512 int32_t lb_dmm_a4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The last 1-3 bytes of a row (zero beyond: the packed B is zero there). */
LB_V512 int32_t lb_dmm_a4_tail(const uint8_t *p, int64_t n) {
    return _mm_cvtsi128_si32(_mm_maskz_loadu_epi8((__mmask16)((1u << n) - 1u), p));
}

/* acc + the 4-byte dot products of a (uint8) and b (int8) per lane: `vpdpbusd` in inline
 * assembly. GCC 12's _mm512_dpbusd_epi32 does not tie the accumulator to the instruction's
 * destination: in the tiles it copied every accumulator to another register and back on
 * every step (24 moves per 12 `vpdpbusd` in the 6 x 2 tile). Same instruction, same bits. */
LB_V512 __m512i lb_dmm_dpbusd(__m512i acc, __m512i a, __m512i b) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "vm"(b));
    return acc;
}

#define LB_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)

/* One tile of MR rows (from m) and NV blocks of 16 columns (from nb); MR, NV constants after
 * inlining. GROUPED selects the float32 per-group chain or the float64 whole-K epilogue. */
LB_V512 void lb_dmm_tile_v512(const lb_dmm_tile *t, int64_t m, int64_t nb, const int MR,
                              const int NV, const int GROUPED) {
    const lb_dmm *p = t->p;
    const lb_dmm_b *B = p->b + t->b * p->b_step;
    const int64_t k4 = B->k4, kfull = p->K / 4, tail = p->K % 4;
    const int64_t G = GROUPED ? (p->K + p->group - 1) / p->group : 1;
    const int64_t g4 = GROUPED ? p->group / 4 : k4;
    const int64_t r0 = m - t->m0;
    const int8_t *pb = B->data + nb * k4 * 64;
#define LB_AROW(r) const uint8_t *a##r = t->a + (r0 + (MR > r ? r : 0)) * t->lda;
    LB_ROWS(LB_AROW)
#undef LB_AROW
    __m512 y00 = _mm512_setzero_ps(), y01 = y00, y10 = y00, y11 = y00, y20 = y00, y21 = y00,
           y30 = y00, y31 = y00, y40 = y00, y41 = y00, y50 = y00, y51 = y00;
    __m512i c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    for (int64_t j = 0; j < G; j++) {
        const int64_t s0 = j * g4, s1 = LB_MIN(k4, s0 + g4), sfull = LB_MIN(s1, kfull);
        c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 =
            _mm512_setzero_si512();
        /* whole steps of 4 bytes, then at most one step of the last 1-3 bytes of K (the
         * choice of load out of the loop) */
#define LB_STEP(r, A4)                                                                    \
    if (MR > r) {                                                                         \
        __m512i av = _mm512_set1_epi32(A4);                                               \
        c##r##0 = lb_dmm_dpbusd(c##r##0, av, b0);                                         \
        if (NV > 1) c##r##1 = lb_dmm_dpbusd(c##r##1, av, b1);                             \
    }
#define LB_WHOLE(r) LB_STEP(r, lb_dmm_a4(a##r + s * 4))
#define LB_TAIL(r) LB_STEP(r, lb_dmm_a4_tail(a##r + s * 4, tail))
        int64_t s = s0;
        for (; s < sfull; s++) {
            __m512i b0 = _mm512_loadu_si512(pb + s * 64), b1 = b0;
            if (NV > 1) b1 = _mm512_loadu_si512(pb + k4 * 64 + s * 64);
            LB_ROWS(LB_WHOLE)
        }
        if (s < s1) {
            __m512i b0 = _mm512_loadu_si512(pb + s * 64), b1 = b0;
            if (NV > 1) b1 = _mm512_loadu_si512(pb + k4 * 64 + s * 64);
            LB_ROWS(LB_TAIL)
        }
#undef LB_TAIL
#undef LB_WHOLE
#undef LB_STEP
        if (GROUPED) {
            const int64_t at0 = (nb * G + j) * 16, at1 = ((nb + 1) * G + j) * 16;
            const __m512i bc0 = _mm512_loadu_si512(B->corr + at0);
            const __m512 sb0 = _mm512_loadu_ps(B->scale + at0);
            __m512i bc1 = bc0;
            __m512 sb1 = sb0;
            if (NV > 1) {
                bc1 = _mm512_loadu_si512(B->corr + at1);
                sb1 = _mm512_loadu_ps(B->scale + at1);
            }
#define LB_GROUP_EPI(r)                                                                     \
    if (MR > r) {                                                                           \
        const __m512i zc = _mm512_set1_epi32(t->azc[(r0 + r) * G + j]);                    \
        const __m512 sa = _mm512_set1_ps(t->asa[(r0 + r) * G + j]);                         \
        __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_dpwssd_epi32(c##r##0, zc, bc0)), \
                                 sb0);                                                      \
        y##r##0 = _mm512_add_ps(y##r##0, _mm512_mul_ps(f, sa));                             \
        if (NV > 1) {                                                                       \
            f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_dpwssd_epi32(c##r##1, zc, bc1)),    \
                              sb1);                                                         \
            y##r##1 = _mm512_add_ps(y##r##1, _mm512_mul_ps(f, sa));                         \
        }                                                                                   \
    }
            LB_ROWS(LB_GROUP_EPI)
#undef LB_GROUP_EPI
        }
    }
    if (!GROUPED) {
        /* acc = sum a b - za sum b - zb ra + K za zb (wrapping int32, exact in the end), then
         * y = float32(double(acc) * (double(sa) * double(sb))) */
        const __m512i kk = _mm512_set1_epi32((int32_t)p->K);
#define LB_WHOLE_EPI_V(r, v)                                                                 \
    {                                                                                        \
        const int64_t n0 = (nb + v) * 16;                                                    \
        __m512d sblo, sbhi;                                                                  \
        lb_dmm_scales_pd(_mm512_loadu_ps(B->scale + n0), &sblo, &sbhi);                      \
        y##r##v = lb_dmm_whole512(c##r##v, _mm512_set1_epi32(t->aza[r0 + r]),                \
                                  _mm512_set1_epi32(t->ara[r0 + r]), kk,                     \
                                  _mm512_loadu_si512(B->corr + n0),                          \
                                  _mm512_loadu_si512(B->zero + n0),                          \
                                  _mm512_set1_pd((double)t->asa[r0 + r]), sblo, sbhi);       \
    }
#define LB_WHOLE_EPI(r)                        \
    if (MR > r) {                              \
        LB_WHOLE_EPI_V(r, 0)                   \
        if (NV > 1) LB_WHOLE_EPI_V(r, 1)       \
    }
        LB_ROWS(LB_WHOLE_EPI)
#undef LB_WHOLE_EPI
#undef LB_WHOLE_EPI_V
    }
#define LB_STORE(r)                                                                       \
    if (MR > r) {                                                                         \
        const int64_t row = m + r;                                                        \
        float *out = t->y + (row - t->m0) * t->ldy;                                        \
        const int64_t n0 = nb * 16;                                                       \
        __mmask16 k0 = lb_dmm_mask(p->N - n0);                                            \
        _mm512_mask_storeu_ps(out + n0, k0, lb_dmm_adds(p, t->b, row, n0, k0, y##r##0));  \
        if (NV > 1) {                                                                     \
            __mmask16 k1 = lb_dmm_mask(p->N - n0 - 16);                                   \
            _mm512_mask_storeu_ps(out + n0 + 16, k1,                                      \
                                  lb_dmm_adds(p, t->b, row, n0 + 16, k1, y##r##1));       \
        }                                                                                 \
    }
    LB_ROWS(LB_STORE)
#undef LB_STORE
}

typedef void (*lb_dmm_tile_fn)(const lb_dmm_tile *, int64_t, int64_t);
#define LB_DMM_FN(MR, NV, GR)                                                                 \
    LB_TARGET_AVX512 __attribute__((noinline)) static void lb_dmm_##MR##_##NV##_##GR(         \
        const lb_dmm_tile *t, int64_t m, int64_t nb) {                                        \
        lb_dmm_tile_v512(t, m, nb, MR, NV, GR);                                               \
    }
#define LB_DMM_ROW(MR) LB_DMM_FN(MR, 1, 1) LB_DMM_FN(MR, 2, 1) LB_DMM_FN(MR, 1, 0) \
    LB_DMM_FN(MR, 2, 0)
LB_DMM_ROW(1)
LB_DMM_ROW(2)
LB_DMM_ROW(3)
LB_DMM_ROW(4)
LB_DMM_ROW(5)
LB_DMM_ROW(6)
#define LB_DMM_NAMES(MR) \
    {{lb_dmm_##MR##_1_0, lb_dmm_##MR##_1_1}, {lb_dmm_##MR##_2_0, lb_dmm_##MR##_2_1}}
static const lb_dmm_tile_fn lb_dmm_tiles[LB_DMM_MR][LB_DMM_NV][2] = {
    LB_DMM_NAMES(1), LB_DMM_NAMES(2), LB_DMM_NAMES(3),
    LB_DMM_NAMES(4), LB_DMM_NAMES(5), LB_DMM_NAMES(6)};

LB_TARGET_AVX512 void lb_sums32_avx512(const uint8_t *a, int64_t groups, int32_t *out) {
    int64_t j = 0;
    for (; j + 2 <= groups; j += 2) { /* two groups: 8 sums of 8 bytes, then 4 + 4 */
        const __m512i s = _mm512_sad_epu8(_mm512_loadu_si512(a + j * 32), _mm512_setzero_si512());
        const __m256i h = _mm512_castsi512_si256(s), k = _mm512_extracti64x4_epi64(s, 1);
        const __m128i lo = _mm_add_epi64(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        const __m128i hi = _mm_add_epi64(_mm256_castsi256_si128(k), _mm256_extracti128_si256(k, 1));
        out[j] = (int32_t)(_mm_cvtsi128_si64(lo) + _mm_extract_epi64(lo, 1));
        out[j + 1] = (int32_t)(_mm_cvtsi128_si64(hi) + _mm_extract_epi64(hi, 1));
    }
    for (; j < groups; j++) {
        const __m256i s = _mm256_sad_epu8(_mm256_loadu_si256((const __m256i *)(a + j * 32)),
                                          _mm256_setzero_si256());
        const __m128i lo = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        out[j] = (int32_t)(_mm_cvtsi128_si64(lo) + _mm_extract_epi64(lo, 1));
    }
}

/* Sums of `groups` whole groups of `group` codes (32, 64 or 128: 64 bytes by vpsadbw). */
LB_TARGET_AVX512 void lb_group_sums_avx512(const uint8_t *a, int64_t groups, int64_t group,
                                           int32_t *out) {
    if (group == 32) {
        lb_sums32_avx512(a, groups, out);
        return;
    }
    for (int64_t j = 0; j < groups; j++) {
        __m512i s = _mm512_setzero_si512();
        for (int64_t c = 0; c < group; c += 64)
            s = _mm512_add_epi64(
                s, _mm512_sad_epu8(_mm512_loadu_si512(a + j * group + c), _mm512_setzero_si512()));
        out[j] = (int32_t)_mm512_reduce_add_epi64(s);
    }
}

LB_TARGET_AVX512 void lb_dmm_tile_avx512(const lb_dmm_tile *t) {
    const int grouped = t->p->group > 0;
    for (int64_t nb = t->nb0; nb < t->nb1; nb += LB_DMM_NV) {
        int nv = (int)LB_MIN(LB_DMM_NV, t->nb1 - nb);
        for (int64_t m = t->m0; m < t->m1; m += LB_DMM_MR) {
            int mr = (int)LB_MIN(LB_DMM_MR, t->m1 - m);
            lb_dmm_tiles[mr - 1][nv - 1][grouped](t, m, nb);
        }
    }
}
#endif /* LB_HAVE_AVX512 */

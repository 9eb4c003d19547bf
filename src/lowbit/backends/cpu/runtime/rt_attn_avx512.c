/* AVX-512 packing of the fused attention's run-time B matrices (rt_attn.c): K^T of Q.K^T
 * (codes of a column are 4 consecutive bytes, s_k == 1) and V of P.V (4 rows of 16
 * contiguous codes, s_n == 1), in lb_dmm_pack_run_one's layout (lowbit_rt_tf.h, lb_dmm_b)
 * byte for byte: per block of 16 columns and step of 4 rows of K the 16 dwords of codes
 * XOR 0x80 (int8), per group the scales and the corrections
 *   corr = (int16)(sum_k (b - 128) - len (zb - 128)) | (int16)(zb - 128) << 16,
 * with sum_k (b - 128) - len (zb - 128) = sum_k b - len zb (the same integer), the sums of
 * codes taken by `vpdpbusd` with ones (exact). Lanes of columns past n are 0 everywhere, as
 * the portable packing's memset leaves them. */
#include "rt_tf_internal.h"

#if LB_HAVE_AVX512
#include "rt_vec512.h"

/* 16 dwords of step kk (rows kk .. kk + 3 of K) of the columns n0 .. n0 + 15 in `m` */
LB_V512 __m512i lb_attn_pack_step(const lb_dmm_pack *p, const uint8_t *src, int64_t kk,
                                  int64_t n0, __mmask16 m, __m512i cols) {
    if (p->s_k == 1)
        return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, cols,
                                           src + n0 * p->s_n + kk, 1);
    /* s_n == 1: four rows of 16 bytes, interleaved byte by byte into dwords */
    const uint8_t *r = src + kk * p->s_k + n0;
    const __m128i r0 = _mm_maskz_loadu_epi8(m, r), r1 = _mm_maskz_loadu_epi8(m, r + p->s_k);
    const __m128i r2 = _mm_maskz_loadu_epi8(m, r + 2 * p->s_k);
    const __m128i r3 = _mm_maskz_loadu_epi8(m, r + 3 * p->s_k);
    const __m128i a = _mm_unpacklo_epi8(r0, r1), b = _mm_unpackhi_epi8(r0, r1);
    const __m128i c = _mm_unpacklo_epi8(r2, r3), d = _mm_unpackhi_epi8(r2, r3);
    const __m256i lo = _mm256_set_m128i(_mm_unpackhi_epi16(a, c), _mm_unpacklo_epi16(a, c));
    const __m256i hi = _mm256_set_m128i(_mm_unpackhi_epi16(b, d), _mm_unpacklo_epi16(b, d));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

LB_TARGET_AVX512 int lb_attn_pack_avx512(const lb_dmm_pack *p, uint8_t *base, lb_dmm_b *d) {
    const int64_t n = p->n, k = p->k, g = p->group;
    if (p->signed_codes || g <= 0 || g % 4 || k % 4 || (p->s_k != 1 && p->s_n != 1) ||
        (p->s_k == 1 && (n - 1) * p->s_n > INT32_MAX))
        return 0;
    const int64_t nblocks = (n + 15) / 16, k4 = k / 4, G = (k + g - 1) / g;
    int8_t *data = (int8_t *)base;
    float *scale = (float *)(base + (nblocks * k4 * 64 + 63) / 64 * 64);
    int32_t *corr = (int32_t *)((uint8_t *)scale + (nblocks * G * 16 * 4 + 63) / 64 * 64);
    int32_t *zero = (int32_t *)((uint8_t *)corr + (nblocks * G * 16 * 4 + 63) / 64 * 64);
    const uint8_t *src = (const uint8_t *)p->src;
    const uint8_t *zsrc = (const uint8_t *)p->zero;
    memset(zero, 0, (size_t)(nblocks * 16 * 4));
    const __m512i flip = _mm512_set1_epi32((int32_t)0x80808080u);
    const __m512i ones = _mm512_set1_epi8(1);
    const __m512i cols = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int32_t)(p->s_k == 1 ? p->s_n : 0)));
    for (int64_t nb = 0; nb < nblocks; nb++) {
        int8_t *blk = data + nb * k4 * 64;
        const int64_t n0 = nb * 16, nc = LB_MIN(16, n - n0);
        const __mmask16 m = nc >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nc) - 1u);
        for (int64_t jj = 0; jj < G; jj++) {
            const int64_t kb = jj * g, ke = LB_MIN(k, kb + g);
            __m512i sum = _mm512_setzero_si512();
            for (int64_t kk = kb; kk < ke; kk += 4) {
                const __m512i v = lb_attn_pack_step(p, src, kk, n0, m, cols);
                sum = _mm512_dpbusd_epi32(sum, v, ones);
                _mm512_storeu_si512(blk + (kk / 4) * 64, _mm512_maskz_xor_epi32(m, v, flip));
            }
            /* per column: scale, and sum b - len zb | (zb - 128) << 16 */
            int32_t s[16];
            _mm512_storeu_si512(s, sum);
            const int32_t len = (int32_t)(ke - kb);
            float *sc = scale + (nb * G + jj) * 16;
            int32_t *co = corr + (nb * G + jj) * 16;
            for (int64_t i = 0; i < 16; i++) {
                if (i >= nc) {
                    sc[i] = 0.0f;
                    co[i] = 0;
                    continue;
                }
                const int64_t at = jj * p->p_group + (n0 + i) * p->p_n;
                const int32_t z = zsrc[at];
                sc[i] = p->scale[at];
                co[i] = (int32_t)((uint32_t)(uint16_t)(int16_t)(s[i] - len * z) |
                                  ((uint32_t)(uint16_t)(int16_t)(z - 128) << 16));
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
    return 1;
}
/* A-side dwords of groups of 32 codes: for slice s = r * G + g (row r < rows, group g < G),
 * codes at codes + r * ld + g * 32 and zero point zero[r * ldz + g], the sum ra of the 32
 * codes (vpsadbw, exact) and
 *   azc[s] = (uint16)(-za) | (uint16)(-ra) << 16
 * (lb_attn_aside's dword), 16 slices at a time: the slices p and p + 4 of each 8 share one
 * vector, whose four partial sums per half are added across lanes. */
LB_V512 __m512i lb_attn_sums8(const uint8_t *const *a) {
    __m512i r = _mm512_setzero_si512();
    for (int q = 0; q < 4; q++) {
        const __m512i x = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a[q])),
            _mm256_loadu_si256((const __m256i *)a[q + 4]), 1);
        __m512i t = _mm512_sad_epu8(x, _mm512_setzero_si512());
        t = _mm512_add_epi64(t, _mm512_shuffle_epi32(t, _MM_PERM_BADC));
        t = _mm512_add_epi64(t, _mm512_shuffle_i64x2(t, t, _MM_SHUFFLE(2, 3, 0, 1)));
        r = _mm512_mask_mov_epi64(r, (__mmask8)((1u << q) | (1u << (q + 4))), t);
    }
    return _mm512_castsi256_si512(_mm512_cvtepi64_epi32(r));
}

LB_TARGET_AVX512 void lb_attn_aside32_avx512(int64_t rows, int64_t G, const uint8_t *codes,
                                             int64_t ld, const uint8_t *zero, int64_t ldz,
                                             int32_t *azc) {
    const int64_t total = rows * G;
    int64_t s = 0, r = 0, g = 0; /* slice s is group g of row r */
    for (; s + 16 <= total; s += 16) {
        const uint8_t *a[16];
        uint8_t z[16];
        for (int i = 0; i < 16; i++) {
            a[i] = codes + r * ld + g * 32;
            z[i] = zero[r * ldz + g];
            if (++g == G) {
                g = 0;
                r++;
            }
        }
        const __m512i ra = _mm512_inserti64x4(lb_attn_sums8(a),
                                              _mm512_castsi512_si256(lb_attn_sums8(a + 8)), 1);
        const __m512i za = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)z));
        const __m512i lo = _mm512_and_si512(_mm512_sub_epi32(_mm512_setzero_si512(), za),
                                            _mm512_set1_epi32(0xFFFF));
        const __m512i hi = _mm512_slli_epi32(_mm512_sub_epi32(_mm512_setzero_si512(), ra), 16);
        _mm512_storeu_si512(azc + s, _mm512_or_si512(lo, hi));
    }
    for (; s < total; s++) {
        const __m256i t = _mm256_sad_epu8(
            _mm256_loadu_si256((const __m256i *)(codes + r * ld + g * 32)), _mm256_setzero_si256());
        const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        const int32_t ra = (int32_t)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1));
        const int32_t za = zero[r * ldz + g];
        azc[s] = (int32_t)((uint32_t)(uint16_t)(int16_t)(-za) |
                           ((uint32_t)(uint16_t)(int16_t)(-ra) << 16));
        if (++g == G) {
            g = 0;
            r++;
        }
    }
}
#endif /* LB_HAVE_AVX512 */

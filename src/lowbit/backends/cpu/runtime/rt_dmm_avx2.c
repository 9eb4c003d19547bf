/* AVX2 tiles of the dynamic product, on the same packed B as the VNNI ones: one row x 16
 * columns at a time. Codes are widened to int16 and multiplied by `vpmaddwd` (exact pair sums;
 * `vpmaddubsw` would saturate), four partial sums per column kept apart until the end of each
 * group and then added pairwise; the zero-point corrections are one more `vpmaddwd` of the
 * 16-bit pairs, and the float steps are those of the reference, 8 lanes at a time. */
#include "rt_tf_internal.h"

#if LB_HAVE_AVX2
#include <immintrin.h>

/* The int32 sums of steps [s0, s1) for 16 columns: lo (columns 0-7), hi (8-15). */
LB_TARGET_AVX2 static inline void lb_dmm2_sums(const int8_t *panel, const uint8_t *a,
                                               int64_t s0, int64_t s1, int64_t K,
                                               __m256i *lo, __m256i *hi) {
    __m256i acc[4];
    for (int i = 0; i < 4; i++) acc[i] = _mm256_setzero_si256();
    for (int64_t s = s0; s < s1; s++) {
        __m256i av = _mm256_cvtepu8_epi16(_mm_set1_epi32(lb_load4_packed(a, s, K)));
        for (int i = 0; i < 4; i++) {
            __m256i w = _mm256_cvtepi8_epi16(
                _mm_loadu_si128((const __m128i *)(panel + s * 64 + i * 16)));
            acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(av, w));
        }
    }
    *lo = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[0], acc[1]), 0xD8);
    *hi = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[2], acc[3]), 0xD8);
}

LB_TARGET_AVX2 static inline __m256 lb_dmm2_whole(__m256i acc, __m256i cs, __m256i zb,
                                                  int32_t za, int32_t ra, int64_t K, float sa,
                                                  __m256 sb) {
    const __m256i vza = _mm256_set1_epi32(za);
    acc = _mm256_sub_epi32(acc, _mm256_mullo_epi32(vza, cs));
    acc = _mm256_sub_epi32(acc, _mm256_mullo_epi32(zb, _mm256_set1_epi32(ra)));
    acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(_mm256_set1_epi32((int32_t)K * za), zb));
    const __m256d vsa = _mm256_set1_pd((double)sa);
    __m256d lo = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(acc)),
                               _mm256_mul_pd(vsa, _mm256_cvtps_pd(_mm256_castps256_ps128(sb))));
    __m256d hi = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(acc, 1)),
                               _mm256_mul_pd(vsa, _mm256_cvtps_pd(_mm256_extractf128_ps(sb, 1))));
    return _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
}

LB_TARGET_AVX2 void lb_dmm_tile_avx2(const lb_dmm_tile *t) {
    const lb_dmm *p = t->p;
    const lb_dmm_b *B = p->b + t->b * p->b_step;
    const int64_t k4 = B->k4, grouped = p->group > 0;
    const int64_t G = grouped ? (p->K + p->group - 1) / p->group : 1;
    const int64_t g4 = grouped ? p->group / 4 : k4;
    for (int64_t nb = t->nb0; nb < t->nb1; nb++) {
        const int8_t *panel = B->data + nb * k4 * 64;
        const int64_t n0 = nb * 16;
        for (int64_t m = t->m0; m < t->m1; m++) {
            const int64_t r = m - t->m0;
            const uint8_t *a = t->a + r * t->lda;
            __m256 y[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
            for (int64_t j = 0; j < G; j++) {
                __m256i s[2];
                lb_dmm2_sums(panel, a, j * g4, LB_MIN(k4, (j + 1) * g4), p->K, &s[0], &s[1]);
                const int64_t at = (nb * G + j) * 16;
                for (int h = 0; h < 2; h++) {
                    __m256 sb = _mm256_loadu_ps(B->scale + at + h * 8);
                    __m256i bc = _mm256_loadu_si256((const __m256i *)(B->corr + at + h * 8));
                    if (grouped) {
                        __m256i acc = _mm256_add_epi32(
                            s[h], _mm256_madd_epi16(_mm256_set1_epi32(t->azc[r * G + j]), bc));
                        __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), sb);
                        y[h] = _mm256_add_ps(y[h],
                                             _mm256_mul_ps(f, _mm256_set1_ps(t->asa[r * G + j])));
                    } else {
                        __m256i zb = _mm256_loadu_si256((const __m256i *)(B->zero + n0 + h * 8));
                        y[h] = lb_dmm2_whole(s[h], bc, zb, t->aza[r], t->ara[r], p->K,
                                             t->asa[r], sb);
                    }
                }
            }
            float out[16];
            _mm256_storeu_ps(out, y[0]);
            _mm256_storeu_ps(out + 8, y[1]);
            float *dst = t->y + (m - t->m0) * t->ldy;
            for (int64_t i = 0; i < 16 && n0 + i < p->N; i++) {
                float v = out[i];
                for (int q = 0; q < 3; q++) {
                    const lb_fadd *ad = &p->add[q];
                    if (ad->v) v = v + ad->v[t->b * ad->batch + m * ad->ld + n0 + i];
                }
                dst[n0 + i] = v;
            }
        }
    }
}
#endif /* LB_HAVE_AVX2 */

/* The AVX-512 steps both tile kernels of the whole-K dynamic product share (rt_dmm_avx512.c
 * on VNNI sums, rt_dmm_amx.c on AMX sums): the float result of 16 columns of one row from
 * their int32 sums, and the float Adds fused after the product. */
#ifndef LOWBIT_RT_DMM_EPI512_H
#define LOWBIT_RT_DMM_EPI512_H

#include "rt_tf_internal.h"

#if LB_HAVE_AVX512
#include "rt_vec512.h"

/* 16 columns of a whole-K row from their sums s = sum a b (wrapping int32):
 *   acc = s - za cs - zb ra + K za zb (exact in the end),
 *   y = float32(double(acc) * (double(sa) * double(sb)))
 * with za, ra (the row's zero point and code sum) and kk = K broadcast, cs, zb the columns'
 * code sums and zero points, sa the row's scale, sblo/sbhi the columns' scales in double. */
LB_V512 __m512 lb_dmm_whole512(__m512i s, __m512i za, __m512i ra, __m512i kk, __m512i cs,
                               __m512i zb, __m512d sa, __m512d sblo, __m512d sbhi) {
    __m512i acc = _mm512_sub_epi32(s, _mm512_mullo_epi32(za, cs));
    acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(zb, ra));
    acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(_mm512_mullo_epi32(kk, za), zb));
    const __m512d lo = _mm512_mul_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(acc)),
                                     _mm512_mul_pd(sa, sblo));
    const __m512d hi = _mm512_mul_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(acc, 1)),
                                     _mm512_mul_pd(sa, sbhi));
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi),
                              1);
}

/* The low and high 8 lanes of 16 float scales in double (lb_dmm_whole512's sblo, sbhi). */
LB_V512 void lb_dmm_scales_pd(__m512 sb, __m512d *lo, __m512d *hi) {
    *lo = _mm512_cvtps_pd(_mm512_castps512_ps256(sb));
    *hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sb), 1)));
}

/* y + add[i] for the stored row m, columns n0..n0+15 (lanes in `k`). */
LB_V512 __m512 lb_dmm_adds(const lb_dmm *p, int64_t b, int64_t m, int64_t n0, __mmask16 k,
                           __m512 y) {
    for (int i = 0; i < 3; i++) {
        const lb_fadd *ad = &p->add[i];
        if (ad->v) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(k, ad->v + b * ad->batch +
                                                                      m * ad->ld + n0));
    }
    return y;
}
#endif /* LB_HAVE_AVX512 */
#endif

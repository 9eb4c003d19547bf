/* AVX-512 loops of rt_dqtensor.c. Range: _mm512_min_ps(v, lo) is v < lo ? v : lo lane by
 * lane (NaN never replaces, nor does -0.0 the +0.0 start), the strict rule of the portable
 * loop; the lanes are then combined by it. Codes: v / scale rounded to nearest even, NaN to
 * 0, + zero, clamped to [0, top] by max/min (r is never NaN there), converted exactly. */
#include "rt_tf_internal.h"

#if LB_HAVE_AVX512
#include "rt_vec512.h"

LB_TARGET_AVX512 void lb_dqt_range_avx512(const float *x, int64_t n, float *lo, float *hi) {
    __m512 l = _mm512_setzero_ps(), h = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        l = _mm512_min_ps(v, l);
        h = _mm512_max_ps(v, h);
    }
    if (i < n) { /* lanes past the end read as 0.0, which changes nothing */
        const __m512 v = _mm512_maskz_loadu_ps(lb_tail_mask(n - i), x + i);
        l = _mm512_min_ps(v, l);
        h = _mm512_max_ps(v, h);
    }
    float ls[16], hs[16], L = 0.0f, H = 0.0f;
    _mm512_storeu_ps(ls, l);
    _mm512_storeu_ps(hs, h);
    for (int k = 0; k < 16; k++) {
        if (ls[k] < L) L = ls[k];
        if (hs[k] > H) H = hs[k];
    }
    *lo = L;
    *hi = H;
}

LB_TARGET_AVX512 void lb_dqt_codes_avx512(const float *x, int64_t n, float scale, float zero,
                                          float top, uint8_t *q) {
    const __m512 sc = _mm512_set1_ps(scale), zr = _mm512_set1_ps(zero),
                 tp = _mm512_set1_ps(top), z0 = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = lb_tail_mask(n - i);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m512 r = _mm512_roundscale_ps(_mm512_div_ps(v, sc),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), z0);
        r = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(r, zr), z0), tp);
        _mm512_mask_cvtepi32_storeu_epi8(q + i, m, _mm512_cvttps_epi32(r));
    }
}
#endif /* LB_HAVE_AVX512 */

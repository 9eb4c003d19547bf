/* The AVX-512 path of the non-overlapping ConvTranspose (rt_convt_impl.h): 8 output channels'
 * double sums of 4 pixels in four registers, the same IEEE products and additions in the same
 * order as the portable block. */
#include "rt_internal.h"

#if LB_HAVE_AVX512
#include <immintrin.h>

#define LB_CT_QB 8

LB_TARGET_AVX512 static inline void lb_fconvt_block_avx512(const float *const *xs,
                                                           const float *w, int64_t C,
                                                           int64_t ldw, double acc[8][8]) {
    __m512d a[8];
    for (int q = 0; q < 8; q++) a[q] = _mm512_setzero_pd();
    for (int64_t ci = 0; ci < C; ci++) {
        __m512d wd = _mm512_cvtps_pd(_mm256_loadu_ps(w + ci * ldw));
        for (int q = 0; q < 8; q++)
            a[q] = _mm512_add_pd(a[q], _mm512_mul_pd(_mm512_set1_pd((double)xs[q][ci]), wd));
    }
    for (int q = 0; q < 8; q++) _mm512_storeu_pd(acc[q], a[q]);
}

#define LB_CT_BLOCK lb_fconvt_block_avx512
#define LB_CT_SUFFIX avx512
#define LB_CT_TARGET LB_TARGET_AVX512
#include "rt_convt_impl.h"

void lb_fconvt_row_avx512(const lb_fconvt *p, const float *in, float *out, int64_t n,
                          int64_t y);
LB_TARGET_AVX512 void lb_fconvt_row_avx512(const lb_fconvt *p, const float *in, float *out,
                                           int64_t n, int64_t y) {
    lb_fconvt_row1_avx512(p, in, out, n, y);
}
#endif

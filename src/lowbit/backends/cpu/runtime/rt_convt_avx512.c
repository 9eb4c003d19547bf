/* The AVX-512 path of the non-overlapping ConvTranspose (rt_convt_impl.h): 8, 16 or 24 output
 * channels' double sums of 8 pixels in registers (each input value broadcast once for all),
 * the same IEEE products and additions in the same order as the portable block (each
 * product and its addition as one fused multiply-add: the product of two floats is exact in
 * double, so rounding once is rounding the same sum). */
#include "rt_internal.h"

#if LB_HAVE_AVX512
#include <immintrin.h>

#define LB_CT_QB 8

/* NV vectors of 8 channels for 8 pixels: 8 * NV accumulators, NV weight vectors. */
#define LB_CT_BLOCK_NV(NV)                                                                     \
    LB_TARGET_AVX512 static inline void lb_fconvt_block##NV(                                   \
        const float *const *xs, const float *w, int64_t C, int64_t ldw, double acc[8][24]) {   \
        __m512d a[8][NV];                                                                      \
        for (int q = 0; q < 8; q++)                                                            \
            for (int v = 0; v < NV; v++) a[q][v] = _mm512_setzero_pd();                        \
        for (int64_t ci = 0; ci < C; ci++) {                                                   \
            __m512d wd[NV];                                                                    \
            for (int v = 0; v < NV; v++)                                                       \
                wd[v] = _mm512_cvtps_pd(_mm256_loadu_ps(w + ci * ldw + 8 * v));                \
            for (int q = 0; q < 8; q++) {                                                      \
                __m512d x = _mm512_set1_pd((double)xs[q][ci]);                                 \
                for (int v = 0; v < NV; v++)                                                   \
                    a[q][v] = _mm512_fmadd_pd(x, wd[v], a[q][v]); /* exact product */         \
            }                                                                                  \
        }                                                                                      \
        for (int q = 0; q < 8; q++)                                                            \
            for (int v = 0; v < NV; v++) _mm512_storeu_pd(acc[q] + 8 * v, a[q][v]);            \
    }
LB_CT_BLOCK_NV(1)
LB_CT_BLOCK_NV(2)
LB_CT_BLOCK_NV(3)

LB_TARGET_AVX512 static inline void lb_fconvt_block_avx512(const float *const *xs,
                                                           const float *w, int64_t C,
                                                           int64_t ldw, int nv,
                                                           double acc[8][24]) {
    if (nv == 3)
        lb_fconvt_block3(xs, w, C, ldw, acc);
    else if (nv == 2)
        lb_fconvt_block2(xs, w, C, ldw, acc);
    else
        lb_fconvt_block1(xs, w, C, ldw, acc);
}

#define LB_CT_BLOCK lb_fconvt_block_avx512
#define LB_CT_MADD(acc, x, w) __builtin_fma((x), (w), (acc)) /* see rt_convt_impl.h */
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

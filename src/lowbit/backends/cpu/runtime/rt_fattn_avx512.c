/* AVX-512 product of the float attention (rt_fattn.c): C[r][n] = float32(sum over k, in order,
 * of A[r][k] * B[k][n]), A and B float64 holding float32 values. 6 rows x 16 columns at a time
 * in 12 double accumulators, one fused multiply-add per product: each product is exact in
 * double, so the fused step rounds as the portable path's multiply then add. */
#include "rt_tf_internal.h"

#if LB_HAVE_AVX512
#include "rt_vec512.h"

#define LB_FATTN_MR 6

LB_V512 void lb_fattn_strip(const double *A, int64_t lda, const double *B, int64_t ldb,
                            float *C, int64_t ldc, int64_t N, int64_t K, const int MR) {
    for (int64_t n = 0; n < N; n += 16) {
        const int64_t left = N - n;
        const __mmask8 m0 = left >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << left) - 1u);
        const __mmask8 m1 = left >= 16  ? (__mmask8)0xFF
                            : left > 8 ? (__mmask8)((1u << (left - 8)) - 1u)
                                       : (__mmask8)0;
        const __mmask16 mc = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
        __m512d c0[LB_FATTN_MR], c1[LB_FATTN_MR];
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) c0[r] = c1[r] = _mm512_setzero_pd();
        for (int64_t k = 0; k < K; k++) {
            const __m512d b0 = _mm512_maskz_loadu_pd(m0, B + k * ldb + n);
            const __m512d b1 = _mm512_maskz_loadu_pd(m1, B + k * ldb + n + 8);
#pragma GCC unroll 6
            for (int r = 0; r < MR; r++) {
                const __m512d a = _mm512_set1_pd(A[r * lda + k]);
                c0[r] = _mm512_fmadd_pd(a, b0, c0[r]);
                c1[r] = _mm512_fmadd_pd(a, b1, c1[r]);
            }
        }
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            const __m512 y = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(c0[r])),
                                                _mm512_cvtpd_ps(c1[r]), 1);
            _mm512_mask_storeu_ps(C + r * ldc + n, mc, y);
        }
    }
}

#define LB_FATTN_STRIP(MR)                                                                  \
    LB_TARGET_AVX512 __attribute__((noinline)) static void lb_fattn_strip_##MR(             \
        const double *A, int64_t lda, const double *B, int64_t ldb, float *C, int64_t ldc,  \
        int64_t N, int64_t K) {                                                             \
        lb_fattn_strip(A, lda, B, ldb, C, ldc, N, K, MR);                                   \
    }
LB_FATTN_STRIP(1)
LB_FATTN_STRIP(2)
LB_FATTN_STRIP(3)
LB_FATTN_STRIP(4)
LB_FATTN_STRIP(5)
LB_FATTN_STRIP(6)

typedef void (*lb_fattn_strip_fn)(const double *, int64_t, const double *, int64_t, float *,
                                  int64_t, int64_t, int64_t);
static const lb_fattn_strip_fn lb_fattn_strips[LB_FATTN_MR] = {
    lb_fattn_strip_1, lb_fattn_strip_2, lb_fattn_strip_3,
    lb_fattn_strip_4, lb_fattn_strip_5, lb_fattn_strip_6};

LB_TARGET_AVX512 void lb_fattn_gemm_avx512(int64_t M, int64_t N, int64_t K, const double *A,
                                           int64_t lda, const double *B, int64_t ldb, float *C,
                                           int64_t ldc, double *acc) {
    (void)acc;
    for (int64_t m = 0; m < M; m += LB_FATTN_MR) {
        const int mr = (int)LB_MIN(LB_FATTN_MR, M - m);
        lb_fattn_strips[mr - 1](A + m * lda, lda, B, ldb, C + m * ldc, ldc, N, K);
    }
}
#endif /* LB_HAVE_AVX512 */

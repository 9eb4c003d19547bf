/* AVX-512 float products of activations (lb_fmatmul_run): C = A B with B read as it lies,
 * [K][N] rows, no transpose. 6 rows x 16 columns at a time in double lanes: each product of
 * two floats is exact in double, so the fused multiply-add rounds as the separate multiply
 * and add of the reference's double sum would; the sum runs over k in order, rounded once to
 * float at the end. */
#include "rt_internal.h"

#if LB_HAVE_AVX512
#include "rt_vec512.h"

#define LB_FMM_MR 6

/* Rows r of an MR-row strip of C (MR constant after inlining), all N columns. */
LB_V512 void lb_fmm_strip(const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                          int64_t ldc, int64_t N, int64_t K, const int MR) {
    for (int64_t n = 0; n < N; n += 16) {
        const __mmask16 m = lb_tail_mask(N - n);
        __m512d c0[LB_FMM_MR], c1[LB_FMM_MR];
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) c0[r] = c1[r] = _mm512_setzero_pd();
        for (int64_t k = 0; k < K; k++) {
            const __m512 bv = _mm512_maskz_loadu_ps(m, B + k * ldb + n);
            const __m512d b0 = _mm512_cvtps_pd(_mm512_castps512_ps256(bv));
            const __m512d b1 = _mm512_cvtps_pd(_mm512_extractf32x8_ps(bv, 1));
#pragma GCC unroll 6
            for (int r = 0; r < MR; r++) {
                const __m512d a = _mm512_set1_pd((double)A[r * lda + k]);
                c0[r] = _mm512_fmadd_pd(a, b0, c0[r]);
                c1[r] = _mm512_fmadd_pd(a, b1, c1[r]);
            }
        }
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            const __m512 y = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(c0[r])),
                                                _mm512_cvtpd_ps(c1[r]), 1);
            _mm512_mask_storeu_ps(C + r * ldc + n, m, y);
        }
    }
}

#define LB_FMM_FN(MR)                                                                        \
    LB_TARGET_AVX512 __attribute__((noinline)) static void lb_fmm_strip_##MR(               \
        const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,     \
        int64_t N, int64_t K) {                                                              \
        lb_fmm_strip(A, lda, B, ldb, C, ldc, N, K, MR);                                      \
    }
LB_FMM_FN(1)
LB_FMM_FN(2)
LB_FMM_FN(3)
LB_FMM_FN(4)
LB_FMM_FN(5)
LB_FMM_FN(6)

typedef void (*lb_fmm_fn)(const float *, int64_t, const float *, int64_t, float *, int64_t,
                          int64_t, int64_t);
static const lb_fmm_fn lb_fmm_strips[LB_FMM_MR] = {lb_fmm_strip_1, lb_fmm_strip_2,
                                                   lb_fmm_strip_3, lb_fmm_strip_4,
                                                   lb_fmm_strip_5, lb_fmm_strip_6};

/* Rows [m0, m1) of C [M][N] = A [M][K] B [K][N] (row strides K, N, N). */
LB_TARGET_AVX512 void lb_fmatmul_rows_avx512(const float *A, const float *B, float *C,
                                             int64_t m0, int64_t m1, int64_t N, int64_t K) {
    for (int64_t m = m0; m < m1; m += LB_FMM_MR) {
        const int mr = (int)LB_MIN(LB_FMM_MR, m1 - m);
        lb_fmm_strips[mr - 1](A + m * K, K, B, N, C + m * N, N, N, K);
    }
}
#endif /* LB_HAVE_AVX512 */

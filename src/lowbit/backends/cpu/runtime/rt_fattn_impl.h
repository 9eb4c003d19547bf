/* The portable product of rt_fattn.c, compiled once per instruction set (define
 * LB_FATTN_SUFFIX and LB_FATTN_TARGET before including): C[r][n] = float32(sum over k, in
 * order, of A[r][k] * B[k][n]) in float64, A and B already float64 (float32 values, so each
 * product is exact and the separate multiply and add round as one fused multiply-add would).
 * `acc` holds n doubles; the loop over n vectorises without changing any sum's order. */

#define LB_FATTN_CAT2(a, b) a##_##b
#define LB_FATTN_CAT(a, b) LB_FATTN_CAT2(a, b)
#define LB_FATTN_FN(name) LB_FATTN_CAT(name, LB_FATTN_SUFFIX)

LB_FATTN_TARGET void LB_FATTN_FN(lb_fattn_gemm)(int64_t M, int64_t N, int64_t K,
                                                const double *A, int64_t lda, const double *B,
                                                int64_t ldb, float *C, int64_t ldc,
                                                double *acc) {
    for (int64_t r = 0; r < M; r++) {
        for (int64_t n = 0; n < N; n++) acc[n] = 0.0;
        for (int64_t k = 0; k < K; k++) {
            const double a = A[r * lda + k];
            const double *b = B + k * ldb;
            for (int64_t n = 0; n < N; n++) acc[n] = acc[n] + a * b[n];
        }
        for (int64_t n = 0; n < N; n++) C[r * ldc + n] = (float)acc[n];
    }
}

#undef LB_FATTN_FN
#undef LB_FATTN_CAT
#undef LB_FATTN_CAT2

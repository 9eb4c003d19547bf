/* Float kernels written once with GCC vector types and compiled per instruction set:
 * rt_float.c includes this file with LB_FL_SUFFIX, LB_FL_TARGET and LB_FL_LANES set.
 *
 * Products and sums are in double, rounded once to float at the end, as the reference
 * computes them; a product of two floats is exact in double, so contracting a*b+c into an FMA
 * (allowed in these functions only) gives the same bits as a separate multiply and add. */

#define LB_CAT_(a, b) a##b
#define LB_CAT(a, b) LB_CAT_(a, b)
#define LB_FN(name) LB_CAT(name, LB_FL_SUFFIX)
#define VD LB_CAT(lb_vd_, LB_FL_SUFFIX)
#define VF LB_CAT(lb_vf_, LB_FL_SUFFIX)

typedef double VD __attribute__((vector_size(LB_FL_LANES * 8)));
typedef float VF __attribute__((vector_size(LB_FL_LANES * 4)));

LB_FL_TARGET LB_FL_CONTRACT static inline VD LB_FN(lb_loadd_)(const float *p) {
    VF f;
    memcpy(&f, p, sizeof(f));
    return __builtin_convertvector(f, VD);
}

LB_FL_TARGET LB_FL_CONTRACT static inline double LB_FN(lb_hsum_)(VD v) {
    double s = 0;
    for (int i = 0; i < LB_FL_LANES; i++) s += v[i];
    return s;
}

/* Rows [m0, m1) x columns [n0, n1) of C = A B^T: 4 x 4 dot products at a time, each a vector
 * of partial sums over k. */
LB_FL_TARGET LB_FL_CONTRACT void LB_FN(lb_fgemm_block_)(const lb_fgemm_job *j, int64_t m0,
                                                        int64_t m1, int64_t n0, int64_t n1) {
    const int64_t K = j->K, kv = K / LB_FL_LANES * LB_FL_LANES;
    for (int64_t m = m0; m < m1; m += 4) {
        int mr = (int)LB_MIN(4, m1 - m);
        const float *a0 = j->A + m * j->lda;
        const float *a1 = mr > 1 ? a0 + j->lda : a0, *a2 = mr > 2 ? a0 + 2 * j->lda : a0;
        const float *a3 = mr > 3 ? a0 + 3 * j->lda : a0;
        for (int64_t n = n0; n < n1; n += 4) {
            int nr = (int)LB_MIN(4, n1 - n);
            const float *b0 = j->B + n * j->ldb;
            const float *b1 = nr > 1 ? b0 + j->ldb : b0, *b2 = nr > 2 ? b0 + 2 * j->ldb : b0;
            const float *b3 = nr > 3 ? b0 + 3 * j->ldb : b0;
            VD c00 = {0}, c01 = {0}, c02 = {0}, c03 = {0}, c10 = {0}, c11 = {0}, c12 = {0},
               c13 = {0}, c20 = {0}, c21 = {0}, c22 = {0}, c23 = {0}, c30 = {0}, c31 = {0},
               c32 = {0}, c33 = {0};
            for (int64_t k = 0; k < kv; k += LB_FL_LANES) {
                VD x0 = LB_FN(lb_loadd_)(a0 + k), x1 = LB_FN(lb_loadd_)(a1 + k);
                VD x2 = LB_FN(lb_loadd_)(a2 + k), x3 = LB_FN(lb_loadd_)(a3 + k);
                VD y = LB_FN(lb_loadd_)(b0 + k);
                c00 += x0 * y, c10 += x1 * y, c20 += x2 * y, c30 += x3 * y;
                y = LB_FN(lb_loadd_)(b1 + k);
                c01 += x0 * y, c11 += x1 * y, c21 += x2 * y, c31 += x3 * y;
                y = LB_FN(lb_loadd_)(b2 + k);
                c02 += x0 * y, c12 += x1 * y, c22 += x2 * y, c32 += x3 * y;
                y = LB_FN(lb_loadd_)(b3 + k);
                c03 += x0 * y, c13 += x1 * y, c23 += x2 * y, c33 += x3 * y;
            }
            double s[4][4] = {
                {LB_FN(lb_hsum_)(c00), LB_FN(lb_hsum_)(c01), LB_FN(lb_hsum_)(c02),
                 LB_FN(lb_hsum_)(c03)},
                {LB_FN(lb_hsum_)(c10), LB_FN(lb_hsum_)(c11), LB_FN(lb_hsum_)(c12),
                 LB_FN(lb_hsum_)(c13)},
                {LB_FN(lb_hsum_)(c20), LB_FN(lb_hsum_)(c21), LB_FN(lb_hsum_)(c22),
                 LB_FN(lb_hsum_)(c23)},
                {LB_FN(lb_hsum_)(c30), LB_FN(lb_hsum_)(c31), LB_FN(lb_hsum_)(c32),
                 LB_FN(lb_hsum_)(c33)}};
            const float *ar[4] = {a0, a1, a2, a3}, *br[4] = {b0, b1, b2, b3};
            for (int r = 0; r < mr; r++)
                for (int q = 0; q < nr; q++) {
                    double v = s[r][q];
                    for (int64_t k = kv; k < K; k++) v += (double)ar[r][k] * (double)br[q][k];
                    lb_fgemm_store(j, m + r, n + q, v);
                }
        }
    }
}

/* Depthwise: every channel of one output pixel, LANES at a time in double lanes (taps summed
 * in order, then the bias: the reference's order, so the result is the same to the bit). */
LB_FL_TARGET LB_FL_CONTRACT void LB_FN(lb_fdw_pixel_)(const lb_fdw_job *j, const float **tap,
                                                      int64_t taps, float *out) {
    int64_t c = j->c, cv = c / LB_FL_LANES * LB_FL_LANES;
    for (int64_t c0 = 0; c0 < cv; c0 += LB_FL_LANES) {
        VD acc = {0};
        for (int64_t t = 0; t < taps; t++)
            acc += LB_FN(lb_loadd_)(tap[t] + c0) * LB_FN(lb_loadd_)(j->w + t * c + c0);
        for (int i = 0; i < LB_FL_LANES; i++) lb_fdw_store(j, out, c0 + i, acc[i]);
    }
    for (int64_t ch = cv; ch < c; ch++) {
        double acc = 0;
        for (int64_t t = 0; t < taps; t++) acc += (double)tap[t][ch] * (double)j->w[t * c + ch];
        lb_fdw_store(j, out, ch, acc);
    }
}

#undef VD
#undef VF
#undef LB_FN

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

/* 8 rows of 8 floats transposed: t[c] holds element c of every row. */
LB_TARGET_AVX512 static inline void lb_transpose8_ps(const __m256 r[8], __m256 t[8]) {
    __m256 a[8], b[8];
    for (int i = 0; i < 4; i++) {
        a[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        b[4 * i] = _mm256_shuffle_ps(a[4 * i], a[4 * i + 2], 0x44);
        b[4 * i + 1] = _mm256_shuffle_ps(a[4 * i], a[4 * i + 2], 0xEE);
        b[4 * i + 2] = _mm256_shuffle_ps(a[4 * i + 1], a[4 * i + 3], 0x44);
        b[4 * i + 3] = _mm256_shuffle_ps(a[4 * i + 1], a[4 * i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm256_permute2f128_ps(b[i], b[4 + i], 0x20);
        t[4 + i] = _mm256_permute2f128_ps(b[i], b[4 + i], 0x31);
    }
}

#define LB_CT_FEW_SUMS 4 /* at most output channels x kernel columns sums per pixel */
#define LB_CT_FEW_PIX 32 /* input pixels per block: 4 vectors of 8 */

/* sums[b][s][k] = the sum s (s = kx * M + m) of pixel xs[b * 8 + k] over the channels in
 * order from 0: S * 4 vectors of 8 doubles in registers, the inputs transposed 8 channels at
 * a time; products and additions as the portable form's (each FMA rounds the exact product's
 * sum once). woff[s]: the weight of channel 0 for sum s, at wk + woff[s] (stride M). */
#define LB_CT_FEW_FN(S)                                                                        \
    LB_TARGET_AVX512 static void lb_fconvt_few##S(const float *const *xs, const float *wk,     \
                                                  const int64_t *woff, int64_t C, int64_t M,   \
                                                  double sums[4][LB_CT_FEW_SUMS][8]) {         \
        __m512d acc[4][S];                                                                     \
        for (int b = 0; b < 4; b++)                                                            \
            for (int s = 0; s < S; s++) acc[b][s] = _mm512_setzero_pd();                       \
        for (int64_t c0 = 0; c0 < C; c0 += 8) {                                                \
            int64_t cn = LB_MIN(8, C - c0);                                                    \
            __mmask8 cm = (__mmask8)((1u << cn) - 1u);                                         \
            __m512d wd[8][S];                                                                  \
            for (int64_t ci = 0; ci < cn; ci++)                                                \
                for (int s = 0; s < S; s++)                                                    \
                    wd[ci][s] = _mm512_set1_pd((double)wk[woff[s] + (c0 + ci) * M]);          \
            for (int b = 0; b < 4; b += 2) { /* two blocks: 2 * S independent sums */         \
                __m256 r[8], t0[8], t1[8];                                                     \
                for (int k = 0; k < 8; k++)                                                    \
                    r[k] = _mm256_maskz_loadu_ps(cm, xs[b * 8 + k] + c0);                      \
                lb_transpose8_ps(r, t0);                                                       \
                for (int k = 0; k < 8; k++)                                                    \
                    r[k] = _mm256_maskz_loadu_ps(cm, xs[b * 8 + 8 + k] + c0);                  \
                lb_transpose8_ps(r, t1);                                                       \
                for (int64_t ci = 0; ci < cn; ci++) {                                          \
                    __m512d x0 = _mm512_cvtps_pd(t0[ci]), x1 = _mm512_cvtps_pd(t1[ci]);        \
                    for (int s = 0; s < S; s++) {                                              \
                        acc[b][s] = _mm512_fmadd_pd(x0, wd[ci][s], acc[b][s]);                 \
                        acc[b + 1][s] = _mm512_fmadd_pd(x1, wd[ci][s], acc[b + 1][s]);         \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        for (int b = 0; b < 4; b++)                                                            \
            for (int s = 0; s < S; s++) _mm512_storeu_pd(sums[b][s], acc[b][s]);              \
    }
LB_CT_FEW_FN(1)
LB_CT_FEW_FN(2)
LB_CT_FEW_FN(3)
LB_CT_FEW_FN(4)

/* The taps of kernel row ky of one input row with fewer than 8 output channels and at most
 * LB_CT_FEW_SUMS sums per pixel (else 0: the portable form runs), by blocks of
 * LB_CT_FEW_PIX pixels (lb_fconvt_few1..4). */
LB_TARGET_AVX512 static int lb_fconvt_few_avx512(const lb_fconvt *p, const float *irow,
                                                 float *orow, int64_t ky) {
    const int64_t M = p->m, C = p->c, S = M * p->kw;
    if (S > LB_CT_FEW_SUMS) return 0;
    const float *wk = p->w + ky * p->kw * C * M; /* [kx][ci][m] */
    int64_t woff[LB_CT_FEW_SUMS] = {0, 0, 0, 0};
    for (int64_t s = 0; s < S; s++) woff[s] = s / M * C * M + s % M;
    for (int64_t ix0 = 0; ix0 < p->iw; ix0 += LB_CT_FEW_PIX) {
        int64_t np = LB_MIN(LB_CT_FEW_PIX, p->iw - ix0);
        const float *xs[LB_CT_FEW_PIX]; /* pixels past the row repeat its first one */
        for (int64_t k = 0; k < LB_CT_FEW_PIX; k++) xs[k] = irow + (ix0 + (k < np ? k : 0)) * C;
        double sums[4][LB_CT_FEW_SUMS][8];
        if (S == 1)
            lb_fconvt_few1(xs, wk, woff, C, M, sums);
        else if (S == 2)
            lb_fconvt_few2(xs, wk, woff, C, M, sums);
        else if (S == 3)
            lb_fconvt_few3(xs, wk, woff, C, M, sums);
        else
            lb_fconvt_few4(xs, wk, woff, C, M, sums);
        int64_t done = 0; /* pixels stored by vectors */
        if (S <= 2 && p->kw == p->sw) { /* pixel k's S sums: S floats at (ix * sw - bx) * M */
            __m512d bias[2];
            for (int64_t s = 0; s < 2; s++)
                bias[s] = _mm512_set1_pd(p->bias && s < S ? (double)p->bias[s % M] : 0.0);
            const __m512i mix = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17,
                                                 1, 16, 0);
            for (int64_t b = 0; b < 4 && (b + 1) * 8 <= np; b++) {
                int64_t x0 = (ix0 + b * 8) * p->sw - p->bx;
                if (x0 < 0 || x0 + 8 * p->sw > p->ow) break;
                __m256 f[2];
                for (int64_t s = 0; s < S; s++) {
                    __m512d d = _mm512_add_pd(_mm512_setzero_pd(), _mm512_loadu_pd(sums[b][s]));
                    if (p->bias) d = _mm512_add_pd(d, bias[s]);
                    f[s] = _mm512_cvtpd_ps(d);
                }
                if (S == 1) {
                    _mm256_storeu_ps(orow + x0 * M, f[0]);
                } else {
                    __m512 lo = _mm512_castps256_ps512(f[0]), hi = _mm512_castps256_ps512(f[1]);
                    _mm512_storeu_ps(orow + x0 * M, _mm512_permutex2var_ps(lo, mix, hi));
                }
                done = (b + 1) * 8;
            }
        }
        for (int64_t k = done; k < np; k++)
            for (int64_t kx = 0; kx < p->kw; kx++) {
                int64_t x = (ix0 + k) * p->sw + kx - p->bx;
                if (x < 0 || x >= p->ow) continue;
                for (int64_t m = 0; m < M; m++) {
                    double a = 0.0 + sums[k / 8][kx * M + m][k % 8];
                    if (p->bias) a = a + (double)p->bias[m];
                    orow[x * M + m] = (float)a;
                }
            }
    }
    return 1;
}

/* rt_convt_impl.h's LB_CT_STORE for n a multiple of 8, 8 results per vector. */
LB_TARGET_AVX512 static inline void lb_fconvt_store_avx512(float *o, const double *a,
                                                           const float *bias, int64_t n) {
    for (int64_t k = 0; k < n; k += 8) {
        __m512d d = _mm512_add_pd(_mm512_setzero_pd(), _mm512_loadu_pd(a + k));
        if (bias) d = _mm512_add_pd(d, _mm512_cvtps_pd(_mm256_loadu_ps(bias + k)));
        _mm256_storeu_ps(o + k, _mm512_cvtpd_ps(d));
    }
}

#define LB_CT_STORE lb_fconvt_store_avx512
#define LB_CT_FEW lb_fconvt_few_avx512
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

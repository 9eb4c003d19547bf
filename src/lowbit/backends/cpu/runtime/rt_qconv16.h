/* Internal interface of the 16-bit convolutions (lb_qconv16_run, lowbit_rt.h): the product
 * tiles and depthwise rows each instruction set provides, and the shared epilogue. */
#ifndef LOWBIT_RT_QCONV16_H
#define LOWBIT_RT_QCONV16_H

#include "rt_internal.h"

/* Rows a tile computes at most (the im2col rows of one output row are taken 8 at a time). */
#define LB_C16_MR 8

/* acc[r * 16 + j] = sum over kpairs pairs i of A[r][2i] W[i][j][0] + A[r][2i+1] W[i][j][1]
 * for r < rows <= LB_C16_MR (A: int16 rows lda apart) and the 16 columns j of one packed
 * block `wb` (kpairs x 16 x 2 int16), in int32 (exact: the caller's mode guarantees it).
 * With `split`, a = 256 hi + lo: acc takes the lo = a & 255 sums and acc_hi the hi = a >> 8
 * ones. */
typedef void (*lb_c16_tile_fn)(const int16_t *A, int64_t lda, int64_t rows, int64_t kpairs,
                               const int16_t *wb, int split, int32_t *acc, int32_t *acc_hi);

/* Output row oy of image n of a depthwise lb_qconv16, epilogue included. */
typedef void (*lb_c16_dw_fn)(const lb_qconv16 *p, const void *in, void *out, int64_t n,
                             int64_t oy);

/* The results of channels m0 .. m0 + n - 1 (n <= 64) from their exact accumulators acc (sum +
 * offset), stored from element `at` on (rt_qconv16_impl.h). */
typedef void (*lb_c16_finish_fn)(const lb_qconv16 *p, int64_t m0, int64_t n,
                                 const int64_t *acc, int64_t at, void *out);

void lb_c16_tile_scalar(const int16_t *A, int64_t lda, int64_t rows, int64_t kpairs,
                        const int16_t *wb, int split, int32_t *acc, int32_t *acc_hi);
void lb_c16_finish_row_scalar(const lb_qconv16 *p, int64_t m0, int64_t n, const int64_t *acc,
                          int64_t at, void *out);
void lb_c16_dw_row_scalar(const lb_qconv16 *p, const void *in, void *out, int64_t n,
                          int64_t oy);
#if LB_HAVE_AVX2
void lb_c16_tile_avx2(const int16_t *A, int64_t lda, int64_t rows, int64_t kpairs,
                      const int16_t *wb, int split, int32_t *acc, int32_t *acc_hi);
void lb_c16_finish_row_avx2(const lb_qconv16 *p, int64_t m0, int64_t n, const int64_t *acc,
                          int64_t at, void *out);
void lb_c16_dw_row_avx2(const lb_qconv16 *p, const void *in, void *out, int64_t n, int64_t oy);
#endif
#if LB_HAVE_AVX512
void lb_c16_tile_avx512(const int16_t *A, int64_t lda, int64_t rows, int64_t kpairs,
                        const int16_t *wb, int split, int32_t *acc, int32_t *acc_hi);
void lb_c16_finish_row_avx512(const lb_qconv16 *p, int64_t m0, int64_t n, const int64_t *acc,
                          int64_t at, void *out);
void lb_c16_dw_row_avx512(const lb_qconv16 *p, const void *in, void *out, int64_t n,
                          int64_t oy);
#endif

/* Element size of the input codes (LB_U8 1, LB_I16 / LB_U16 2). */
static inline int64_t lb_c16_esize(int32_t a_type) {
    return a_type == LB_U8 ? 1 : 2;
}

/* The input codes each tap of output pixel (n, oy, ox) reads: the pixel's channels, or
 * `zero_row` where the tap falls in the padding. */
static inline void lb_c16_taps(const lb_window *w, const char *in, const char *zero_row,
                               int64_t esize, int64_t n, int64_t oy, int64_t ox,
                               const char **taps) {
    int64_t iy0 = oy * w->sh - w->pt, ix0 = ox * w->sw - w->pl;
    const char *img = in + n * w->ih * w->iw * w->c * esize;
    for (int64_t ky = 0; ky < w->kh; ky++) {
        int64_t iy = iy0 + ky * w->dh;
        for (int64_t kx = 0; kx < w->kw; kx++) {
            int64_t ix = ix0 + kx * w->dw;
            int inside = iy >= 0 && iy < w->ih && ix >= 0 && ix < w->iw;
            taps[ky * w->kw + kx] = inside ? img + (iy * w->iw + ix) * w->c * esize : zero_row;
        }
    }
}

#endif /* LOWBIT_RT_QCONV16_H */

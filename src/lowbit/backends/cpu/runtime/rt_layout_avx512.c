/* AVX-512 im2col rows for convolutions with few input channels (the first layer of an image
 * network): each window row is one masked load and one masked store, the row's padding one
 * store before them; a memcpy call per few bytes cost more than the bytes. */
#include "rt_internal.h"

#if LB_HAVE_AVX512
#include "rt_vec512.h"

static inline __mmask64 lb_bytes_mask(int64_t n) {
    return n >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << n) - 1);
}

/* Output row oy of lb_im2col_u8 for one group with dw == 1, kp <= 64 (checked by the caller). */
LB_TARGET_AVX512 void lb_im2col_row_u8_avx512(const lb_window *w, int64_t cg, int64_t kp,
                                              const uint8_t *in, uint8_t pad, uint8_t *out,
                                              int64_t oy) {
    const __m512i padv = _mm512_set1_epi8((char)pad);
    const __mmask64 row_mask = lb_bytes_mask(kp);
    const int64_t run = w->kw * cg;
    for (int64_t ox = 0; ox < w->ow; ox++) {
        uint8_t *dst = out + (oy * w->ow + ox) * kp;
        _mm512_mask_storeu_epi8(dst, row_mask, padv);
        int64_t ix0 = ox * w->sw - w->pl;
        int64_t lo = LB_MAX(0, -ix0), hi = LB_MIN(w->kw, w->iw - ix0); /* taps inside */
        if (hi <= lo) continue;
        __mmask64 k = lb_bytes_mask((hi - lo) * cg);
        for (int64_t ky = 0; ky < w->kh; ky++) {
            int64_t iy = oy * w->sh - w->pt + ky * w->dh;
            if (iy < 0 || iy >= w->ih) continue;
            _mm512_mask_storeu_epi8(dst + ky * run + lo * cg, k,
                                    _mm512_maskz_loadu_epi8(k, in + (iy * w->iw + ix0 + lo) * w->c));
        }
    }
}
#endif /* LB_HAVE_AVX512 */

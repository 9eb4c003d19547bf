/* AVX-512 im2col rows for convolutions with few input channels (the first layer of an image
 * network): each window row is one masked load and one masked store, the row's padding one
 * store before them; a memcpy call per few bytes cost more than the bytes. */
#include "rt_internal.h"

#if LB_HAVE_AVX512
#include "rt_vec512.h"

static inline __mmask64 lb_bytes_mask(int64_t n) {
    return n >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << n) - 1);
}

/* The 28 bytes of a 3 x 3 window of 3 channels (the first layer of most image networks) whose
 * rows start at r0, r1, r2 (9 bytes each), then the pad byte: the rows are loaded into 128-bit
 * registers and shifted into place, one store per pixel instead of four. */
LB_V512 void lb_im2col_3x3x3(const uint8_t *r0, const uint8_t *r1, const uint8_t *r2,
                             __m128i padx, uint8_t *dst) {
    const __mmask16 nine = 0x1FF;
    __m128i x0 = _mm_maskz_loadu_epi8(nine, r0), x1 = _mm_maskz_loadu_epi8(nine, r1);
    __m128i x2 = _mm_maskz_loadu_epi8(nine, r2);
    /* bytes 0-15: row 0, row 1's first 7; bytes 16-27: row 1's last 2, row 2, the pad */
    __m128i a = _mm_or_si128(x0, _mm_bslli_si128(x1, 9));
    __m128i b = _mm_or_si128(_mm_bsrli_si128(x1, 7), _mm_bslli_si128(x2, 2));
    b = _mm_mask_blend_epi8((__mmask16)0xF800, b, padx);
    _mm256_mask_storeu_epi8(dst, (__mmask32)0x0FFFFFFF,
                            _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1));
}

/* Output row oy of lb_im2col_u8 for one group with dw == 1, kp <= 64 (checked by the caller). */
LB_TARGET_AVX512 void lb_im2col_row_u8_avx512(const lb_window *w, int64_t cg, int64_t kp,
                                              const uint8_t *in, uint8_t pad, uint8_t *out,
                                              int64_t oy) {
    const __m512i padv = _mm512_set1_epi8((char)pad);
    const __mmask64 row_mask = lb_bytes_mask(kp);
    const int64_t run = w->kw * cg;
    const int64_t iy0 = oy * w->sh - w->pt;
    const int rows_inside = iy0 >= 0 && iy0 + (w->kh - 1) * w->dh < w->ih;
    const int small = w->kh == 3 && w->kw == 3 && cg == 3 && kp == 28;
    for (int64_t ox = 0; ox < w->ow; ox++) {
        uint8_t *dst = out + (oy * w->ow + ox) * kp;
        int64_t ix0 = ox * w->sw - w->pl;
        int64_t lo = LB_MAX(0, -ix0), hi = LB_MIN(w->kw, w->iw - ix0); /* taps inside */
        if (small && rows_inside && lo == 0 && hi == 3) {
            const uint8_t *r0 = in + (iy0 * w->iw + ix0) * w->c, *r1 = r0 + w->dh * w->iw * w->c;
            lb_im2col_3x3x3(r0, r1, r1 + w->dh * w->iw * w->c, _mm512_castsi512_si128(padv),
                            dst);
            continue;
        }
        _mm512_mask_storeu_epi8(dst, row_mask, padv);
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

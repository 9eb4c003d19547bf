/* AVX-512 dynamic quantization: the operations of rt_dq_impl.h on 16 lanes. Ranges are min
 * and max over lanes (order does not matter), and every rounding step is the same IEEE
 * operation: division, round to nearest even (vrndscaleps), exact integer adds and clamps. */
#include "rt_tf_internal.h"

#if LB_HAVE_AVX512
#include "rt_vec512.h"

#define LB_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

LB_V512 __mmask16 lb_dq_mask(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1u);
}

/* 16 values of the slice (x / cs when cs is set); lanes outside `m` are 0. */
LB_V512 __m512 lb_dq_load(const float *x, const float *cs, int64_t i, __mmask16 m) {
    __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    if (cs) v = _mm512_div_ps(v, _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), m, cs + i));
    return v;
}

/* NaN lanes to 0 (they count as 0 in the range). */
LB_V512 __m512 lb_dq_nan0(__m512 v) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v,
                                _mm512_setzero_ps());
}

/* Codes of 16 values: clamp(rint(v / scale) + zero, qlo, top), NaN giving `zero`. */
LB_V512 __m512i lb_dq_codes(__m512 v, __m512 scale, __m512 zero, __m512 qlo, __m512 top) {
    __m512 r = _mm512_roundscale_ps(_mm512_div_ps(v, scale), LB_RNE);
    r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), r, _mm512_setzero_ps());
    r = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(r, zero), qlo), top);
    return _mm512_cvtps_epi32(r);
}

/* Scale and zero point of a slice from its range (scalar: the same expressions as C). */
LB_V512 void lb_dq_params(float lo, float hi, int32_t qmax, int32_t symmetric, float *scale,
                          float *zero) {
    const float top = (float)qmax;
    if (symmetric) {
        *scale = hi == 0.0f ? 1.0f : hi / top;
        *zero = 0.0f;
    } else {
        *scale = hi == lo ? 1.0f : (hi - lo) / top;
        *zero = lb_rint_f32(lb_clampf(0.0f - lo / *scale, 0.0f, top));
    }
}

#define LB_DQ_KEEP 8 /* slices up to 8 x 16 values stay in registers between the two passes */

LB_TARGET_AVX512 static void lb_dq_slice_v512(const float *x, const float *cs, int64_t len,
                                              int32_t qmax, int32_t symmetric, void *q,
                                              float *scale_out, void *zero_out) {
    __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
    __m512 kept[LB_DQ_KEEP];
    int64_t chunks = (len + 15) / 16;
    for (int64_t c = 0; c < chunks; c++) {
        __m512 v = lb_dq_load(x, cs, c * 16, lb_dq_mask(len - c * 16));
        if (c < LB_DQ_KEEP) kept[c] = v;
        v = lb_dq_nan0(v);
        if (symmetric) v = _mm512_abs_ps(v);
        lo = _mm512_min_ps(lo, v);
        hi = _mm512_max_ps(hi, v);
    }
    float scale, zero;
    lb_dq_params(_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi), qmax, symmetric, &scale,
                 &zero);
    *scale_out = scale;
    if (symmetric)
        *(int8_t *)zero_out = 0;
    else
        *(uint8_t *)zero_out = (uint8_t)zero;
    const __m512 vs = _mm512_set1_ps(scale), vz = _mm512_set1_ps(zero);
    const __m512 top = _mm512_set1_ps((float)qmax);
    const __m512 qlo = symmetric ? _mm512_set1_ps(-(float)qmax) : _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; c++) {
        __mmask16 m = lb_dq_mask(len - c * 16);
        __m512 v = c < LB_DQ_KEEP ? kept[c] : lb_dq_load(x, cs, c * 16, m);
        __m512i codes = lb_dq_codes(v, vs, vz, qlo, top);
        _mm_mask_storeu_epi8((uint8_t *)q + c * 16, m, _mm512_cvtepi32_epi8(codes));
    }
}

/* 16 vectors -> one: lane i is the min (MAX_ = 0) or max (MAX_ = 1) over the lanes of v[i].
 * A tree of halvings: at width w, two vectors of 16/w segments of w lanes become one vector of
 * 32/w segments of w/2 lanes (a's segments, then b's), so the segment order is kept. */
static const int32_t lb_dq_fold_ix[4][2][16] = {
    {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
     {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}},
    {{0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27},
     {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31}},
    {{0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29},
     {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31}},
    {{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30},
     {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}}};

/* 16 vectors -> one: lane i is the min (MAX_ = 0) or max (MAX_ = 1) over the lanes of v[i].
 * A tree of halvings: at width w, two vectors of 16/w segments of w lanes become one vector of
 * 32/w segments of w/2 lanes (a's segments, then b's), so the segment order is kept. */
LB_V512 __m512 lb_dq_fold16(__m512 *v, const int MAX_) {
    for (int level = 0, count = 16; level < 4; level++, count /= 2) {
        const __m512i vx = _mm512_loadu_si512(lb_dq_fold_ix[level][0]);
        const __m512i vy = _mm512_loadu_si512(lb_dq_fold_ix[level][1]);
        for (int i = 0; i < count / 2; i++) {
            __m512 x = _mm512_permutex2var_ps(v[2 * i], vx, v[2 * i + 1]);
            __m512 y = _mm512_permutex2var_ps(v[2 * i], vy, v[2 * i + 1]);
            v[i] = MAX_ ? _mm512_max_ps(x, y) : _mm512_min_ps(x, y);
        }
    }
    return v[0];
}

/* Sixteen slices' parameters from their ranges (lo <= 0 <= hi; |x| ranges when symmetric):
   scale = (hi - lo) / qmax, or hi / qmax symmetric, 1 where that range is empty; zero point
   round_half_even(clamp(-lo / scale, 0, qmax)), 0 symmetric (lb_dq_params, 16 lanes). */
LB_V512 void lb_dq_params16(__m512 lo, __m512 hi, int symmetric, __m512 top, __m512 *scale,
                            __m512 *zero) {
    const __m512 zero_v = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
    if (symmetric) {
        *scale = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(hi, zero_v, _CMP_EQ_OQ),
                                      _mm512_div_ps(hi, top), one);
        *zero = zero_v;
        return;
    }
    *scale = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(hi, lo, _CMP_EQ_OQ),
                                  _mm512_div_ps(_mm512_sub_ps(hi, lo), top), one);
    const __m512 z = _mm512_sub_ps(zero_v, _mm512_div_ps(lo, *scale));
    *zero = _mm512_roundscale_ps(_mm512_min_ps(_mm512_max_ps(z, zero_v), top), LB_RNE);
}

/* Rows r0..r1 in blocks of 16 slices (a slice: one row's group), slices taken in order
 * (row, group): the ranges of 16 slices are folded into one vector each, and the parameters
 * of the 16 slices computed together, with the vector forms of lb_dq_params' expressions
 * (the same IEEE operations); then each slice's codes. Lanes beyond a slice's end are 0,
 * which is always inside the range. */
LB_TARGET_AVX512 static void lb_dq_rows_batched(const lb_dq_rows *p, int64_t r0, int64_t r1) {
    /* the parameters in locals: the stores of codes may alias *p as far as the compiler
     * knows, which would reload them in the inner loops */
    const int64_t group = p->group, k = p->k, ldx = p->ldx, ldq = p->ldq, ldp = p->ldp;
    const float *const xbase = p->x, *const csbase = p->channel_scale;
    const int symmetric = p->symmetric;
    float *const pscale = p->scale;
    uint8_t *const pzero = (uint8_t *)p->zero, *const qbase = (uint8_t *)p->q;
    const int64_t G = (k + group - 1) / group, chunks = (group + 15) / 16;
    const int64_t total = (r1 - r0) * G;
    const __m512 top = _mm512_set1_ps((float)p->qmax);
    const __m512 zero_v = _mm512_setzero_ps();
    const __m512 qlo = symmetric ? _mm512_set1_ps(-(float)p->qmax) : zero_v;
    /* with channel scales, x / cs of pass 1 is kept for pass 2 (one division less) */
    float kept[16 * 128];
    int64_t r = r0, j = 0; /* the next slice */
    for (int64_t s0 = 0; s0 < total; s0 += 16) {
        const int64_t count = LB_MIN(16, total - s0);
        __m512 lo[16], hi[16];
        int64_t at_r[16], at_j[16];
        for (int64_t i = 0; i < 16; i++) {
            __m512 l = zero_v, h = zero_v;
            if (i < count) {
                at_r[i] = r;
                at_j[i] = j;
                const int64_t k0 = j * group, len = LB_MIN(group, k - k0);
                const float *x = xbase + r * ldx + k0;
                const float *cs = csbase ? csbase + k0 : NULL;
                for (int64_t c = 0; c < chunks; c++) {
                    __m512 v = lb_dq_load(x, cs, c * 16, lb_dq_mask(len - c * 16));
                    if (cs) _mm512_storeu_ps(kept + (i * chunks + c) * 16, v);
                    v = lb_dq_nan0(v);
                    if (symmetric) v = _mm512_abs_ps(v);
                    l = _mm512_min_ps(l, v);
                    h = _mm512_max_ps(h, v);
                }
                if (++j == G) {
                    j = 0;
                    r++;
                }
            }
            lo[i] = l;
            hi[i] = h;
        }
        const __m512 vlo = lb_dq_fold16(lo, 0), vhi = lb_dq_fold16(hi, 1);
        __m512 scale, zero;
        lb_dq_params16(vlo, vhi, symmetric, top, &scale, &zero);
        float sc[16];
        int32_t ze[16];
        _mm512_storeu_ps(sc, scale);
        _mm512_storeu_si512(ze, _mm512_cvtps_epi32(zero));
        for (int64_t i = 0; i < count; i++) {
            const int64_t rr = at_r[i], jj = at_j[i], k0 = jj * group;
            const int64_t len = LB_MIN(group, k - k0);
            const float *x = xbase + rr * ldx + k0;
            const float *cs = csbase ? csbase + k0 : NULL;
            pscale[rr * ldp + jj] = sc[i];
            if (symmetric)
                pzero[rr * ldp + jj] = 0;
            else
                pzero[rr * ldp + jj] = (uint8_t)ze[i];
            const __m512 vs = _mm512_set1_ps(sc[i]), vz = _mm512_set1_ps((float)ze[i]);
            uint8_t *q = qbase + rr * ldq + k0;
            for (int64_t c = 0; c < chunks; c++) {
                __mmask16 m = lb_dq_mask(len - c * 16);
                __m512 v = cs ? _mm512_loadu_ps(kept + (i * chunks + c) * 16)
                              : _mm512_maskz_loadu_ps(m, x + c * 16);
                __m512i codes = lb_dq_codes(v, vs, vz, qlo, top);
                __m128i bytes = _mm512_cvtepi32_epi8(codes);
                /* register form, then a store: vpmovdb to memory is slow on some cores */
                __asm__("" : "+v"(bytes));
                if (m == 0xFFFF)
                    _mm_storeu_si128((__m128i *)(q + c * 16), bytes);
                else
                    _mm_mask_storeu_epi8(q + c * 16, m, bytes);
            }
        }
    }
}

/* Groups of 32, 64 or 128 values filling whole rows (k a multiple of the group, the default
 * grouped case and its coarser variants): lb_dq_rows_batched's operations without its general
 * bookkeeping. Blocks of 16 slices in order (row, group); a slice is CH = group / 16 vectors,
 * no masks. NaN lanes leave the range as vminps/vmaxps return their second operand when the
 * first is NaN (the range starts at 0, which a NaN counts as); they get the code `zero` as in
 * lb_dq_codes. Parameters of 16 consecutive slices are stored as one vector when they are
 * contiguous (ldp == G). */
LB_V512 void lb_dq_rows_whole(const lb_dq_rows *p, int64_t r0, int64_t r1, const int CH) {
    const int64_t group = 16 * CH;
    const int64_t k = p->k, ldx = p->ldx, ldq = p->ldq, ldp = p->ldp, G = k / group;
    const float *const xbase = p->x, *const csbase = p->channel_scale;
    const int symmetric = p->symmetric;
    float *const pscale = p->scale;
    uint8_t *const pzero = (uint8_t *)p->zero, *const qbase = (uint8_t *)p->q;
    const int64_t total = (r1 - r0) * G;
    const __m512 top = _mm512_set1_ps((float)p->qmax);
    const __m512 zero_v = _mm512_setzero_ps();
    const __m512 qlo = symmetric ? _mm512_set1_ps(-(float)p->qmax) : zero_v;
    float kept[16 * 128]; /* x / cs of pass 1, for pass 2 */
    int64_t r = r0, j = 0;
    for (int64_t s0 = 0; s0 < total; s0 += 16) {
        const int64_t count = LB_MIN(16, total - s0);
        __m512 lo[16], hi[16];
        const float *src[16];
        uint8_t *dst[16];
        for (int64_t i = 0; i < 16; i++) {
            __m512 l = zero_v, h = zero_v;
            if (i < count) {
                const float *x = xbase + r * ldx + j * group;
                dst[i] = qbase + r * ldq + j * group;
                src[i] = csbase ? kept + i * group : x;
                for (int c = 0; c < CH; c++) {
                    __m512 v = _mm512_loadu_ps(x + c * 16);
                    if (csbase) {
                        v = _mm512_div_ps(v, _mm512_loadu_ps(csbase + j * group + c * 16));
                        _mm512_storeu_ps(kept + i * group + c * 16, v);
                    }
                    if (symmetric) v = _mm512_abs_ps(v);
                    l = _mm512_min_ps(v, l);
                    h = _mm512_max_ps(v, h);
                }
                if (++j == G) {
                    j = 0;
                    r++;
                }
            }
            lo[i] = l;
            hi[i] = h;
        }
        const __m512 vlo = lb_dq_fold16(lo, 0), vhi = lb_dq_fold16(hi, 1);
        __m512 scale, zero;
        lb_dq_params16(vlo, vhi, symmetric, top, &scale, &zero);
        float sc[16], zf[16];
        _mm512_storeu_ps(sc, scale);
        _mm512_storeu_ps(zf, zero);
        const __m128i zb = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(zero));
        const int64_t first = (r0 + s0 / G) * ldp + s0 % G; /* slice s0's parameters */
        if (ldp == G) {
            const __mmask16 m = lb_dq_mask(count);
            _mm512_mask_storeu_ps(pscale + first, m, scale);
            _mm_mask_storeu_epi8(pzero + first, m, symmetric ? _mm_setzero_si128() : zb);
        } else {
            for (int64_t i = 0; i < count; i++) {
                const int64_t s = s0 + i, at = (r0 + s / G) * ldp + s % G;
                pscale[at] = sc[i];
                pzero[at] = symmetric ? 0 : (uint8_t)(int32_t)zf[i];
            }
        }
        for (int64_t i = 0; i < count; i++) {
            const __m512 vs = _mm512_set1_ps(sc[i]), vz = _mm512_set1_ps(zf[i]);
            const float *x = src[i];
            for (int c = 0; c < CH; c++) {
                const __m512 v = _mm512_loadu_ps(x + c * 16);
                const __mmask16 ok = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
                __m512 q = _mm512_maskz_roundscale_ps(ok, _mm512_div_ps(v, vs), LB_RNE);
                q = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(q, vz), qlo), top);
                __m128i bytes = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(q));
                __asm__("" : "+v"(bytes));
                _mm_storeu_si128((__m128i *)(dst[i] + c * 16), bytes);
            }
        }
    }
}

LB_TARGET_AVX512 static void lb_dq_rows_g32(const lb_dq_rows *p, int64_t r0, int64_t r1) {
    lb_dq_rows_whole(p, r0, r1, 2);
}
LB_TARGET_AVX512 static void lb_dq_rows_g64(const lb_dq_rows *p, int64_t r0, int64_t r1) {
    lb_dq_rows_whole(p, r0, r1, 4);
}
LB_TARGET_AVX512 static void lb_dq_rows_g128(const lb_dq_rows *p, int64_t r0, int64_t r1) {
    lb_dq_rows_whole(p, r0, r1, 8);
}

LB_TARGET_AVX512 void lb_dq_rows_avx512(const lb_dq_rows *p, int64_t r0, int64_t r1) {
    int64_t G = (p->k + p->group - 1) / p->group;
    if ((p->group == 32 || p->group == 64 || p->group == 128) && p->k % p->group == 0 &&
        r1 > r0) {
        if (p->group == 32)
            lb_dq_rows_g32(p, r0, r1);
        else if (p->group == 64)
            lb_dq_rows_g64(p, r0, r1);
        else
            lb_dq_rows_g128(p, r0, r1);
        return;
    }
    if (p->group <= 128 && (r1 - r0) * G >= 8) {
        lb_dq_rows_batched(p, r0, r1);
        return;
    }
    for (int64_t r = r0; r < r1; r++)
        for (int64_t j = 0; j < G; j++) {
            int64_t k0 = j * p->group, len = LB_MIN(p->group, p->k - k0);
            lb_dq_slice_v512(p->x + r * p->ldx + k0,
                             p->channel_scale ? p->channel_scale + k0 : NULL, len, p->qmax,
                             p->symmetric, (uint8_t *)p->q + r * p->ldq + k0,
                             p->scale + r * p->ldp + j, (uint8_t *)p->zero + r * p->ldp + j);
        }
}

/* Columns [c0, c1) of block o, 16 at a time: ranges over the rows of each group elementwise. */
LB_TARGET_AVX512 void lb_dq_cols_avx512(const lb_dq_cols *p, int64_t o, int64_t c0,
                                        int64_t c1) {
    int64_t G = (p->r + p->group - 1) / p->group;
    const __m512 top = _mm512_set1_ps((float)p->qmax);
    const __m512 zero_v = _mm512_setzero_ps();
    const __m512 qlo = p->symmetric ? _mm512_set1_ps(-(float)p->qmax) : zero_v;
    for (int64_t c = c0; c < c1; c += 16) {
        __mmask16 m = lb_dq_mask(c1 - c);
        for (int64_t j = 0; j < G; j++) {
            int64_t rr0 = j * p->group, len = LB_MIN(p->group, p->r - rr0);
            const float *x = p->x + (o * p->r + rr0) * p->c + c;
            __m512 lo = zero_v, hi = zero_v;
            for (int64_t i = 0; i < len; i++) {
                __m512 v = lb_dq_nan0(_mm512_maskz_loadu_ps(m, x + i * p->c));
                if (p->symmetric) v = _mm512_abs_ps(v);
                lo = _mm512_min_ps(lo, v);
                hi = _mm512_max_ps(hi, v);
            }
            __m512 scale, zero;
            lb_dq_params16(lo, hi, p->symmetric, top, &scale, &zero);
            int64_t pat = (o * G + j) * p->c + c;
            _mm512_mask_storeu_ps(p->scale + pat, m, scale);
            _mm_mask_storeu_epi8((uint8_t *)p->zero + pat, m,
                                 _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(zero)));
            uint8_t *q = (uint8_t *)p->q + (o * p->r + rr0) * p->c + c;
            for (int64_t i = 0; i < len; i++) {
                __m512 v = _mm512_maskz_loadu_ps(m, x + i * p->c);
                _mm_mask_storeu_epi8(q + i * p->c, m,
                                     _mm512_cvtepi32_epi8(lb_dq_codes(v, scale, zero, qlo, top)));
            }
        }
    }
}
#endif /* LB_HAVE_AVX512 */

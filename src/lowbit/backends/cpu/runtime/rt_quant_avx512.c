/* AVX-512 rows of the quantized Add/Sub/Mul (rt_quant.c): 16 elements at a time through the
 * same integer expressions (rt_vec512.h). */
#include "rt_internal.h"

#if LB_HAVE_AVX512
#include "rt_vec512.h"

/* 16 codes of type `type` at p (stride 1, or 0: one code broadcast) as int32 lanes. */
LB_V512 __m512i lb_load16(const void *p, int32_t type, int64_t stride, __mmask16 k) {
    if (stride == 0) {
        int32_t v = type == LB_U8 ? *(const uint8_t *)p
                    : type == LB_I16 ? *(const int16_t *)p : *(const uint16_t *)p;
        return _mm512_set1_epi32(v);
    }
    switch (type) {
    case LB_U8:
        return _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, p));
    case LB_I16:
        return _mm512_cvtepi16_epi32(_mm256_maskz_loadu_epi16(k, p));
    default:
        return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, p));
    }
}

static int64_t lb_tsize(int32_t type) { return type == LB_U8 ? 1 : 2; }

/* out[i] = table[q[i]] for 8-bit codes and a 256-entry table of bytes: the table widened to
 * 16 bits in 8 registers, each code looked up in the four 64-entry quarters by
 * vpermt2w (bits 0-5) and the quarter chosen by bits 6 and 7; 32 codes a step. */
LB_TARGET_AVX512 void lb_lookup_u8_avx512(int64_t n, const uint8_t *q, const uint8_t *table,
                                          uint8_t *out) {
    __m512i t[8];
    for (int i = 0; i < 8; i++)
        t[i] = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(table + 32 * i)));
    const __m512i bit6 = _mm512_set1_epi16(64), bit7 = _mm512_set1_epi16(128);
    for (int64_t i = 0; i < n; i += 32) {
        __mmask32 k = n - i >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << (n - i)) - 1u);
        __m512i idx = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(k, q + i));
        __mmask32 b6 = _mm512_test_epi16_mask(idx, bit6), b7 = _mm512_test_epi16_mask(idx, bit7);
        __m512i lo = _mm512_mask_blend_epi16(b6, _mm512_permutex2var_epi16(t[0], idx, t[1]),
                                             _mm512_permutex2var_epi16(t[2], idx, t[3]));
        __m512i hi = _mm512_mask_blend_epi16(b6, _mm512_permutex2var_epi16(t[4], idx, t[5]),
                                             _mm512_permutex2var_epi16(t[6], idx, t[7]));
        _mm256_mask_storeu_epi8(out + i, k,
                                _mm512_cvtepi16_epi8(_mm512_mask_blend_epi16(b7, lo, hi)));
    }
}

/* lb_post_map's rows [r0, r1) when the post stage is the float32 HardSwish then the
 * per-channel Mul (PM: its requantization, q31 or prescale): lb_hm_post_v512, the parameters
 * in registers, two rows of 16 channels at a time. */
LB_V512 void lb_post_rows_hsw_mul(const lb_post_map_job *j, int64_t r0, int64_t r1,
                                  const int PM, const int PLSH, const int PRSH) {
    const int64_t C = j->channels, size = lb_tsize(j->in_type);
    const int32_t in_type = j->in_type, out_type = j->out_type;
    const char *const x = (const char *)j->x;
    void *const out = j->out;
    const lb_post post = *j->post;
    const lb_hm_consts c = lb_hm_consts_load(&post, PM);
    int64_t r = r0;
    for (; r + 2 <= r1; r += 2) {
        for (int64_t ch = 0; ch < C; ch += 16) {
            __mmask16 k = lb_tail_mask(C - ch);
            __m512i mulv = _mm512_loadu_si512(post.mul + ch);
            int64_t at = r * C + ch;
            __m512i y0 = lb_load16(x + at * size, in_type, 1, k);
            __m512i y1 = lb_load16(x + (at + C) * size, in_type, 1, k);
            y0 = lb_hm_post_v512(y0, &c, mulv, PM, PLSH, PRSH);
            y1 = lb_hm_post_v512(y1, &c, mulv, PM, PLSH, PRSH);
            lb_store_v512(out, out_type, at, y0, k);
            lb_store_v512(out, out_type, at + C, y1, k);
        }
    }
    for (; r < r1; r++) {
        for (int64_t ch = 0; ch < C; ch += 16) {
            __mmask16 k = lb_tail_mask(C - ch);
            int64_t at = r * C + ch;
            __m512i y = lb_load16(x + at * size, in_type, 1, k);
            y = lb_hm_post_v512(y, &c, _mm512_loadu_si512(post.mul + ch), PM, PLSH, PRSH);
            lb_store_v512(out, out_type, at, y, k);
        }
    }
}

/* lb_post_map's rows [r0, r1): 16 channels at a time through lb_post_v512. */
LB_TARGET_AVX512 void lb_post_rows_avx512(const lb_post_map_job *j, int64_t r0, int64_t r1) {
    const int64_t C = j->channels, size = lb_tsize(j->in_type);
    const lb_post *p = j->post;
    if (p->hsw && p->mul && !p->table) {
        if (p->rq.method == LB_RQ_PRESCALE) {
            lb_post_rows_hsw_mul(j, r0, r1, LB_RQ_PRESCALE, 0, 0);
            return;
        }
        if (p->rq.method == LB_RQ_Q31) {
            if (p->rq.p1[0] == 0 && p->rq.p2[0] != 0)
                lb_post_rows_hsw_mul(j, r0, r1, LB_RQ_Q31, 0, 1);
            else
                lb_post_rows_hsw_mul(j, r0, r1, LB_RQ_Q31, 1, 1);
            return;
        }
    }
    for (int64_t r = r0; r < r1; r++) {
        for (int64_t c = 0; c < C; c += 16) {
            __mmask16 k = lb_tail_mask(C - c);
            int64_t at = r * C + c;
            __m512i y = lb_load16((const char *)j->x + at * size, j->in_type, 1, k);
            lb_store_v512(j->out, j->out_type, at, lb_post_v512(j->post, c, y, k), k);
        }
    }
}

/* out[p * c + ch] = tables[ch * 256 + x[p * c + ch]] (lb_qse_residual's lookup): 16 channels
 * of a pixel a step, each code's table byte fetched by a dword gather at byte offsets (the
 * tables are readable 64 bytes past their end) and narrowed. */
LB_TARGET_AVX512 void lb_qse_lookup_avx512(const uint8_t *tables, int64_t c, const uint8_t *x,
                                           uint8_t *out, int64_t npix) {
    const __m512i lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (int64_t p = 0; p < npix; p++) {
        const uint8_t *xp = x + p * c;
        uint8_t *op = out + p * c;
        for (int64_t ch = 0; ch < c; ch += 16) {
            __mmask16 k = lb_tail_mask(c - ch);
            __m512i chv = _mm512_add_epi32(_mm512_set1_epi32((int)ch), lanes);
            __m512i code = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, xp + ch));
            __m512i idx = _mm512_add_epi32(_mm512_slli_epi32(chv, 8), code);
            __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, idx, tables, 1);
            _mm_mask_storeu_epi8(op + ch, k, _mm512_cvtepi32_epi8(g));
        }
    }
}

/* lb_q31_v512 with a left shift of 0: its saturation step is skipped for such lanes. */
LB_V512 __m512i lb_q31_l0_v512(__m512i x, __m512i m, __m512i r) {
    return lb_q31_v512(x, m, _mm512_setzero_si512(), r);
}

/* Add/Sub with one operand constant (stride 0) and no left shifts (the usual parameters):
 * the constant's aligned term once, then one q31 for the other and one for the result, as
 * lb_add_v512 computes them. */
LB_TARGET_AVX512 static void lb_qadd_const_row_avx512(const lb_qbinary *op, const void *a,
                                                      int64_t sa, const void *b, void *out,
                                                      int64_t n) {
    const lb_add_params *p = &op->p;
    lb_add512 av = lb_add512_load(p);
    const int64_t ea = lb_tsize(op->a_type);
    /* the constant operand is b here (the caller swaps the roles for a constant a) */
    __m512i yb = lb_load16(b, op->b_type, 0, 0xFFFF);
    __m512i cb = lb_q31_v512(_mm512_sllv_epi32(_mm512_sub_epi32(yb, av.z2), av.shift), av.m2,
                             av.l2, av.r2);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = lb_tail_mask(n - i);
        __m512i x = lb_load16((const char *)a + i * sa * ea, op->a_type, sa, k);
        __m512i d = _mm512_sllv_epi32(_mm512_sub_epi32(x, av.z1), av.shift);
        __m512i t = lb_q31_l0_v512(d, av.m1, av.r1);
        __m512i sum = p->sub ? _mm512_sub_epi32(t, cb) : _mm512_add_epi32(t, cb);
        __m512i y = _mm512_add_epi32(lb_q31_l0_v512(sum, av.out.p0, av.out.p2), av.out.zp);
        y = _mm512_max_epi32(y, _mm512_set1_epi32(p->out.qmin));
        y = _mm512_min_epi32(y, _mm512_set1_epi32(p->out.qmax));
        lb_store_v512(out, op->out_type, i, y, k);
    }
}

/* The table form of an 8-bit Add/Sub (lb_qbinary's lin_on): out[i] = clamp(Q[t[i]] +
 * ((R[t[i]] + lin_c * u[i]) >> lin_s), lin_lo, lin_hi), 32 codes a step. Q and R (int16) are
 * held in 8 registers each and looked up as lb_lookup_u8_avx512 does (vpermt2w on bits 0-5,
 * the quarter chosen by bits 6 and 7); R[t] and u are interleaved in pairs so that one
 * vpmaddwd with (1, lin_c) gives R[t] + lin_c * u exactly in int32, shifted and packed back to
 * int16 in order (|value >> lin_s| < 2**15, the compiler checked), then Q added with
 * saturation (the bounds are 8-bit: the clamp is unchanged), clamped and narrowed. */
LB_V512 __m512i lb_lookup16_v512(const __m512i t[8], __m512i idx, __mmask32 b6, __mmask32 b7) {
    __m512i lo = _mm512_mask_blend_epi16(b6, _mm512_permutex2var_epi16(t[0], idx, t[1]),
                                         _mm512_permutex2var_epi16(t[2], idx, t[3]));
    __m512i hi = _mm512_mask_blend_epi16(b6, _mm512_permutex2var_epi16(t[4], idx, t[5]),
                                         _mm512_permutex2var_epi16(t[6], idx, t[7]));
    return _mm512_mask_blend_epi16(b7, lo, hi);
}

LB_TARGET_AVX512 void lb_qlin_row_avx512(const lb_qbinary *op, const uint8_t *t,
                                         const uint8_t *u, uint8_t *out, int64_t n) {
    __m512i tq[8], tr[8];
    for (int i = 0; i < 8; i++) {
        tq[i] = _mm512_loadu_si512((const void *)(op->lin_table + 32 * i));
        tr[i] = _mm512_loadu_si512((const void *)(op->lin_table + 256 + 32 * i));
    }
    const __m512i w = _mm512_set1_epi32((int32_t)(1u | ((uint32_t)op->lin_c << 16)));
    const __m512i bit6 = _mm512_set1_epi16(64), bit7 = _mm512_set1_epi16(128);
    const __m512i lo = _mm512_set1_epi16((int16_t)op->lin_lo);
    const __m512i hi = _mm512_set1_epi16((int16_t)op->lin_hi);
    const __m128i s = _mm_cvtsi32_si128(op->lin_s);
    for (int64_t i = 0; i < n; i += 32) {
        __mmask32 k = n - i >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << (n - i)) - 1u);
        __m512i xt = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(k, t + i));
        __m512i xu = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(k, u + i));
        __mmask32 b6 = _mm512_test_epi16_mask(xt, bit6), b7 = _mm512_test_epi16_mask(xt, bit7);
        __m512i q = lb_lookup16_v512(tq, xt, b6, b7), r = lb_lookup16_v512(tr, xt, b6, b7);
        __m512i v0 = _mm512_madd_epi16(_mm512_unpacklo_epi16(r, xu), w);
        __m512i v1 = _mm512_madd_epi16(_mm512_unpackhi_epi16(r, xu), w);
        __m512i y = _mm512_packs_epi32(_mm512_sra_epi32(v0, s), _mm512_sra_epi32(v1, s));
        y = _mm512_adds_epi16(y, q);
        y = _mm512_min_epi16(_mm512_max_epi16(y, lo), hi);
        _mm256_mask_storeu_epi8(out + i, k, _mm512_cvtepi16_epi8(y));
    }
}

/* out[i] = op(a[i * sa], b[i * sb]) for i < n, with sa, sb in {0, 1}; Mul products must fit
 * int32 (the caller checks: `narrow`). */
LB_TARGET_AVX512 void lb_qbinary_row_avx512(const lb_qbinary *op, const void *a, int64_t sa,
                                            const void *b, int64_t sb, void *out, int64_t n) {
    const lb_add_params *p = &op->p;
    if (op->op != LB_QMUL && p->out.method == LB_RQ_Q31 && p->out.p1[0] == 0) {
        if (sb == 0 && sa == 1 && p->l1 == 0) {
            lb_qadd_const_row_avx512(op, a, sa, b, out, n);
            return;
        }
        if (sa == 0 && sb == 1 && p->l2 == 0) { /* swap: constant a becomes the second */
            lb_qbinary sw = *op;
            sw.a_type = op->b_type;
            sw.b_type = op->a_type;
            sw.p.z1 = p->z2, sw.p.m1 = p->m2, sw.p.l1 = p->l2, sw.p.r1 = p->r2;
            sw.p.z2 = p->z1, sw.p.m2 = p->m1, sw.p.l2 = p->l1, sw.p.r2 = p->r1;
            if (!p->sub) {
                lb_qadd_const_row_avx512(&sw, b, sb, a, out, n);
                return;
            }
        }
    }
    lb_add512 av = lb_add512_load(p);
    const __m512i z1 = _mm512_set1_epi32(p->z1), z2 = _mm512_set1_epi32(p->z2);
    const int64_t ea = lb_tsize(op->a_type), eb = lb_tsize(op->b_type);
    /* q31 output requantization without a left shift: the shorter lb_q31_l0_v512 */
    const int l0 = p->out.method == LB_RQ_Q31 && p->out.p1[0] == 0;
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = lb_tail_mask(n - i);
        __m512i x = lb_load16((const char *)a + i * sa * ea, op->a_type, sa, k);
        __m512i y = lb_load16((const char *)b + i * sb * eb, op->b_type, sb, k);
        __m512i r, acc;
        if (op->op == LB_QMUL) {
            acc = _mm512_mullo_epi32(_mm512_sub_epi32(x, z1), _mm512_sub_epi32(y, z2));
            if (!l0) {
                lb_store_v512(out, op->out_type, i, lb_requant_v512(&p->out, &av.out, acc), k);
                continue;
            }
        } else if (p->l1 == 0 && p->l2 == 0) {
            __m512i t1 = lb_q31_l0_v512(_mm512_sllv_epi32(_mm512_sub_epi32(x, av.z1), av.shift),
                                        av.m1, av.r1);
            __m512i t2 = lb_q31_l0_v512(_mm512_sllv_epi32(_mm512_sub_epi32(y, av.z2), av.shift),
                                        av.m2, av.r2);
            acc = p->sub ? _mm512_sub_epi32(t1, t2) : _mm512_add_epi32(t1, t2);
            if (!l0) { /* prescale (or q31 with a left shift) for the result */
                lb_store_v512(out, op->out_type, i, lb_requant_v512(&p->out, &av.out, acc), k);
                continue;
            }
        } else {
            lb_store_v512(out, op->out_type, i, lb_add_v512(p, &av, x, y), k);
            continue;
        }
        r = _mm512_add_epi32(lb_q31_l0_v512(acc, av.out.p0, av.out.p2), av.out.zp);
        r = _mm512_max_epi32(r, _mm512_set1_epi32(p->out.qmin));
        r = _mm512_min_epi32(r, _mm512_set1_epi32(p->out.qmax));
        lb_store_v512(out, op->out_type, i, r, k);
    }
}
#endif

#if LB_HAVE_AVX512
/* Quantize of `np` pixels of a 3-channel float NCHW image (channel planes `hw` floats apart)
 * into interleaved uint8 NHWC codes: lb_quantize_one on 16 pixels of each channel, then the
 * three byte vectors interleaved by byte shuffles. `s`, `zp`: each channel's parameters. */
LB_TARGET_AVX512 void lb_quantize_nhwc3_avx512(const float *x, int64_t hw, int64_t np,
                                               const float s[3], const float zp[3], float lo,
                                               float hi, float pinf, float ninf, float nanv,
                                               uint8_t *out) {
    __m128i idx[3][3]; /* idx[o][ch]: output vector o, byte i = channel ch of pixel (16o+i)/3 */
    for (int o = 0; o < 3; o++)
        for (int ch = 0; ch < 3; ch++) {
            int8_t v[16];
            for (int i = 0; i < 16; i++)
                v[i] = (16 * o + i) % 3 == ch ? (int8_t)((16 * o + i) / 3) : (int8_t)-128;
            idx[o][ch] = _mm_loadu_si128((const __m128i *)v);
        }
    const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    const __m512 vpinf = _mm512_set1_ps(pinf), vninf = _mm512_set1_ps(ninf),
                 vnan = _mm512_set1_ps(nanv), inf = _mm512_set1_ps(INFINITY);
    /* Where s is in [2^-30, 2^30] and the 16 lanes are finite with |x| <= 2^60 (a photo's
     * values), the quick form: x / s without the division, q = x * (1/s) corrected once by
     * its exact residual, q + (x - q * s) * (1/s): the correctly rounded quotient when 1/s is
     * (Markstein's theorem) and nothing is subnormal; below |x| = 2^-100, where the residual
     * can be, both quotients are under 2^-69 and round to 0. With no NaN or infinity, the
     * clamps are max / min. The general form (division, NaN and infinity codes) otherwise.
     * 640 million quotients near ties in [2^-60, 2^60] checked equal to the division. */
    float inv[3];
    int quick[3];
    for (int ch = 0; ch < 3; ch++) {
        float as = fabsf(s[ch]);
        inv[ch] = 1.0f / s[ch];
        quick[ch] = as >= 0x1p-30f && as <= 0x1p30f;
    }
    const __m512 xmax = _mm512_set1_ps(0x1p60f);
    for (int64_t p = 0; p < np; p += 16) {
        __mmask16 k = lb_tail_mask(np - p);
        __m128i b[3];
        for (int ch = 0; ch < 3; ch++) {
            __m512 v = _mm512_maskz_loadu_ps(k, x + ch * hw + p), vs = _mm512_set1_ps(s[ch]);
            __m512 r;
            if (quick[ch] && _mm512_cmp_ps_mask(_mm512_abs_ps(v), xmax, _CMP_LE_OQ) == 0xFFFF) {
                __m512 vi = _mm512_set1_ps(inv[ch]), q = _mm512_mul_ps(v, vi);
                q = _mm512_fmadd_ps(_mm512_fnmadd_ps(q, vs, v), vi, q);
                r = _mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                r = _mm512_add_ps(r, _mm512_set1_ps(zp[ch]));
                r = _mm512_min_ps(_mm512_max_ps(r, vlo), vhi);
            } else {
                r = _mm512_roundscale_ps(_mm512_div_ps(v, vs),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q), r, vnan);
                r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(r, inf, _CMP_EQ_OQ), r, vpinf);
                r = _mm512_mask_blend_ps(
                    _mm512_cmp_ps_mask(r, _mm512_sub_ps(_mm512_setzero_ps(), inf), _CMP_EQ_OQ),
                    r, vninf);
                r = _mm512_add_ps(r, _mm512_set1_ps(zp[ch]));
                r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(r, vlo, _CMP_LT_OQ), r, vlo);
                r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(r, vhi, _CMP_GT_OQ), r, vhi);
            }
            b[ch] = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r));
        }
        int64_t bytes = 3 * LB_MIN(16, np - p);
        for (int o = 0; o < 3; o++) {
            __m128i v = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(b[0], idx[o][0]),
                                                  _mm_shuffle_epi8(b[1], idx[o][1])),
                                     _mm_shuffle_epi8(b[2], idx[o][2]));
            int64_t left = bytes - 16 * o;
            if (left <= 0) break;
            _mm_mask_storeu_epi8(out + 3 * p + 16 * o, lb_tail_mask(left), v);
        }
    }
}
#endif

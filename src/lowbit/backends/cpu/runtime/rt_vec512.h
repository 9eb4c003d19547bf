/* AVX-512 versions of the requantization expressions (same integers as rt_internal.h), shared
 * by the AVX-512 kernels. Include only where LB_HAVE_AVX512. */
#ifndef LOWBIT_RT_VEC512_H
#define LOWBIT_RT_VEC512_H

#include <immintrin.h>

#include "rt_internal.h"

#define LB_V512 LB_TARGET_AVX512 static inline __attribute__((always_inline))

/* fixed_point "q31" on 16 lanes: the saturating left shift, the 64-bit rounding doubling high
 * product, then the rounding right shift split as
 *   (h + 2**(r-1) - (h < 0)) >> r = (h >> r) + ((h & (2**r - 1)) + 2**(r-1) - (h < 0)) >>> r
 * where the second sum is non-negative and below 2**32, so it cannot overflow. LSH: whether
 * any lane shifts left (else nothing to saturate: multipliers below 1); RSH: whether any
 * shifts right (else nothing to round); modd, mask, rrnd and rpos derived from m and r once
 * (lb_q31_prep), so that loops keep them in registers. */
LB_V512 __m512i lb_q31_pre_v512(__m512i x, __m512i m, __m512i l, __m512i r, __m512i modd,
                                __m512i mask, __m512i rrnd, __mmask16 rpos, const int LSH,
                                const int RSH) {
    const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi32(1);
    __m512i xs = x;
    if (LSH) {
        __m512i sh = _mm512_sllv_epi32(x, l);
        __mmask16 ovf = _mm512_cmpneq_epi32_mask(_mm512_srav_epi32(sh, l), x);
        __m512i sat = _mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(x, zero),
                                              _mm512_set1_epi32(INT32_MAX),
                                              _mm512_set1_epi32(INT32_MIN));
        xs = _mm512_mask_blend_epi32(ovf, sh, sat);
    }
    const __m512i half = _mm512_set1_epi64((int64_t)1 << 30);
    __m512i even = _mm512_mul_epi32(xs, m);
    __m512i odd = _mm512_mul_epi32(_mm512_srli_epi64(xs, 32), modd);
    even = _mm512_srai_epi64(_mm512_add_epi64(even, half), 31);
    odd = _mm512_srai_epi64(_mm512_add_epi64(odd, half), 31);
    __m512i h = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
    if (!RSH) return h;
    __mmask16 neg = _mm512_mask_cmplt_epi32_mask(rpos, h, zero);
    __m512i frac = _mm512_add_epi32(_mm512_and_si512(h, mask), rrnd);
    frac = _mm512_mask_sub_epi32(frac, neg, frac, one);
    return _mm512_add_epi32(_mm512_srav_epi32(h, r), _mm512_srlv_epi32(frac, r));
}

/* lb_q31_pre_v512's vectors for multipliers m and right shifts r. */
LB_V512 void lb_q31_prep(__m512i m, __m512i r, __m512i *modd, __m512i *mask, __m512i *rrnd,
                         __mmask16 *rpos) {
    const __m512i one = _mm512_set1_epi32(1);
    *modd = _mm512_srli_epi64(m, 32);
    *mask = _mm512_sub_epi32(_mm512_sllv_epi32(one, r), one);
    *rrnd = _mm512_srli_epi32(_mm512_add_epi32(*mask, one), 1);
    *rpos = _mm512_cmpgt_epi32_mask(r, _mm512_setzero_si512());
}

/* lb_q31_pre_v512 with everything derived from m, l and r on the call. */
LB_V512 __m512i lb_q31_v512(__m512i x, __m512i m, __m512i l, __m512i r) {
    __m512i modd, mask, rrnd;
    __mmask16 rpos;
    lb_q31_prep(m, r, &modd, &mask, &rrnd, &rpos);
    return lb_q31_pre_v512(x, m, l, r, modd, mask, rrnd, rpos, _mm512_test_epi32_mask(l, l) != 0,
                           _mm512_test_epi32_mask(r, r) != 0);
}

/* fixed_point "prescale" on 16 lanes with its vectors derived once: the arithmetic shift by
 * pre, the clip to [negclip, clip], then (t * scale + rnd) >> post (rnd = 2**(post-1)). */
LB_V512 __m512i lb_prescale_pre_v512(__m512i x, __m512i pre, __m512i clip, __m512i negclip,
                                     __m512i scale, __m512i rnd, __m512i post) {
    __m512i t = _mm512_max_epi32(_mm512_min_epi32(_mm512_srav_epi32(x, pre), clip), negclip);
    return _mm512_srav_epi32(_mm512_add_epi32(_mm512_mullo_epi32(t, scale), rnd), post);
}

/* fixed_point "prescale" on 16 lanes. */
LB_V512 __m512i lb_prescale_v512(__m512i x, __m512i pre, __m512i scale, __m512i post,
                                 __m512i clip) {
    const __m512i one = _mm512_set1_epi32(1);
    return lb_prescale_pre_v512(x, pre, clip, _mm512_sub_epi32(_mm512_setzero_si512(), clip),
                                scale, _mm512_sllv_epi32(one, _mm512_sub_epi32(post, one)), post);
}

/* The requantization parameters of 16 consecutive channels, loaded once per column block. */
typedef struct lb_rq512 {
    __m512i p0, p1, p2, p3, zp;
    __m512 fmul;
} lb_rq512;

LB_V512 lb_rq512 lb_rq512_load(const lb_requant *rq, int64_t c) {
    lb_rq512 v;
    v.zp = _mm512_loadu_si512(rq->zero_point + c);
    v.p0 = v.p1 = v.p2 = v.p3 = _mm512_setzero_si512();
    v.fmul = _mm512_setzero_ps();
    if (rq->method == LB_RQ_FLOAT32) {
        v.fmul = _mm512_loadu_ps(rq->fmul + c);
        return v;
    }
    v.p0 = _mm512_loadu_si512(rq->p0 + c);
    v.p1 = _mm512_loadu_si512(rq->p1 + c);
    v.p2 = _mm512_loadu_si512(rq->p2 + c);
    if (rq->method == LB_RQ_PRESCALE) v.p3 = _mm512_loadu_si512(rq->p3 + c);
    return v;
}

/* Parameters of channel 0 in every lane (per-tensor requantization). */
LB_V512 lb_rq512 lb_rq512_broadcast(const lb_requant *rq) {
    lb_rq512 v;
    v.zp = _mm512_set1_epi32(rq->zero_point[0]);
    v.p0 = v.p1 = v.p2 = v.p3 = _mm512_setzero_si512();
    v.fmul = _mm512_setzero_ps();
    if (rq->method == LB_RQ_FLOAT32) {
        v.fmul = _mm512_set1_ps(rq->fmul[0]);
        return v;
    }
    v.p0 = _mm512_set1_epi32(rq->p0[0]);
    v.p1 = _mm512_set1_epi32(rq->p1[0]);
    v.p2 = _mm512_set1_epi32(rq->p2[0]);
    if (rq->method == LB_RQ_PRESCALE) v.p3 = _mm512_set1_epi32(rq->p3[0]);
    return v;
}

/* Stored codes of 16 accumulators: requantize, add the zero point, clamp. */
LB_V512 __m512i lb_requant_v512(const lb_requant *rq, const lb_rq512 *v, __m512i x) {
    __m512i y;
    if (rq->method == LB_RQ_FLOAT32) {
        __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(x), v->fmul);
        __m512 lo = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_set1_epi32(rq->qmin), v->zp));
        __m512 hi = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_set1_epi32(rq->qmax), v->zp));
        f = _mm512_min_ps(_mm512_max_ps(f, lo), hi); /* max_ps gives lo for NaN */
        y = _mm512_cvt_roundps_epi32(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else if (rq->method == LB_RQ_PRESCALE) {
        y = lb_prescale_v512(x, v->p0, v->p1, v->p2, v->p3);
    } else {
        y = lb_q31_v512(x, v->p0, v->p1, v->p2);
    }
    y = _mm512_add_epi32(y, v->zp);
    y = _mm512_max_epi32(y, _mm512_set1_epi32(rq->qmin));
    return _mm512_min_epi32(y, _mm512_set1_epi32(rq->qmax));
}

/* Per-tensor Add/Sub parameters in vectors (the fused residual of lb_epilogue). */
typedef struct lb_add512 {
    __m512i shift, z1, m1, l1, r1, z2, m2, l2, r2;
    lb_rq512 out;
} lb_add512;

LB_V512 lb_add512 lb_add512_load(const lb_add_params *p) {
    lb_add512 v;
    v.shift = _mm512_set1_epi32(p->shift);
    v.z1 = _mm512_set1_epi32(p->z1);
    v.m1 = _mm512_set1_epi32(p->m1);
    v.l1 = _mm512_set1_epi32(p->l1);
    v.r1 = _mm512_set1_epi32(p->r1);
    v.z2 = _mm512_set1_epi32(p->z2);
    v.m2 = _mm512_set1_epi32(p->m2);
    v.l2 = _mm512_set1_epi32(p->l2);
    v.r2 = _mm512_set1_epi32(p->r2);
    v.out = lb_rq512_broadcast(&p->out);
    return v;
}

LB_V512 __m512i lb_add_v512(const lb_add_params *p, const lb_add512 *v, __m512i y1,
                            __m512i y2) {
    __m512i d1 = _mm512_sllv_epi32(_mm512_sub_epi32(y1, v->z1), v->shift);
    __m512i d2 = _mm512_sllv_epi32(_mm512_sub_epi32(y2, v->z2), v->shift);
    __m512i a1 = lb_q31_v512(d1, v->m1, v->l1, v->r1);
    __m512i a2 = lb_q31_v512(d2, v->m2, v->l2, v->r2);
    __m512i s = p->sub ? _mm512_sub_epi32(a1, a2) : _mm512_add_epi32(a1, a2);
    return lb_requant_v512(&p->out, &v->out, s);
}

/* Store 16 int32 codes as `out_type` (LB_U8, LB_I16, LB_U16, LB_I32) under mask k. */
LB_V512 void lb_store_v512(void *out, int32_t out_type, int64_t at, __m512i y, __mmask16 k) {
    switch (out_type) {
    case LB_U8:
        _mm_mask_storeu_epi8((uint8_t *)out + at, k, _mm512_cvtepi32_epi8(y));
        break;
    case LB_I16:
    case LB_U16:
        _mm256_mask_storeu_epi16((int16_t *)out + at, k, _mm512_cvtepi32_epi16(y));
        break;
    case LB_I32:
        _mm512_mask_storeu_epi32((int32_t *)out + at, k, y);
        break;
    default:
        break;
    }
}

LB_V512 __mmask16 lb_tail_mask(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

/* lb_post's float32 HardSwish on 16 codes (lb_hsw_scalar's operations, in its order). */
LB_V512 __m512i lb_hsw_v512(const lb_post *p, __m512i y) {
    __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(y, _mm512_set1_epi32(p->hsw_zx)));
    __m512 h = _mm512_add_ps(_mm512_mul_ps(v, _mm512_set1_ps(p->hsw_c1)), _mm512_set1_ps(0.5f));
    h = _mm512_min_ps(_mm512_max_ps(h, _mm512_setzero_ps()), _mm512_set1_ps(1.0f));
    __m512 u = _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(v, h), _mm512_set1_ps(p->hsw_c2)),
                             _mm512_set1_ps(p->hsw_c3));
    u = _mm512_max_ps(u, _mm512_set1_ps((float)(p->hsw_qmin - p->hsw_zy)));
    u = _mm512_min_ps(u, _mm512_set1_ps((float)(p->hsw_qmax - p->hsw_zy)));
    __m512i r = _mm512_cvt_roundps_epi32(u, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_add_epi32(r, _mm512_set1_epi32(p->hsw_zy));
}

/* An lb_post that is the float32 HardSwish then the per-channel Mul (requantized per tensor
 * by q31 or prescale, PM), as vectors loaded once (lb_hm_consts_load) for lb_hm_post_v512. */
typedef struct lb_hm_consts {
    __m512i hzx, hzy, pz, pp0, pp1, pp2, pzp, pclip, pnegclip, prnd, pqmin, pqmax;
    __m512i pmodd, pmask, prrnd;
    __mmask16 prpos;
    __m512 c1, c2, c3, half, fone, fzero, lo, hi;
} lb_hm_consts;

LB_V512 lb_hm_consts lb_hm_consts_load(const lb_post *post, const int PM) {
    const __m512i one = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
    const lb_requant *prq = &post->rq;
    lb_hm_consts c;
    c.hzx = _mm512_set1_epi32(post->hsw_zx);
    c.hzy = _mm512_set1_epi32(post->hsw_zy);
    c.c1 = _mm512_set1_ps(post->hsw_c1);
    c.c2 = _mm512_set1_ps(post->hsw_c2);
    c.c3 = _mm512_set1_ps(post->hsw_c3);
    c.half = _mm512_set1_ps(0.5f);
    c.fone = _mm512_set1_ps(1.0f);
    c.fzero = _mm512_setzero_ps();
    c.lo = _mm512_set1_ps((float)(post->hsw_qmin - post->hsw_zy));
    c.hi = _mm512_set1_ps((float)(post->hsw_qmax - post->hsw_zy));
    c.pz = _mm512_set1_epi32(post->z);
    c.pp0 = _mm512_set1_epi32(prq->p0[0]);
    c.pp1 = _mm512_set1_epi32(prq->p1[0]);
    c.pp2 = _mm512_set1_epi32(prq->p2[0]);
    c.pzp = _mm512_set1_epi32(prq->zero_point[0]);
    c.pclip = PM == LB_RQ_PRESCALE ? _mm512_set1_epi32(prq->p3[0]) : zero;
    c.pnegclip = _mm512_sub_epi32(zero, c.pclip);
    c.prnd = _mm512_sllv_epi32(one, _mm512_sub_epi32(c.pp2, one));
    c.pqmin = _mm512_set1_epi32(prq->qmin);
    c.pqmax = _mm512_set1_epi32(prq->qmax);
    lb_q31_prep(c.pp0, c.pp2, &c.pmodd, &c.pmask, &c.prrnd, &c.prpos);
    return c;
}

/* lb_post_v512 for such a post stage on the codes y of 16 channels whose Mul constants are
 * mulv: lb_hsw_v512's operations, then the Mul's (PLSH, PRSH: lb_q31_pre_v512's flags). */
LB_V512 __m512i lb_hm_post_v512(__m512i y, const lb_hm_consts *c, __m512i mulv, const int PM,
                                const int PLSH, const int PRSH) {
    __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(y, c->hzx));
    __m512 h = _mm512_add_ps(_mm512_mul_ps(f, c->c1), c->half);
    h = _mm512_min_ps(_mm512_max_ps(h, c->fzero), c->fone);
    __m512 u = _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(f, h), c->c2), c->c3);
    u = _mm512_min_ps(_mm512_max_ps(u, c->lo), c->hi);
    y = _mm512_add_epi32(
        _mm512_cvt_roundps_epi32(u, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), c->hzy);
    __m512i prod = _mm512_mullo_epi32(_mm512_sub_epi32(y, c->pz), mulv);
    if (PM == LB_RQ_PRESCALE) {
        y = lb_prescale_pre_v512(prod, c->pp0, c->pclip, c->pnegclip, c->pp1, c->prnd, c->pp2);
    } else {
        y = lb_q31_pre_v512(prod, c->pp0, c->pp1, c->pp2, c->pmodd, c->pmask, c->prrnd, c->prpos,
                            PLSH, PRSH);
    }
    return _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(y, c->pzp), c->pqmin), c->pqmax);
}

/* lb_post on 16 codes of channels c.. (lanes outside mask k are not read from the table). */
LB_V512 __m512i lb_post_v512(const lb_post *p, int64_t c, __m512i y, __mmask16 k) {
    if (p->hsw) y = lb_hsw_v512(p, y);
    if (p->table) {
        __m512i idx = _mm512_sub_epi32(y, _mm512_set1_epi32(p->table_min));
        if (p->table_type == LB_U8) {
            y = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, idx, p->table, 1);
            y = _mm512_and_si512(y, _mm512_set1_epi32(0xFF));
        } else {
            y = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, idx, p->table, 2);
            y = p->table_type == LB_I16 ? _mm512_srai_epi32(_mm512_slli_epi32(y, 16), 16)
                                        : _mm512_and_si512(y, _mm512_set1_epi32(0xFFFF));
        }
    }
    if (p->mul) {
        __m512i prod = _mm512_mullo_epi32(_mm512_sub_epi32(y, _mm512_set1_epi32(p->z)),
                                          _mm512_loadu_si512(p->mul + c));
        lb_rq512 rv = lb_rq512_broadcast(&p->rq);
        y = lb_requant_v512(&p->rq, &rv, prod);
    }
    return y;
}

/* The epilogue of lb_qgemm on 16 accumulators of row m, columns n0.. (rv: the requantization
 * parameters of these columns, av: the fused Add's). */
LB_V512 void lb_epilogue_v512(const lb_gemm_tile *t, int64_t m, int64_t n0, __m512i x,
                              const lb_rq512 *rv, const lb_add512 *av) {
    const lb_epilogue *ep = t->ep;
    __mmask16 k = lb_tail_mask(t->N - n0);
    x = _mm512_add_epi32(x, _mm512_loadu_si512(ep->col_offset + n0));
    if (ep->col_zb)
        x = _mm512_sub_epi32(x, _mm512_mullo_epi32(_mm512_loadu_si512(ep->col_zb + n0),
                                                   _mm512_set1_epi32(t->row_sums[m])));
    int64_t at = m * t->ldc + n0;
    if (ep->out_type == LB_I32) {
        _mm512_mask_storeu_epi32((int32_t *)t->C + at, k, x);
        return;
    }
    if (ep->rq.method == LB_RQ_FLOAT32 && ep->out_type == LB_F32) { /* QGemm's float result */
        __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(x), _mm512_loadu_ps(ep->rq.fmul + n0));
        _mm512_mask_storeu_ps((float *)t->C + at, k, f);
        return;
    }
    if (ep->rq.method == LB_RQ_DEQUANT) {
        __m512d lo = _mm512_cvtepi32_pd(_mm512_castsi512_si256(x));
        __m512d hi = _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(x, 1));
        lo = _mm512_mul_pd(lo, _mm512_loadu_pd(ep->rq.dscale + n0));
        hi = _mm512_mul_pd(hi, _mm512_loadu_pd(ep->rq.dscale + n0 + 8));
        __m512 f = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)),
                                      _mm512_cvtpd_ps(hi), 1);
        f = _mm512_max_ps(f, _mm512_set1_ps(ep->rq.fmin));
        f = _mm512_min_ps(f, _mm512_set1_ps(ep->rq.fmax));
        _mm512_mask_storeu_ps((float *)t->C + at, k, f);
        return;
    }
    __m512i y = lb_requant_v512(&ep->rq, rv, x);
    if (ep->residual) {
        __m512i r = _mm512_cvtepu8_epi32(
            _mm_maskz_loadu_epi8(k, ep->residual + m * ep->ld_residual + n0));
        y = lb_add_v512(ep->add, av, y, r);
    }
    if (ep->post) y = lb_post_v512(ep->post, n0, y, k);
    lb_store_v512(t->C, ep->out_type, at, y, k);
}

#endif /* LOWBIT_RT_VEC512_H */

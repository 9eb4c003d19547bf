/* NEON versions of the requantization expressions (the same integers as rt_internal.h) and the
 * vector epilogue shared by the 64-bit ARM kernels. Include only where LB_HAVE_NEON. */
#ifndef LOWBIT_RT_VEC_NEON_H
#define LOWBIT_RT_VEC_NEON_H

#include <arm_neon.h>

#include "rt_internal.h"

/* fixed_point "q31" on 4 lanes:
 *   xs = sat32(x << l)                    vqshl (saturating)
 *   h = (xs * m + 2**30) >> 31            vqrdmulh: (2 xs m + 2**31) >> 32, the same integer
 *                                         (it saturates only for xs = m = INT32_MIN; m >= 0)
 *   y = (h + 2**(r-1) - (h < 0)) >> r     vrshl rounds half up without overflow; the -1 of
 *                                         negative h (when r > 0) makes ties round away from 0
 * A saturating add of that -1 changes nothing: INT32_MIN is a multiple of 2**r. */
static inline int32x4_t lb_q31_neon(int32x4_t x, int32x4_t m, int32x4_t l, int32x4_t r) {
    r = vmaxq_s32(r, vdupq_n_s32(0));
    int32x4_t h = vqrdmulhq_s32(vqshlq_s32(x, l), m);
    int32x4_t neg = vandq_s32(vshrq_n_s32(h, 31),
                              vreinterpretq_s32_u32(vcgtq_s32(r, vdupq_n_s32(0))));
    return vrshlq_s32(vqaddq_s32(h, neg), vnegq_s32(r));
}

/* fixed_point "prescale": t = clamp(x >> pre, -clip, clip); (t * scale + 2**(post-1)) >> post,
 * inside int32 by the encoder's choice of clip (vshl by a negative count is an arithmetic
 * right shift). */
static inline int32x4_t lb_prescale_neon(int32x4_t x, int32x4_t pre, int32x4_t scale,
                                         int32x4_t post, int32x4_t clip) {
    int32x4_t t = vshlq_s32(x, vnegq_s32(pre));
    t = vmaxq_s32(vminq_s32(t, clip), vnegq_s32(clip));
    int32x4_t rnd = vshlq_s32(vdupq_n_s32(1), vsubq_s32(post, vdupq_n_s32(1)));
    return vshlq_s32(vaddq_s32(vmulq_s32(t, scale), rnd), vnegq_s32(post));
}

/* The stored value of 4 accumulators: channels c..c+3, or channel 0 for all when `per_tensor`
 * (method LB_RQ_Q31 or LB_RQ_PRESCALE). */
static inline int32x4_t lb_requant_neon(const lb_requant *rq, int64_t c, int per_tensor,
                                        int32x4_t x) {
#define LB_RQ_LOAD(p) (per_tensor ? vld1q_dup_s32(p) : vld1q_s32((p) + c))
    int32x4_t y;
    if (rq->method == LB_RQ_PRESCALE)
        y = lb_prescale_neon(x, LB_RQ_LOAD(rq->p0), LB_RQ_LOAD(rq->p1), LB_RQ_LOAD(rq->p2),
                             LB_RQ_LOAD(rq->p3));
    else
        y = lb_q31_neon(x, LB_RQ_LOAD(rq->p0), LB_RQ_LOAD(rq->p1), LB_RQ_LOAD(rq->p2));
    y = vaddq_s32(y, LB_RQ_LOAD(rq->zero_point));
#undef LB_RQ_LOAD
    return vminq_s32(vmaxq_s32(y, vdupq_n_s32(rq->qmin)), vdupq_n_s32(rq->qmax));
}

/* lowbit's quantized Add/Sub of 4 computed codes y1 and residual codes y2 (lb_add_scalar). */
static inline int32x4_t lb_add_neon(const lb_add_params *p, int32x4_t y1, int32x4_t y2) {
    int32x4_t sh = vdupq_n_s32(p->shift);
    int32x4_t d1 = vshlq_s32(vsubq_s32(y1, vdupq_n_s32(p->z1)), sh);
    int32x4_t d2 = vshlq_s32(vsubq_s32(y2, vdupq_n_s32(p->z2)), sh);
    int32x4_t a1 = lb_q31_neon(d1, vdupq_n_s32(p->m1), vdupq_n_s32(p->l1), vdupq_n_s32(p->r1));
    int32x4_t a2 = lb_q31_neon(d2, vdupq_n_s32(p->m2), vdupq_n_s32(p->l2), vdupq_n_s32(p->r2));
    return lb_requant_neon(&p->out, 0, 1, p->sub ? vsubq_s32(a1, a2) : vaddq_s32(a1, a2));
}

static inline int lb_rq_vector_method(int method) {
    return method == LB_RQ_Q31 || method == LB_RQ_PRESCALE;
}

/* lb_epilogue_row on 8 columns at a time for q31/prescale into 8- or 16-bit codes (with the
 * row-sum term and a fused residual Add); the other cases and the last columns go to the
 * scalar lb_epilogue_row. */
static inline void lb_epilogue_row_neon(const lb_gemm_tile *t, int64_t m, int64_t n0, int64_t n,
                                        const int32_t *acc) {
    const lb_epilogue *ep = t->ep;
    int out = ep->out_type;
    if (ep->post || !lb_rq_vector_method(ep->rq.method) ||
        (out != LB_U8 && out != LB_I16 && out != LB_U16) ||
        (ep->residual && !lb_rq_vector_method(ep->add->out.method))) {
        lb_epilogue_row(t, m, n0, n, acc);
        return;
    }
    const int32x4_t rowsum = vdupq_n_s32(ep->col_zb ? t->row_sums[m] : 0);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        int32x4_t y[2];
        uint16x8_t res = vdupq_n_u16(0);
        if (ep->residual) res = vmovl_u8(vld1_u8(ep->residual + m * ep->ld_residual + n0 + j));
        for (int h = 0; h < 2; h++) {
            int64_t c = n0 + j + 4 * h;
            int32x4_t x = vaddq_s32(vld1q_s32(acc + j + 4 * h), vld1q_s32(ep->col_offset + c));
            if (ep->col_zb) x = vsubq_s32(x, vmulq_s32(vld1q_s32(ep->col_zb + c), rowsum));
            y[h] = lb_requant_neon(&ep->rq, c, 0, x);
            if (ep->residual) {
                uint16x4_t r4 = h ? vget_high_u16(res) : vget_low_u16(res);
                y[h] = lb_add_neon(ep->add, y[h], vreinterpretq_s32_u32(vmovl_u16(r4)));
            }
        }
        int16x8_t v16 = vcombine_s16(vmovn_s32(y[0]), vmovn_s32(y[1]));
        int64_t at = m * t->ldc + n0 + j;
        if (out == LB_U8)
            vst1_u8((uint8_t *)t->C + at, vmovn_u16(vreinterpretq_u16_s16(v16)));
        else
            vst1q_s16((int16_t *)t->C + at, v16);
    }
    if (j < n) lb_epilogue_row(t, m, n0 + j, n - j, acc + j);
}

#endif /* LOWBIT_RT_VEC_NEON_H */

/* The epilogue and the depthwise row of lb_qconv16 (lowbit_rt.h), written once in plain C
 * and compiled per instruction set: a file includes this with LB_C16_SUFFIX and
 * LB_C16_TARGET set (the compiler vectorises the channel loops for that target; a file that
 * defines LB_C16_OWN_FINISH / LB_C16_OWN_DW brings its own lb_c16_finish_row_SUFFIX /
 * lb_c16_dw_row_SUFFIX). Each
 * channel's sum takes its taps in order, in int32 (LB_C16_INT32: exact by the code
 * generator's bound) or int64, and the epilogue is lb_qconv_wide's (lowbit_rt.h) lane by
 * lane, with lb_q31's and lb_prescale's integer expressions: the same integers on every path. */

#define LB_C16_CAT_(a, b) a##b
#define LB_C16_CAT(a, b) LB_C16_CAT_(a, b)

#ifndef LB_C16_OWN_FINISH /* else the including file defines it (vectorised by hand) */
/* The results of channels m0 .. m0 + n - 1 (n <= 64) from their exact accumulators acc[0 .. n)
 * (sum + offset), stored from element `at` of `out` on: float results from acc, else the
 * narrow shift (rounding half up), the saturation to int32 and the requantization. */
LB_C16_TARGET void LB_C16_CAT(lb_c16_finish_row_, LB_C16_SUFFIX)(const lb_qconv16 *p,
                                                                 int64_t m0, int64_t n,
                                                                 const int64_t *acc,
                                                                 int64_t at, void *out) {
    const lb_requant *rq = &p->rq;
    if (rq->method == LB_RQ_DEQUANT) {
        const double *s = rq->dscale + m0;
        float *o = (float *)out + at;
        for (int64_t i = 0; i < n; i++) {
            float v = (float)((double)acc[i] * s[i]);
            v = v < rq->fmin ? rq->fmin : v;
            o[i] = v > rq->fmax ? rq->fmax : v;
        }
        return;
    }
    int32_t x[64], y[64];
    int r = p->narrow_shift;
    if (r > 0) {
        const int64_t half = (int64_t)1 << (r - 1);
        for (int64_t i = 0; i < n; i++) {
            int64_t a = (acc[i] + half) >> r;
            a = a < INT32_MIN ? INT32_MIN : a;
            x[i] = (int32_t)(a > INT32_MAX ? INT32_MAX : a);
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            int64_t a = acc[i] < INT32_MIN ? INT32_MIN : acc[i];
            x[i] = (int32_t)(a > INT32_MAX ? INT32_MAX : a);
        }
    }
    if (p->out_type == LB_I32) {
        memcpy((int32_t *)out + at, x, (size_t)n * 4);
        return;
    }
    const int32_t *zp = rq->zero_point + m0;
    if (rq->method == LB_RQ_Q31) {
        const int32_t *mul = rq->p0 + m0, *l = rq->p1 + m0, *rr = rq->p2 + m0;
        const int64_t qmin = rq->qmin, qmax = rq->qmax;
        for (int64_t i = 0; i < n; i++) {
            int64_t xs = (int64_t)x[i] * ((int64_t)1 << l[i]);
            xs = xs > INT32_MAX ? INT32_MAX : xs;
            xs = xs < INT32_MIN ? INT32_MIN : xs;
            int64_t h = (xs * mul[i] + ((int64_t)1 << 30)) >> 31;
            /* lb_q31's rounding shift, branch-free: half and the correction are 0 when r = 0 */
            int64_t r = rr[i], half = ((int64_t)1 << r) >> 1;
            int64_t v = ((h + half - ((h < 0) & (r > 0))) >> r) + zp[i];
            v = v < qmin ? qmin : v;
            y[i] = (int32_t)(v > qmax ? qmax : v);
        }
    } else if (rq->method == LB_RQ_PRESCALE) {
        const int32_t *pre = rq->p0 + m0, *sc = rq->p1 + m0, *post = rq->p2 + m0;
        const int32_t *clip = rq->p3 + m0;
        for (int64_t i = 0; i < n; i++) {
            int32_t t = x[i] >> pre[i];
            t = t > clip[i] ? clip[i] : t;
            t = t < -clip[i] ? -clip[i] : t;
            int32_t u = (t * sc[i] + (int32_t)(1u << (post[i] - 1))) >> post[i];
            int64_t v = (int64_t)u + zp[i];
            v = v < rq->qmin ? rq->qmin : v;
            y[i] = (int32_t)(v > rq->qmax ? rq->qmax : v);
        }
    } else {
        for (int64_t i = 0; i < n; i++) y[i] = lb_requant_scalar(rq, m0 + i, x[i]);
    }
    switch (p->out_type) {
    case LB_U8:
        for (int64_t i = 0; i < n; i++) ((uint8_t *)out)[at + i] = (uint8_t)y[i];
        break;
    case LB_I16:
        for (int64_t i = 0; i < n; i++) ((int16_t *)out)[at + i] = (int16_t)y[i];
        break;
    case LB_U16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)out)[at + i] = (uint16_t)y[i];
        break;
    default:
        for (int64_t i = 0; i < n; i++) lb_store(out, p->out_type, at + i, y[i]);
    }
}

#endif

/* acc[i] += (x[i] - bias) * w[i] over the block's channels, for every tap (bias 32768 moves
 * uint16 codes to int16). */
#define LB_C16_DW_TAPS(T, BIAS, ACC_T)                                                    \
    for (int64_t t = 0; t < taps; t++) {                                                  \
        const T *x = (const T *)tap[t] + c0;                                              \
        const int16_t *wt = p->w + t * c + c0;                                            \
        for (int64_t i = 0; i < cn; i++)                                                  \
            acc[i] += (ACC_T)((int32_t)x[i] - (BIAS)) * (ACC_T)wt[i];                    \
    }

#define LB_C16_DW_TYPES(ACC_T)                                                            \
    switch (p->a_type) {                                                                  \
    case LB_U8:                                                                           \
        LB_C16_DW_TAPS(uint8_t, 0, ACC_T)                                                 \
        break;                                                                            \
    case LB_I16:                                                                          \
        LB_C16_DW_TAPS(int16_t, 0, ACC_T)                                                 \
        break;                                                                            \
    default:                                                                              \
        LB_C16_DW_TAPS(uint16_t, 32768, ACC_T)                                            \
    }

#ifndef LB_C16_OWN_DW /* else the including file defines it */
LB_C16_TARGET void LB_C16_CAT(lb_c16_dw_row_, LB_C16_SUFFIX)(const lb_qconv16 *p,
                                                             const void *in, void *out,
                                                             int64_t n, int64_t oy) {
    const lb_window *w = &p->win;
    int64_t taps = w->kh * w->kw, c = w->c, esize = lb_c16_esize(p->a_type);
    const char *tap[LB_DW_MAX_TAPS];
    int64_t sums[64];
    for (int64_t ox = 0; ox < w->ow; ox++) {
        lb_c16_taps(w, (const char *)in, (const char *)p->zero_row, esize, n, oy, ox, tap);
        int64_t at0 = ((n * w->oh + oy) * w->ow + ox) * c;
        for (int64_t c0 = 0; c0 < c; c0 += 64) {
            int64_t cn = LB_MIN(64, c - c0);
            if (p->mode == LB_C16_INT32) {
                int32_t acc[64];
                for (int64_t i = 0; i < cn; i++) acc[i] = 0;
                LB_C16_DW_TYPES(int32_t)
                for (int64_t i = 0; i < cn; i++) sums[i] = acc[i] + p->offset[c0 + i];
            } else {
                int64_t acc[64];
                for (int64_t i = 0; i < cn; i++) acc[i] = 0;
                LB_C16_DW_TYPES(int64_t)
                for (int64_t i = 0; i < cn; i++) sums[i] = acc[i] + p->offset[c0 + i];
            }
            LB_C16_CAT(lb_c16_finish_row_, LB_C16_SUFFIX)(p, c0, cn, sums, at0 + c0, out);
        }
    }
}

#endif

#undef LB_C16_DW_TYPES
#undef LB_C16_DW_TAPS

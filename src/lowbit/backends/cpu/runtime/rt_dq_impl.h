/* Dynamic quantization in portable C, compiled once per instruction set: rt_dq.c includes this
 * file with LB_DQ_SUFFIX and LB_DQ_TARGET set (scalar, and the AVX2 path). */

#define LB_DQ_CAT_(a, b) a##b
#define LB_DQ_CAT(a, b) LB_DQ_CAT_(a, b)
#define LB_DQ_FN(name) LB_DQ_CAT(name, LB_DQ_SUFFIX)

/* Parameters of one slice of `len` values at x[i * stride] (divided by cs[i * cs_stride] when
 * cs is set), then its codes at q[i * qstride]. */
LB_DQ_TARGET static inline void LB_DQ_FN(lb_dq_slice_)(const float *x, int64_t len, int64_t stride, const float *cs,
                          int64_t cs_stride, int32_t qmax, int32_t symmetric, void *q,
                          int64_t qstride, float *scale_out, void *zero_out) {
    const float top = (float)qmax;
    float lo = 0.0f, hi = 0.0f;
    for (int64_t i = 0; i < len; i++) {
        float v = x[i * stride];
        if (cs) v = v / cs[i * cs_stride];
        if (v != v) continue; /* NaN: counts as 0, already in the range */
        if (symmetric) v = fabsf(v);
        if (v < lo) lo = v;
        if (v > hi) hi = v;
    }
    float scale, zero = 0.0f, qlo;
    if (symmetric) {
        scale = hi == 0.0f ? 1.0f : hi / top;
        qlo = -top;
    } else {
        scale = hi == lo ? 1.0f : (hi - lo) / top;
        zero = lb_rint_f32(lb_clampf(0.0f - lo / scale, 0.0f, top));
        qlo = 0.0f;
    }
    *scale_out = scale;
    if (symmetric)
        *(int8_t *)zero_out = 0;
    else
        *(uint8_t *)zero_out = (uint8_t)zero;
    for (int64_t i = 0; i < len; i++) {
        float v = x[i * stride];
        if (cs) v = v / cs[i * cs_stride];
        float r = lb_rint_f32(v / scale);
        if (v != v) r = 0.0f;
        r = lb_clampf(r + zero, qlo, top);
        if (symmetric)
            ((int8_t *)q)[i * qstride] = (int8_t)(int32_t)r;
        else
            ((uint8_t *)q)[i * qstride] = (uint8_t)(int32_t)r;
    }
}

LB_DQ_TARGET void LB_DQ_FN(lb_dq_rows_)(const lb_dq_rows *p, int64_t r0, int64_t r1) {
    int64_t G = (p->k + p->group - 1) / p->group, esize = 1;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t j = 0; j < G; j++) {
            int64_t k0 = j * p->group, len = LB_MIN(p->group, p->k - k0);
            LB_DQ_FN(lb_dq_slice_)(p->x + r * p->ldx + k0, len, 1,
                          p->channel_scale ? p->channel_scale + k0 : NULL, 1, p->qmax,
                          p->symmetric, (uint8_t *)p->q + (r * p->ldq + k0) * esize, 1,
                          p->scale + r * p->ldp + j, (uint8_t *)p->zero + r * p->ldp + j);
        }
}

LB_DQ_TARGET void LB_DQ_FN(lb_dq_cols_)(const lb_dq_cols *p, int64_t o, int64_t c0, int64_t c1) {
    int64_t G = (p->r + p->group - 1) / p->group;
    for (int64_t j = 0; j < G; j++) {
        int64_t r0 = j * p->group, len = LB_MIN(p->group, p->r - r0);
        for (int64_t c = c0; c < c1; c++) {
            int64_t at = (o * p->r + r0) * p->c + c, pat = (o * G + j) * p->c + c;
            LB_DQ_FN(lb_dq_slice_)(p->x + at, len, p->c, NULL, 0, p->qmax, p->symmetric,
                          (uint8_t *)p->q + at, p->c, p->scale + pat, (uint8_t *)p->zero + pat);
        }
    }
}

#undef LB_DQ_FN

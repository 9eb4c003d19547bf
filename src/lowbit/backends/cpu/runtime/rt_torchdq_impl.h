/* The two passes of PyTorch's dynamic activation quantization (rt_torchdq.c), portable C
 * compiled once per instruction set: define LB_TDQ_SUFFIX (function name suffix) and
 * LB_TDQ_TARGET (a target attribute, or nothing) before including. Every step is one IEEE
 * operation whose result does not depend on the order of the lanes: min and max (NaN noted
 * apart), a float64 product (exact) and sum rounded once to float32, a clamp, and round to
 * nearest even by adding and subtracting 1.5 * 2^23 (exact for 0 <= t <= 255). */

#define LB_TDQ_CAT2(a, b) a##_##b
#define LB_TDQ_CAT(a, b) LB_TDQ_CAT2(a, b)
#define LB_TDQ_FN(name) LB_TDQ_CAT(name, LB_TDQ_SUFFIX)

/* min and max of x[0 .. n) into *lo, *hi (NaN skipped); returns 1 if some x is NaN. Sixteen
 * running minima and maxima (elementwise, so the compiler keeps them in vector lanes). */
LB_TDQ_TARGET int LB_TDQ_FN(lb_tdq_range)(const float *x, int64_t n, float *lo, float *hi) {
    float l[16], h[16];
    int32_t nan[16];
    for (int k = 0; k < 16; k++) {
        l[k] = *lo;
        h[k] = *hi;
        nan[k] = 0;
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++) {
            float v = x[i + k];
            l[k] = v < l[k] ? v : l[k];
            h[k] = v > h[k] ? v : h[k];
            nan[k] |= v != v;
        }
    for (int k = 0; i < n; i++, k++) {
        float v = x[i];
        l[k] = v < l[k] ? v : l[k];
        h[k] = v > h[k] ? v : h[k];
        nan[k] |= v != v;
    }
    int any = 0;
    for (int k = 0; k < 16; k++) {
        *lo = l[k] < *lo ? l[k] : *lo;
        *hi = h[k] > *hi ? h[k] : *hi;
        any |= nan[k];
    }
    return any;
}

/* q[i] = clamp(rint(float32(float64(x[i]) * inv + z)), 0, 255), NaN giving 0. */
LB_TDQ_TARGET void LB_TDQ_FN(lb_tdq_codes)(const float *x, int64_t n, double inv, double z,
                                           uint8_t *q) {
    for (int64_t i = 0; i < n; i++) {
        float t = (float)((double)x[i] * inv + z);
        t = t < 0.0f ? 0.0f : t;
        t = t > 255.0f ? 255.0f : t;
        float r = (t + 12582912.0f) - 12582912.0f;
        q[i] = r != r ? (uint8_t)0 : (uint8_t)(int32_t)r;
    }
}

#undef LB_TDQ_FN
#undef LB_TDQ_CAT
#undef LB_TDQ_CAT2

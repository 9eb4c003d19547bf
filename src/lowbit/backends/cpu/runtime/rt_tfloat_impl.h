/* LayerNorm, Softmax, GELU and exp in portable C, compiled once per instruction set: rt_tfloat.c
 * includes this file with LB_TF_SUFFIX and LB_TF_TARGET set (scalar, and the AVX2 path). */

#define LB_TF_CAT_(a, b) a##b
#define LB_TF_CAT(a, b) LB_TF_CAT_(a, b)
#define LB_TF_FN(name) LB_TF_CAT(name, LB_TF_SUFFIX)

LB_TF_TARGET void LB_TF_FN(lb_layernorm_rows_)(int64_t r0, int64_t r1, int64_t n,
                                               const float *x, int64_t ldx, const float *gamma,
                                               const float *beta, double eps, float *y,
                                               int64_t ldy) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * ldx;
        double acc[16] = {0};
        for (int64_t i = 0; i < n; i++) acc[i % 16] = acc[i % 16] + (double)xr[i];
        double mean = lb_halve16(acc) / (double)n;
        for (int i = 0; i < 16; i++) acc[i] = 0.0;
        for (int64_t i = 0; i < n; i++) {
            double d = (double)xr[i] - mean;
            acc[i % 16] = acc[i % 16] + d * d;
        }
        double inv = 1.0 / sqrt(lb_halve16(acc) / (double)n + eps);
        float *yr = y + r * ldy;
        for (int64_t i = 0; i < n; i++) {
            double v = (((double)xr[i] - mean) * inv) * (double)gamma[i];
            if (beta) v = v + (double)beta[i];
            yr[i] = (float)v;
        }
    }
}

LB_TF_TARGET void LB_TF_FN(lb_softmax_rows_)(int64_t r0, int64_t r1, int64_t n, const float *x,
                                             int64_t ldx, float *y, int64_t ldy) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * ldx;
        float *yr = y + r * ldy;
        float m = -INFINITY;
        int nan = 0;
        for (int64_t i = 0; i < n; i++) {
            if (xr[i] != xr[i]) nan = 1;
            if (xr[i] > m) m = xr[i];
        }
        if (nan) m = NAN;
        float acc[16] = {0};
        for (int64_t i = 0; i < n; i++) {
            float e = lb_exp_f32(xr[i] - m);
            yr[i] = e;
            acc[i % 16] = acc[i % 16] + e;
        }
        float inv = 1.0f / lb_halve16f(acc);
        for (int64_t i = 0; i < n; i++) yr[i] = yr[i] * inv;
    }
}

LB_TF_TARGET void LB_TF_FN(lb_gelu_span_)(int64_t n, const float *x, int32_t tanh_form,
                                          float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = lb_gelu_f32(x[i], tanh_form);
}

LB_TF_TARGET void LB_TF_FN(lb_exp_span_)(int64_t n, const float *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = lb_exp_f32(x[i]);
}

#undef LB_TF_FN

/* The depthwise row of lb_qconv16 (lowbit_rt.h), written once in plain C and compiled per
 * instruction set: a file includes it with LB_C16_SUFFIX and LB_C16_TARGET set (the compiler
 * vectorises the channel loops for that target). Each channel's sum takes its taps in order,
 * in int32 (LB_C16_INT32: exact by the code generator's bound) or int64; the same integers
 * on every path. */

#define LB_C16_CAT_(a, b) a##b
#define LB_C16_CAT(a, b) LB_C16_CAT_(a, b)

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

LB_C16_TARGET void LB_C16_CAT(lb_c16_dw_row_, LB_C16_SUFFIX)(const lb_qconv16 *p,
                                                             const void *in, void *out,
                                                             int64_t n, int64_t oy) {
    const lb_window *w = &p->win;
    int64_t taps = w->kh * w->kw, c = w->c, esize = lb_c16_esize(p->a_type);
    const char *tap[LB_DW_MAX_TAPS];
    for (int64_t ox = 0; ox < w->ow; ox++) {
        lb_c16_taps(w, (const char *)in, (const char *)p->zero_row, esize, n, oy, ox, tap);
        int64_t at0 = ((n * w->oh + oy) * w->ow + ox) * c;
        for (int64_t c0 = 0; c0 < c; c0 += 64) {
            int64_t cn = LB_MIN(64, c - c0);
            if (p->mode == LB_C16_INT32) {
                int32_t acc[64];
                for (int64_t i = 0; i < cn; i++) acc[i] = 0;
                LB_C16_DW_TYPES(int32_t)
                for (int64_t i = 0; i < cn; i++)
                    lb_c16_finish(p, c0 + i, at0 + c0 + i, acc[i] + p->offset[c0 + i], out);
            } else {
                int64_t acc[64];
                for (int64_t i = 0; i < cn; i++) acc[i] = 0;
                LB_C16_DW_TYPES(int64_t)
                for (int64_t i = 0; i < cn; i++)
                    lb_c16_finish(p, c0 + i, at0 + c0 + i, acc[i] + p->offset[c0 + i], out);
            }
        }
    }
}

#undef LB_C16_DW_TYPES
#undef LB_C16_DW_TAPS

/* Elementwise quantized kernels: Quantize, Dequantize, Requantize, lookup tables, clamps, and
 * Add/Sub/Mul with broadcasting. Each is the reference's integer expression, element by
 * element; work is split in chunks over the threads. */
#include "rt_internal.h"

#define LB_CHUNK 16384

static inline int64_t lb_chunks(int64_t n) { return (n + LB_CHUNK - 1) / LB_CHUNK; }

static inline int64_t lb_channel(lb_axis ax, int64_t i) {
    return ax.channels == 1 ? 0 : (i / ax.inner) % ax.channels;
}

/* ---- Quantize ---------------------------------------------------------------------------- */

typedef struct lb_q_job {
    int64_t n;
    const float *x;
    lb_axis ax;
    const float *scale;
    const int32_t *zp;
    int32_t qmin, qmax, out_type;
    void *out;
    float pinf, ninf, nanv;
} lb_q_job;

/* quantize(x) of lowbit.numerics.arith as a branch-free float expression the compiler vectorises:
 * r = rint(x / s) with NaN -> 0 and +-inf -> the type's qmax / qmin (before the zero point is
 * added, as numpy's nan_to_num there), then r + zp clamped. Adding zp in float is exact where
 * it matters: past 2**24 the clamp decides. */
static inline float lb_quantize_one(float x, float s, float zp, float lo, float hi, float pinf,
                                    float ninf, float nanv) {
    float r = nearbyintf(x / s);
    r = r != r ? nanv : r;
    r = r == INFINITY ? pinf : r;
    r = r == -INFINITY ? ninf : r;
    r += zp;
    r = r < lo ? lo : r;
    return r > hi ? hi : r;
}

/* Runs of elements sharing one channel: the inner loop has constant parameters. */
static void lb_quantize_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_q_job *j = (const lb_q_job *)arg;
    int64_t i = t * LB_CHUNK, i1 = LB_MIN(j->n, i + LB_CHUNK);
    const float lo = (float)j->qmin, hi = (float)j->qmax;
    /* in locals: the byte stores below may alias the job, which would reload them */
    const float pinf = j->pinf, ninf = j->ninf, nanv = j->nanv;
    while (i < i1) {
        int64_t c = lb_channel(j->ax, i);
        int64_t run = j->ax.channels == 1 ? i1 - i : LB_MIN(i1 - i, j->ax.inner - i % j->ax.inner);
        const float s = j->scale[c], zp = (float)j->zp[c];
        const float *x = j->x + i;
        if (j->out_type == LB_U8) {
            uint8_t *o = (uint8_t *)j->out + i;
            for (int64_t k = 0; k < run; k++)
                o[k] = (uint8_t)(int32_t)lb_quantize_one(x[k], s, zp, lo, hi, pinf, ninf, nanv);
        } else if (j->out_type == LB_I16) {
            int16_t *o = (int16_t *)j->out + i;
            for (int64_t k = 0; k < run; k++)
                o[k] = (int16_t)(int32_t)lb_quantize_one(x[k], s, zp, lo, hi, pinf, ninf, nanv);
        } else {
            for (int64_t k = 0; k < run; k++)
                lb_store(j->out, j->out_type, i + k,
                         (int32_t)lb_quantize_one(x[k], s, zp, lo, hi, pinf, ninf, nanv));
        }
        i += run;
    }
}

void lb_quantize_f32(const lb_ctx *ctx, int64_t n, const float *x, lb_axis ax,
                     const float *scale, const int32_t *zp, int32_t qmin, int32_t qmax,
                     float nanv, float ninf, float pinf, int32_t out_type, void *out) {
    lb_q_job j = {n, x, ax, scale, zp, qmin, qmax, out_type, out, pinf, ninf, nanv};
    lb_parallel_for(ctx, lb_chunks(n), lb_quantize_task, &j);
}

typedef struct lb_qnhwc_job {
    int64_t c, hw, blocks;
    const float *x;
    const float *scale;
    const int32_t *zp;
    int per_channel;
    int32_t qmin, qmax, out_type;
    void *out;
    float pinf, ninf, nanv;
    int vector3; /* 3 channels into uint8 on AVX-512: lb_quantize_nhwc3_avx512 */
} lb_qnhwc_job;

#define LB_PIXELS 256

/* Task = (image, block of pixels): each channel's run quantized in a local buffer, then
 * written every c elements (NCHW in, NHWC out). */
static void lb_quantize_nhwc_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_qnhwc_job *j = (const lb_qnhwc_job *)arg;
    int64_t n = t / j->blocks, p0 = (t % j->blocks) * LB_PIXELS;
    int64_t np = LB_MIN(LB_PIXELS, j->hw - p0);
    const float lo = (float)j->qmin, hi = (float)j->qmax;
    int32_t buf[LB_PIXELS];
#if LB_HAVE_AVX512
    if (j->vector3) {
        float s[3], zp[3];
        for (int ch = 0; ch < 3; ch++) {
            s[ch] = j->scale[j->per_channel ? ch : 0];
            zp[ch] = (float)j->zp[j->per_channel ? ch : 0];
        }
        lb_quantize_nhwc3_avx512(j->x + n * 3 * j->hw + p0, j->hw, np, s, zp, lo, hi, j->pinf,
                                 j->ninf, j->nanv, (uint8_t *)j->out + (n * j->hw + p0) * 3);
        return;
    }
#endif
    for (int64_t ch = 0; ch < j->c; ch++) {
        int64_t pc = j->per_channel ? ch : 0;
        const float s = j->scale[pc], zp = (float)j->zp[pc];
        const float *x = j->x + (n * j->c + ch) * j->hw + p0;
        for (int64_t k = 0; k < np; k++) buf[k] = (int32_t)lb_quantize_one(x[k], s, zp, lo, hi, j->pinf, j->ninf, j->nanv);
        int64_t base = (n * j->hw + p0) * j->c + ch;
        if (j->out_type == LB_U8) {
            uint8_t *o = (uint8_t *)j->out + base;
            for (int64_t k = 0; k < np; k++) o[k * j->c] = (uint8_t)buf[k];
        } else {
            for (int64_t k = 0; k < np; k++) lb_store(j->out, j->out_type, base + k * j->c, buf[k]);
        }
    }
}

void lb_quantize_f32_nhwc(const lb_ctx *ctx, int64_t n, int64_t c, int64_t hw, const float *x,
                          int per_channel, const float *scale, const int32_t *zp, int32_t qmin,
                          int32_t qmax, float nanv, float ninf, float pinf, int32_t out_type,
                          void *out) {
    int64_t blocks = (hw + LB_PIXELS - 1) / LB_PIXELS;
    lb_qnhwc_job j = {c,    hw,   blocks,   x,   scale, zp,  per_channel,
                      qmin, qmax, out_type, out, pinf,  ninf, nanv, 0};
#if LB_HAVE_AVX512
    j.vector3 = ctx->isa == LB_ISA_AVX512VNNI && c == 3 && out_type == LB_U8;
#endif
    lb_parallel_for(ctx, n * blocks, lb_quantize_nhwc_task, &j);
}

/* ---- Dequantize -------------------------------------------------------------------------- */

typedef struct lb_dq_job {
    int64_t n;
    const void *q;
    int32_t in_type;
    lb_axis ax;
    const float *scale;
    const int32_t *zp;
    float *out;
} lb_dq_job;

static void lb_dequantize_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_dq_job *j = (const lb_dq_job *)arg;
    int64_t i1 = LB_MIN(j->n, (t + 1) * LB_CHUNK);
    if (j->ax.inner == 1 && (j->in_type == LB_I8 || j->in_type == LB_U8)) {
        /* channels along the last axis (or one): runs of consecutive channels, a loop the
         * compiler vectorises; the same expression */
        const int64_t C = j->ax.channels;
        if (C == 1) { /* per tensor: parameters in locals (out may alias the scale array) */
            const int32_t z = j->zp[0];
            const float s = j->scale[0];
            float *out = j->out;
            if (j->in_type == LB_I8) {
                const int8_t *q = (const int8_t *)j->q;
                for (int64_t i = t * LB_CHUNK; i < i1; i++) out[i] = (float)((int32_t)q[i] - z) * s;
            } else {
                const uint8_t *q = (const uint8_t *)j->q;
                for (int64_t i = t * LB_CHUNK; i < i1; i++) out[i] = (float)((int32_t)q[i] - z) * s;
            }
            return;
        }
        for (int64_t i = t * LB_CHUNK; i < i1;) {
            const int64_t c0 = C == 1 ? 0 : i % C, run = C == 1 ? i1 - i : LB_MIN(i1 - i, C - c0);
            const int64_t cs = C == 1 ? 0 : 1;
            float *out = j->out + i;
            if (j->in_type == LB_I8) {
                const int8_t *q = (const int8_t *)j->q + i;
                for (int64_t k = 0; k < run; k++)
                    out[k] = (float)((int32_t)q[k] - j->zp[c0 + cs * k]) * j->scale[c0 + cs * k];
            } else {
                const uint8_t *q = (const uint8_t *)j->q + i;
                for (int64_t k = 0; k < run; k++)
                    out[k] = (float)((int32_t)q[k] - j->zp[c0 + cs * k]) * j->scale[c0 + cs * k];
            }
            i += run;
        }
        return;
    }
    for (int64_t i = t * LB_CHUNK; i < i1; i++) {
        int64_t c = lb_channel(j->ax, i);
        j->out[i] = (float)((int64_t)lb_load_int(j->q, j->in_type, i) - j->zp[c]) * j->scale[c];
    }
}

void lb_dequantize(const lb_ctx *ctx, int64_t n, const void *q, int32_t in_type, lb_axis ax,
                   const float *scale, const int32_t *zp, float *out) {
    lb_dq_job j = {n, q, in_type, ax, scale, zp, out};
    lb_parallel_for(ctx, lb_chunks(n), lb_dequantize_task, &j);
}

/* ---- Requantize -------------------------------------------------------------------------- */

typedef struct lb_rq_job {
    int64_t n;
    const void *q;
    int32_t in_type;
    lb_axis ax;
    const int32_t *zin;
    const lb_requant *rq;
    int32_t out_type;
    void *out;
} lb_rq_job;

static void lb_requantize_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_rq_job *j = (const lb_rq_job *)arg;
    int64_t i1 = LB_MIN(j->n, (t + 1) * LB_CHUNK);
    for (int64_t i = t * LB_CHUNK; i < i1; i++) {
        int64_t c = lb_channel(j->ax, i);
        int32_t d = lb_load_int(j->q, j->in_type, i) - j->zin[c];
        lb_store(j->out, j->out_type, i, lb_requant_scalar(j->rq, c, d));
    }
}

void lb_requantize(const lb_ctx *ctx, int64_t n, const void *q, int32_t in_type, lb_axis ax,
                   const int32_t *zin, const lb_requant *rq, int32_t out_type, void *out) {
    lb_rq_job j = {n, q, in_type, ax, zin, rq, out_type, out};
    lb_parallel_for(ctx, lb_chunks(n), lb_requantize_task, &j);
}

/* ---- tables and clamps ------------------------------------------------------------------- */

typedef struct lb_lut_job {
    int64_t n;
    const void *q;
    int32_t in_type, in_min;
    const void *table;
    int32_t out_type;
    void *out;
    int32_t lo, hi;
    int isa;
} lb_lut_job;

/* A typed loop per (input, output) type: the table holds output codes. */
#define LB_LUT_LOOP(TI, TO)                                                              \
    do {                                                                                 \
        const TI *q = (const TI *)j->q;                                                  \
        const TO *tab = (const TO *)j->table;                                            \
        TO *o = (TO *)j->out;                                                            \
        for (int64_t i = i0; i < i1; i++) o[i] = tab[(int32_t)q[i] - j->in_min];         \
        return;                                                                          \
    } while (0)
#define LB_LUT_OUT(TI)                                                                   \
    switch (j->out_type) {                                                               \
    case LB_U8:                                                                          \
        LB_LUT_LOOP(TI, uint8_t);                                                        \
    case LB_I8:                                                                          \
        LB_LUT_LOOP(TI, int8_t);                                                         \
    case LB_I16:                                                                         \
        LB_LUT_LOOP(TI, int16_t);                                                        \
    case LB_U16:                                                                         \
        LB_LUT_LOOP(TI, uint16_t);                                                       \
    default:                                                                             \
        break;                                                                           \
    }

static void lb_lookup_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_lut_job *j = (const lb_lut_job *)arg;
    int64_t i0 = t * LB_CHUNK, i1 = LB_MIN(j->n, i0 + LB_CHUNK);
#if LB_HAVE_AVX512
    if (j->isa == LB_ISA_AVX512VNNI && j->in_type == LB_U8 && j->in_min == 0 &&
        (j->out_type == LB_U8 || j->out_type == LB_I8)) {
        lb_lookup_u8_avx512(i1 - i0, (const uint8_t *)j->q + i0, (const uint8_t *)j->table,
                            (uint8_t *)j->out + i0);
        return;
    }
#endif
    switch (j->in_type) {
    case LB_U8:
        LB_LUT_OUT(uint8_t)
        break;
    case LB_I8:
        LB_LUT_OUT(int8_t)
        break;
    case LB_I16:
        LB_LUT_OUT(int16_t)
        break;
    case LB_U16:
        LB_LUT_OUT(uint16_t)
        break;
    default:
        break;
    }
    for (int64_t i = i0; i < i1; i++) { /* other types */
        int32_t k = lb_load_int(j->q, j->in_type, i) - j->in_min;
        lb_store(j->out, j->out_type, i, lb_load_int(j->table, j->out_type, k));
    }
}

void lb_lookup(const lb_ctx *ctx, int64_t n, const void *q, int32_t in_type, int32_t in_min,
               const void *table, int32_t out_type, void *out) {
    lb_lut_job j = {n, q, in_type, in_min, table, out_type, out, 0, 0, ctx->isa};
    lb_parallel_for(ctx, lb_chunks(n), lb_lookup_task, &j);
}

/* ---- a post stage as a step of its own (lb_post_map) -------------------------------------- */

static void lb_post_map_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_post_map_job *j = (const lb_post_map_job *)arg;
    int64_t per = LB_MAX(1, LB_CHUNK / j->channels);
    int64_t r0 = t * per, r1 = LB_MIN(j->rows, r0 + per);
#if LB_HAVE_AVX512
    if (j->isa == LB_ISA_AVX512VNNI) {
        lb_post_rows_avx512(j, r0, r1);
        return;
    }
#endif
    for (int64_t i = r0 * j->channels; i < r1 * j->channels; i++)
        lb_store(j->out, j->out_type, i,
                 lb_post_scalar(j->post, i % j->channels, lb_load_int(j->x, j->in_type, i)));
}

void lb_post_map(const lb_ctx *ctx, int64_t rows, int64_t channels, const void *x,
                 int32_t in_type, const lb_post *post, int32_t out_type, void *out) {
    if (rows <= 0 || channels <= 0) return;
    lb_post_map_job j = {rows, channels, x, in_type, post, out_type, out, ctx->isa};
    int64_t per = LB_MAX(1, LB_CHUNK / channels);
    lb_parallel_for(ctx, (rows + per - 1) / per, lb_post_map_task, &j);
}

static void lb_clamp_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_lut_job *j = (const lb_lut_job *)arg;
    int64_t i0 = t * LB_CHUNK, i1 = LB_MIN(j->n, i0 + LB_CHUNK);
    if (j->in_type == LB_U8) {
        const uint8_t *q = (const uint8_t *)j->q;
        uint8_t *o = (uint8_t *)j->out;
        uint8_t lo = (uint8_t)j->lo, hi = (uint8_t)j->hi;
        for (int64_t i = i0; i < i1; i++) o[i] = q[i] < lo ? lo : (q[i] > hi ? hi : q[i]);
        return;
    }
    for (int64_t i = i0; i < i1; i++)
        lb_store(j->out, j->in_type, i, lb_clamp32(lb_load_int(j->q, j->in_type, i), j->lo, j->hi));
}

void lb_clamp(const lb_ctx *ctx, int64_t n, const void *q, int32_t type, int32_t lo,
              int32_t hi, void *out) {
    lb_lut_job j = {n, q, type, 0, NULL, type, out, lo, hi, ctx->isa};
    lb_parallel_for(ctx, lb_chunks(n), lb_clamp_task, &j);
}

/* ---- Add / Sub / Mul with broadcasting --------------------------------------------------- */

typedef struct lb_qb_job {
    const lb_bcast *bc;
    const lb_qbinary *op;
    const void *a, *b;
    void *out;
    int64_t rows, last;
    int isa;
    /* Add/Sub of two 8-bit operands off the AVX-512 path: each operand's aligned term
     * q31((q - z) << shift) for its 256 codes (lb_add_scalar's a_1 and a_2), or NULL (on
     * AVX-512 the two gathers per 16 results cost more than the arithmetic) */
    const int32_t *ta, *tb;
} lb_qb_job;

static inline int32_t lb_qbinary_one(const lb_qbinary *op, int32_t x, int32_t y) {
    if (op->op == LB_QTABLE2) return op->table[x * 256 + y];
    if (op->op == LB_QMUL) {
        int64_t prod = (int64_t)(x - op->p.z1) * (int64_t)(y - op->p.z2);
        return lb_requant_scalar(&op->p.out, 0, lb_clamp32(prod, INT32_MIN, INT32_MAX));
    }
    return lb_add_scalar(&op->p, x, y);
}

/* Pieces of rows of the output's last axis (a long row, as a whole image of the same shape
 * as the other operand, is cut in pieces of up to LB_QB_PIECE elements so that all threads
 * share it); a row's operand offsets come from its n-d index. Task t takes pieces
 * [t * per, (t + 1) * per) of the rows' pieces in order. */
#define LB_QB_PIECE 8192
#define LB_QB_TASKS 64

/* out[i] = op(a[i * sa], b[i * sb]) for i < len on the context's path: the AVX-512 row when it
 * applies, else lb_qbinary_one per element. */
static void lb_qbinary_span(const lb_qb_job *j, const void *a, int64_t oa, int64_t sa,
                            const void *b, int64_t ob, int64_t sb, void *out, int64_t base,
                            int64_t len) {
    if (j->op->lin_on) { /* 8-bit Add/Sub in its proven table form (lowbit_rt.h) */
        const lb_qbinary *op = j->op;
        const uint8_t *pt = (const uint8_t *)a + oa, *pu = (const uint8_t *)b + ob;
        int64_t st = sa, su = sb;
        if (op->lin_swap) {
            pt = (const uint8_t *)b + ob, pu = (const uint8_t *)a + oa;
            st = sb, su = sa;
        }
        uint8_t *o = (uint8_t *)out + base;
#if LB_HAVE_AVX512
        if (j->isa == LB_ISA_AVX512VNNI && st == 1 && su == 1) {
            lb_qlin_row_avx512(op, pt, pu, o, len);
            return;
        }
#endif
        const int16_t *tq = op->lin_table, *tr = op->lin_table + 256;
        for (int64_t i = 0; i < len; i++) {
            int32_t t = pt[i * st];
            int32_t v = tq[t] + ((tr[t] + op->lin_c * (int32_t)pu[i * su]) >> op->lin_s);
            o[i] = (uint8_t)(v < op->lin_lo ? op->lin_lo : v > op->lin_hi ? op->lin_hi : v);
        }
        return;
    }
    if (j->ta) { /* 8-bit Add/Sub: the aligned terms looked up */
        const uint8_t *pa = (const uint8_t *)a + oa, *pb = (const uint8_t *)b + ob;
        for (int64_t i = 0; i < len; i++) {
            int32_t t1 = j->ta[pa[i * sa]], t2 = j->tb[pb[i * sb]];
            int32_t acc = j->op->p.sub ? t1 - t2 : t1 + t2;
            lb_store(out, j->op->out_type, base + i, lb_requant_scalar(&j->op->p.out, 0, acc));
        }
        return;
    }
#if LB_HAVE_AVX512
    if (j->isa == LB_ISA_AVX512VNNI && j->op->narrow && j->op->op != LB_QTABLE2 && sa <= 1 &&
        sb <= 1 && j->op->out_type != LB_I32) {
        int64_t ea = j->op->a_type == LB_U8 ? 1 : 2, eb = j->op->b_type == LB_U8 ? 1 : 2;
        int64_t eo = j->op->out_type == LB_U8 ? 1 : 2;
        lb_qbinary_row_avx512(j->op, (const char *)a + oa * ea, sa, (const char *)b + ob * eb,
                              sb, (char *)out + base * eo, len);
        return;
    }
#endif
    if (j->op->a_type == LB_U8 && j->op->b_type == LB_U8 && j->op->out_type == LB_U8) {
        const uint8_t *pa = (const uint8_t *)a + oa, *pb = (const uint8_t *)b + ob;
        uint8_t *o = (uint8_t *)out + base;
        for (int64_t i = 0; i < len; i++)
            o[i] = (uint8_t)lb_qbinary_one(j->op, pa[i * sa], pb[i * sb]);
        return;
    }
    for (int64_t i = 0; i < len; i++) {
        int32_t x = lb_load_int(a, j->op->a_type, oa + i * sa);
        int32_t y = lb_load_int(b, j->op->b_type, ob + i * sb);
        lb_store(out, j->op->out_type, base + i, lb_qbinary_one(j->op, x, y));
    }
}

/* A piece where one operand is one code throughout (a scalar, or a channel's value over its
 * image) and the other is 8-bit: the result is a function of that byte. Its 256 values are
 * computed by lb_qbinary_span itself (the same path and integers as without the table) and
 * looked up, the table kept while the constant code stays the same. On the AVX-512 path a
 * Mul's row is about as fast as the lookup: only Add and Sub take tables there. (16-bit
 * operands would need tables of up to 65536 codes: PP-OCR's span most of that range.) */
#define LB_QB_TABLE_MIN 1024
static const uint8_t lb_iota256[256] = {
#define LB_I8_(k) k, k + 1, k + 2, k + 3, k + 4, k + 5, k + 6, k + 7
#define LB_I64_(k) LB_I8_(k), LB_I8_(k + 8), LB_I8_(k + 16), LB_I8_(k + 24), LB_I8_(k + 32), \
                   LB_I8_(k + 40), LB_I8_(k + 48), LB_I8_(k + 56)
    LB_I64_(0), LB_I64_(64), LB_I64_(128), LB_I64_(192)
#undef LB_I8_
#undef LB_I64_
};

typedef struct lb_qb_table {
    int side;            /* 0: none built; 1: a varies (b constant); 2: b varies */
    int32_t code;        /* the constant operand's code */
    int32_t values[256]; /* out_type codes of 0..255 (stored as out_type) */
} lb_qb_table;

static int lb_qbinary_table_piece(const lb_qb_job *j, lb_qb_table *tb, int64_t oa, int64_t sa,
                                  int64_t ob, int64_t sb, int64_t base, int64_t len) {
    const lb_qbinary *op = j->op;
    if (len < LB_QB_TABLE_MIN || op->op == LB_QTABLE2 ||
        (j->isa == LB_ISA_AVX512VNNI && op->op == LB_QMUL))
        return 0;
    int side;
    if (sb == 0 && sa == 1 && op->a_type == LB_U8)
        side = 1;
    else if (sa == 0 && sb == 1 && op->b_type == LB_U8)
        side = 2;
    else
        return 0;
    int32_t code = side == 1 ? lb_load_int(j->b, op->b_type, ob) : lb_load_int(j->a, op->a_type, oa);
    if (tb->side != side || tb->code != code) {
        if (side == 1)
            lb_qbinary_span(j, lb_iota256, 0, 1, j->b, ob, 0, tb->values, 0, 256);
        else
            lb_qbinary_span(j, j->a, oa, 0, lb_iota256, 0, 1, tb->values, 0, 256);
        tb->side = side;
        tb->code = code;
    }
    const uint8_t *q = side == 1 ? (const uint8_t *)j->a + oa : (const uint8_t *)j->b + ob;
    switch (op->out_type) {
    case LB_U8: {
        const uint8_t *tab = (const uint8_t *)tb->values;
        uint8_t *o = (uint8_t *)j->out + base;
        for (int64_t i = 0; i < len; i++) o[i] = tab[q[i]];
        break;
    }
    case LB_I16:
    case LB_U16: {
        const uint16_t *tab = (const uint16_t *)tb->values;
        uint16_t *o = (uint16_t *)j->out + base;
        for (int64_t i = 0; i < len; i++) o[i] = tab[q[i]];
        break;
    }
    default:
        for (int64_t i = 0; i < len; i++)
            lb_store(j->out, op->out_type, base + i, lb_load_int(tb->values, op->out_type, q[i]));
        break;
    }
    return 1;
}

/* Short rows where one operand repeats the same row (a per-channel operand of an NHWC image:
 * PP-OCR's equalization Muls and squeeze-excitation scales, rows of 16 to 480 channels): that
 * row is copied `k` times into a buffer and k rows of the other operand (consecutive in
 * memory) are computed as one span with it, the same integers per element. */
#define LB_QB_TILE 2048 /* elements */

static int lb_type_bytes(int32_t type) {
    return type == LB_U8 || type == LB_I8 ? 1 : (type == LB_I16 || type == LB_U16) ? 2 : 4;
}

/* rows [u, u + k) of the job (one piece each, same outer index) as one span; `repeat` 1: b
 * repeats (a's rows are consecutive), 2: a repeats. tile/tile_at: the buffer and the repeated
 * row's element offset it holds (-1: none yet). */
static void lb_qbinary_rows(const lb_qb_job *j, int repeat, int64_t oa, int64_t ob, int64_t base,
                            int64_t k, unsigned char *tile, int64_t *tile_at) {
    int64_t last = j->last;
    const void *src = repeat == 1 ? j->b : j->a;
    int64_t at = repeat == 1 ? ob : oa;
    int eb = lb_type_bytes(repeat == 1 ? j->op->b_type : j->op->a_type);
    if (*tile_at != at) {
        int64_t row = last * eb, fit = LB_QB_TILE / last;
        for (int64_t r = 0; r < fit; r++)
            memcpy(tile + r * row, (const unsigned char *)src + at * eb, (size_t)row);
        *tile_at = at;
    }
    if (repeat == 1)
        lb_qbinary_span(j, j->a, oa, 1, tile, 0, 1, j->out, base, k * last);
    else
        lb_qbinary_span(j, tile, 0, 1, j->b, ob, 1, j->out, base, k * last);
}

static void lb_qbinary_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_qb_job *j = (const lb_qb_job *)arg;
    const lb_bcast *bc = j->bc;
    int64_t pieces = (j->last + LB_QB_PIECE - 1) / LB_QB_PIECE;
    int64_t total = j->rows * pieces, per = (total + LB_QB_TASKS - 1) / LB_QB_TASKS;
    int64_t u0 = t * per, u1 = LB_MIN(total, u0 + per);
    int nd = bc->nd;
    lb_qb_table tb;
    tb.side = 0;
    tb.code = 0;
    int repeat = 0;
    if (nd >= 2 && pieces == 1 && j->last * 2 <= LB_QB_TILE && bc->sa[nd - 1] == 1 &&
        bc->sb[nd - 1] == 1) {
        if (bc->sa[nd - 2] == j->last && bc->sb[nd - 2] == 0)
            repeat = 1;
        else if (bc->sb[nd - 2] == j->last && bc->sa[nd - 2] == 0)
            repeat = 2;
    }
    _Alignas(64) unsigned char tile[LB_QB_TILE * 4];
    int64_t tile_at = -1;
    for (int64_t u = u0; u < u1; u++) {
        int64_t r = u / pieces, i0 = (u % pieces) * LB_QB_PIECE;
        int64_t i1 = LB_MIN(j->last, i0 + LB_QB_PIECE), len = i1 - i0;
        int64_t rest = r, oa = 0, ob = 0;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t i = rest % bc->shape[d];
            rest /= bc->shape[d];
            oa += i * bc->sa[d];
            ob += i * bc->sb[d];
        }
        int64_t sa = bc->sa[nd - 1], sb = bc->sb[nd - 1], base = r * j->last + i0;
        oa += i0 * sa;
        ob += i0 * sb;
        if (repeat) { /* rows u.. while the outer index stays (the repeated row the same) */
            int64_t inner = bc->shape[nd - 2];
            int64_t k = LB_MIN(LB_MIN(u1 - u, inner - r % inner), LB_QB_TILE / j->last);
            if (k > 1) {
                lb_qbinary_rows(j, repeat, oa, ob, base, k, tile, &tile_at);
                u += k - 1;
                continue;
            }
        }
        if (lb_qbinary_table_piece(j, &tb, oa, sa, ob, sb, base, len)) continue;
        lb_qbinary_span(j, j->a, oa, sa, j->b, ob, sb, j->out, base, len);
    }
}

void lb_qbinary_run(const lb_ctx *ctx, const lb_bcast *bc, const lb_qbinary *op, const void *a,
                    const void *b, void *out) {
    int64_t rows = 1;
    for (int d = 0; d < bc->nd - 1; d++) rows *= bc->shape[d];
    int64_t last = bc->shape[bc->nd - 1];
    if (rows * last == 0) return;
    lb_qb_job j = {bc, op, a, b, out, rows, last, ctx->isa, NULL, NULL};
    int32_t ta[256], tb[256];
    if ((op->op == LB_QADD || op->op == LB_QSUB) && !op->lin_on && op->a_type == LB_U8 &&
        op->b_type == LB_U8 && rows * last >= 4096 && ctx->isa != LB_ISA_AVX512VNNI) {
        const lb_add_params *p = &op->p;
        for (int32_t c = 0; c < 256; c++) { /* as lb_add_scalar */
            ta[c] = lb_q31((int32_t)((uint32_t)(c - p->z1) << p->shift), p->m1, p->l1, p->r1);
            tb[c] = lb_q31((int32_t)((uint32_t)(c - p->z2) << p->shift), p->m2, p->l2, p->r2);
        }
        j.ta = ta;
        j.tb = tb;
    }
    int64_t total = rows * ((last + LB_QB_PIECE - 1) / LB_QB_PIECE);
    int64_t per = (total + LB_QB_TASKS - 1) / LB_QB_TASKS;
    lb_parallel_for_sized(ctx, (total + per - 1) / per, rows * last * 3, lb_qbinary_task, &j);
}

/* ---- residual squeeze-excitation: y = x + x * s ----------------------------------------- */

#define LB_QSE_BUILD 8     /* channels a table-building task */
#define LB_QSE_PIECE 16384 /* codes a lookup task, about */

typedef struct lb_qse_job {
    const lb_qse *op;
    const uint8_t *x, *s; /* this image's codes and its c codes of s */
    uint8_t *out, *tables;
    int64_t hw, c, per; /* per: pixels a lookup task */
    int isa;
} lb_qse_job;

/* Tables of channels [LB_QSE_BUILD t, LB_QSE_BUILD (t + 1)): the Mul's code of each x code
 * (lb_qbinary_span with s's code at stride 0), then the Add's result of x code and that code,
 * through the same spans (and so the same integers) as lb_qbinary_run. */
static void lb_qse_build_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_qse_job *j = (const lb_qse_job *)arg;
    const lb_qse *op = j->op;
    lb_qb_job jm = {NULL, &op->mul, NULL, NULL, NULL, 1, 256, j->isa, NULL, NULL};
    lb_qb_job ja = {NULL, &op->add, NULL, NULL, NULL, 1, 256, j->isa, NULL, NULL};
    _Alignas(64) uint8_t m[256];
    int64_t c1 = LB_MIN(j->c, (t + 1) * LB_QSE_BUILD);
    for (int64_t ch = t * LB_QSE_BUILD; ch < c1; ch++) {
        if (op->mul_x_second)
            lb_qbinary_span(&jm, j->s, ch, 0, lb_iota256, 0, 1, m, 0, 256);
        else
            lb_qbinary_span(&jm, lb_iota256, 0, 1, j->s, ch, 0, m, 0, 256);
        if (op->add_x_second)
            lb_qbinary_span(&ja, m, 0, 1, lb_iota256, 0, 1, j->tables, ch * 256, 256);
        else
            lb_qbinary_span(&ja, lb_iota256, 0, 1, m, 0, 1, j->tables, ch * 256, 256);
    }
}

static void lb_qse_lookup_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_qse_job *j = (const lb_qse_job *)arg;
    int64_t p0 = t * j->per, p1 = LB_MIN(j->hw, p0 + j->per), c = j->c;
    if (p0 >= p1) return;
    const uint8_t *x = j->x + p0 * c;
    uint8_t *o = j->out + p0 * c;
#if LB_HAVE_AVX512
    if (j->isa == LB_ISA_AVX512VNNI) {
        lb_qse_lookup_avx512(j->tables, c, x, o, p1 - p0);
        return;
    }
#endif
    for (int64_t p = 0; p < p1 - p0; p++)
        for (int64_t ch = 0; ch < c; ch++)
            o[p * c + ch] = j->tables[ch * 256 + x[p * c + ch]];
}

void lb_qse_residual(const lb_ctx *ctx, const lb_qse *op, int64_t n, int64_t hw, int64_t c,
                     const uint8_t *x, const uint8_t *s, uint8_t *out, uint8_t *tables) {
    if (n <= 0 || hw <= 0 || c <= 0) return;
    int64_t per = LB_MAX(1, LB_QSE_PIECE / c);
    lb_qse_job j = {op, NULL, NULL, NULL, tables, hw, c, per, ctx->isa};
    for (int64_t b = 0; b < n; b++) {
        j.x = x + b * hw * c;
        j.s = s + b * c;
        j.out = out + b * hw * c;
        lb_parallel_for(ctx, (c + LB_QSE_BUILD - 1) / LB_QSE_BUILD, lb_qse_build_task, &j);
        lb_parallel_for(ctx, (hw + per - 1) / per, lb_qse_lookup_task, &j);
    }
}

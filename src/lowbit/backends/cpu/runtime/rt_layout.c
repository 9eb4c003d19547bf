/* Data movement: n-d permutation (transposes, NCHW <-> NHWC, slices), copies, im2col. */
#include "rt_internal.h"

typedef struct lb_perm_job {
    int nd;
    const int64_t *shape, *strides;
    int esize;
    const char *in;
    char *out;
    int lead;      /* a task: one index of the first `lead` axes (1, or 2 for a batch of 1) */
    int64_t inner; /* elements per task: the product of the other axes */
} lb_perm_job;

/* One slice along the leading axes: an odometer over the remaining axes, the last one moving
 * fastest with a typed inner loop. */
static void lb_perm_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_perm_job *j = (const lb_perm_job *)arg;
    int64_t idx[8] = {0};
    int nd = j->nd;
    int64_t last = j->shape[nd - 1], ls = j->strides[nd - 1], rest = t, start = 0;
    for (int d = j->lead - 1; d >= 0; d--) {
        start += (rest % j->shape[d]) * j->strides[d];
        rest /= j->shape[d];
    }
    const char *base = j->in + start * j->esize;
    char *dst = j->out + t * j->inner * j->esize;
    int64_t rows = last ? j->inner / last : 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0;
        for (int d = j->lead; d < nd - 1; d++) off += idx[d] * j->strides[d];
        const char *src = base + off * j->esize;
        switch (j->esize) {
        case 1:
            for (int64_t i = 0; i < last; i++) dst[i] = src[i * ls];
            break;
        case 2:
            for (int64_t i = 0; i < last; i++)
                ((int16_t *)dst)[i] = ((const int16_t *)src)[i * ls];
            break;
        case 4:
            for (int64_t i = 0; i < last; i++)
                ((int32_t *)dst)[i] = ((const int32_t *)src)[i * ls];
            break;
        case 8:
            for (int64_t i = 0; i < last; i++)
                ((int64_t *)dst)[i] = ((const int64_t *)src)[i * ls];
            break;
        default:
            for (int64_t i = 0; i < last; i++) memcpy(dst + i * j->esize, src + i * ls * j->esize,
                                                      (size_t)j->esize);
        }
        dst += last * j->esize;
        for (int d = nd - 2; d >= j->lead; d--) {
            if (++idx[d] < j->shape[d]) break;
            idx[d] = 0;
        }
    }
}

/* A batch of small-row transposes out[b][r][c] = in[b * bstride + c * R + r] for c < C <= 16
 * (NCHW -> NHWC of few channels): a task is a block of LB_PERM_BLOCK rows r of one b, read
 * channel by channel (contiguous) and written with a stride of C. */
#define LB_PERM_BLOCK 1024
typedef struct lb_tshort_job {
    int64_t R, C, bstride, blocks;
    int esize;
    const char *in;
    char *out;
} lb_tshort_job;

#define LB_TSHORT_COPY(T)                                                                      \
    for (int64_t c = 0; c < j->C; c++) {                                                       \
        const T *s = (const T *)src + c * j->R;                                                \
        T *d = (T *)dst + c;                                                                   \
        for (int64_t r = 0; r < nr; r++) d[r * j->C] = s[r];                                   \
    }

static void lb_tshort_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_tshort_job *j = (const lb_tshort_job *)arg;
    int64_t b = t / j->blocks, r0 = t % j->blocks * LB_PERM_BLOCK;
    int64_t nr = LB_MIN(LB_PERM_BLOCK, j->R - r0);
    const char *src = j->in + (b * j->bstride + r0) * j->esize;
    char *dst = j->out + (b * j->R + r0) * j->C * j->esize;
    switch (j->esize) {
    case 1: LB_TSHORT_COPY(uint8_t) break;
    case 2: LB_TSHORT_COPY(uint16_t) break;
    case 4: LB_TSHORT_COPY(uint32_t) break;
    default: LB_TSHORT_COPY(uint64_t) break;
    }
}

void lb_permute(const lb_ctx *ctx, int nd, const int64_t *shape, const int64_t *in_strides,
                int esize, const void *in, void *out) {
    int64_t shape1[8] = {1, 1}, strides1[8] = {0, 0};
    if (nd < 2) { /* treat as [1, n] */
        shape1[1] = nd == 1 ? shape[0] : 1;
        strides1[1] = nd == 1 ? in_strides[0] : 0;
        shape = shape1;
        in_strides = strides1;
        nd = 2;
    }
    /* merge axis d + 1 into d where the input steps through both as one (NHWC -> NCHW: h and
     * w), dropping axes of size 1: fewer, longer rows */
    int64_t shape2[8], strides2[8];
    int nd2 = 0;
    for (int d = 0; d < nd && nd <= 8; d++) {
        if (shape[d] == 1 && d > 0) continue;
        if (nd2 > 0 && shape2[nd2 - 1] != 1 && strides2[nd2 - 1] == in_strides[d] * shape[d]) {
            shape2[nd2 - 1] *= shape[d];
            strides2[nd2 - 1] = in_strides[d];
            continue;
        }
        shape2[nd2] = shape[d];
        strides2[nd2++] = in_strides[d];
    }
    if (nd <= 8 && nd2 >= 2) {
        shape = shape2;
        in_strides = strides2;
        nd = nd2;
    }
    int64_t bytes = esize;
    for (int d = 0; d < nd; d++) bytes *= shape[d];
    if (nd == 3 && shape[2] <= 16 && shape[2] > 1 && in_strides[1] == 1 &&
        in_strides[2] == shape[1] && (esize == 1 || esize == 2 || esize == 4 || esize == 8)) {
        /* few channels to the end (NCHW -> NHWC of an image): rows of 3 as tasks cost more
         * than the copy */
        lb_tshort_job tj = {shape[1], shape[2], in_strides[0],
                            (shape[1] + LB_PERM_BLOCK - 1) / LB_PERM_BLOCK, esize,
                            (const char *)in, (char *)out};
        if (tj.blocks) lb_parallel_for_sized(ctx, shape[0] * tj.blocks, bytes * 2,
                                             lb_tshort_task, &tj);
        return;
    }
    /* enough tasks for the threads, when there are threads to share it */
    int lead = nd >= 3 && shape[0] < 16 && bytes * 2 >= LB_INLINE_BYTES ? 2 : 1;
    int64_t inner = 1, tasks = 1;
    for (int d = 0; d < nd; d++) {
        if (d < lead)
            tasks *= shape[d];
        else
            inner *= shape[d];
    }
    lb_perm_job j = {nd, shape, in_strides, esize, (const char *)in, (char *)out, lead, inner};
    if (inner == 0) return;
    lb_parallel_for_sized(ctx, tasks, bytes * 2, lb_perm_task, &j);
}

typedef struct lb_copy_job {
    const char *in;
    char *out;
    int64_t n;
} lb_copy_job;

#define LB_COPY_CHUNK (1 << 18)

static void lb_copy_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_copy_job *j = (const lb_copy_job *)arg;
    int64_t i0 = t * LB_COPY_CHUNK, n = LB_MIN(LB_COPY_CHUNK, j->n - i0);
    memcpy(j->out + i0, j->in + i0, (size_t)n);
}

void lb_copy(const lb_ctx *ctx, int64_t nbytes, const void *in, void *out) {
    if (in == out || nbytes <= 0) return;
    lb_copy_job j = {(const char *)in, (char *)out, nbytes};
    lb_parallel_for(ctx, (nbytes + LB_COPY_CHUNK - 1) / LB_COPY_CHUNK, lb_copy_task, &j);
}

/* ---- im2col ------------------------------------------------------------------------------ */

typedef struct lb_im2col_job {
    const lb_window *w;
    int64_t groups, cg, kp;
    const void *in;
    void *out;
    int esize;
    uint8_t pad8;
    int vector; /* rows by lb_im2col_row_u8_avx512 */
} lb_im2col_job;

/* Short runs (a few bytes per tap in the first layer of a network) are moved in pieces of
 * constant size, which the compiler inlines: a memcpy/memset call per run costs more than the
 * bytes. */
#define LB_SHORT_RUN 64

static inline void lb_move_bytes(char *d, const char *s, int64_t n) {
    if (n > LB_SHORT_RUN) {
        memcpy(d, s, (size_t)n);
        return;
    }
    if (n >= 8) { /* 8-byte pieces, the last one overlapping its predecessor */
        for (int64_t i = 0; i + 8 < n; i += 8) memcpy(d + i, s + i, 8);
        memcpy(d + n - 8, s + n - 8, 8);
    } else if (n >= 4) {
        memcpy(d, s, 4);
        memcpy(d + n - 4, s + n - 4, 4);
    } else {
        for (int64_t i = 0; i < n; i++) d[i] = s[i];
    }
}

static inline void lb_set_bytes(char *d, uint8_t v, int64_t n) {
    if (n > LB_SHORT_RUN) {
        memset(d, v, (size_t)n);
        return;
    }
    uint64_t v8 = 0x0101010101010101ull * v;
    for (; n >= 8; n -= 8, d += 8) memcpy(d, &v8, 8);
    if (n & 4) {
        memcpy(d, &v8, 4);
        d += 4;
    }
    if (n & 2) {
        memcpy(d, &v8, 2);
        d += 2;
    }
    if (n & 1) *d = (char)v;
}

/* n elements of `pad` (bytes) or zeros (wider elements). */
static inline void lb_fill(char *d, int64_t n, int64_t es, uint8_t pad) {
    if (n > 0) lb_set_bytes(d, es == 1 ? pad : 0, n * es);
}

/* Task = one output row. Small channel counts are copied element by element (a memcpy call
 * per tap and group costs more than the bytes). */
static void lb_im2col_task(void *arg, int64_t oy, int worker) {
    (void)worker;
    const lb_im2col_job *j = (const lb_im2col_job *)arg;
    const lb_window *w = j->w;
    int64_t taps = w->kh * w->kw, es = j->esize, cg = j->cg, seg = taps * cg;
    int64_t row = j->groups * j->kp;
#if LB_HAVE_AVX512
    if (j->vector) {
        lb_im2col_row_u8_avx512(w, cg, j->kp, (const uint8_t *)j->in, j->pad8,
                                (uint8_t *)j->out, oy);
        return;
    }
#endif
    if (j->groups == 1 && w->dw == 1) { /* a window row is one run of kw * c elements */
        for (int64_t ox = 0; ox < w->ow; ox++) {
            char *dst = (char *)j->out + (oy * w->ow + ox) * row * es;
            int64_t ix0 = ox * w->sw - w->pl;
            int64_t lo = LB_MAX(0, -ix0), hi = LB_MIN(w->kw, w->iw - ix0); /* taps inside */
            for (int64_t ky = 0; ky < w->kh; ky++) {
                int64_t iy = oy * w->sh - w->pt + ky * w->dh;
                char *d = dst + ky * w->kw * cg * es;
                if (iy < 0 || iy >= w->ih || hi <= lo) {
                    lb_fill(d, w->kw * cg, es, j->pad8);
                    continue;
                }
                lb_fill(d, lo * cg, es, j->pad8);
                lb_move_bytes(d + lo * cg * es,
                              (const char *)j->in + ((iy * w->iw + ix0 + lo) * w->c) * es,
                              (hi - lo) * cg * es);
                lb_fill(d + hi * cg * es, (w->kw - hi) * cg, es, j->pad8);
            }
            lb_fill(dst + seg * es, j->kp - seg, es, j->pad8);
        }
        return;
    }
    for (int64_t ox = 0; ox < w->ow; ox++) {
        char *dst = (char *)j->out + (oy * w->ow + ox) * row * es;
        for (int64_t ky = 0; ky < w->kh; ky++) {
            int64_t iy = oy * w->sh - w->pt + ky * w->dh;
            for (int64_t kx = 0; kx < w->kw; kx++) {
                int64_t ix = ox * w->sw - w->pl + kx * w->dw;
                int64_t tap = ky * w->kw + kx;
                int inside = iy >= 0 && iy < w->ih && ix >= 0 && ix < w->iw;
                const char *src = (const char *)j->in + ((iy * w->iw + ix) * w->c) * es;
                for (int64_t g = 0; g < j->groups; g++) {
                    char *d = dst + (g * j->kp + tap * cg) * es;
                    if (inside && es == 1 && cg <= 8) {
                        for (int64_t i = 0; i < cg; i++) d[i] = src[g * cg + i];
                    } else if (inside) {
                        memcpy(d, src + g * cg * es, (size_t)(cg * es));
                    } else if (es == 1) {
                        memset(d, j->pad8, (size_t)cg);
                    } else {
                        memset(d, 0, (size_t)(cg * es));
                    }
                }
            }
        }
        for (int64_t g = 0; g < j->groups && j->kp > seg; g++) /* each group's padding to kp */
            memset(dst + (g * j->kp + seg) * es, es == 1 ? j->pad8 : 0, (size_t)((j->kp - seg) * es));
    }
}

void lb_im2col_u8(const lb_ctx *ctx, const lb_window *w, int64_t groups, int64_t cg, int64_t kp,
                  const uint8_t *in, uint8_t pad, uint8_t *out) {
    lb_im2col_job j = {w, groups, cg, kp, in, out, 1, pad, 0};
#if LB_HAVE_AVX512
    j.vector = ctx->isa == LB_ISA_AVX512VNNI && groups == 1 && w->dw == 1 && kp <= 64;
#endif
    lb_parallel_for(ctx, w->oh, lb_im2col_task, &j);
}

void lb_im2col_f32(const lb_ctx *ctx, const lb_window *w, int64_t groups, int64_t cg,
                   const float *in, float *out) {
    lb_im2col_job j = {w, groups, cg, w->kh * w->kw * cg, in, out, 4, 0, 0};
    lb_parallel_for(ctx, w->oh, lb_im2col_task, &j);
}

/* ---- strided rows ------------------------------------------------------------------------ */

typedef struct lb_rows_job {
    int64_t row_bytes;
    const char *in;
    int64_t in_stride;
    char *out;
    int64_t out_stride;
    int64_t rows, per;
} lb_rows_job;

static void lb_rows_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_rows_job *j = (const lb_rows_job *)arg;
    int64_t r1 = LB_MIN(j->rows, (t + 1) * j->per);
    for (int64_t r = t * j->per; r < r1; r++)
        memcpy(j->out + r * j->out_stride, j->in + r * j->in_stride, (size_t)j->row_bytes);
}

void lb_copy_rows(const lb_ctx *ctx, int64_t rows, int64_t row_bytes, const void *in,
                  int64_t in_stride, void *out, int64_t out_stride) {
    if (rows <= 0 || row_bytes <= 0) return;
    int64_t per = LB_MAX(1, (1 << 16) / row_bytes);
    lb_rows_job j = {row_bytes, (const char *)in, in_stride, (char *)out, out_stride, rows, per};
    lb_parallel_for(ctx, (rows + per - 1) / per, lb_rows_task, &j);
}

/* ---- DepthToSpace ------------------------------------------------------------------------ */

typedef struct lb_d2s_job {
    int64_t w, b, m;
    int esize;
    const char *in;
    char *out;
} lb_d2s_job;

/* Chunks of a constant byte count: the compiler turns each copy into one or two moves. */
#define LB_D2S_COPY(BYTES)                                                                     \
    for (int64_t x = 0; x < j->w; x++) memcpy(dst + x * (BYTES), src + x * cb, (BYTES));       \
    break;

/* Input row t (image n, row y: t = n * h + y) into output rows t * b + i, i < b: each pixel's
 * channels [i * b * m, (i + 1) * b * m) are the b output pixels' m values in a row. */
static void lb_d2s_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_d2s_job *j = (const lb_d2s_job *)arg;
    const int64_t chunk = j->b * j->m * j->esize, cb = j->b * chunk;
    for (int64_t i = 0; i < j->b; i++) {
        const char *src = j->in + t * j->w * cb + i * chunk;
        char *dst = j->out + (t * j->b + i) * j->w * chunk;
        switch (chunk) {
        case 1: LB_D2S_COPY(1)
        case 2: LB_D2S_COPY(2)
        case 4: LB_D2S_COPY(4)
        case 8: LB_D2S_COPY(8)
        case 16: LB_D2S_COPY(16)
        case 32: LB_D2S_COPY(32)
        case 48: LB_D2S_COPY(48)
        case 64: LB_D2S_COPY(64)
        default:
            for (int64_t x = 0; x < j->w; x++)
                memcpy(dst + x * chunk, src + x * cb, (size_t)chunk);
        }
    }
}
#undef LB_D2S_COPY

void lb_depth_to_space(const lb_ctx *ctx, int64_t n, int64_t h, int64_t w, int64_t b,
                       int64_t m, int esize, const void *in, void *out) {
    if (n * h * w * b * m == 0) return;
    lb_d2s_job j = {w, b, m, esize, (const char *)in, (char *)out};
    lb_parallel_for_sized(ctx, n * h, n * h * w * b * b * m * esize * 2, lb_d2s_task, &j);
}

/* Helpers shared by the library's source files (not part of the public interface). */
#ifndef LOWBIT_RT_INTERNAL_H
#define LOWBIT_RT_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "lowbit_rt.h"

/* Vector code is compiled per function with a target attribute, so one build of the library
 * holds every path and the context picks one at run time. Bundles for one target leave paths
 * out: LB_NO_X86_KERNELS (the portable path alone on x86-64), LB_NO_AVX512 (AVX2 and portable),
 * LB_NO_DOTPROD (NEON without the dot-product instructions). */
#if (defined(__x86_64__) || defined(_M_X64)) && !defined(LB_NO_X86_KERNELS)
#define LB_HAVE_AVX2 1
#define LB_TARGET_AVX2 __attribute__((target("avx2,fma,f16c,bmi,bmi2")))
#ifndef LB_NO_AVX512
#define LB_HAVE_AVX512 1
#define LB_TARGET_AVX512 \
    __attribute__((target("avx2,fma,f16c,bmi,bmi2,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#else
#define LB_HAVE_AVX512 0
#endif
#else
#define LB_HAVE_AVX2 0
#define LB_HAVE_AVX512 0
#endif
#define LB_HAVE_X86 (LB_HAVE_AVX2 || LB_HAVE_AVX512)

/* AMX-INT8 tiles (tdpbusd: 16 x 16 int32 += 16 x 64 uint8 . 64 x 16 int8 per instruction) on
 * Linux, which hands out the tile state only to a process that asks (arch_prctl), with
 * compilers that know the instructions (gcc 11, clang 12). LB_NO_AMX leaves them out. */
#if LB_HAVE_AVX512 && defined(__linux__) && !defined(LB_NO_AMX) && \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11))
#define LB_HAVE_AMX 1
#define LB_TARGET_AMX                                                                       \
    __attribute__((target("avx2,fma,f16c,bmi,bmi2,avx512f,avx512bw,avx512vl,avx512dq,"     \
                          "avx512vnni,amx-tile,amx-int8")))
#else
#define LB_HAVE_AMX 0
#endif

/* 64-bit ARM: NEON (Advanced SIMD) is part of the base architecture; the dot-product
 * instructions (sdot, ARMv8.2 and later) are compiled per function and chosen at run time. */
#if defined(__aarch64__) && !defined(LB_NO_NEON_KERNELS)
#define LB_HAVE_NEON 1
#ifndef LB_NO_DOTPROD
#define LB_HAVE_DOTPROD 1
#define LB_TARGET_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#else
#define LB_HAVE_DOTPROD 0
#endif
#else
#define LB_HAVE_NEON 0
#define LB_HAVE_DOTPROD 0
#endif

#define LB_INLINE static inline __attribute__((always_inline))
#define LB_MIN(a, b) ((a) < (b) ? (a) : (b))
#define LB_MAX(a, b) ((a) > (b) ? (a) : (b))

static inline int32_t lb_clamp32(int64_t v, int32_t lo, int32_t hi) {
    return (int32_t)(v < lo ? lo : (v > hi ? hi : v));
}

/* Two's complement int32 addition and product without undefined behaviour (the accumulator
 * arithmetic relies on wrap-around: the exact result is in range, partial sums may not be). */
static inline int32_t lb_wrap_add(int32_t a, int32_t b) {
    return (int32_t)((uint32_t)a + (uint32_t)b);
}
static inline int32_t lb_wrap_mul(int32_t a, int32_t b) {
    return (int32_t)((uint32_t)a * (uint32_t)b);
}

/* fixed_point "q31": xs = sat32(x << l); h = (xs * m + 2**30) >> 31;
 * y = r > 0 ? (h + 2**(r-1) - (h < 0)) >> r : h. `>>` on negative values is arithmetic (as
 * gcc and clang define it). */
static inline int32_t lb_q31(int32_t x, int32_t m, int32_t l, int32_t r) {
    int64_t xs = (int64_t)x * ((int64_t)1 << l);
    if (xs > INT32_MAX) xs = INT32_MAX;
    if (xs < INT32_MIN) xs = INT32_MIN;
    int64_t h = (xs * m + ((int64_t)1 << 30)) >> 31;
    if (r > 0) h = (h + ((int64_t)1 << (r - 1)) - (h < 0)) >> r;
    return (int32_t)h;
}

/* fixed_point "prescale": t = clamp(x >> pre, -clip, clip); y = (t * scale + 2**(post-1)) >>
 * post, every step inside int32 by the encoder's choice of clip. */
static inline int32_t lb_prescale(int32_t x, int32_t pre, int32_t scale, int32_t post,
                                  int32_t clip) {
    int32_t t = x >> pre;
    if (t > clip) t = clip;
    if (t < -clip) t = -clip;
    return (t * scale + (int32_t)(1u << (post - 1))) >> post;
}

/* ONNX Runtime's QLinear requantization: rint(clamp(float32(acc) * M, lo, hi)), NaN -> lo. */
static inline int32_t lb_rq_float32(int32_t acc, float m, int32_t zp, int32_t qmin,
                                    int32_t qmax) {
    float v = (float)acc * m;
    double lo = (double)qmin - zp, hi = (double)qmax - zp, d = (double)v;
    if (d != d) d = lo;
    if (d < lo) d = lo;
    if (d > hi) d = hi;
    return (int32_t)nearbyint(d) + zp;
}

/* The stored value of accumulator `acc` of channel c (every method but LB_RQ_DEQUANT). */
static inline int32_t lb_requant_scalar(const lb_requant *rq, int64_t c, int32_t acc) {
    int64_t y;
    switch (rq->method) {
    case LB_RQ_Q31:
        y = lb_q31(acc, rq->p0[c], rq->p1[c], rq->p2[c]);
        break;
    case LB_RQ_PRESCALE:
        y = lb_prescale(acc, rq->p0[c], rq->p1[c], rq->p2[c], rq->p3[c]);
        break;
    case LB_RQ_FLOAT32:
        return lb_rq_float32(acc, rq->fmul[c], rq->zero_point[c], rq->qmin, rq->qmax);
    default:
        return 0;
    }
    return lb_clamp32(y + rq->zero_point[c], rq->qmin, rq->qmax);
}

static inline float lb_dequant_scalar(const lb_requant *rq, int64_t c, int32_t acc) {
    if (rq->method == LB_RQ_FLOAT32) return (float)acc * rq->fmul[c]; /* ONNX Runtime's QGemm */
    float v = (float)((double)acc * rq->dscale[c]);
    if (v < rq->fmin) v = rq->fmin;
    if (v > rq->fmax) v = rq->fmax;
    return v;
}

/* Bytes 4g .. 4g+3 of a row of K bytes as one int32 (little-endian), zeros past K: the four
 * codes one dot-product step reads. */
static inline int32_t lb_load4_packed(const uint8_t *a, int64_t g, int64_t K) {
    int64_t k = g * 4;
    int32_t v = 0;
    if (k + 4 <= K) {
        memcpy(&v, a + k, 4);
    } else {
        uint8_t b[4] = {0, 0, 0, 0};
        for (int64_t i = k; i < K; i++) b[i - k] = a[i];
        memcpy(&v, b, 4);
    }
    return v;
}

/* Load element i of `p`, integer codes of type `type` (LB_U8, LB_I8, LB_I16, LB_U16, LB_I32);
 * 0 for any other type. */
static inline int64_t lb_load_int(const void *p, int32_t type, int64_t i) {
    switch (type) {
    case LB_U8:
        return ((const uint8_t *)p)[i];
    case LB_I8:
        return ((const int8_t *)p)[i];
    case LB_I16:
        return ((const int16_t *)p)[i];
    case LB_U16:
        return ((const uint16_t *)p)[i];
    case LB_I32:
        return ((const int32_t *)p)[i];
    default:
        return 0;
    }
}

/* Store one requantized value of type `out_type` at element index i of `out`. */
static inline void lb_store(void *out, int32_t out_type, int64_t i, int32_t v) {
    switch (out_type) {
    case LB_U8:
        ((uint8_t *)out)[i] = (uint8_t)v;
        break;
    case LB_I16:
        ((int16_t *)out)[i] = (int16_t)v;
        break;
    case LB_U16:
        ((uint16_t *)out)[i] = (uint16_t)v;
        break;
    case LB_I32:
        ((int32_t *)out)[i] = v;
        break;
    case LB_I8:
        ((int8_t *)out)[i] = (int8_t)v;
        break;
    default:
        break;
    }
}

/* lowbit's quantized Add/Sub of a computed value y1 (stored code) and a residual code y2. */
static inline int32_t lb_add_scalar(const lb_add_params *p, int32_t y1, int32_t y2) {
    int32_t d1 = (int32_t)((uint32_t)(y1 - p->z1) << p->shift);
    int32_t d2 = (int32_t)((uint32_t)(y2 - p->z2) << p->shift);
    int32_t a1 = lb_q31(d1, p->m1, p->l1, p->r1);
    int32_t a2 = lb_q31(d2, p->m2, p->l2, p->r2);
    return lb_requant_scalar(&p->out, 0, p->sub ? a1 - a2 : a1 + a2);
}

/* lb_post's float32 HardSwish of the code y (lowbit_rt.h; int_activation.HardSwishParams). */
static inline int32_t lb_hsw_scalar(const lb_post *p, int32_t y) {
    float v = (float)(y - p->hsw_zx);
    float h = v * p->hsw_c1 + 0.5f;
    h = h > 0.0f ? h : 0.0f;
    h = h < 1.0f ? h : 1.0f;
    float u = (v * h) * p->hsw_c2 + p->hsw_c3;
    float lo = (float)(p->hsw_qmin - p->hsw_zy), hi = (float)(p->hsw_qmax - p->hsw_zy);
    u = u > lo ? u : lo; /* exact bounds (|code| < 2**24): clamping first rounds the same */
    u = u < hi ? u : hi;
    return (int32_t)nearbyintf(u) + p->hsw_zy;
}

/* lb_post on the code y of channel c (the epilogue's code before it is stored). */
static inline int32_t lb_post_scalar(const lb_post *p, int64_t c, int32_t y) {
    if (p->table) y = (int32_t)lb_load_int(p->table, p->table_type, (int64_t)y - p->table_min);
    if (p->hsw) y = lb_hsw_scalar(p, y);
    if (p->mul) {
        int64_t prod = (int64_t)(y - p->z) * p->mul[c];
        y = lb_requant_scalar(&p->rq, 0, lb_clamp32(prod, INT32_MIN, INT32_MAX));
    }
    return y;
}

/* lb_post_map's arguments: rows x channels codes (channels last) through a post stage. */
typedef struct lb_post_map_job {
    int64_t rows, channels;
    const void *x;
    int32_t in_type;
    const lb_post *post;
    int32_t out_type;
    void *out;
    int isa;
} lb_post_map_job;

/* ---- per-ISA entry points (defined in rt_*_avx2.c / rt_*_avx512.c) ---------------------- */

typedef struct lb_gemm_tile {
    int64_t M, N, K;
    const uint8_t *A;
    int64_t lda;
    const lb_packed_b *B;
    const lb_epilogue *ep;
    void *C;
    int64_t ldc;
    const int32_t *row_sums;
} lb_gemm_tile;

/* Compute rows [m0, m1) and 16-column blocks [nb0, nb1) of the product. */
void lb_gemm_block_scalar(const lb_gemm_tile *t, int64_t m0, int64_t m1, int64_t nb0,
                          int64_t nb1);
#if LB_HAVE_AVX2
void lb_gemm_block_avx2(const lb_gemm_tile *t, int64_t m0, int64_t m1, int64_t nb0,
                        int64_t nb1);
#endif
#if LB_HAVE_AVX512
void lb_gemm_block_avx512(const lb_gemm_tile *t, int64_t m0, int64_t m1, int64_t nb0,
                          int64_t nb1);
#endif
#if LB_HAVE_AVX512
/* The AVX-512 epilogue of mr rows x nv <= 4 column blocks of int32 accumulators at acc
 * (64-byte aligned; row r's block v at acc + (r * 4 + v) * 16), rows m.., blocks nb.. */
void lb_gemm_epilogue_avx512(const lb_gemm_tile *t, int64_t m, int64_t nb, int mr, int nv,
                             const int32_t *acc);
#endif
/* Most rows of an AMX task (lb_qgemm), all copied at once (lb_gemm_block_amx). */
#define LB_AMX_TASK_ROWS 128
#if LB_HAVE_AMX
/* A number for one call of lb_qgemm, never given out before in this process (nonzero). */
uint64_t lb_amx_product_id(void);
/* The same on AMX tiles (rows past a multiple of 16 on the AVX-512 kernel). `product`: the
 * lb_amx_product_id of the call the task belongs to (a thread that copied these rows of A for
 * an earlier task of it uses its copy again). */
void lb_gemm_block_amx(const lb_gemm_tile *t, uint64_t product, int64_t m0, int64_t m1,
                       int64_t nb0, int64_t nb1);
#endif
#if LB_HAVE_NEON
void lb_gemm_block_neon(const lb_gemm_tile *t, int64_t m0, int64_t m1, int64_t nb0,
                        int64_t nb1);
#endif
#if LB_HAVE_DOTPROD
void lb_gemm_block_dotprod(const lb_gemm_tile *t, int64_t m0, int64_t m1, int64_t nb0,
                           int64_t nb1);
#endif

/* Apply the epilogue to one row of raw accumulators acc[0..n) for columns [n0, n0+n) of row m
 * (shared by the scalar and AVX2 paths). */
void lb_epilogue_row(const lb_gemm_tile *t, int64_t m, int64_t n0, int64_t n,
                     const int32_t *acc);

#if LB_HAVE_AVX512
void lb_quantize_nhwc3_avx512(const float *x, int64_t hw, int64_t np, const float s[3],
                              const float zp[3], float lo, float hi, float pinf, float ninf,
                              float nanv, uint8_t *out);
void lb_qbinary_row_avx512(const lb_qbinary *op, const void *a, int64_t sa, const void *b,
                           int64_t sb, void *out, int64_t n);
void lb_qlin_row_avx512(const lb_qbinary *op, const uint8_t *t, const uint8_t *u,
                        uint8_t *out, int64_t n);
void lb_lookup_u8_avx512(int64_t n, const uint8_t *q, const uint8_t *table, uint8_t *out);
void lb_post_rows_avx512(const lb_post_map_job *j, int64_t r0, int64_t r1);
/* out[p * c + ch] = tables[ch * 256 + x[p * c + ch]] for p < npix (lb_qse_residual) */
void lb_qse_lookup_avx512(const uint8_t *tables, int64_t c, const uint8_t *x, uint8_t *out,
                          int64_t npix);
#endif

/* ---- depthwise convolution helpers (rt_qconv.c) ------------------------------------------ */

#define LB_DW_MAX_TAPS 64 /* the code generator uses the depthwise kernels up to 8 x 8 */

void lb_dw_offsets(const lb_window *w, int64_t *offsets);

/* The input rows each tap of output pixel (n, oy, ox) reads (the zero row where the tap falls
 * in the padding). `offsets[t]` are the taps' offsets from the window's corner when the whole
 * window is inside. */
static inline void lb_dw_taps(const lb_window *w, const uint8_t *in, const uint8_t *zero_row,
                const int64_t *offsets, int64_t n, int64_t oy, int64_t ox,
                const uint8_t **taps) {
    int64_t iy0 = oy * w->sh - w->pt, ix0 = ox * w->sw - w->pl;
    int64_t iy1 = iy0 + (w->kh - 1) * w->dh, ix1 = ix0 + (w->kw - 1) * w->dw;
    const uint8_t *img = in + n * w->ih * w->iw * w->c;
    if (iy0 >= 0 && ix0 >= 0 && iy1 < w->ih && ix1 < w->iw) {
        const uint8_t *corner = img + (iy0 * w->iw + ix0) * w->c;
        for (int64_t t = 0; t < w->kh * w->kw; t++) taps[t] = corner + offsets[t];
        return;
    }
    for (int64_t ky = 0; ky < w->kh; ky++) {
        int64_t iy = iy0 + ky * w->dh;
        for (int64_t kx = 0; kx < w->kw; kx++) {
            int64_t ix = ix0 + kx * w->dw;
            int inside = iy >= 0 && iy < w->ih && ix >= 0 && ix < w->iw;
            taps[ky * w->kw + kx] = inside ? img + (iy * w->iw + ix) * w->c : zero_row;
        }
    }
}

#if LB_HAVE_NEON
void lb_dwconv_neon(const lb_ctx *ctx, const lb_dwconv *p, const uint8_t *in, void *out,
                    const int64_t *offsets);
#endif
#if LB_HAVE_AVX512
void lb_im2col_row_u8_avx512(const lb_window *w, int64_t cg, int64_t kp, const uint8_t *in,
                             uint8_t pad, uint8_t *out, int64_t oy);
void lb_dwconv_avx512(const lb_ctx *ctx, const lb_dwconv *p, const uint8_t *in, void *out,
                      const int64_t *offsets);
#endif

/* lb_parallel_for for a job touching about `bytes` bytes in all: below LB_INLINE_BYTES the
 * caller runs every task itself (waking workers and sharing the task counter between cores
 * costs more than such a job: MNISTNet's pools and layout change). */
#define LB_INLINE_BYTES 32768
void lb_parallel_for_sized(const lb_ctx *ctx, int64_t ntasks, int64_t bytes, lb_task_fn fn,
                           void *arg);

#endif /* LOWBIT_RT_INTERNAL_H */

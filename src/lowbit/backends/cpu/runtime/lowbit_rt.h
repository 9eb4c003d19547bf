/* lowbit's CPU kernel library: the hand-written half of the compiled backend.
 *
 * Generated model code (one C file per graph) calls these kernels with pointers into one arena
 * and into one blob of prepacked constants. The library keeps no global mutable state: the
 * instruction set and the thread pool live in an `lb_ctx` that the caller creates once, so two
 * models, or two instances of one, can run side by side.
 *
 * Exactness: every integer kernel computes what lowbit's reference interpreter computes, bit
 * for bit (lowbit/backends/reference is the specification). Requantization executes the integer
 * expressions of lowbit.numerics.fixed_point; the parameters are derived in Python by the same
 * functions the reference calls and reach the kernels as arrays.
 *
 * Storage conventions of the generated code:
 *   - 8-bit quantized tensors are stored as uint8. An int8 code q is stored as q + 128 (its bits
 *     XOR 0x80) with zero point z + 128, so every 8-bit kernel reads unsigned bytes (what
 *     `vpdpbusd` multiplies) and results are unchanged: only q - z ever enters arithmetic.
 *   - 16-bit quantized tensors are stored as int16 / uint16 codes.
 *   - 4-D activations between convolutions are NHWC; the generated code converts at the edges.
 */
#ifndef LOWBIT_RT_H
#define LOWBIT_RT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define LB_API __declspec(dllexport)
#else
#define LB_API __attribute__((visibility("default")))
#endif

/* ---- instruction sets and the execution context ---------------------------------------- */

enum lb_isa {
    LB_ISA_SCALAR = 0,     /* portable C */
    LB_ISA_AVX2 = 1,       /* x86-64 AVX2: int8 widened to int16, vpmaddwd */
    LB_ISA_AVX512VNNI = 2, /* x86-64 AVX-512 F/BW/VL + VNNI: vpdpbusd, vpdpwssd */
    LB_ISA_NEON = 3,       /* 64-bit ARM Advanced SIMD: int8 widened to int16, smlal */
    LB_ISA_DOTPROD = 4,    /* 64-bit ARM with the dot-product instructions (ARMv8.2 sdot) */
    LB_ISA_AMX = 5,        /* x86-64 AVX-512 VNNI plus AMX-INT8 tiles (tdpbusd) for the int8
                            * products: a context of this ISA has isa LB_ISA_AVX512VNNI and amx 1 */
    LB_ISA_COUNT = 6
};

/* The best instruction set this CPU and OS support among those this build of the library has
 * kernels for (x86-64: cpuid + xgetbv, the OS must save the vector registers' state; 64-bit
 * ARM: NEON always, sdot from the kernel's hardware capabilities). */
LB_API int lb_detect_isa(void);
/* Whether contexts of instruction set `isa` can run here (scalar always). */
LB_API int lb_isa_supported(int isa);
LB_API const char *lb_isa_name(int isa);
/* The ISA named by `name` ("scalar", "avx2", "vnni", "neon", "dotprod", "amx"), or -1. */
LB_API int lb_isa_from_name(const char *name);

typedef struct lb_pool lb_pool;

typedef struct lb_ctx {
    int isa;       /* an lb_isa this CPU supports, never LB_ISA_AMX (see amx) */
    int threads;   /* >= 1; the calling thread is one of them */
    lb_pool *pool; /* NULL when threads == 1 */
    int amx;       /* 1: the int8 products use AMX tiles (isa is then LB_ISA_AVX512VNNI, which
                    * every other kernel runs); 0 in a context created with another ISA */
} lb_ctx;

/* A context running kernels on `threads` threads (the caller plus threads - 1 workers waiting
 * on a condition variable) with instruction set `isa` (the best supported one when `isa` is
 * not: check lb_isa_supported first to refuse instead; LB_ISA_AMX gives isa LB_ISA_AVX512VNNI
 * and amx 1). NULL on failure. With one thread a
 * context needs no allocation and no thread: `lb_ctx ctx = {isa, 1, NULL, 0};` works as well (without AMX). */
LB_API lb_ctx *lb_ctx_create(int threads, int isa);
LB_API void lb_ctx_destroy(lb_ctx *ctx);

/* fn(arg, task, worker) for task in [0, ntasks), spread over the context's threads; returns
 * when all are done. Tasks are handed out dynamically (an atomic counter), so a thread slowed
 * down by another process does not hold the others back. `worker` is in [0, threads). */
typedef void (*lb_task_fn)(void *arg, int64_t task, int worker);
LB_API void lb_parallel_for(const lb_ctx *ctx, int64_t ntasks, lb_task_fn fn, void *arg);

/* Debug counters of the thread pool, per step of generated code (zero cost unless attached):
 * lb_pool_stats_attach points the pool at `counters` (nsteps * LB_POOL_STATS_FIELDS int64,
 * added to, never cleared; NULL detaches; returns 1 when attached, 0 without a pool), and
 * generated code with step timing calls lb_pool_step(ctx, i) before step i and
 * lb_pool_step(ctx, -1) after it. Per step: jobs run on the pool, their tasks, the tasks the
 * caller ran itself, jobs whose tasks the caller ran all (no worker took one), wall ns from
 * each job's start to its end, wall ns the caller waited at the job's end after its own
 * tasks, jobs run inline on the caller (one task or too small to split), the step's wall ns,
 * wall ns the workers spent in its tasks, wall ns from each job's start to a worker's first
 * claim (jobs a worker joined), jobs started while a worker slept (woken by a futex), and
 * wall ns from the workers' last task end to the job's end (jobs a worker joined). */
enum {
    LB_PS_JOBS, LB_PS_TASKS, LB_PS_CALLER_TASKS, LB_PS_ALONE_JOBS, LB_PS_JOB_NS, LB_PS_WAIT_NS,
    LB_PS_INLINE, LB_PS_STEP_NS, LB_PS_WORKER_NS, LB_PS_JOIN_NS, LB_PS_ASLEEP_JOBS,
    LB_PS_WORKER_TAIL_NS, LB_POOL_STATS_FIELDS
};
LB_API int lb_pool_stats_attach(const lb_ctx *ctx, int64_t *counters, int64_t nsteps);
LB_API void lb_pool_step(const lb_ctx *ctx, int64_t step);

/* CPU time of the process in seconds (per-step profiles of generated code: on one thread, the
 * work of each step even when other processes share the cores). */
LB_API double lb_seconds(void);

/* ---- requantization -------------------------------------------------------------------- */

enum lb_rq_method {
    LB_RQ_Q31 = 0,      /* p0 multiplier, p1 left shift, p2 right shift (fixed_point "q31") */
    LB_RQ_PRESCALE = 1, /* p0 pre, p1 scale, p2 post, p3 clip (fixed_point "prescale") */
    LB_RQ_FLOAT32 = 2,  /* ONNX Runtime's QLinear*: rint(clamp(float32(acc) * fmul)) */
    LB_RQ_DEQUANT = 3   /* float output: float32(double(acc) * dscale), then fclamp */
};

/* Everything that turns an int32 accumulator of output channel c into a stored value. Every
 * array has one entry per channel, padded with zeros to a multiple of 16 entries so that
 * vector loads at the last channels stay inside the array. */
typedef struct lb_requant {
    int32_t method;
    int32_t qmin, qmax; /* output range, narrowed by a fused Relu/Clip */
    const int32_t *p0, *p1, *p2, *p3;
    const int32_t *zero_point; /* output zero point per channel (stored domain) */
    const float *fmul;         /* LB_RQ_FLOAT32 */
    const double *dscale;      /* LB_RQ_DEQUANT */
    float fmin, fmax;          /* LB_RQ_DEQUANT: fused clip of the float result */
} lb_requant;

/* The exact integer expression of one method on one value (scalar; the vector kernels compute
 * the same). Returns the stored output value as int32, or for LB_RQ_DEQUANT nothing: use
 * lb_dequant_one. */
LB_API int32_t lb_requant_one(const lb_requant *rq, int64_t c, int32_t acc);
LB_API float lb_dequant_one(const lb_requant *rq, int64_t c, int32_t acc);

/* Elementwise requantization of int32 accumulators with per-tensor parameters (index 0),
 * storing `out_type` values. */
LB_API void lb_requant_i32(const lb_ctx *ctx, int64_t n, const int32_t *acc,
                           const lb_requant *rq, int32_t out_type, void *out);

/* ---- element types of stored tensors --------------------------------------------------- */

enum lb_type {
    LB_U8 = 0,  /* uint8 codes, or int8 codes + 128 */
    LB_I16 = 1,
    LB_U16 = 2,
    LB_F32 = 3,
    LB_I32 = 4,
    LB_I8 = 5,  /* raw int8 (graph inputs and outputs only) */
    LB_I64 = 6,
    LB_F64 = 7,
    LB_BOOL = 8
};

/* ---- int8 products --------------------------------------------------------------------- */

/* Weights of a product packed for the micro-kernels: for each block of 16 output channels,
 * for each group of 4 reduction steps, 16 channels x 4 int8 values (64 bytes):
 *   data[((nb * k4) + g) * 64 + j * 4 + t] = W[nb * 16 + j][g * 4 + t]
 * zero beyond N and K. Unsigned weights are stored minus 128 (their zero point too), so the
 * packed values are always int8. */
typedef struct lb_packed_b {
    const int8_t *data;
    int64_t n, k, k4; /* k4 = ceil(k / 4) */
} lb_packed_b;

/* The per-channel constant folded into the accumulator, the optional row-sum correction, the
 * requantization, and an optional residual Add fused after it. */
typedef struct lb_add_params {
    /* lowbit's quantized Add (backends/reference/kernels/int_combine.py), with the first
     * operand the value just computed and the second read from `residual`:
     *   a_i = q31((q_i - z_i) << shift, m_i, l_i, r_i);  y = requant(a_1 + a_2) */
    int32_t shift;
    int32_t z1, m1, l1, r1;
    int32_t z2, m2, l2, r2;
    int32_t sub; /* 1: y = requant(a_1 - a_2) (Sub) */
    lb_requant out;
} lb_add_params;

/* An elementwise function of each requantized code, applied before it is stored: a chain of
 * one-input quantized ops (a lookup table) or a quantized HardSwish computed in float32,
 * and/or a quantized Mul by a per-channel constant that read the product's result alone,
 * fused by the code generator (codegen/post_stage.py).
 * With y the code the epilogue's rq gives (and its residual Add, if any):
 *   t = table ? table[y - table_min] : y      (entries of table_type: LB_U8, LB_I16, LB_U16;
 *                                               the table is readable 4 bytes past its end)
 *   t = hsw ? lb_hsw(y) : t                   (int_activation.HardSwishParams, in float32:
 *         v = (float)(y - hsw_zx); h = min(max(v * hsw_c1 + 0.5f, 0), 1);
 *         t = clamp(rint((v * h) * hsw_c2 + hsw_c3) + hsw_zy, hsw_qmin, hsw_qmax),
 *         every operation rounded to nearest even, in this order, no FMA; zero points and
 *         bounds in stored codes; table is NULL then)
 *   out = mul ? requant(rq, 0, (t - z) * mul[c]) : t      (lowbit's quantized Mul, rq per
 *                                                          tensor, |(t - z) * mul[c]| < 2**31)
 * stored as the epilogue's out_type. */
typedef struct lb_post {
    const void *table;
    int32_t table_type, table_min;
    const int32_t *mul; /* NULL, or the constant's centred codes per channel (padded to 16) */
    int32_t z;
    lb_requant rq;
    /* appended (set by name): the float32 HardSwish instead of a table */
    int32_t hsw, hsw_zx, hsw_zy, hsw_qmin, hsw_qmax;
    float hsw_c1, hsw_c2, hsw_c3;
} lb_post;

typedef struct lb_epilogue {
    const int32_t *col_offset; /* bias and zero-point corrections, wrapped to int32 */
    const int32_t *col_zb;     /* weight zero point per channel for the row-sum term, or NULL */
    lb_requant rq;
    int32_t out_type;          /* LB_U8, LB_I16, LB_U16, LB_F32, LB_I32 (raw accumulator) */
    const uint8_t *residual;   /* NULL, or the Add's second operand (u8, same layout as out) */
    int64_t ld_residual;
    const lb_add_params *add;
    /* NULL, or the bounded form of a prescale requantization into uint8 codes, which the
     * AVX-512 VNNI kernels use instead of rq (same results; packing.py bounded_arrays derives
     * it): per block of 16 channels, 64 int32: lo[16], hi[16], add[16], cst[16], and
     *   y = ((clamp(acc + add, lo, hi) >> pre) * scale + cst) >> post
     * with pre, scale, post from rq (p0, p1, p2) and acc the raw sum before col_offset: no
     * clip, zero point or final clamp (the bounds are where the codes saturate). Only set
     * without col_zb or groups (with a residual only together with residual_split). */
    const int32_t *bounded;
    const lb_post *post; /* NULL, or a function of each code before it is stored (lb_post) */
    /* NULL, or (with `bounded`) the residual Add/Sub of `add` between 8-bit codes in a form
     * the AVX-512 VNNI product kernels use instead (same results; packing.py residual_split
     * derives and checks it): 24 int32, for each operand z, mh, ml, k, rk, half, neg, r, then
     * sub, lo, hi, ad, cst, pre, scale, post. With q an operand's code (the product's from
     * `bounded`, the residual's) and d = q - z:
     *   h = d * mh + ((d * ml + rk) >> k);  a = (h + half + ((h >> 31) & neg)) >> r
     *   s = a_1 + a_2 (sub: a_1 - a_2);  out = ((clamp(s + ad, lo, hi) >> pre) * scale + cst) >> post */
    const int32_t *residual_split;
} lb_epilogue;

/* C[m, n] = epilogue(sum_k A[m, k] * B[k, n]) for m < M, n < N, with A uint8 (row stride lda)
 * and B packed. `row_sums` is scratch of M int32 when ep->col_zb is set (else NULL).
 * The accumulator is exact: requires |sum + col_offset - zb * row_sum| < 2**31, which the
 * code generator checks statically (else it uses lb_qgemm_wide). */
LB_API void lb_qgemm(const lb_ctx *ctx, int64_t M, int64_t N, int64_t K, const uint8_t *A,
                     int64_t lda, const lb_packed_b *B, const lb_epilogue *ep, void *C,
                     int64_t ldc, int32_t *row_sums);

/* Pack a row-major int8 matrix W[n, k] (row stride ldw) into `out` (lb_packed_b layout,
 * ceil(n/16) * k4 * 64 bytes); with `flip`, W holds uint8 values and is stored minus 128.
 * Used at run time for products of two activations; constants are packed in Python. */
LB_API void lb_pack_b(int64_t n, int64_t k, const uint8_t *W, int64_t ldw, int64_t ldk,
                      int flip, int8_t *out);

/* The exact product for operands that the fast path cannot take (16-bit activations or
 * weights, accumulators that may leave int32): int64 accumulation, then
 * acc = saturate_int32(round_shift(sum + bias, narrow_shift)) as the reference's
 * narrow_accumulator, then the requantization.
 *   A: type a_type (LB_U8 stored codes, LB_I16, LB_U16), row stride lda, zero point za
 *   W: row-major [N, K] int32 values already centred on their zero points
 *   bias: int64 per channel or NULL */
typedef struct lb_wide_params {
    int32_t a_type, out_type;
    int32_t za;
    int32_t narrow_shift;
    const int32_t *w;   /* N x K centred weights */
    const int64_t *bias;
    lb_requant rq;
} lb_wide_params;

LB_API void lb_qgemm_wide(const lb_ctx *ctx, int64_t M, int64_t N, int64_t K, const void *A,
                          int64_t lda, const lb_wide_params *p, void *C, int64_t ldc);


/* ---- data movement --------------------------------------------------------------------- */

/* DepthToSpace (DCR) of an NHWC image: in [n][h][w][b * b * m], out [n][h * b][w * b][m] with
 * out[., y * b + i, x * b + j, c] = in[., y, x, (i * b + j) * m + c]; elements of esize bytes. */
LB_API void lb_depth_to_space(const lb_ctx *ctx, int64_t n, int64_t h, int64_t w, int64_t b,
                              int64_t m, int esize, const void *in, void *out);

/* out[i0, ..., i{nd-1}] = in[sum_j i_j * in_strides[j]] for a contiguous `out` of `shape`
 * (nd <= 8; strides in elements of `esize` bytes). Transposes, layout changes, slices. */
LB_API void lb_permute(const lb_ctx *ctx, int nd, const int64_t *shape, const int64_t *in_strides,
                       int esize, const void *in, void *out);

LB_API void lb_copy(const lb_ctx *ctx, int64_t nbytes, const void *in, void *out);
/* rows x row_bytes from `in` (rows in_stride bytes apart) to `out` (out_stride apart):
 * Concat, Slice, Split along an outer axis. */
LB_API void lb_copy_rows(const lb_ctx *ctx, int64_t rows, int64_t row_bytes, const void *in,
                         int64_t in_stride, void *out, int64_t out_stride);

/* Convolution geometry, shared by the convolution and pooling kernels: NHWC input
 * [n, ih, iw, c] (row stride of a pixel: `c` elements), output [n, oh, ow, ...]. */
typedef struct lb_window {
    int64_t n, ih, iw, c;
    int64_t oh, ow;
    int64_t kh, kw, sh, sw, dh, dw, pt, pl; /* kernel, strides, dilations, top/left pads */
} lb_window;

/* im2col of one image of a uint8 NHWC input for a grouped convolution: row p = oh*ow + ow of
 * `out` holds, for each group g, kp bytes: for each kernel tap the group's cg channels,
 *   out[p * (groups * kp) + g * kp + tap * cg + ci]
 * then `pad` up to kp (a multiple of 4 >= taps * cg: the product then has no K tail). Positions
 * outside the image are `pad` too (the input's zero point: they add nothing). The float
 * version has kp = taps * cg and pads with 0. */
LB_API void lb_im2col_u8(const lb_ctx *ctx, const lb_window *w, int64_t groups, int64_t cg,
                         int64_t kp, const uint8_t *in, uint8_t pad, uint8_t *out);
LB_API void lb_im2col_f32(const lb_ctx *ctx, const lb_window *w, int64_t groups, int64_t cg,
                          const float *in, float *out);

/* ---- quantize / dequantize / requantize / tables --------------------------------------- */

/* Per-channel parameters of an elementwise op run along one axis: element i has channel
 * (i / inner) % channels (channels == 1: per tensor). */
typedef struct lb_axis {
    int64_t channels, inner;
} lb_axis;

/* y = clamp(r + zp, qmin, qmax) with r = rint(float32(x) / scale), NaN giving r = nanv and
 * -inf / +inf r = ninf / pinf, stored as out_type (zp, qmin, qmax in the stored domain: + 128
 * for int8 as uint8). lowbit.numerics.arith.quantize: nanv 0, infinities the type's range
 * (before the zero point); ONNX QuantizeLinear: NaN and -inf to qmin, +inf to qmax. */
LB_API void lb_quantize_f32(const lb_ctx *ctx, int64_t n, const float *x, lb_axis ax,
                            const float *scale, const int32_t *zp, int32_t qmin, int32_t qmax,
                            float nanv, float ninf, float pinf, int32_t out_type, void *out);
/* The same from an NCHW float input [n, c, hw] into an NHWC output [n, hw, c] (the layout of
 * the convolution that reads it); parameters per tensor or per channel c. */
LB_API void lb_quantize_f32_nhwc(const lb_ctx *ctx, int64_t n, int64_t c, int64_t hw,
                                 const float *x, int per_channel, const float *scale,
                                 const int32_t *zp, int32_t qmin, int32_t qmax, float nanv,
                                 float ninf, float pinf, int32_t out_type, void *out);
/* y = float32(q - zp) * scale (lowbit.numerics.arith.dequantize) from in_type codes. */
LB_API void lb_dequantize(const lb_ctx *ctx, int64_t n, const void *q, int32_t in_type,
                          lb_axis ax, const float *scale, const int32_t *zp, float *out);
/* y = requant(q - zin) with per-channel rq along ax (Requantize, Relu/Clip on new types,
 * Concat inputs). */
LB_API void lb_requantize(const lb_ctx *ctx, int64_t n, const void *q, int32_t in_type,
                          lb_axis ax, const int32_t *zin, const lb_requant *rq,
                          int32_t out_type, void *out);
/* y = table[q - qmin_in]: 8-bit inputs (256 entries) or 16-bit (65536). */
LB_API void lb_lookup(const lb_ctx *ctx, int64_t n, const void *q, int32_t in_type,
                      int32_t in_min, const void *table, int32_t out_type, void *out);
/* out[r, c] = post(x[r, c]) for rows x channels codes, channels last (lb_post: its table or
 * float32 HardSwish, then its per-channel Mul), from 8- or 16-bit codes of in_type. */
LB_API void lb_post_map(const lb_ctx *ctx, int64_t rows, int64_t channels, const void *x,
                        int32_t in_type, const lb_post *post, int32_t out_type, void *out);
/* y = clamp(q, lo, hi) on in_type codes (Relu and Clip with unchanged types). */
LB_API void lb_clamp(const lb_ctx *ctx, int64_t n, const void *q, int32_t type, int32_t lo,
                     int32_t hi, void *out);

/* ---- quantized elementwise with broadcasting ------------------------------------------- */

/* An n-d iteration over a contiguous output of `shape` (nd <= 6) with the operands' element
 * strides (0 along broadcast axes). */
typedef struct lb_bcast {
    int nd;
    int64_t shape[6];
    int64_t sa[6], sb[6];
} lb_bcast;

enum lb_qbinary_op { LB_QADD = 0, LB_QSUB = 1, LB_QMUL = 2, LB_QTABLE2 = 3 };

/* lowbit's quantized Add/Sub (int_combine.add: both operands aligned by q31 at 2**shift, then
 * requantized) and Mul (product of centred codes requantized), per tensor. */
typedef struct lb_qbinary {
    int32_t op;
    int32_t a_type, b_type, out_type; /* LB_U8, LB_I16, LB_U16 */
    lb_add_params p; /* Add/Sub: everything; Mul: z1, z2 and out */
    int32_t narrow;  /* Mul: |(a - z1)(b - z2)| < 2**31 for every code (vector path) */
    const uint8_t *table; /* LB_QTABLE2: out = table[a * 256 + b] (8-bit operands) */
    /* Add/Sub of 8-bit codes (all three types LB_U8) when lin_on: with t the code of the
     * tabled operand (b when lin_swap, else a) and u the other's,
     *   out = clamp(Q[t] + ((R[t] + lin_c * u) >> lin_s), lin_lo, lin_hi)
     * (Q = lin_table[0..255], R = lin_table[256..511], 0 <= R < 2**lin_s <= 2**14), integers
     * the compiler proved equal to p's expressions for all 65536 code pairs
     * (codegen/add_linear.py) */
    int32_t lin_on, lin_swap, lin_c, lin_s, lin_lo, lin_hi;
    const int16_t *lin_table;
} lb_qbinary;

LB_API void lb_qbinary_run(const lb_ctx *ctx, const lb_bcast *bc, const lb_qbinary *op,
                           const void *a, const void *b, void *out);

/* The residual squeeze-excitation of 8-bit NHWC codes (PP-OCR's RSE blocks): y = Add(x, Mul(x,
 * s)) with s one code per image and channel ([N, C, 1, 1]), the Mul and the Add each exactly as
 * lb_qbinary_run computes it (every type LB_U8; `mul` has a = x and b = s, or the reverse with
 * mul_x_second; `add` a = x and b = the Mul's code, or the reverse with add_x_second). For
 * each image the 256 results of each channel are computed by those same integer expressions
 * into `tables` (c * 256 + 64 bytes of scratch), then every code is looked up: the Mul's codes
 * are never stored and one pass over x replaces two. */
typedef struct lb_qse {
    lb_qbinary mul, add;
    int32_t mul_x_second, add_x_second;
} lb_qse;

LB_API void lb_qse_residual(const lb_ctx *ctx, const lb_qse *op, int64_t n, int64_t hw,
                            int64_t c, const uint8_t *x, const uint8_t *s, uint8_t *out,
                            uint8_t *tables);

/* ---- pooling ---------------------------------------------------------------------------- */

/* Max pooling of NHWC codes or floats (type LB_U8, LB_I16, LB_U16, LB_F32); padded positions
 * are skipped. */
LB_API void lb_maxpool(const lb_ctx *ctx, const lb_window *w, int32_t type, const void *in,
                       void *out);
/* Quantized average over windows of NHWC codes: acc = sum(q - zin) over the window's elements
 * inside the image (plus padded ones when count_pad, which add 0), then requantized with the
 * parameters for that element count: rq_for_count[count - 1] (int_pool: M = s_x / (s_y n)).
 * Global average pooling (one window covering the whole image, no padding) has one count:
 * rq_for_count[0] is its requantization. */
LB_API void lb_qavgpool(const lb_ctx *ctx, const lb_window *w, int32_t in_type, int32_t zin,
                        int count_pad, const lb_requant *rq_for_count, int32_t out_type,
                        const void *in, void *out);

/* ---- convolutions ----------------------------------------------------------------------- */

/* A quantized convolution of NHWC uint8 activations: groups x (cg input channels -> mg output
 * channels), weights packed per group (`packed[g]`: K = taps * cg in (tap, channel) order,
 * rounded up to a multiple of 4 with zero weights unless pointwise), the epilogue per output
 * channel (its arrays indexed by the global output channel). `scratch`: im2col rows of one
 * image (oh*ow * groups*K bytes) unless the convolution is pointwise (1x1, stride 1, no
 * padding), then NULL; `row_sums` as lb_qgemm's (oh*ow int32, or n*oh*ow when pointwise). */
typedef struct lb_qconv {
    lb_window win;
    int64_t groups, cg, mg;
    uint8_t pad; /* input zero point (stored) */
    const lb_packed_b *packed;
    lb_epilogue ep;
} lb_qconv;

LB_API void lb_qconv_run(const lb_ctx *ctx, const lb_qconv *p, const uint8_t *in, void *out,
                         uint8_t *scratch, int32_t *row_sums);

/* Depthwise convolution (one input channel per output channel) of NHWC uint8 activations.
 * Weights w_c[tap] - zw_c as int16 in two layouts: `w_plain` [taps][c], and for the AVX-512
 * kernel `w_pairs` (taps rounded up to even, per 32 channels per tap pair, as packing.py
 * writes). `zero_row`: c bytes equal to the input zero point (padded taps read it).
 * The epilogue's col_offset holds bias - zx * sum_taps(w_c - zw_c). */
typedef struct lb_dwconv {
    lb_window win;
    const int16_t *w_plain, *w_pairs;
    const uint8_t *zero_row;
    lb_epilogue ep;
    const int8_t *w_quads; /* or NULL: int8 weights for the AVX-512 VNNI kernel, per 32
                            * channels per 4 taps (packing.py quad_weights) */
    /* The order of the taps in w_quads (ops_quant.py quad_taps):
     *   LB_DW_TAPS (0): row-major taps, 4 at a time;
     *   LB_DW_COLUMNS (1): kernels of at most 8 rows: for each kernel column, its rows' taps
     *     in groups of 4 rows (one group for kh <= 4, else two; zero weights past kh). The
     *     kernel then interleaves each input pixel's rows once per output row instead of once
     *     per 4 taps of each output pixel (stride <= 2, dilation <= 2, kernel width <= 8). */
    int32_t quad_order;
} lb_dwconv;

enum lb_dw_order { LB_DW_TAPS = 0, LB_DW_COLUMNS = 1 };

LB_API void lb_dwconv_run(const lb_ctx *ctx, const lb_dwconv *p, const uint8_t *in, void *out);

/* The exact convolution for operands the int8 kernels cannot take (16-bit activations or
 * weights, accumulators that may leave int32): a direct loop with int64 accumulation, then
 * as lb_qgemm_wide (narrow shift, saturation to int32, requantization; float results from
 * the unshifted accumulator). Weights centred, [groups * mg][taps][cg] as int32; padded taps
 * add nothing. */
typedef struct lb_qconv_wide {
    lb_window win;
    int64_t groups, cg, mg;
    lb_wide_params p;
} lb_qconv_wide;

LB_API void lb_qconv_wide_run(const lb_ctx *ctx, const lb_qconv_wide *p, const void *in,
                              void *out);

/* 16-bit convolutions (W8A16, W16A8, W16A16) by int16 x int16 products summed in int32
 * (rt_qconv16*.c: vpdpwssd on AVX-512, vpmaddwd on AVX2, portable C). Each input code x
 * becomes a = x (LB_U8 stored codes, LB_I16) or x - 32768 (LB_U16), an int16, with zero point
 * za in the same domain; weights are centred (w - zw) and inside int16. Then
 *   acc = sum_k a_k w_k + offset[m],  offset[m] = bias[m] - za * sum_k w_k   (int64)
 * equals the reference's sum (x - zx)(w - zw) + bias, and is finished as lb_qconv_wide (narrow
 * shift, saturation to int32, requantization; float results from the unshifted acc).
 * `mode` says how the sum stays exact (the code generator proves it from the weights):
 *   LB_C16_INT32: |sum| <= max|a| * max_m sum_k |w_mk| < 2**31, one int32 sum;
 *   LB_C16_SPLIT: a = 256 hi + lo (hi = a >> 8, lo = a & 255), two int32 sums, each < 2**31,
 *     acc = 256 sum_hi + sum_lo + offset in int64 (not depthwise);
 *   LB_C16_INT64: int64 sums (depthwise only).
 * General (depthwise == 0): weights per group, per 16 output channels, per pair of k (k in
 * (tap, channel) order, kp = taps * cg rounded up to even, zero weights past the last
 * channel): 16 x 2 int16; `scratch`: oh * ow * groups * kp int16 (im2col of one image),
 * NULL where `direct` (the generator's choice: a 1x1 stride-1 unpadded convolution of one
 * group of LB_I16 codes with cg even, whose input rows are the product's rows, read in place).
 * Depthwise (cg == mg == 1): weights [taps][c]; `zero_row`: c raw input codes equal to the
 * zero point (padded taps read it); `scratch` NULL. */
typedef struct lb_qconv16 {
    lb_window win;
    int64_t groups, cg, mg, kp;
    int32_t a_type, out_type;
    int32_t za, narrow_shift;
    int32_t mode, depthwise;
    const int16_t *w;
    const int64_t *offset;
    const void *zero_row;
    lb_requant rq;
    int32_t direct;
} lb_qconv16;

enum lb_c16_mode { LB_C16_INT32 = 0, LB_C16_SPLIT = 1, LB_C16_INT64 = 2 };

LB_API void lb_qconv16_run(const lb_ctx *ctx, const lb_qconv16 *p, const void *in, void *out,
                           int16_t *scratch);

/* A batch of products of two activations, C_b = A_b B_b (A_b [M, K], B_b [K, N], row-major,
 * b-th matrices `*_bstride` elements apart, 0 to reuse one): attention's products. Each B_b is
 * packed at run time (`packed`: ceil(N/16) * ceil(K/4) * 64 bytes), its column sums fold the
 * zero points into `offsets` (N padded to 16, int32), then lb_qgemm with `ep` (whose
 * col_offset is replaced). `flip`: B holds uint8 stored codes, packed as code ^ 0x80 with
 * zero point zb (already moved by -128). With `wide` (16-bit operands, or sums that may leave
 * int32) every element is summed in int64 instead, as lb_qgemm_wide: the codes minus za and
 * zb_raw, then the narrow shift and the requantization of ep.rq. */
typedef struct lb_qmatmul {
    int64_t batch, M, N, K;
    int64_t a_bstride, b_bstride, c_bstride;
    int32_t a_type, b_type;
    int32_t flip, za, zb;
    int32_t wide, narrow_shift, zb_raw;
    lb_epilogue ep;
} lb_qmatmul;

LB_API void lb_qmatmul_run(const lb_ctx *ctx, const lb_qmatmul *p, const void *A, const void *B,
                           void *C, int8_t *packed, int32_t *offsets, int32_t *row_sums);

/* ---- float kernels ---------------------------------------------------------------------- */

/* C[m, n] = clamp(sum_k A[m, k] * B[n, k] + bias[n], lo, hi), products and sums in double,
 * rounded once to float (as the reference). B is row-major [n, k] (row stride ldb), A row
 * stride lda, C row stride ldc. bias may be NULL. */
LB_API void lb_fgemm(const lb_ctx *ctx, int64_t M, int64_t N, int64_t K, const float *A,
                     int64_t lda, const float *B, int64_t ldb, const float *bias, float lo,
                     float hi, float *C, int64_t ldc);

/* The same product as float32 chains: each C[m, n] starts at +0 and takes A[m, k] * B[n, k]
 * for k in order by one float32 fused multiply-add each (fmaf), then the bias by one float32
 * addition, then the clamp; the same bits on every ISA path and thread count. */
LB_API void lb_fgemm_fma(const lb_ctx *ctx, int64_t M, int64_t N, int64_t K, const float *A,
                         int64_t lda, const float *B, int64_t ldb, const float *bias, float lo,
                         float hi, float *C, int64_t ldc);

/* lb_fgemm_fma (the same bits) with B packed once, ahead of the calls: panels of
 * LB_FGEMM_PANEL columns, Bp[(n / P * K + k) * P + n % P] = B[n, k] (P = LB_FGEMM_PANEL),
 * the last panel's columns past N zero. */
#define LB_FGEMM_PANEL 32
LB_API void lb_fgemm_fma_packed(const lb_ctx *ctx, int64_t M, int64_t N, int64_t K,
                                const float *A, int64_t lda, const float *Bp, const float *bias,
                                float lo, float hi, float *C, int64_t ldc);

typedef struct lb_fconv {
    lb_window win;
    int64_t groups, cg, mg;
    const float *w; /* per group [mg][taps * cg] in (tap, channel) order */
    const float *bias;
    float lo, hi;
    int fma; /* products as float32 fused multiply-add chains (lb_fgemm_fma), else in double */
    const float *wp; /* fma, groups == 1, not depthwise: w packed as lb_fgemm_fma_packed's B,
                      * or NULL (packed on every call) */
} lb_fconv;

LB_API void lb_fconv_run(const lb_ctx *ctx, const lb_fconv *p, const float *in, float *out,
                         float *scratch);

/* A batch of float products C_b = A_b B_b of activations (strides as lb_qmatmul's); each B_b
 * is transposed into `scratch` (N * K floats) for lb_fgemm. */
LB_API void lb_fmatmul_run(const lb_ctx *ctx, int64_t batch, int64_t M, int64_t N, int64_t K,
                           const float *A, int64_t a_bstride, const float *B, int64_t b_bstride,
                           float *C, int64_t c_bstride, float *scratch);

/* Elementwise float32 arithmetic with broadcasting (IEEE float32, as numpy computes it). */
enum lb_fbinary_op { LB_FADD = 0, LB_FSUB, LB_FMUL, LB_FDIV, LB_FMAX, LB_FMIN, LB_FPOW };
LB_API void lb_fbinary_run(const lb_ctx *ctx, const lb_bcast *bc, int op, const float *a,
                           const float *b, float *out);

/* One-input float functions, with the reference's formulas (activation.py, unary.py). */
enum lb_funary_op {
    LB_FRELU = 0, LB_FLEAKY, LB_FSIGMOID, LB_FHARDSIGMOID, LB_FHARDSWISH, LB_FTANH, LB_FEXP,
    LB_FLOG, LB_FSQRT, LB_FABS, LB_FNEG, LB_FRECIP, LB_FCLIP, LB_FERF, LB_FGELU, LB_FGELU_TANH,
    LB_FFLOOR, LB_FCEIL, LB_FROUND, LB_FSOFTPLUS, LB_FELU, LB_FIDENTITY
};
LB_API void lb_funary(const lb_ctx *ctx, int64_t n, int op, float alpha, float beta,
                      const float *x, float *out);

/* Means in double, rounded once: of each row of `cols` contiguous values (ReduceMean over
 * trailing axes), or over the pixels of NHWC images per channel (global averages). */
LB_API void lb_fmean_rows(const lb_ctx *ctx, int64_t rows, int64_t cols, const float *x,
                          float *out);
LB_API void lb_fmean_nhwc(const lb_ctx *ctx, int64_t n, int64_t pixels, int64_t c,
                          const float *x, float *out);
/* Float average pooling over NHWC windows: the sum in double divided by the element count
 * (pads counted with count_pad, never ceil_mode's overhang beyond pb/pr). */
LB_API void lb_favgpool(const lb_ctx *ctx, const lb_window *w, int count_pad, int64_t pb,
                        int64_t pr, const float *in, float *out);

/* Nearest-neighbour resizing of NHWC images: out[n, y, x, :] = in[n, iy[y], ix[x], :] (index
 * tables computed by the code generator with the reference's rounding). */
LB_API void lb_resize_nearest(const lb_ctx *ctx, int64_t n, int64_t ih, int64_t iw, int64_t c,
                              int64_t oh, int64_t ow, const int64_t *iy, const int64_t *ix,
                              int esize, const void *in, void *out);

/* BatchNormalization in double as the reference: y = (x - mean[c]) * k[c] + b[c], k = scale /
 * sqrt(var + eps), on NHWC (or any tensor whose channel is innermost: channels c). */
LB_API void lb_fbatchnorm(const lb_ctx *ctx, int64_t rows, int64_t c, const float *x,
                          const double *mean, const double *k, const double *b, float *out);

/* ConvTranspose (group 1) of NHWC floats: each input pixel times the kernel lands at
 * (iy * sh + ky * dh, ix * sw + kx * dw) of a full output of fh x fw; the result is the window
 * of it starting at (by, bx), oh x ow, plus bias: sums in double, rounded once. Weights
 * [taps][c][m], at most 64 taps. */
typedef struct lb_fconvt {
    int64_t n, ih, iw, c, m, kh, kw, sh, sw, dh, dw;
    int64_t fh, fw, by, bx, oh, ow;
    const float *w, *bias;
} lb_fconvt;

LB_API void lb_fconvt_run(const lb_ctx *ctx, const lb_fconvt *p, const float *in, float *out);

/* ---- bundles (rt_bundle.c) ---------------------------------------------------------------
 * A bundle is a model's generated code written to a folder with this library
 * (`lowbit compile MODEL -o DIR`): its header declares NAME_run, which returns one of these. */

enum lb_status {
    LB_OK = 0,
    LB_ERR_ARGUMENT = -1,  /* a NULL context, weights, arena, input or output */
    LB_ERR_BATCH = -2,     /* batch < 1, or not 1 for a model without a batch dimension */
    LB_ERR_ALIGNMENT = -3, /* weights or arena not 64-byte aligned */
    LB_ERR_ISA = -4,       /* the context's instruction set is not the bundle's */
    LB_ERR_WEIGHTS = -5    /* weights of the wrong size or checksum (NAME_check_weights) */
};

LB_API const char *lb_status_text(int status);

/* CRC-32 (IEEE 802.3, as zlib.crc32) of n bytes: bundles check their weights with it. */
LB_API uint32_t lb_crc32(const void *data, size_t n);

/* One input or output of a bundle: a contiguous row-major array. */
typedef struct lb_tensor_info {
    const char *name;
    int32_t type;          /* enum lb_type; LB_I8 is raw int8 */
    int32_t rank;
    int64_t shape[8];      /* -1: the batch size given to NAME_run */
    int32_t quantized;     /* 1: real = scale * (q - zero_point) */
    int32_t axis;          /* -1: one scale and zero point; else the axis they run along */
    int64_t channels;      /* entries of scale and zero_point (0 when not quantized) */
    const float *scale;
    const int32_t *zero_point;
} lb_tensor_info;

#ifdef __cplusplus
}
#endif

#include "lowbit_rt_tf.h" /* dynamic quantization and transformer ops */

#endif /* LOWBIT_RT_H */

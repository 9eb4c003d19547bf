/* lowbit's CPU kernel library, part two: dynamic quantization and the float ops of
 * transformer encoders (included by lowbit_rt.h).
 *
 * Exactness: integer results equal the reference interpreter's; float results are the same
 * IEEE operations in the same order as the reference's definitions
 * (lowbit/numerics/dynamic_params.py, lowbit/numerics/elementary.py), so they are bit-identical
 * too, on every instruction set (the library is compiled with -ffp-contract=off).
 */
#ifndef LOWBIT_RT_TF_H
#define LOWBIT_RT_TF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- dynamic quantization -------------------------------------------------------------- *
 * lowbit.numerics.dynamic_params, per slice of float32 values (NaN counts as 0 in the range
 * and gets the zero point as its code):
 *   asymmetric: lo = min(min x, 0), hi = max(max x, 0), scale = hi == lo ? 1 : (hi - lo) / qmax,
 *               zero = rint(clamp(0 - lo / scale, 0, qmax)), q = clamp(rint(x / scale) + zero,
 *               0, qmax) as uint8
 *   symmetric:  m = max |x|, scale = m == 0 ? 1 : m / qmax, zero = 0,
 *               q = clamp(rint(x / scale), -qmax, qmax) as int8
 * with x replaced by float32(x / channel_scale[k]) when a channel scale is given. */

/* Slices along rows: `rows` rows of k values (row stride ldx), each cut into groups of `group`
 * values (group >= k: one slice per row; the last group may be shorter). Codes q [rows][k]
 * (stride ldq, uint8 or int8), parameters scale/zero [rows][G] (stride ldp), G = ceil(k /
 * group). Per row, per group, per head or per tensor quantization all take this form once
 * the reduced axes are the trailing ones. */
typedef struct lb_dq_rows {
    int64_t rows, k, group;
    const float *x;
    int64_t ldx;
    const float *channel_scale; /* k divisors, or NULL */
    void *q;
    int64_t ldq;
    float *scale;
    void *zero;
    int64_t ldp;
    int32_t qmax;      /* 255 / 127 (asymmetric), 127 / 63 (symmetric) */
    int32_t symmetric; /* 0: uint8 codes with a zero point; 1: int8 codes, zero point 0 */
} lb_dq_rows;

LB_API void lb_dq_rows_run(const lb_ctx *ctx, const lb_dq_rows *p);

/* Slices along a strided axis: `outer` blocks of [r][c] values (c contiguous), each column cut
 * along r into groups of `group` (group >= r: one slice per column). Codes [outer][r][c],
 * parameters [outer][G][c] (scale, zero contiguous in that order). */
typedef struct lb_dq_cols {
    int64_t outer, r, c, group;
    const float *x;
    void *q;
    float *scale;
    void *zero;
    int32_t qmax, symmetric;
} lb_dq_cols;

LB_API void lb_dq_cols_run(const lb_ctx *ctx, const lb_dq_cols *p);

/* PyTorch's dynamic activation quantization (lowbit TorchDynamicQuantize, rt_torchdq.c): one
 * scale and zero point for all n values, chosen as fbgemm chooses them
 * (lowbit/numerics/torch_params.py), and the uint8 codes. */
typedef struct lb_torch_dq {
    int64_t n;
    const float *x;
    uint8_t *q;
    float *scale;  /* one value */
    uint8_t *zero; /* one value */
    int32_t qmax;  /* 127 (reduce_range) or 255 */
} lb_torch_dq;

LB_API void lb_torch_dq_run(const lb_ctx *ctx, const lb_torch_dq *p);
/* fbgemm's scale (float32) and zero point (float64: an integer, or NaN) from the tensor's
 * min and max (NaN for a tensor holding NaN; +inf and -inf for an empty one). */
LB_API void lb_torch_dq_params(float lo, float hi, int32_t qmax, float *scale, double *zero);
/* PyTorch's erf-form GELU (lowbit TorchGelu, rt_torchgelu.c): y = (x * (erf(x / divisor) +
 * one)) * half, step by step in float32 (erf evaluated in double, as the Erf kernel). */
LB_API void lb_torch_gelu(const lb_ctx *ctx, int64_t n, const float *x, float divisor, float one,
                          float half, float *y);

/* ---- dynamic products ------------------------------------------------------------------ *
 * lowbit DynamicMatMul: Y[m, n] from 8-bit codes A[m, k] (zero point za and scale sa per row
 * and group of K) and B[k, n] (zero point zb and scale sb per group and column):
 *   acc_j = sum over group j of (a - za)(b - zb)                  exact, int32
 *   grouped (group > 0): y = 0; y = y + (float32(acc_j) * sb_j) * sa_j for each j   (float32)
 *   whole K (group = 0): y = float32(double(acc) * (double(sa) * double(sb)))
 * then y = y + add[0], y + add[1], y + add[2] (float32, in order: a bias per column, or an
 * element of a matrix such as a residual).
 *
 * B is packed: codes as int8 in the lb_packed_b layout (uint8 codes minus 128, zero points
 * too), K padded with zeros to whole groups of 4; per block of 16 columns and group j:
 *   scale[(nb * G + j) * 16 + i]  sb of column nb*16+i (float)
 *   corr[(nb * G + j) * 16 + i]   grouped: (int16)(sum_k b - len_j * zb) | (int16)zb << 16
 *                                 whole K: sum_k b (int32), with zb in `zero`
 *   zero[nb * 16 + i]             whole K: zb (int32, int8 range)
 * With a grouped B, both correction terms fit one 16-bit multiply-add:
 *   acc_j = sum a b + (-za) (sum b - len zb) + (-ra) zb,   ra = sum over group j of a. */
typedef struct lb_dmm_b {
    const int8_t *data;
    int64_t n, k, k4; /* k4 = ceil(k / 4): 4-byte steps of each 16-column block */
    const float *scale;
    const int32_t *corr;
    const int32_t *zero;
} lb_dmm_b;

/* One float addition after the product: v[m * ld + n] (ld = 0: one value per column). */
typedef struct lb_fadd {
    const float *v;
    int64_t ld, batch; /* row stride and batch stride (elements) */
} lb_fadd;

/* ---- operations on whole rows --------------------------------------------------------- *
 * A chain applied to rows of n float32 values held in a buffer, in order: the ops a code
 * generator fuses after a product (or after a LayerNorm) so that each row is read once. Row
 * m of an output lives at out + m * ld. */
enum lb_rowop_kind {
    LB_ROW_ADD_VEC = 0, /* v = v + a[n] */
    LB_ROW_ADD_ROWS,    /* v = v + a[m * ld + n] */
    LB_ROW_MUL_VEC,     /* v = v * a[n] */
    LB_ROW_LAYERNORM,   /* v = layernorm(v) with gamma a, beta b (may be NULL), eps */
    LB_ROW_GELU,        /* v = gelu(v), flag 1: tanh form */
    LB_ROW_STORE,       /* out[m * ld + n] = v (float32) */
    LB_ROW_GATHER,      /* out[m * ld + i] = v[idx[i]] for i < count (float32) */
    LB_ROW_DQ           /* dynamic quantization of v (lb_dq_rows: group `count`, channel scale
                         * b, codes out (ld), scale/zero (ldp), flag 1: symmetric) */
};

typedef struct lb_rowop {
    int32_t kind, flag;
    const float *a, *b;
    const int64_t *idx;
    int64_t count;
    double eps;
    void *out;
    int64_t ld;
    float *scale;
    void *zero;
    int64_t ldp;
    int32_t qmax;
} lb_rowop;

#define LB_MAX_ROWOPS 10
typedef struct lb_rowops {
    int32_t count;
    lb_rowop op[LB_MAX_ROWOPS];
} lb_rowops;

/* The chain on rows x[r * ldx] of n values, r < rows (x is not modified); scratch: rows * n
 * floats (the rows are copied there, then changed in place). */
LB_API void lb_rowops_run(const lb_ctx *ctx, int64_t rows, int64_t n, const float *x,
                          int64_t ldx, const lb_rowops *ops, float *scratch);

typedef struct lb_dmm {
    int64_t batch, M, N, K, group; /* group: 0 (whole K) or a multiple of 4 */
    const uint8_t *a;              /* A codes: row m of batch b at a + b*a_batch + m*lda */
    int64_t lda, a_batch;
    int32_t a_signed;              /* A holds int8 codes (read as code + 128) */
    const float *a_scale;          /* sa of (b, m, j) at [b*p_batch + m*p_row + j*p_group] */
    const void *a_zero;            /* za likewise, uint8 (int8 when a_signed) */
    int64_t p_batch, p_row, p_group;
    const lb_dmm_b *b;             /* B of batch b: b[b * b_step] */
    int64_t b_step;
    lb_fadd add[3];                /* v == NULL: none */
    float *y;                      /* Y[b, m, n] at y + b*y_batch + m*ldy + n */
    int64_t ldy, y_batch;
    const lb_rowops *rows;         /* NULL, or a chain on whole rows of Y (after the adds;
                                    * batch 1; y may then be NULL: rows go through a buffer) */
    uint8_t *scratch;              /* lb_dmm_scratch_bytes(p) bytes, 64-byte aligned */
} lb_dmm;

/* Scratch of lb_dmm_run: batch * M * N floats (the row buffer) when `rows` is set, then
 * batch * M * K bytes (A's codes + 128) when A is signed. */
LB_API int64_t lb_dmm_scratch_bytes(const lb_dmm *p);
LB_API void lb_dmm_run(const lb_ctx *ctx, const lb_dmm *p);

/* Pack run-time codes as the B of a dynamic product: for each of `batch` matrices, codes
 * B[k, n] at src + b*s_batch + k*s_k + n*s_n (uint8, or int8 when `signed_codes`), scale and
 * zero point of (group j, column n) at [b*p_batch + j*p_group + n*p_n]; writes the lb_dmm_b
 * descriptors (out[b]) and their data into `scratch` (lb_dmm_pack_bytes(n, k, group) bytes per
 * matrix, 64-byte aligned). */
LB_API int64_t lb_dmm_pack_bytes(int64_t n, int64_t k, int64_t group);
typedef struct lb_dmm_pack {
    int64_t batch, n, k, group;
    const void *src;
    int64_t s_batch, s_k, s_n;
    int32_t signed_codes;
    const float *scale;
    const void *zero;
    int64_t p_batch, p_group, p_n;
} lb_dmm_pack;

LB_API void lb_dmm_pack_run(const lb_ctx *ctx, const lb_dmm_pack *p, uint8_t *scratch,
                            lb_dmm_b *out);

/* ---- fused attention -------------------------------------------------------------------- *
 * lowbit's dynamic attention, per batch b and head h (queries and keys: the S tokens):
 *   Q, K: dynamic quantization of each token's D values of the head, in groups of `group`
 *         (the graph's Q and K^T DynamicQuantize);
 *   scores = DynamicMatMul(Q, K^T) (groups of `group` along D);
 *   scores = scores * scale (scale_op 1) or scores / scale (scale_op 2), then + mask[b, h, r, c]
 *         (strides mask_s[4], 0 along broadcast axes; mask NULL: none);
 *   P = softmax(scores) per row, quantized per row in groups of `pgroup` keys;
 *   V: quantized per head and column over groups of `vgroup` tokens;
 *   out = DynamicMatMul(P, V) (groups of pgroup == vgroup), written at token row r, columns
 *         h*D .. h*D + D - 1 of out (the heads' transpose back).
 * (All four quantized asymmetric, uint8.) Each step is the separate kernel's (the same IEEE operations in the same order). q, k, v
 * are rows of tokens (row stride ldq, ldk, ldv; batch stride S rows), head h at h*D. The
 * scores of a block of queries stay in a buffer: the S x S scores are never stored. Then the
 * optional row chain runs on the output rows (all heads); with a chain, out may be NULL: the
 * rows then only go through the chain, from a buffer of the block's rows (nothing is written
 * at out). Scratch: lb_attention_scratch bytes. */
typedef struct lb_attn {
    int64_t batch, heads, S, D, group, pgroup, vgroup;
    const float *q, *k, *v;
    int64_t ldq, ldk, ldv;
    int32_t q_qmax, k_qmax, v_qmax, p_qmax; /* asymmetric uint8 codes: 255 or 127 */
    int32_t scale_op;
    float scale;
    const float *mask;
    int64_t mask_s[4];
    float *out;
    int64_t ldo;
    const lb_rowops *rows;
} lb_attn;

LB_API int64_t lb_attention_scratch(const lb_attn *p);
LB_API void lb_attention_run(const lb_ctx *ctx, const lb_attn *p, uint8_t *scratch);

/* ---- fused float attention ------------------------------------------------------------- *
 * The float32 attention of imported models (ONNX Runtime's and PyTorch's dynamic files keep
 * it in float), per batch b and head h of D values, S tokens:
 *   scores[r][c] = float32(sum over d in order of double(q[r][d]) * double(k[c][d]))
 *                  (the MatMul reference: float64 sums rounded once);
 *   scores = scores * scale (scale_op 1) or scores / scale (scale_op 2), then + mask[b, h,
 *            r, c] (strides mask_s, 0 along broadcast axes; mask NULL: none), in float32;
 *   P = softmax(scores) per row (lb_softmax's rows);
 *   out[r][h*D + d] = float32(sum over c in order of double(P[r][c]) * double(v[c][d])).
 * q, k, v are rows of tokens (row stride ldq, ldk, ldv; batch stride S rows), head h at h*D;
 * out likewise (ldo). The S x S scores are never stored. Scratch: lb_fattn_scratch bytes. */
typedef struct lb_fattn {
    int64_t batch, heads, S, D;
    const float *q, *k, *v;
    int64_t ldq, ldk, ldv;
    int32_t scale_op;
    float scale;
    const float *mask;
    int64_t mask_s[4];
    float *out;
    int64_t ldo;
} lb_fattn;

LB_API int64_t lb_fattn_scratch(const lb_fattn *p);
LB_API void lb_fattn_run(const lb_ctx *ctx, const lb_fattn *p, uint8_t *scratch);

/* ---- float ops ------------------------------------------------------------------------- */

/* LayerNormalization over rows of n float32 values, in float64 (the reference's definition):
 *   mean = lane_sum(x) / n, d = x - mean, inv = 1 / sqrt(lane_sum(d * d) / n + eps),
 *   y = float32((d * inv) * gamma + beta)
 * with lane_sum the fixed-order sum of lowbit.numerics.elementary (16 lanes, then halving).
 * beta may be NULL. Rows at x + r*ldx, y + r*ldy. */
LB_API void lb_layernorm(const lb_ctx *ctx, int64_t rows, int64_t n, const float *x,
                         int64_t ldx, const float *gamma, const float *beta, double eps,
                         float *y, int64_t ldy);

/* Softmax over rows of n float32 values (lowbit.numerics.elementary.softmax). */
LB_API void lb_softmax(const lb_ctx *ctx, int64_t rows, int64_t n, const float *x, int64_t ldx,
                       float *y, int64_t ldy);

/* lb_softmax of the rows of x + bias (bias: n float32 values added to every row, one IEEE
 * add each, the sums rounded to float32 as the separate Add stores them): a classifier
 * head's bias and Softmax in one pass over each row. */
LB_API void lb_softmax_bias(const lb_ctx *ctx, int64_t rows, int64_t n, const float *x,
                            int64_t ldx, const float *bias, float *y, int64_t ldy);

/* GELU of n float32 values (lowbit.numerics.elementary.gelu): tanh_form 0 (erf) or 1. */
LB_API void lb_gelu(const lb_ctx *ctx, int64_t n, const float *x, int32_t tanh_form, float *y);

/* e^x of n float32 values (lowbit.numerics.elementary.exp). */
LB_API void lb_exp(const lb_ctx *ctx, int64_t n, const float *x, float *y);

/* ---- elementwise ops with broadcasting, and gathers ------------------------------------ */

enum lb_ew_op {
    LB_EW_ADD = 0, LB_EW_SUB, LB_EW_MUL, LB_EW_DIV, LB_EW_MAX, LB_EW_MIN,
    LB_EW_AND, LB_EW_OR, LB_EW_XOR, LB_EW_EQ, LB_EW_LT, LB_EW_LE, LB_EW_GT, LB_EW_GE,
    LB_EW_WHERE, /* out = c ? a : b with c the first operand (bool) */
    LB_EW_COUNT
};

/* An n-d iteration over a contiguous output of `shape` (nd <= 8) with up to three operands'
 * element strides (0 along broadcast axes). */
typedef struct lb_iter {
    int nd;
    int64_t shape[8];
    int64_t s[3][8];
} lb_iter;

/* out = a op b elementwise, values of `type` (LB_F32, LB_F64, LB_I64, LB_I32, LB_U8, LB_I8,
 * LB_BOOL); comparisons write bool (uint8 0/1). Integer division truncates (as C; the code
 * generator refuses a division by zero at run time: status 1). Float max/min propagate NaN.
 * Where: operands (cond, a, b), a and b of `type`. Returns 0, or 1 on an integer division by
 * zero. */
LB_API int lb_elementwise(const lb_ctx *ctx, int32_t op, int32_t type, const lb_iter *it,
                          const void *a, const void *b, const void *c, void *out);

/* y = x converted from `from` to `to` (as numpy's astype for the values lowbit produces:
 * float to integer truncates, to bool is x != 0). */
LB_API void lb_cast(const lb_ctx *ctx, int64_t n, const void *x, int32_t from, int32_t to,
                    void *y);

/* Gather along an axis: data [outer][dim][inner] (element size esize), indices (int64 or
 * int32) `count` of them, out [outer][count][inner]. Negative indices count from the end.
 * Returns 0, or 1 + the position of the first index outside [-dim, dim) (nothing is read
 * outside `data`). */
LB_API int64_t lb_gather(const lb_ctx *ctx, int64_t outer, int64_t dim, int64_t inner,
                         int32_t esize, const void *data, int64_t count, const void *indices,
                         int32_t index_type, void *out);

/* GatherND (batch_dims 0): data of rank r with shape `dims` (row-major), indices [count][kq]
 * int64, out [count][slice] with slice = product of dims[kq:], in elements of esize bytes.
 * Returns 0, or 1 + the position of the first index tuple outside the data. */
LB_API int64_t lb_gather_nd(const lb_ctx *ctx, int32_t r, const int64_t *dims, int32_t esize,
                            const void *data, int64_t count, int32_t kq, const int64_t *indices,
                            void *out);

#ifdef __cplusplus
}
#endif

#endif /* LOWBIT_RT_TF_H */

/* Input moments for lowbit.profile (not used by compiled models): the upper triangle of
 *
 *     S = sum over p of x_p x_p^T,    x_p[i] = x[p * sp + i * si],  p < P, i < C
 *
 * (lowbit.quant.input_moments: the input vectors of a 1x1 convolution, a Gemm or a MatMul).
 * Positions are taken in blocks of LB_MOM_BLOCK in order. Within a block each element of S is
 * a float32 sum of its products in position order, each product added by one fused
 * multiply-add (where the target has one: every path of an x86-64 build with -march=native on
 * an FMA machine, and 64-bit ARM); each block's sum is then added to the float64 total. Lanes
 * are elements of S, never partial sums of one, so every ISA path gives the same bits, and so
 * does any number of threads (threads share a block's rows). The caller gives the block's
 * packing buffer (no allocation). */
#include "rt_internal.h"

#define LB_MOM_BLOCK 256

typedef float lb_vf16 __attribute__((vector_size(64)));

typedef struct lb_mom_job {
    float *pack; /* the block: [pb][cp] floats, columns C.. zero */
    int64_t pb, cp, c;
    double *upper;
    int isa;
    float *upper32; /* non-NULL: one block (pb = p), its float32 sums stored here, not added */
} lb_mom_job;

/* Index of S[i][i] in the row-major upper triangle (diagonal included) of a C x C matrix. */
static inline int64_t lb_mom_row(int64_t c, int64_t i) { return i * c - i * (i - 1) / 2; }

#if defined(__clang__)
#define LB_MOM_CONTRACT
#define LB_MOM_PRAGMA _Pragma("clang fp contract(fast)")
#else
#define LB_MOM_CONTRACT __attribute__((optimize("fp-contract=fast")))
#define LB_MOM_PRAGMA
#endif

#define LB_MOM_SUFFIX scalar
#define LB_MOM_TARGET
#define LB_MOM_MI 2
#define LB_MOM_NJ 1
#include "rt_moments_impl.h"
#undef LB_MOM_SUFFIX
#undef LB_MOM_TARGET
#undef LB_MOM_MI
#undef LB_MOM_NJ

#if LB_HAVE_AVX2
#define LB_MOM_SUFFIX avx2
#define LB_MOM_TARGET LB_TARGET_AVX2
#define LB_MOM_MI 6
#define LB_MOM_NJ 1
#include "rt_moments_impl.h"
#undef LB_MOM_SUFFIX
#undef LB_MOM_TARGET
#undef LB_MOM_MI
#undef LB_MOM_NJ
#endif

#if LB_HAVE_AVX512
#define LB_MOM_SUFFIX avx512
#define LB_MOM_TARGET LB_TARGET_AVX512
#define LB_MOM_MI 6
#define LB_MOM_NJ 4
#include "rt_moments_impl.h"
#undef LB_MOM_SUFFIX
#undef LB_MOM_TARGET
#undef LB_MOM_MI
#undef LB_MOM_NJ
#endif

/* Rows of a task: a multiple of every path's LB_MOM_MI. */
#define LB_MOM_TASK_ROWS 12

static void lb_mom_task(void *arg, int64_t task, int worker) {
    (void)worker;
    const lb_mom_job *j = (const lb_mom_job *)arg;
    const int64_t end = LB_MIN(j->c, (task + 1) * LB_MOM_TASK_ROWS);
    int64_t i0 = task * LB_MOM_TASK_ROWS;
    switch (j->isa) {
#if LB_HAVE_AVX512
    case LB_ISA_AVX512VNNI:
        for (; i0 < end; i0 += 6) lb_mom_rows_avx512(j, i0, (int)LB_MIN(6, end - i0));
        break;
#endif
#if LB_HAVE_AVX2
    case LB_ISA_AVX2:
        for (; i0 < end; i0 += 6) lb_mom_rows_avx2(j, i0, (int)LB_MIN(6, end - i0));
        break;
#endif
    default:
        for (; i0 < end; i0 += 2) lb_mom_rows_scalar(j, i0, (int)LB_MIN(2, end - i0));
    }
}

LB_API int64_t lb_moments_scratch(int64_t c);
LB_API void lb_moments_f32(const lb_ctx *ctx, const float *x, int64_t p, int64_t c, int64_t sp,
                           int64_t si, float *scratch, double *upper);
LB_API int lb_moments_block_f32(const lb_ctx *ctx, const float *x, int64_t p, int64_t c,
                                int64_t sp, int64_t si, float *scratch, float *upper);

/* Floats of lb_moments_f32's scratch for vectors of length c. */
LB_API int64_t lb_moments_scratch(int64_t c) {
    return LB_MOM_BLOCK * ((c + 15) / 16 * 16 + 16);
}

/* Packs block [p0, p0 + j->pb) of the vectors into j->pack and sums it into the triangle. */
static void lb_mom_block(const lb_ctx *ctx, lb_mom_job *j, const float *x, int64_t p0,
                         int64_t sp, int64_t si) {
    const int64_t c = j->c;
    float *scratch = j->pack;
    for (int64_t q = 0; q < j->pb; q++) {
        float *row = scratch + q * j->cp;
        const float *src = x + (p0 + q) * sp;
        if (si == 1) memcpy(row, src, (size_t)c * sizeof(float));
        memset(row + c, 0, (size_t)(j->cp - c) * sizeof(float));
    }
    if (si != 1) /* a transpose, 16 x 16 at a time */
        for (int64_t q0 = 0; q0 < j->pb; q0 += 16)
            for (int64_t i0 = 0; i0 < c; i0 += 16)
                for (int64_t i = i0; i < LB_MIN(c, i0 + 16); i++)
                    for (int64_t q = q0; q < LB_MIN(j->pb, q0 + 16); q++)
                        scratch[q * j->cp + i] = x[(p0 + q) * sp + i * si];
    lb_parallel_for(ctx, (c + LB_MOM_TASK_ROWS - 1) / LB_MOM_TASK_ROWS, lb_mom_task, j);
}

/* upper [c (c + 1) / 2] (row-major, diagonal included) += S of the p vectors (header). */
LB_API void lb_moments_f32(const lb_ctx *ctx, const float *x, int64_t p, int64_t c, int64_t sp,
                           int64_t si, float *scratch, double *upper) {
    if (p <= 0 || c <= 0) return;
    lb_mom_job j = {scratch, 0, (c + 15) / 16 * 16 + 16, c, upper, ctx->isa, NULL};
    for (int64_t p0 = 0; p0 < p; p0 += LB_MOM_BLOCK) {
        j.pb = LB_MIN(LB_MOM_BLOCK, p - p0);
        lb_mom_block(ctx, &j, x, p0, sp, si);
    }
}

/* upper [c (c + 1) / 2] = the float32 sums of one block of 1 <= p <= LB_MOM_BLOCK vectors
 * (overwritten: lb_moments_f32 on zeros adds exactly these values, converted to float64).
 * Returns 0, or -1 when p is outside that range. */
LB_API int lb_moments_block_f32(const lb_ctx *ctx, const float *x, int64_t p, int64_t c,
                                int64_t sp, int64_t si, float *scratch, float *upper) {
    if (p <= 0 || p > LB_MOM_BLOCK || c <= 0) return -1;
    lb_mom_job j = {scratch, p, (c + 15) / 16 * 16 + 16, c, NULL, ctx->isa, upper};
    lb_mom_block(ctx, &j, x, 0, sp, si);
    return 0;
}

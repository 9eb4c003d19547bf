/* Helpers shared by the transformer kernels (rt_dq*.c, rt_dmm*.c, rt_tfloat*.c, rt_tensor.c);
 * not part of the public interface. */
#ifndef LOWBIT_RT_TF_INTERNAL_H
#define LOWBIT_RT_TF_INTERNAL_H

#include "rt_internal.h"

/* rint in the default rounding mode (to nearest, ties to even), as numpy's rint. */
static inline float lb_rint_f32(float x) { return rintf(x); }

/* clamp, with NaN passed through (callers handle NaN first) */
static inline float lb_clampf(float v, float lo, float hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

/* ---- per-ISA entry points -------------------------------------------------------------- */

void lb_dq_rows_scalar(const lb_dq_rows *p, int64_t r0, int64_t r1);
void lb_dq_cols_scalar(const lb_dq_cols *p, int64_t o, int64_t c0, int64_t c1);

/* A tile job of a dynamic product: rows [m0, m1) and 16-column blocks [nb0, nb1) of batch b.
 * `aside`: per row of the tile and group, the dword (uint16)(-za) | (uint16)(-ra) << 16 and
 * sa, prepared by the driver (za includes the +128 of signed codes). */
typedef struct lb_dmm_tile {
    const lb_dmm *p;
    int64_t b, m0, m1, nb0, nb1;
    const uint8_t *a; /* row m of the tile at a + (m - m0) * lda (uint8 codes) */
    int64_t lda;
    float *y;         /* row m of the tile's result at y + (m - m0) * ldy */
    int64_t ldy;
    const int32_t *azc; /* [m1 - m0][G] */
    const float *asa;   /* [m1 - m0][G] */
    const int32_t *aza; /* [m1 - m0]: za (whole K) */
    const int32_t *ara; /* [m1 - m0]: ra over all of K (whole K) */
} lb_dmm_tile;

void lb_dmm_tile_scalar(const lb_dmm_tile *t);

/* Pack matrix b of a run-time B (lb_dmm_pack) into base (lb_dmm_pack_bytes), descriptor d. */
void lb_dmm_pack_run_one(const lb_dmm_pack *p, uint8_t *base, lb_dmm_b *d, int64_t b);

#if LB_HAVE_X86
void lb_dq_rows_avx512(const lb_dq_rows *p, int64_t r0, int64_t r1);
void lb_dq_cols_avx512(const lb_dq_cols *p, int64_t o, int64_t c0, int64_t c1);
void lb_dq_rows_avx2(const lb_dq_rows *p, int64_t r0, int64_t r1);
void lb_dq_cols_avx2(const lb_dq_cols *p, int64_t o, int64_t c0, int64_t c1);
void lb_dmm_tile_avx512(const lb_dmm_tile *t);
/* out[j] = sum of a[j * 32 .. j * 32 + 31] for j < groups (uint8 codes, exact) */
void lb_sums32_avx512(const uint8_t *a, int64_t groups, int32_t *out);
void lb_group_sums_avx512(const uint8_t *a, int64_t groups, int64_t group, int32_t *out);
void lb_dmm_tile_avx2(const lb_dmm_tile *t);
#endif
#if LB_HAVE_AVX512
/* lb_dmm_pack_run_one of matrix 0 for the fused attention's packs (rt_attn_avx512.c): the
 * same bytes; 0 when p is not a case it handles (nothing written then). */
int lb_attn_pack_avx512(const lb_dmm_pack *p, uint8_t *base, lb_dmm_b *d);
/* lb_attn_aside's dwords for groups of 32 codes (rt_attn_avx512.c) */
void lb_attn_aside32_avx512(int64_t rows, int64_t G, const uint8_t *codes, int64_t ld,
                            const uint8_t *zero, int64_t ldz, int32_t *azc);
#endif
#if LB_HAVE_AMX
/* The AVX-512 tile job of a whole-K product (group 0) with its int8 sums on AMX tiles (same
 * bits); the context must have the tile state (lb_ctx.amx). */
void lb_dmm_tile_amx(const lb_dmm_tile *t);
#endif

/* DynamicQuantizeLinear of a whole tensor (one row of lb_dq_rows) on all threads
 * (rt_dqtensor.c): whether p is such a row and worth it, and the run. */
int lb_dq_tensor_fits(const lb_ctx *ctx, const lb_dq_rows *p);
void lb_dq_tensor_run(const lb_ctx *ctx, const lb_dq_rows *p);
#if LB_HAVE_AVX512
void lb_dqt_range_avx512(const float *x, int64_t n, float *lo, float *hi);
void lb_dqt_codes_avx512(const float *x, int64_t n, float scale, float zero, float top,
                         uint8_t *q);
#endif

/* The row chain on rows [m0, m1) held in buf (row m at buf + (m - m0) * ldb). */
void lb_rowops_apply(int isa, int64_t m0, int64_t m1, int64_t n, float *buf, int64_t ldb,
                     const lb_rowops *ops);

/* Float kernels per ISA (rt_tfloat_impl.h compiled three times). */
void lb_layernorm_rows_scalar(int64_t r0, int64_t r1, int64_t n, const float *x, int64_t ldx,
                              const float *gamma, const float *beta, double eps, float *y,
                              int64_t ldy);
void lb_softmax_rows_scalar(int64_t r0, int64_t r1, int64_t n, const float *x, int64_t ldx,
                            float *y, int64_t ldy);
void lb_gelu_span_scalar(int64_t n, const float *x, int32_t tanh_form, float *y);
void lb_exp_span_scalar(int64_t n, const float *x, float *y);
#if LB_HAVE_X86
void lb_layernorm_rows_avx2(int64_t r0, int64_t r1, int64_t n, const float *x, int64_t ldx,
                            const float *gamma, const float *beta, double eps, float *y,
                            int64_t ldy);
void lb_softmax_rows_avx2(int64_t r0, int64_t r1, int64_t n, const float *x, int64_t ldx,
                          float *y, int64_t ldy);
void lb_gelu_span_avx2(int64_t n, const float *x, int32_t tanh_form, float *y);
void lb_exp_span_avx2(int64_t n, const float *x, float *y);
void lb_layernorm_rows_avx512(int64_t r0, int64_t r1, int64_t n, const float *x, int64_t ldx,
                              const float *gamma, const float *beta, double eps, float *y,
                              int64_t ldy);
void lb_softmax_rows_avx512(int64_t r0, int64_t r1, int64_t n, const float *x, int64_t ldx,
                            float *y, int64_t ldy);
void lb_gelu_span_avx512(int64_t n, const float *x, int32_t tanh_form, float *y);
void lb_exp_span_avx512(int64_t n, const float *x, float *y);
#endif

#endif /* LOWBIT_RT_TF_INTERNAL_H */

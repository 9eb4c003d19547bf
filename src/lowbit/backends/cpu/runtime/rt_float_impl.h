/* Float kernels written once with GCC vector types and compiled per instruction set:
 * rt_float.c includes this file with LB_FL_SUFFIX, LB_FL_TARGET and LB_FL_LANES set.
 *
 * Products and sums are in double, rounded once to float at the end, as the reference
 * computes them; a product of two floats is exact in double, so contracting a*b+c into an FMA
 * (allowed in these functions only) gives the same bits as a separate multiply and add. */

#define LB_CAT_(a, b) a##b
#define LB_CAT(a, b) LB_CAT_(a, b)
#define LB_FN(name) LB_CAT(name, LB_FL_SUFFIX)
#define VD LB_CAT(lb_vd_, LB_FL_SUFFIX)
#define VF LB_CAT(lb_vf_, LB_FL_SUFFIX)

typedef double VD __attribute__((vector_size(LB_FL_LANES * 8)));
typedef float VF __attribute__((vector_size(LB_FL_LANES * 4)));

LB_FL_TARGET LB_FL_CONTRACT static inline VD LB_FN(lb_loadd_)(const float *p) {
    VF f;
    memcpy(&f, p, sizeof(f));
    return __builtin_convertvector(f, VD);
}

/* The product C = A B^T, register-tiled: LB_FL_MR rows x NR = 2 LANES columns a tile, the
 * accumulators in registers; B's columns packed to double per panel of NR columns and block of
 * LB_FG_KC steps of k (on the stack), A's values widened to double and broadcast. Each result is
 * its products (exact in double) added in k order to one double, rounded once: the same bits on
 * every ISA path and for any split into tasks. */
#define NR (2 * LB_FL_LANES)

LB_FL_TARGET LB_FL_CONTRACT static inline __attribute__((always_inline)) void LB_FN(lb_fg_tile_)(
    const lb_fgemm_job *j, const float *a, const double *bp, int64_t kc, double *acc, int first,
    int last, int64_t m, int64_t n, int nr, const int MR) {
    const int64_t lda = j->lda;
    VD c0[LB_FL_MR], c1[LB_FL_MR];
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
        if (first) {
            c0[r] = (VD){0};
            c1[r] = (VD){0};
        } else {
            memcpy(&c0[r], acc + r * NR, sizeof(VD));
            memcpy(&c1[r], acc + r * NR + LB_FL_LANES, sizeof(VD));
        }
    }
    for (int64_t k = 0; k < kc; k++) {
        VD b0, b1;
        memcpy(&b0, bp + k * NR, sizeof(VD));
        memcpy(&b1, bp + k * NR + LB_FL_LANES, sizeof(VD));
#pragma GCC unroll 12
        for (int r = 0; r < MR; r++) {
            const VD x = (double)a[r * lda + k] - (VD){0}; /* a splat: x - 0 is x, -0 too */
            c0[r] += x * b0;
            c1[r] += x * b1;
        }
    }
    if (!last) {
#pragma GCC unroll 12
        for (int r = 0; r < MR; r++) {
            memcpy(acc + r * NR, &c0[r], sizeof(VD));
            memcpy(acc + r * NR + LB_FL_LANES, &c1[r], sizeof(VD));
        }
        return;
    }
    VD bias0 = {0}, bias1 = {0};
    if (j->bias) {
        float bf[NR] = {0};
        memcpy(bf, j->bias + n, (size_t)nr * sizeof(float));
        bias0 = LB_FN(lb_loadd_)(bf);
        bias1 = LB_FN(lb_loadd_)(bf + LB_FL_LANES);
    }
    const float lo = j->lo, hi = j->hi;
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
        const VF y0 = __builtin_convertvector(c0[r] + bias0, VF);
        const VF y1 = __builtin_convertvector(c1[r] + bias1, VF);
        float y[NR];
        memcpy(y, &y0, sizeof(VF));
        memcpy(y + LB_FL_LANES, &y1, sizeof(VF));
        for (int q = 0; q < NR; q++) {
            float f = y[q];
            f = f < lo ? lo : f;
            y[q] = f > hi ? hi : f;
        }
        float *out = j->C + (m + r) * j->ldc + n;
        if (nr == NR)
            memcpy(out, y, sizeof(y));
        else
            for (int q = 0; q < nr; q++) out[q] = y[q];
    }
}

#define LB_FG_TILE_FN(R)                                                                       \
    LB_FL_TARGET LB_FL_CONTRACT __attribute__((noinline)) static void LB_CAT(                  \
        LB_FN(lb_fg_tile_), R)(const lb_fgemm_job *j, const float *a, const double *bp,        \
                               int64_t kc, double *acc, int first, int last, int64_t m,        \
                               int64_t n, int nr) {                                            \
        LB_FN(lb_fg_tile_)(j, a, bp, kc, acc, first, last, m, n, nr, R);                       \
    }
LB_FG_TILE_FN(1)
LB_FG_TILE_FN(2)
LB_FG_TILE_FN(3)
LB_FG_TILE_FN(4)
#if LB_FL_MR > 4
LB_FG_TILE_FN(5)
LB_FG_TILE_FN(6)
LB_FG_TILE_FN(7)
LB_FG_TILE_FN(8)
#endif
#if LB_FL_MR > 8
LB_FG_TILE_FN(9)
LB_FG_TILE_FN(10)
LB_FG_TILE_FN(11)
LB_FG_TILE_FN(12)
#endif

typedef void (*LB_FN(lb_fg_tile_fn_))(const lb_fgemm_job *, const float *, const double *,
                                        int64_t, double *, int, int, int64_t, int64_t, int);

/* Rows [m0, m1) (at most LB_FG_ROWS when K > LB_FG_KC) x columns [n0, n1) of C = A B^T. */
LB_FL_TARGET void LB_FN(lb_fgemm_block_)(const lb_fgemm_job *j, int64_t m0, int64_t m1,
                                         int64_t n0, int64_t n1) {
    static const LB_FN(lb_fg_tile_fn_) tiles[LB_FL_MR] = {
        LB_CAT(LB_FN(lb_fg_tile_), 1), LB_CAT(LB_FN(lb_fg_tile_), 2),
        LB_CAT(LB_FN(lb_fg_tile_), 3), LB_CAT(LB_FN(lb_fg_tile_), 4),
#if LB_FL_MR > 4
        LB_CAT(LB_FN(lb_fg_tile_), 5), LB_CAT(LB_FN(lb_fg_tile_), 6),
        LB_CAT(LB_FN(lb_fg_tile_), 7), LB_CAT(LB_FN(lb_fg_tile_), 8),
#endif
#if LB_FL_MR > 8
        LB_CAT(LB_FN(lb_fg_tile_), 9), LB_CAT(LB_FN(lb_fg_tile_), 10),
        LB_CAT(LB_FN(lb_fg_tile_), 11), LB_CAT(LB_FN(lb_fg_tile_), 12),
#endif
    };
    double bp[LB_FG_KC * NR] __attribute__((aligned(64)));
    double acc[LB_FG_ROWS * NR] __attribute__((aligned(64)));
    const int64_t K = j->K;
    for (int64_t n = n0; n < n1; n += NR) {
        const int nr = (int)LB_MIN(NR, n1 - n);
        for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += LB_FG_KC) {
            const int64_t kc = LB_MIN(LB_FG_KC, K - k0);
            for (int q = 0; q < NR; q++) {
                if (q < nr) {
                    const float *b = j->B + (n + q) * j->ldb + k0;
                    for (int64_t k = 0; k < kc; k++) bp[k * NR + q] = (double)b[k];
                } else {
                    for (int64_t k = 0; k < kc; k++) bp[k * NR + q] = 0.0;
                }
            }
            const int first = k0 == 0, last = k0 + kc >= K;
            for (int64_t m = m0; m < m1; m += LB_FL_MR) {
                const int mr = (int)LB_MIN(LB_FL_MR, m1 - m);
                tiles[mr - 1](j, j->A + m * j->lda + k0, bp, kc,
                              first && last ? NULL : acc + (m - m0) * NR, first, last, m, n, nr);
            }
        }
    }
}
#undef NR

/* Depthwise: every channel of one output pixel, LANES at a time in double lanes (taps summed
 * in order, then the bias: the reference's order, so the result is the same to the bit); four
 * vectors of channels at once, so that four sums are in flight. */
LB_FL_TARGET LB_FL_CONTRACT void LB_FN(lb_fdw_pixel_)(const lb_fdw_job *j, const float **tap,
                                                      int64_t taps, float *out) {
    const int64_t c = j->c, cv = c / LB_FL_LANES * LB_FL_LANES;
    const int64_t c4 = c / (4 * LB_FL_LANES) * 4 * LB_FL_LANES;
    for (int64_t c0 = 0; c0 < c4; c0 += 4 * LB_FL_LANES) {
        VD acc[4] = {{0}, {0}, {0}, {0}};
        for (int64_t t = 0; t < taps; t++) {
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) {
                const int64_t ch = c0 + v * LB_FL_LANES;
                acc[v] += LB_FN(lb_loadd_)(tap[t] + ch) * LB_FN(lb_loadd_)(j->w + t * c + ch);
            }
        }
        const float lo = j->p->lo, hi = j->p->hi;
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) { /* lb_fdw_store, a vector at a time */
            const int64_t ch = c0 + v * LB_FL_LANES;
            VD sum = acc[v];
            if (j->p->bias) sum += LB_FN(lb_loadd_)(j->p->bias + ch);
            const VF y = __builtin_convertvector(sum, VF);
            float f[LB_FL_LANES];
            memcpy(f, &y, sizeof(y));
            for (int i = 0; i < LB_FL_LANES; i++) {
                float x = f[i];
                x = x < lo ? lo : x;
                f[i] = x > hi ? hi : x;
            }
            memcpy(out + ch, f, sizeof(f));
        }
    }
    for (int64_t c0 = c4; c0 < cv; c0 += LB_FL_LANES) {
        VD acc = {0};
        for (int64_t t = 0; t < taps; t++)
            acc += LB_FN(lb_loadd_)(tap[t] + c0) * LB_FN(lb_loadd_)(j->w + t * c + c0);
        for (int i = 0; i < LB_FL_LANES; i++) lb_fdw_store(j, out, c0 + i, acc[i]);
    }
    for (int64_t ch = cv; ch < c; ch++) {
        double acc = 0;
        for (int64_t t = 0; t < taps; t++) acc += (double)tap[t][ch] * (double)j->w[t * c + ch];
        lb_fdw_store(j, out, ch, acc);
    }
}

#undef VD
#undef VF
#undef LB_FN

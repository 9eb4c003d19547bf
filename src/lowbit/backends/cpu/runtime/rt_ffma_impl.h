/* The float32 chain kernels (lb_fgemm_fma, lb_fconv_run with `fma` set), written once with GCC
 * vector types and compiled per instruction set: rt_float.c includes this file with
 * LB_FF_SUFFIX, LB_FF_TARGET, LB_FF_LANES (floats a vector), LB_FF_MR and LB_FF_FMA(a, b, c)
 * (a * b + c rounded once, lane by lane) set.
 *
 * The definition, the same on every path: each result starts at +0 and takes its products
 * in k order, each by one float32 fused multiply-add (fmaf: the exact a * b + acc rounded
 * once to float32), then the bias by one float32 addition, then the clamp. The vectors run
 * across outputs, never across k, so no ISA path and no split into tasks changes a bit. */

#define LB_FF_CAT_(a, b) a##b
#define LB_FF_CAT(a, b) LB_FF_CAT_(a, b)
#define LB_FF(name) LB_FF_CAT(name, LB_FF_SUFFIX)
#define VF LB_FF_CAT(lb_vff_, LB_FF_SUFFIX)
#define VI LB_FF_CAT(lb_vfi_, LB_FF_SUFFIX)

typedef float VF __attribute__((vector_size(LB_FF_LANES * 4)));
typedef int32_t VI __attribute__((vector_size(LB_FF_LANES * 4)));

LB_FF_TARGET static inline VF LB_FF(lb_ff_load_)(const float *p) {
    VF v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* y + bias (when there is one) clamped to [lo, hi] as `y < lo ? lo : y`, then
 * `y > hi ? hi : y` (NaN stays NaN), by lane masks. */
LB_FF_TARGET static inline VF LB_FF(lb_ff_finish_)(VF y, const float *bias, float lo,
                                                   float hi) {
    if (bias) y = y + LB_FF(lb_ff_load_)(bias);
    const VF vlo = lo - (VF){0}, vhi = hi - (VF){0};
    VI below = y < vlo;
    y = (VF)(((VI)vlo & below) | ((VI)y & ~below));
    VI above = y > vhi;
    return (VF)(((VI)vhi & above) | ((VI)y & ~above));
}

/* The product C = A B^T, register-tiled: MR rows x NR = 2 LANES columns a tile, the float32
 * accumulators in registers (kept in `acc` between blocks of LB_FG_KC steps of k: storing and
 * reloading a float is exact); B's columns packed per panel of NR columns and block of k. */
#define NR (2 * LB_FF_LANES)

LB_FF_TARGET static inline __attribute__((always_inline)) void LB_FF(lb_ffg_tile_)(
    const lb_fgemm_job *j, const float *a, const float *bp, int64_t kc, float *acc, int first,
    int last, int64_t m, int64_t n, int nr, const int MR, const int NV) {
    const int64_t lda = j->lda;
    VF c0[LB_FF_MR], c1[LB_FF_MR];
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
        c0[r] = first ? (VF){0} : LB_FF(lb_ff_load_)(acc + r * NR);
        if (NV == 2) c1[r] = first ? (VF){0} : LB_FF(lb_ff_load_)(acc + r * NR + LB_FF_LANES);
    }
    for (int64_t k = 0; k < kc; k++) {
        const VF b0 = LB_FF(lb_ff_load_)(bp + k * NR);
        const VF b1 = NV == 2 ? LB_FF(lb_ff_load_)(bp + k * NR + LB_FF_LANES) : b0;
#pragma GCC unroll 12
        for (int r = 0; r < MR; r++) {
            const VF x = a[r * lda + k] - (VF){0}; /* a splat: x - 0 is x, -0 too */
            c0[r] = LB_FF_FMA(x, b0, c0[r]);
            if (NV == 2) c1[r] = LB_FF_FMA(x, b1, c1[r]);
        }
    }
    if (!last) {
#pragma GCC unroll 12
        for (int r = 0; r < MR; r++) {
            memcpy(acc + r * NR, &c0[r], sizeof(VF));
            if (NV == 2) memcpy(acc + r * NR + LB_FF_LANES, &c1[r], sizeof(VF));
        }
        return;
    }
    float bias[NR] = {0};
    if (j->bias) memcpy(bias, j->bias + n, (size_t)nr * sizeof(float));
    const float *b = j->bias ? bias : NULL;
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
        const VF y0 = LB_FF(lb_ff_finish_)(c0[r], b, j->lo, j->hi);
        float *out = j->C + (m + r) * j->ldc + n;
        if (nr == NV * LB_FF_LANES) {
            memcpy(out, &y0, sizeof(VF));
            if (NV == 2) {
                const VF y1 = LB_FF(lb_ff_finish_)(c1[r], b ? b + LB_FF_LANES : NULL, j->lo,
                                                   j->hi);
                memcpy(out + LB_FF_LANES, &y1, sizeof(VF));
            }
        } else {
            float y[NR];
            memcpy(y, &y0, sizeof(VF));
            if (NV == 2) {
                const VF y1 = LB_FF(lb_ff_finish_)(c1[r], b ? b + LB_FF_LANES : NULL, j->lo,
                                                   j->hi);
                memcpy(y + LB_FF_LANES, &y1, sizeof(VF));
            }
            for (int q = 0; q < nr; q++) out[q] = y[q];
        }
    }
}

/* One function per tile height and width (NV vectors of columns: the last panel of N <= LANES
 * columns takes one). */
#define LB_FFG_TILE_FN(R, NV)                                                                  \
    LB_FF_TARGET __attribute__((noinline)) static void LB_FF_CAT(                              \
        LB_FF_CAT(LB_FF(lb_ffg_tile_), R), LB_FF_CAT(_, NV))(                                  \
        const lb_fgemm_job *j, const float *a, const float *bp, int64_t kc, float *acc,        \
        int first, int last, int64_t m, int64_t n, int nr) {                                   \
        LB_FF(lb_ffg_tile_)(j, a, bp, kc, acc, first, last, m, n, nr, R, NV);                  \
    }
#define LB_FFG_TILE_FNS(R) LB_FFG_TILE_FN(R, 1) LB_FFG_TILE_FN(R, 2)
LB_FFG_TILE_FNS(1)
LB_FFG_TILE_FNS(2)
LB_FFG_TILE_FNS(3)
LB_FFG_TILE_FNS(4)
#if LB_FF_MR > 4
LB_FFG_TILE_FNS(5)
LB_FFG_TILE_FNS(6)
LB_FFG_TILE_FNS(7)
LB_FFG_TILE_FNS(8)
LB_FFG_TILE_FNS(9)
LB_FFG_TILE_FNS(10)
LB_FFG_TILE_FNS(11)
LB_FFG_TILE_FNS(12)
#endif
#define LB_FFG_TILE(R, NV) LB_FF_CAT(LB_FF_CAT(LB_FF(lb_ffg_tile_), R), LB_FF_CAT(_, NV))
#define LB_FFG_TILES(R) {LB_FFG_TILE(R, 1), LB_FFG_TILE(R, 2)}

typedef void (*LB_FF(lb_ffg_tile_fn_))(const lb_fgemm_job *, const float *, const float *,
                                         int64_t, float *, int, int, int64_t, int64_t, int);

/* Rows [m0, m1) (at most LB_FG_ROWS when K > LB_FG_KC) x columns [n0, n1) of C = A B^T. */
LB_FF_TARGET void LB_FF(lb_ffgemm_block_)(const lb_fgemm_job *j, int64_t m0, int64_t m1,
                                          int64_t n0, int64_t n1) {
    static const LB_FF(lb_ffg_tile_fn_) tiles[LB_FF_MR][2] = {
        LB_FFG_TILES(1), LB_FFG_TILES(2), LB_FFG_TILES(3), LB_FFG_TILES(4),
#if LB_FF_MR > 4
        LB_FFG_TILES(5), LB_FFG_TILES(6), LB_FFG_TILES(7), LB_FFG_TILES(8),
        LB_FFG_TILES(9), LB_FFG_TILES(10), LB_FFG_TILES(11), LB_FFG_TILES(12),
#endif
    };
    float bp[LB_FG_KC * NR] __attribute__((aligned(64)));
    float acc[LB_FG_ROWS * NR] __attribute__((aligned(64)));
    const int64_t K = j->K;
    for (int64_t n = n0; n < n1; n += NR) {
        const int nr = (int)LB_MIN(NR, n1 - n);
        for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += LB_FG_KC) {
            const int64_t kc = LB_MIN(LB_FG_KC, K - k0);
            for (int q = 0; q < NR; q++) {
                if (q < nr) {
                    const float *b = j->B + (n + q) * j->ldb + k0;
                    for (int64_t k = 0; k < kc; k++) bp[k * NR + q] = b[k];
                } else {
                    for (int64_t k = 0; k < kc; k++) bp[k * NR + q] = 0.0f;
                }
            }
            const int first = k0 == 0, last = k0 + kc >= K;
            for (int64_t m = m0; m < m1; m += LB_FF_MR) {
                const int mr = (int)LB_MIN(LB_FF_MR, m1 - m);
                tiles[mr - 1][nr > LB_FF_LANES](j, j->A + m * j->lda + k0, bp, kc,
                              first && last ? NULL : acc + (m - m0) * NR, first, last, m, n, nr);
            }
        }
    }
}
#undef NR
#undef LB_FFG_TILE_FN
#undef LB_FFG_TILE_FNS
#undef LB_FFG_TILE
#undef LB_FFG_TILES

/* V vectors of channels from c0 of LB_FDW_PIXELS pixels (V constant after inlining): V x
 * PIXELS chains side by side, each tap's pointers and weights loaded once for them. */
LB_FF_TARGET static inline __attribute__((always_inline)) void LB_FF(lb_ffdw_block_)(
    const lb_fdw_job *j, const float *const *tap, int64_t taps, int np, float *const *out,
    int64_t c0, const int V) {
    const int64_t c = j->c;
    VF acc[LB_FDW_PIXELS][4];
#pragma GCC unroll 16
    for (int i = 0; i < LB_FDW_PIXELS * V; i++) acc[i / V][i % V] = (VF){0};
    for (int64_t t = 0; t < taps; t++) {
        VF w[4];
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) w[v] = LB_FF(lb_ff_load_)(j->w + t * c + c0 + v * LB_FF_LANES);
#pragma GCC unroll 4
        for (int p = 0; p < LB_FDW_PIXELS; p++) {
            const float *x = tap[p * taps + t] + c0;
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                acc[p][v] = LB_FF_FMA(LB_FF(lb_ff_load_)(x + v * LB_FF_LANES), w[v], acc[p][v]);
        }
    }
    const float lo = j->p->lo, hi = j->p->hi, *bias = j->p->bias;
    for (int p = 0; p < np; p++) {
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) {
            const int64_t ch = c0 + v * LB_FF_LANES;
            const VF y = LB_FF(lb_ff_finish_)(acc[p][v], bias ? bias + ch : NULL, lo, hi);
            memcpy(out[p] + ch, &y, sizeof(y));
        }
    }
}

/* Depthwise: every channel of LB_FDW_PIXELS output pixels (tap[p * taps + t]: pixel p's tap
 * t; pixels past `np` repeat the last one's taps and are not stored), each a chain over the
 * taps in order, then the bias. */
LB_FF_TARGET void LB_FF(lb_ffdw_pixels_)(const lb_fdw_job *j, const float *const *tap,
                                         int64_t taps, int np, float *const *out) {
    const int64_t c = j->c, cv = c / LB_FF_LANES * LB_FF_LANES;
    const int64_t c4 = c / (4 * LB_FF_LANES) * 4 * LB_FF_LANES;
    for (int64_t c0 = 0; c0 < c4; c0 += 4 * LB_FF_LANES)
        LB_FF(lb_ffdw_block_)(j, tap, taps, np, out, c0, 4);
    for (int64_t c0 = c4; c0 < cv; c0 += LB_FF_LANES)
        LB_FF(lb_ffdw_block_)(j, tap, taps, np, out, c0, 1);
    const float lo = j->p->lo, hi = j->p->hi, *bias = j->p->bias;
    for (int p = 0; p < np; p++)
        for (int64_t ch = cv; ch < c; ch++) {
            float acc = 0.0f;
            for (int64_t t = 0; t < taps; t++)
                acc = fmaf(tap[p * taps + t][ch], j->w[t * c + ch], acc);
            if (bias) acc = acc + bias[ch];
            acc = acc < lo ? lo : acc;
            out[p][ch] = acc > hi ? hi : acc;
        }
}

#undef VF
#undef VI
#undef LB_FF

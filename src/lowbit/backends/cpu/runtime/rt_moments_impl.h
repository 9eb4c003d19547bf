/* The tiles of lb_moments (rt_moments.c), written once with GCC vector types and compiled per
 * instruction set: rt_moments.c includes this file with LB_MOM_SUFFIX, LB_MOM_TARGET, LB_MOM_MI
 * (rows a tile) and LB_MOM_NJ (vectors of 16 columns a tile, at most) set. */

#define LB_MCAT_(a, b) a##b
#define LB_MCAT(a, b) LB_MCAT_(a, b)
#define LB_MFN(name) LB_MCAT(name, LB_MOM_SUFFIX)

/* Rows [i0, i0 + rows) x columns [j0, j0 + 16 NJ) of one block's S: float32 sums over the
 * block's positions in order, one fused multiply-add a product, added to the float64 total. */
LB_MOM_TARGET LB_MOM_CONTRACT static inline __attribute__((always_inline)) void LB_MFN(
    lb_mom_tile_)(const lb_mom_job *j, int64_t i0, int rows, int64_t j0, const int NJ) {
    LB_MOM_PRAGMA
    lb_vf16 acc[LB_MOM_MI][LB_MOM_NJ];
#pragma GCC unroll 8
    for (int r = 0; r < LB_MOM_MI; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NJ; v++) acc[r][v] = (lb_vf16){0};
    const int64_t cp = j->cp;
    for (int64_t p = 0; p < j->pb; p++) {
        const float *row = j->pack + p * cp;
        lb_vf16 b[LB_MOM_NJ];
#pragma GCC unroll 4
        for (int v = 0; v < NJ; v++) memcpy(&b[v], row + j0 + 16 * v, sizeof(lb_vf16));
#pragma GCC unroll 8
        for (int r = 0; r < LB_MOM_MI; r++) {
            const lb_vf16 a = row[i0 + r] - (lb_vf16){0}; /* a splat: x - 0 is x, -0 too */
#pragma GCC unroll 4
            for (int v = 0; v < NJ; v++) acc[r][v] += a * b[v];
        }
    }
    for (int r = 0; r < rows; r++) {
        const int64_t i = i0 + r;
        const int64_t lo = LB_MAX(i, j0), hi = LB_MIN(j->c, j0 + 16 * NJ);
        if (j->upper32 != NULL && lo == j0 && hi == j0 + 16 * NJ) { /* the whole tile row */
            float *out = j->upper32 + lb_mom_row(j->c, i) - i + j0;
#pragma GCC unroll 4
            for (int v = 0; v < NJ; v++) memcpy(out + 16 * v, &acc[r][v], sizeof(lb_vf16));
            continue;
        }
        float s[16 * LB_MOM_NJ];
        for (int v = 0; v < NJ; v++) memcpy(s + 16 * v, &acc[r][v], sizeof(lb_vf16));
        if (j->upper32 != NULL) {
            float *out = j->upper32 + lb_mom_row(j->c, i) - i;
            if (hi > lo) memcpy(out + lo, s + (lo - j0), (size_t)(hi - lo) * sizeof(float));
            continue;
        }
        double *out = j->upper + lb_mom_row(j->c, i) - i;
        for (int64_t col = lo; col < hi; col++) out[col] += (double)s[col - j0];
    }
}

/* Rows [i0, i0 + rows) of one block's S, from the diagonal's 16-column vector to the end. */
LB_MOM_TARGET LB_MOM_CONTRACT static void LB_MFN(lb_mom_rows_)(const lb_mom_job *j, int64_t i0,
                                                             int rows) {
    const int64_t end = (j->c + 15) / 16 * 16;
    for (int64_t j0 = i0 / 16 * 16; j0 < end; j0 += 16 * LB_MOM_NJ) {
        const int nv = (int)LB_MIN(LB_MOM_NJ, (end - j0) / 16);
        switch (nv) {
#if LB_MOM_NJ >= 4
        case 4:
            LB_MFN(lb_mom_tile_)(j, i0, rows, j0, 4);
            break;
        case 3:
            LB_MFN(lb_mom_tile_)(j, i0, rows, j0, 3);
            break;
#endif
#if LB_MOM_NJ >= 2
        case 2:
            LB_MFN(lb_mom_tile_)(j, i0, rows, j0, 2);
            break;
#endif
        default:
            LB_MFN(lb_mom_tile_)(j, i0, rows, j0, 1);
        }
    }
}

#undef LB_MFN

/* One output row of a ConvTranspose whose kernel taps never overlap (kh <= sh, kw <= sw, no
 * dilation: the upsampling form), in portable C compiled once per instruction set: rt_fops.c
 * includes this file with LB_CT_SUFFIX, LB_CT_TARGET and LB_CT_BLOCK set (scalar, and the AVX2
 * path), rt_convt_avx512.c for the AVX-512 path.
 * Output (fy, fx) then has at most one tap: input pixel (fy / sh, fx / sw), kernel tap
 * (fy % sh, fx % sw) when that is inside the kernel. Its sum is the one lb_fconvt_task forms:
 * products of the input channels in order added to a double starting at 0, then 0 + that sum
 * (the taps' total), plus the bias, rounded once to float. Outputs without a tap hold the bias.
 * With 8 output channels or more, vectors hold 8 channels' sums of LB_CT_QB pixels (up to
 * LB_CT_NV such vectors per pixel share each input value); with fewer,
 * blocks of LB_CT_PIX input pixels are transposed so that a vector holds neighbouring
 * pixels' sums (LB_CT_FEW, if defined, may take a row first: the AVX-512 path's). */

/* acc + x * w for doubles x and w converted from floats: their product is exact in double
 * (at most 48 significant bits, far from overflow or underflow), so a fused multiply-add,
 * which rounds once, gives the same double as the product then the sum (rt_convt_avx512.c
 * uses one). */
#ifndef LB_CT_MADD
#define LB_CT_MADD(acc, x, w) ((acc) + (x) * (w))
#endif

/* o[k] = float((0.0 + a[k]) + bias[k]) (without bias: float(0.0 + a[k])) for k < n. */
#ifndef LB_CT_STORE
#define LB_CT_STORE(o, a, bias, n)                                                             \
    do {                                                                                       \
        if (bias)                                                                              \
            for (int64_t k_ = 0; k_ < (n); k_++)                                               \
                (o)[k_] = (float)((0.0 + (a)[k_]) + (double)(bias)[k_]);                       \
        else                                                                                   \
            for (int64_t k_ = 0; k_ < (n); k_++) (o)[k_] = (float)(0.0 + (a)[k_]);            \
    } while (0)
#endif

#ifndef LB_CT_QB
#define LB_CT_QB 4 /* pixels per block with 8 output channels or more (AVX-512: 8) */
#endif
#ifndef LB_CT_PIX
#define LB_CT_PIX 16  /* input pixels per block (fewer than 8 output channels) */
#define LB_CT_CI 64   /* input channels per transposed block */
#define LB_CT_SUMS 64 /* at most output channels x kernel columns sums per pixel */
#define LB_CT_NV 3    /* blocks of 8 output channels summed together (shared input values) */

/* acc[q][k] = sum over ci in order, from 0, of xs[q][ci] * w[ci * ldw + k] (k < 8 * nv) in
 * double: 8 * nv channels' sums of LB_CT_QB pixels (the portable form; rt_convt_avx512.c has
 * the vector one). */
static inline void lb_fconvt_block_c(const float *const *xs, const float *w, int64_t C,
                                     int64_t ldw, int nv, double acc[LB_CT_QB][8 * LB_CT_NV]) {
    for (int q = 0; q < LB_CT_QB; q++)
        for (int k = 0; k < 8 * nv; k++) acc[q][k] = 0.0;
    for (int64_t ci = 0; ci < C; ci++)
        for (int q = 0; q < LB_CT_QB; q++) {
            const double v = (double)xs[q][ci];
            for (int k = 0; k < 8 * nv; k++)
                acc[q][k] = acc[q][k] + v * (double)w[ci * ldw + k];
        }
}
#endif

#define LB_CT_CAT_(a, b) a##b
#define LB_CT_CAT(a, b) LB_CT_CAT_(a, b)
#define LB_CT_FN(name) LB_CT_CAT(name, LB_CT_SUFFIX)

LB_CT_TARGET static void LB_CT_FN(lb_fconvt_row1_)(const lb_fconvt *p, const float *in,
                                                   float *out, int64_t n, int64_t y) {
    const int64_t M = p->m, C = p->c, fy = y + p->by;
    float *orow = out + (n * p->oh + y) * p->ow * M;
    int64_t iy = fy / p->sh, ky = fy % p->sh;
    int live = fy < p->fh && ky < p->kh && iy < p->ih;
    /* the bias, where no tap lands (with fewer than 8 channels everywhere first: the scattered
     * stores below then find the row in cache, measured faster) */
    int64_t bias_end = p->ow;
#ifdef LB_CT_FEW_SUMS
    /* LB_CT_FEW writes every output itself when each has a tap: kernel as wide as the stride,
     * no output past the last input pixel's */
    if (live && M < 8 && M * p->kw <= LB_CT_FEW_SUMS && p->kw == p->sw &&
        p->bx + p->ow <= p->iw * p->sw)
        bias_end = 0;
#endif
    for (int64_t x = 0; x < bias_end; x++) {
        int64_t fx = x + p->bx;
        if (M >= 8 && live && fx % p->sw < p->kw && fx / p->sw < p->iw) continue;
        for (int64_t m = 0; m < M; m++)
            orow[x * M + m] = p->bias ? (float)(0.0 + (double)p->bias[m]) : 0.0f;
    }
    if (!live) return;
    const float *irow = in + (n * p->ih + iy) * p->iw * C;
    /* the input pixels whose taps land in the output window: fx = ix * sw + kx - bx */
    if (M >= 8) {
        /* LB_CT_QB pixels of one kernel column at once, channels in blocks of 8 (the accumulators
         * stay in registers), the last M % 8 channels one pixel at a time */
        const int64_t m8 = M / 8 * 8;
        for (int64_t kx = 0; kx < p->kw; kx++) {
            const float *wt = p->w + (ky * p->kw + kx) * C * M;
            for (int64_t ix0 = 0; ix0 < p->iw; ix0 += LB_CT_QB) {
                int64_t np = LB_MIN(LB_CT_QB, p->iw - ix0);
                const float *xs[LB_CT_QB];
                for (int64_t q = 0; q < LB_CT_QB; q++) xs[q] = irow + (ix0 + (q < np ? q : 0)) * C;
                for (int64_t m0 = 0, nv; m0 < m8; m0 += 8 * nv) {
                    nv = LB_MIN(LB_CT_NV, (m8 - m0) / 8);
                    double acc[LB_CT_QB][8 * LB_CT_NV];
                    LB_CT_BLOCK(xs, wt + m0, C, M, (int)nv, acc);
                    for (int64_t q = 0; q < np; q++) {
                        int64_t x = (ix0 + q) * p->sw + kx - p->bx;
                        if (x < 0 || x >= p->ow) continue;
                        LB_CT_STORE(orow + x * M + m0, acc[q], p->bias ? p->bias + m0 : NULL,
                                    8 * nv);
                    }
                }
                for (int64_t q = 0; q < np && m8 < M; q++) {
                    int64_t x = (ix0 + q) * p->sw + kx - p->bx;
                    if (x < 0 || x >= p->ow) continue;
                    double s[8];
                    for (int64_t m = m8; m < M; m++) s[m - m8] = 0.0;
                    for (int64_t ci = 0; ci < C; ci++) {
                        const double v = (double)xs[q][ci];
                        for (int64_t m = m8; m < M; m++)
                            s[m - m8] = s[m - m8] + v * (double)wt[ci * M + m];
                    }
                    for (int64_t m = m8; m < M; m++) {
                        double a = 0.0 + s[m - m8];
                        if (p->bias) a = a + (double)p->bias[m];
                        orow[x * M + m] = (float)a;
                    }
                }
            }
        }
        return;
    }
    /* fewer than 8 output channels (M * kw <= LB_CT_SUMS, checked by the caller) */
#ifdef LB_CT_FEW
    if (LB_CT_FEW(p, irow, orow, ky)) return;
#endif
    double xt[LB_CT_CI][LB_CT_PIX], v[LB_CT_SUMS][LB_CT_PIX];
    for (int64_t ix0 = 0; ix0 < p->iw; ix0 += LB_CT_PIX) {
        int64_t np = LB_MIN(LB_CT_PIX, p->iw - ix0);
        for (int64_t u = 0; u < M * p->kw; u++)
            for (int64_t k = 0; k < LB_CT_PIX; k++) v[u][k] = 0.0;
        for (int64_t c0 = 0; c0 < C; c0 += LB_CT_CI) {
            int64_t cn = LB_MIN(LB_CT_CI, C - c0);
            for (int64_t ci = 0; ci < cn; ci++)
                for (int64_t k = 0; k < LB_CT_PIX; k++)
                    xt[ci][k] = k < np ? (double)irow[(ix0 + k) * C + c0 + ci] : 0.0;
            for (int64_t kx = 0; kx < p->kw; kx++) {
                const float *wt = p->w + (ky * p->kw + kx) * C * M;
                for (int64_t m = 0; m < M; m++) {
                    double *vv = v[kx * M + m];
                    for (int64_t ci = 0; ci < cn; ci++) {
                        const double w = (double)wt[(c0 + ci) * M + m];
                        for (int64_t k = 0; k < LB_CT_PIX; k++)
                            vv[k] = LB_CT_MADD(vv[k], xt[ci][k], w);
                    }
                }
            }
        }
        for (int64_t k = 0; k < np; k++)
            for (int64_t kx = 0; kx < p->kw; kx++) {
                int64_t x = (ix0 + k) * p->sw + kx - p->bx;
                if (x < 0 || x >= p->ow) continue;
                for (int64_t m = 0; m < M; m++) {
                    double a = 0.0 + v[kx * M + m][k];
                    if (p->bias) a = a + (double)p->bias[m];
                    orow[x * M + m] = (float)a;
                }
            }
    }
}

#undef LB_CT_CAT_
#undef LB_CT_CAT
#undef LB_CT_FN

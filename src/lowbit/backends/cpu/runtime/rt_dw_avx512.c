/* AVX-512 depthwise convolution: 32 channels at a time, two taps per `vpdpwssd`.
 *
 * The uint8 inputs of taps t and t+1 are widened to int16 and interleaved (unpacklo/hi), so
 * each int32 lane holds (x_t[c], x_t+1[c]) for one channel c; `vpdpwssd` multiplies them with
 * the packed pair (w_t[c] - zw, w_t+1[c] - zw) and adds both products to the lane's
 * accumulator, exactly (|x w| <= 255 * 255). unpacklo/hi work within 128-bit lanes, so the
 * accumulators hold channels in the order
 *   lo: 0-3, 8-11, 16-19, 24-27    hi: 4-7, 12-15, 20-23, 28-31
 * (the order packing.py writes the weights in); one permutation restores 0-15 and 16-31 for
 * the epilogue. */
#include "rt_internal.h"

#if LB_HAVE_AVX512
#include "rt_vec512.h"

typedef struct lb_dw512_job {
    const lb_dwconv *p;
    const uint8_t *in;
    lb_gemm_tile tile;
    const int64_t *offsets;
    int64_t pairs;
    int64_t chunks, chunk_c; /* a task: one output row's channels [k * chunk_c, +chunk_c) */
    int64_t pix; /* column quads (lb_dwv_row): output pixels per chunk */
} lb_dw512_job;

/* The lanes of channels [c0, c0 + 32) that exist (of c). */
LB_V512 __mmask32 lb_dw_lanes(int64_t c, int64_t c0) {
    return c - c0 >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << (c - c0)) - 1u);
}

/* Parameters of 16 channels' requantization in registers. */
typedef struct lb_dwrq {
    __m512i off, zp, p0, p1, p2, clip, negclip, rnd;
} lb_dwrq;

LB_V512 lb_dwrq lb_dwrq_load(const lb_epilogue *ep, int64_t c, const int METHOD) {
    const lb_requant *rq = &ep->rq;
    const __m512i one = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
    lb_dwrq v;
    v.off = _mm512_loadu_si512(ep->col_offset + c);
    v.zp = _mm512_loadu_si512(rq->zero_point + c);
    v.p0 = _mm512_loadu_si512(rq->p0 + c);
    v.p1 = _mm512_loadu_si512(rq->p1 + c);
    v.p2 = _mm512_loadu_si512(rq->p2 + c);
    v.clip = v.negclip = v.rnd = zero;
    if (METHOD == LB_RQ_PRESCALE) {
        v.clip = _mm512_loadu_si512(rq->p3 + c);
        v.negclip = _mm512_sub_epi32(zero, v.clip);
        v.rnd = _mm512_sllv_epi32(one, _mm512_sub_epi32(v.p2, one));
    }
    return v;
}

LB_V512 __m512i lb_dwrq_apply(const lb_dwrq *v, __m512i x, __m512i qmin, __m512i qmax,
                              const int METHOD) {
    x = _mm512_add_epi32(x, v->off);
    __m512i y;
    if (METHOD == LB_RQ_PRESCALE) {
        y = lb_prescale_pre_v512(x, v->p0, v->clip, v->negclip, v->p1, v->rnd, v->p2);
    } else {
        y = lb_q31_v512(x, v->p0, v->p1, v->p2);
    }
    return _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(y, v->zp), qmin), qmax);
}

/* One output row (n, oy): tap pointers of every pixel first, then for each block of 32
 * channels every pixel, the block's weights and requantization parameters held throughout.
 * METHOD, OUT (0: uint8, 1: 16-bit) and RES (a fused residual Add) are constants. */
LB_V512 void lb_dw512_row(const lb_dw512_job *j, int64_t t, const int METHOD, const int OUT,
                          const int RES) {
    const lb_dwconv *p = j->p;
    const lb_window *w = &p->win;
    const lb_epilogue *ep = &p->ep;
    int64_t row = t / j->chunks, n = row / w->oh, oy = row % w->oh, taps = w->kh * w->kw;
    int64_t c = w->c, c_lo = (t % j->chunks) * j->chunk_c, c_hi = LB_MIN(c, c_lo + j->chunk_c);
    int64_t stride = j->pairs * 2;
    const uint8_t *tap[256 * 2 * 8];
    const __m512i lo_idx = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21,
                                             22, 23);
    const __m512i hi_idx = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28,
                                             29, 30, 31);
    const __m512i qmin = _mm512_set1_epi32(ep->rq.qmin), qmax = _mm512_set1_epi32(ep->rq.qmax);
    lb_add512 addv;
    memset(&addv, 0, sizeof(addv));
    if (RES) addv = lb_add512_load(ep->add);
    for (int64_t ox0 = 0; ox0 < w->ow; ox0 += 256 / 8) {
        int64_t count = LB_MIN(256 / 8, w->ow - ox0);
        for (int64_t i = 0; i < count; i++) {
            const uint8_t **tp = tap + i * stride;
            lb_dw_taps(w, j->in, p->zero_row, j->offsets, n, oy, ox0 + i, tp);
            if (taps & 1) tp[taps] = p->zero_row; /* the odd tap's partner: zero weights */
        }
        for (int64_t c0 = c_lo; c0 < c_hi; c0 += 32) {
            const __mmask32 k = lb_dw_lanes(c, c0);
            __mmask16 k1 = (__mmask16)k, k2 = (__mmask16)(k >> 16);
            const int16_t *wp = p->w_pairs + (c0 / 32) * j->pairs * 64;
            lb_dwrq r1 = lb_dwrq_load(ep, c0, METHOD), r2 = lb_dwrq_load(ep, c0 + 16, METHOD);
            for (int64_t i = 0; i < count; i++) {
                const uint8_t **tp = tap + i * stride;
                __m512i acc_lo = _mm512_setzero_si512(), acc_hi = acc_lo;
                for (int64_t q = 0; q < j->pairs; q++) {
                    __m512i x0 = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(k, tp[2 * q] + c0));
                    __m512i x1 = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(k, tp[2 * q + 1] + c0));
                    acc_lo = _mm512_dpwssd_epi32(acc_lo, _mm512_unpacklo_epi16(x0, x1),
                                                 _mm512_loadu_si512(wp + q * 64));
                    acc_hi = _mm512_dpwssd_epi32(acc_hi, _mm512_unpackhi_epi16(x0, x1),
                                                 _mm512_loadu_si512(wp + q * 64 + 32));
                }
                __m512i y1 = lb_dwrq_apply(&r1, _mm512_permutex2var_epi32(acc_lo, lo_idx, acc_hi),
                                           qmin, qmax, METHOD);
                __m512i y2 = lb_dwrq_apply(&r2, _mm512_permutex2var_epi32(acc_lo, hi_idx, acc_hi),
                                           qmin, qmax, METHOD);
                int64_t m = (n * w->oh + oy) * w->ow + ox0 + i, at = m * c + c0;
                if (RES) {
                    const uint8_t *res = ep->residual + m * ep->ld_residual + c0;
                    y1 = lb_add_v512(ep->add, &addv, y1,
                                     _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k1, res)));
                    y2 = lb_add_v512(ep->add, &addv, y2,
                                     _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k2, res + 16)));
                }
                if (OUT == 0) {
                    __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(y1)),
                                                        _mm512_cvtepi32_epi8(y2), 1);
                    _mm256_mask_storeu_epi8((uint8_t *)j->tile.C + at, k, b);
                } else {
                    __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(y1)),
                                                   _mm512_cvtepi32_epi16(y2), 1);
                    _mm512_mask_storeu_epi16((int16_t *)j->tile.C + at, k, h);
                }
            }
        }
    }
}

#define LB_DW_FN(M, O, R)                                                                \
    LB_TARGET_AVX512 static void lb_dw512_##M##_##O##_##R(void *arg, int64_t t, int worker) { \
        (void)worker;                                                                  \
        lb_dw512_row((const lb_dw512_job *)arg, t, M, O, R);                           \
    }
LB_DW_FN(0, 0, 0)
LB_DW_FN(0, 0, 1)
LB_DW_FN(0, 1, 0)
LB_DW_FN(0, 1, 1)
LB_DW_FN(1, 0, 0)
LB_DW_FN(1, 0, 1)
LB_DW_FN(1, 1, 0)
LB_DW_FN(1, 1, 1)
static const lb_task_fn lb_dw512_fns[2][2][2] = {
    {{lb_dw512_0_0_0, lb_dw512_0_0_1}, {lb_dw512_0_1_0, lb_dw512_0_1_1}},
    {{lb_dw512_1_0_0, lb_dw512_1_0_1}, {lb_dw512_1_1_0, lb_dw512_1_1_1}}};

/* ---- four taps per `vpdpbusd` (weights that fit int8) --------------------------------------
 * 32 channels at a time in 256-bit vectors. For taps 4q..4q+3 the uint8 inputs are interleaved
 * bytewise (unpack epi8, then epi16, within 128-bit lanes), so that each int32 lane holds
 * (x_4q[c], .., x_4q+3[c]) of one channel and `vpdpbusd` (uint8 x int8, four products summed
 * into int32 without saturation) adds the four products with the packed int8 weights
 * w_t[c] - zw_c. Accumulator X (0-3), lane j (0-7) holds channel 16 (j / 4) + 4 X + j % 4 (the
 * order packing.py's quad_weights writes); the requantization parameters are gathered in that
 * order once per block, and four byte shuffles restore the channel order of the results. */

/* Requantization parameters of accumulators (X0, X0 + 1) as one 512-bit vector, lane
 * l = 8 (X - X0) + j holding channel c0 + 16 (j / 4) + 4 X + j % 4 (zero past c). */
LB_V512 __m512i lb_dwq_param(const int32_t *v, __mmask32 k, __m512i idx) {
    return _mm512_permutex2var_epi32(_mm512_maskz_loadu_epi32((__mmask16)k, v), idx,
                                     _mm512_maskz_loadu_epi32((__mmask16)(k >> 16), v + 16));
}

LB_V512 lb_dwrq lb_dwrq_gather(const lb_epilogue *ep, int64_t c0, __mmask32 k, int x0,
                               const int METHOD) {
    const lb_requant *rq = &ep->rq;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    __m512i idx = _mm512_add_epi32(lane, _mm512_set1_epi32(4 * x0));
    const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi32(1);
    lb_dwrq v;
    v.off = lb_dwq_param(ep->col_offset + c0, k, idx);
    v.zp = lb_dwq_param(rq->zero_point + c0, k, idx);
    v.p0 = lb_dwq_param(rq->p0 + c0, k, idx);
    v.p1 = lb_dwq_param(rq->p1 + c0, k, idx);
    v.p2 = lb_dwq_param(rq->p2 + c0, k, idx);
    v.clip = v.negclip = v.rnd = zero;
    if (METHOD == LB_RQ_PRESCALE) {
        v.clip = lb_dwq_param(rq->p3 + c0, k, idx);
        v.negclip = _mm512_sub_epi32(zero, v.clip);
        v.rnd = _mm512_sllv_epi32(one, _mm512_sub_epi32(v.p2, one));
    }
    return v;
}

/* The bounded form of the requantization (lb_epilogue.bounded) for accumulators (X0, X0 + 1)
 * in the lane order above; `plain`: no lane has a pre-shift or an unfolded offset. */
typedef struct lb_dwbq {
    __m512i lo, hi, add, cst, pre, scale, post;
    int plain;
} lb_dwbq;

LB_V512 lb_dwbq lb_dwbq_gather(const lb_epilogue *ep, int64_t c0, __mmask32 k, int x0) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    __m512i idx = _mm512_add_epi32(lane, _mm512_set1_epi32(4 * x0));
    const int32_t *b = ep->bounded + c0 / 16 * 64; /* channels c0.. and c0 + 16.. */
    __mmask16 k1 = (__mmask16)k, k2 = (__mmask16)(k >> 16);
#define LB_DWB(ptr, next)                                                                 \
    _mm512_permutex2var_epi32(_mm512_maskz_loadu_epi32(k1, ptr), idx,                    \
                              _mm512_maskz_loadu_epi32(k2, next))
    lb_dwbq v;
    v.lo = LB_DWB(b, b + 64);
    v.hi = LB_DWB(b + 16, b + 80);
    v.add = LB_DWB(b + 32, b + 96);
    v.cst = LB_DWB(b + 48, b + 112);
    v.pre = LB_DWB(ep->rq.p0 + c0, ep->rq.p0 + c0 + 16);
    v.scale = LB_DWB(ep->rq.p1 + c0, ep->rq.p1 + c0 + 16);
    v.post = LB_DWB(ep->rq.p2 + c0, ep->rq.p2 + c0 + 16);
#undef LB_DWB
    __m512i either = _mm512_or_si512(v.add, v.pre);
    v.plain = !_mm512_test_epi32_mask(either, either);
    return v;
}

LB_V512 __m512i lb_dwbq_apply(const lb_dwbq *v, __m512i x) {
    if (v->plain) {
        x = _mm512_min_epi32(_mm512_max_epi32(x, v->lo), v->hi);
    } else {
        x = _mm512_add_epi32(x, v->add);
        x = _mm512_srav_epi32(_mm512_min_epi32(_mm512_max_epi32(x, v->lo), v->hi), v->pre);
    }
    return _mm512_srav_epi32(_mm512_add_epi32(_mm512_mullo_epi32(x, v->scale), v->cst),
                             v->post);
}

/* One output row (or a chunk of its channels), results without a residual or post stage.
 * METHOD: LB_RQ_Q31, LB_RQ_PRESCALE, or LB_DW_BOUNDED (the epilogue's bounded form of
 * prescale, uint8 only); OUT: LB_U8, LB_I16 or LB_U16. */
#define LB_DW_BOUNDED 2

/* The requantized 32-bit codes y01, y23 of 32 channels' accumulators x01, x23 (lanes as
 * `lb_dw_gather` lays out the parameters): the bounded form (b) or the others (r) per
 * METHOD. */
LB_V512 void lb_dw_requant(const lb_dwbq *b01, const lb_dwbq *b23, const lb_dwrq *r01,
                           const lb_dwrq *r23, __m512i qmin, __m512i qmax, __m512i x01,
                           __m512i x23, __m512i *y01, __m512i *y23, const int METHOD) {
    if (METHOD == LB_DW_BOUNDED) {
        *y01 = lb_dwbq_apply(b01, x01);
        *y23 = lb_dwbq_apply(b23, x23);
    } else {
        *y01 = lb_dwrq_apply(r01, x01, qmin, qmax, METHOD);
        *y23 = lb_dwrq_apply(r23, x23, qmin, qmax, METHOD);
    }
}

/* The requantization parameters of channels [c0, c0 + 32) in the layout of the 4-tap-quad
 * kernels (accumulators 0-1 and 2-3): the bounded form's (b) or the others' (r) per METHOD,
 * the unused pair zeroed. */
LB_V512 void lb_dw_gather(const lb_epilogue *ep, int64_t c0, __mmask32 k, const int METHOD,
                          lb_dwrq *r01, lb_dwrq *r23, lb_dwbq *b01, lb_dwbq *b23) {
    if (METHOD == LB_DW_BOUNDED) {
        memset(r01, 0, sizeof(*r01));
        memset(r23, 0, sizeof(*r23));
        *b01 = lb_dwbq_gather(ep, c0, k, 0);
        *b23 = lb_dwbq_gather(ep, c0, k, 2);
    } else {
        memset(b01, 0, sizeof(*b01));
        memset(b23, 0, sizeof(*b23));
        *r01 = lb_dwrq_gather(ep, c0, k, 0, METHOD);
        *r23 = lb_dwrq_gather(ep, c0, k, 2, METHOD);
    }
}
/* P consecutive output pixels (P a constant) of one row and 32 channels: pixel p's taps at
 * base[p] + c0 + offs[p][t], its results to dst8 / dst16 + p * ldc (OUT: uint8 or 16-bit).
 * The pixels' products are independent chains, interleaved so that no `vpdpbusd` waits for
 * the latency of the one before it (one pixel alone is a dependent chain of `quads` products
 * per accumulator); each quad's weights are loaded once for the P pixels. */
#define LB_DWQ_PIX 2

/* 32 channels' bytes at address a: all 32 (FULL) or those of mask k. */
LB_V512 __m256i lb_dwq_load(uintptr_t a, __mmask32 k, const int FULL) {
    if (FULL) return _mm256_loadu_si256((const __m256i *)a);
    return _mm256_maskz_loadu_epi8(k, (const void *)a);
}

/* The address of pixel m's channel c0 in the results (OUT: uint8 or 16-bit codes). */
LB_V512 void *lb_dwq_dst(const lb_dw512_job *j, int64_t m, int64_t c, int64_t c0,
                         const int OUT) {
    if (OUT == LB_U8) return (uint8_t *)j->tile.C + m * c + c0;
    return (uint16_t *)j->tile.C + m * c + c0;
}

LB_V512 void lb_dwq_pixels(const uintptr_t *base, const intptr_t *const *offs, int64_t c0,
                           int64_t quads, const int8_t *wq, __mmask32 k, const lb_dwbq *b01,
                           const lb_dwbq *b23, const lb_dwrq *r01, const lb_dwrq *r23,
                           __m512i qmin, __m512i qmax, __m512i order, __m512i order16,
                           void *dst, int64_t ldc, const int METHOD, const int OUT,
                           const int P, const int FULL) {
    uint8_t *const dst8 = (uint8_t *)dst;
    uint16_t *const dst16 = (uint16_t *)dst;
    __m256i a0[LB_DWQ_PIX], a1[LB_DWQ_PIX], a2[LB_DWQ_PIX], a3[LB_DWQ_PIX];
    uintptr_t b[LB_DWQ_PIX];
#pragma GCC unroll 2
    for (int p = 0; p < P; p++) {
        a0[p] = a1[p] = a2[p] = a3[p] = _mm256_setzero_si256();
        b[p] = base[p] + (uintptr_t)c0;
    }
    for (int64_t q = 0; q < quads; q++) {
        const int8_t *wg = wq + q * 128;
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)wg);
        const __m256i w1 = _mm256_loadu_si256((const __m256i *)(wg + 32));
        const __m256i w2 = _mm256_loadu_si256((const __m256i *)(wg + 64));
        const __m256i w3 = _mm256_loadu_si256((const __m256i *)(wg + 96));
#pragma GCC unroll 2
        for (int p = 0; p < P; p++) {
            const intptr_t *t4 = offs[p] + 4 * q;
            __m256i x0 = lb_dwq_load(b[p] + (uintptr_t)t4[0], k, FULL);
            __m256i x1 = lb_dwq_load(b[p] + (uintptr_t)t4[1], k, FULL);
            __m256i x2 = lb_dwq_load(b[p] + (uintptr_t)t4[2], k, FULL);
            __m256i x3 = lb_dwq_load(b[p] + (uintptr_t)t4[3], k, FULL);
            __m256i l01 = _mm256_unpacklo_epi8(x0, x1), h01 = _mm256_unpackhi_epi8(x0, x1);
            __m256i l23 = _mm256_unpacklo_epi8(x2, x3), h23 = _mm256_unpackhi_epi8(x2, x3);
            a0[p] = _mm256_dpbusd_epi32(a0[p], _mm256_unpacklo_epi16(l01, l23), w0);
            a1[p] = _mm256_dpbusd_epi32(a1[p], _mm256_unpackhi_epi16(l01, l23), w1);
            a2[p] = _mm256_dpbusd_epi32(a2[p], _mm256_unpacklo_epi16(h01, h23), w2);
            a3[p] = _mm256_dpbusd_epi32(a3[p], _mm256_unpackhi_epi16(h01, h23), w3);
        }
    }
#pragma GCC unroll 2
    for (int p = 0; p < P; p++) {
        __m512i x01 = _mm512_inserti64x4(_mm512_castsi256_si512(a0[p]), a1[p], 1);
        __m512i x23 = _mm512_inserti64x4(_mm512_castsi256_si512(a2[p]), a3[p], 1);
        __m512i y01, y23;
        lb_dw_requant(b01, b23, r01, r23, qmin, qmax, x01, x23, &y01, &y23, METHOD);
        if (OUT != LB_U8) { /* codes inside the 16-bit type: one exact pack */
            __m512i w16 = OUT == LB_I16 ? _mm512_packs_epi32(y01, y23)
                                        : _mm512_packus_epi32(y01, y23);
            _mm512_mask_storeu_epi16(dst16 + p * ldc, k, _mm512_permutexvar_epi16(order16, w16));
            continue;
        }
        /* codes 0..255: two saturating packs (exact) leave in 128-bit lane L the dwords (4
         * channels each) of y01's and y23's lane L, i.e. dword 4L holds channels (0, 16, 4,
         * 20) + L's four and dword 4L+1 (8, 24, 12, 28); one permutation puts the 32 bytes in
         * channel order. */
        __m512i w16 = _mm512_packus_epi32(y01, y23);
        __m256i y = _mm512_castsi512_si256(
            _mm512_permutexvar_epi32(order, _mm512_packus_epi16(w16, w16)));
        _mm256_mask_storeu_epi8(dst8 + p * ldc, k, y);
    }
}

LB_V512 void lb_dwq_row(const lb_dw512_job *j, int64_t t, const int METHOD, const int OUT) {
    const lb_dwconv *p = j->p;
    const lb_window *w = &p->win;
    const lb_epilogue *ep = &p->ep;
    int64_t row = t / j->chunks, n = row / w->oh, oy = row % w->oh, taps = w->kh * w->kw;
    int64_t c = w->c, c_lo = (t % j->chunks) * j->chunk_c, c_hi = LB_MIN(c, c_lo + j->chunk_c);
    int64_t quads = (taps + 3) / 4, stride = quads * 4;
    /* The taps of pixel i are at base[i] + offs[i][t]: inside the image base is the window's
     * corner and offs the shared `inner` offsets; at the border base is 0 and offs the taps'
     * addresses (the zero row for taps outside). Taps past the last read valid bytes with zero
     * weights. */
    intptr_t inner[LB_DW_MAX_TAPS + 4], border[32 * (LB_DW_MAX_TAPS + 4)];
    const intptr_t *offs[32];
    uintptr_t base[32];
    for (int64_t e = 0; e < stride; e++) inner[e] = e < taps ? (intptr_t)j->offsets[e] : 0;
    const uint8_t *img = j->in + n * w->ih * w->iw * c;
    int64_t iy0 = oy * w->sh - w->pt, iy1 = iy0 + (w->kh - 1) * w->dh;
    int rows_inside = iy0 >= 0 && iy1 < w->ih;
    const __m512i qmin = _mm512_set1_epi32(ep->rq.qmin), qmax = _mm512_set1_epi32(ep->rq.qmax);
    const __m512i order = _mm512_setr_epi32(0, 8, 1, 9, 4, 12, 5, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    /* 16-bit results: after one saturating pack of (y01, y23), word 8L + u of 128-bit lane L
     * holds y01's int32 lane 4L + u (u < 4) or y23's lane 4L + u - 4; int32 lane i of
     * accumulator pair X (x01: X = 0, 1; x23: X = 2, 3) is channel 16 (j / 4) + 4 X + j % 4
     * with X = 2 (pair) + i / 8, j = i % 8 (quad_weights' lane order). order16[ch] is the
     * word holding channel ch. */
    int16_t pos16[32];
    for (int wd = 0; wd < 32; wd++) {
        int lane = wd / 8, u = wd % 8, pair = u < 4 ? 0 : 2, i = 4 * lane + u % 4;
        int x = pair + i / 8, jj = i % 8;
        pos16[16 * (jj / 4) + 4 * x + jj % 4] = (int16_t)wd;
    }
    const __m512i order16 = _mm512_loadu_si512(pos16);
    for (int64_t ox0 = 0; ox0 < w->ow; ox0 += 32) {
        int64_t count = LB_MIN(32, w->ow - ox0);
        for (int64_t i = 0; i < count; i++) {
            int64_t ix0 = (ox0 + i) * w->sw - w->pl, ix1 = ix0 + (w->kw - 1) * w->dw;
            if (rows_inside && ix0 >= 0 && ix1 < w->iw) {
                base[i] = (uintptr_t)(img + (iy0 * w->iw + ix0) * c);
                offs[i] = inner;
                continue;
            }
            const uint8_t *tp[LB_DW_MAX_TAPS];
            lb_dw_taps(w, j->in, p->zero_row, j->offsets, n, oy, ox0 + i, tp);
            intptr_t *b = border + i * stride;
            for (int64_t e = 0; e < stride; e++)
                b[e] = (intptr_t)(e < taps ? tp[e] : p->zero_row);
            base[i] = 0;
            offs[i] = b;
        }
        for (int64_t c0 = c_lo; c0 < c_hi; c0 += 32) {
            const __mmask32 k = lb_dw_lanes(c, c0);
            const int8_t *wq = p->w_quads + (c0 / 32) * quads * 128;
            lb_dwrq r01, r23;
            lb_dwbq b01, b23;
            lb_dw_gather(ep, c0, k, METHOD, &r01, &r23, &b01, &b23);
            const int64_t m0 = (n * w->oh + oy) * w->ow + ox0;
            int64_t i = 0;
            for (; k == 0xFFFFFFFFu && i + LB_DWQ_PIX <= count; i += LB_DWQ_PIX)
                lb_dwq_pixels(base + i, offs + i, c0, quads, wq, k, &b01, &b23, &r01, &r23,
                              qmin, qmax, order, order16, lb_dwq_dst(j, m0 + i, c, c0, OUT),
                              c, METHOD, OUT, LB_DWQ_PIX, 1);
            for (; i + LB_DWQ_PIX <= count; i += LB_DWQ_PIX)
                lb_dwq_pixels(base + i, offs + i, c0, quads, wq, k, &b01, &b23, &r01, &r23,
                              qmin, qmax, order, order16, lb_dwq_dst(j, m0 + i, c, c0, OUT),
                              c, METHOD, OUT, LB_DWQ_PIX, 0);
            for (; i < count; i++)
                lb_dwq_pixels(base + i, offs + i, c0, quads, wq, k, &b01, &b23, &r01, &r23,
                              qmin, qmax, order, order16, lb_dwq_dst(j, m0 + i, c, c0, OUT),
                              c, METHOD, OUT, 1, 0);
        }
    }
}

/* ---- column quads (lb_dwconv.quad_order LB_DW_COLUMNS, kernels of at most 8 rows) ---------
 * For a chunk of output pixels of one output row and 32 channels, each input column the chunk
 * reads is interleaved once (the kernel rows' bytes of a channel in one int32 lane, lane order
 * as above, rows past kh reading the zero row with zero weights) into `vbuf`: G = 1 group of
 * 4 rows for kernels of at most 4 rows, G = 2 (rows 0-3, 4-7) for 6-8 rows. An output pixel's
 * taps of kernel column dx, row group g are then the 4 vectors at its column + dx * dw, group
 * g, multiplied by the packed weights (quad dx * G + g) without further shuffles.
 * Kernels of 5 rows (H = 1): rows 0-3 as one group, and row 4 as horizontal quads (the bytes
 * of columns x, x + dw, x + 2 dw, x + 3 dw of row 4 interleaved as the second group of
 * column x): the pixel at column x takes quads x + 4 h dw, h < ceil(kw / 4), with weights
 * quads kw + h (5 x 5: 7 quads a pixel, as row-major taps, instead of 10).
 * Interleaving costs 8 shuffles per input column and group instead of 8 per 4 taps of every
 * output pixel (3 x 3: 24; 5 x 5: 56). */
#define LB_DWV_COLS 80
#define LB_DWV_MAX_GROUPS 2

/* The 4 interleaved vectors of 32 channels of the bytes at p0..p3 (masked by k). */
LB_V512 void lb_dwv_interleave(const uint8_t *p0, const uint8_t *p1, const uint8_t *p2,
                               const uint8_t *p3, __mmask32 k, __m256i *dst) {
    __m256i x0 = _mm256_maskz_loadu_epi8(k, p0), x1 = _mm256_maskz_loadu_epi8(k, p1);
    __m256i x2 = _mm256_maskz_loadu_epi8(k, p2), x3 = _mm256_maskz_loadu_epi8(k, p3);
    __m256i l01 = _mm256_unpacklo_epi8(x0, x1), h01 = _mm256_unpackhi_epi8(x0, x1);
    __m256i l23 = _mm256_unpacklo_epi8(x2, x3), h23 = _mm256_unpackhi_epi8(x2, x3);
    _mm256_store_si256(dst, _mm256_unpacklo_epi16(l01, l23));
    _mm256_store_si256(dst + 1, _mm256_unpackhi_epi16(l01, l23));
    _mm256_store_si256(dst + 2, _mm256_unpacklo_epi16(h01, h23));
    _mm256_store_si256(dst + 3, _mm256_unpackhi_epi16(h01, h23));
}

/* The requantized codes of one pixel's 32 channels (accumulators a0..a3 in the lane order
 * above) stored under mask k. */
LB_V512 void lb_dwv_store(const lb_dwbq *b01, const lb_dwbq *b23, const lb_dwrq *r01,
                          const lb_dwrq *r23, __m512i qmin, __m512i qmax, __m512i x01,
                          __m512i x23, uint8_t *dst, __mmask32 k, const int METHOD) {
    const __m512i order = _mm512_setr_epi32(0, 8, 1, 9, 4, 12, 5, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    __m512i y01, y23;
    lb_dw_requant(b01, b23, r01, r23, qmin, qmax, x01, x23, &y01, &y23, METHOD);
    __m512i w16 = _mm512_packus_epi32(y01, y23);
    _mm256_mask_storeu_epi8(dst, k, _mm512_castsi512_si256(_mm512_permutexvar_epi32(
                                        order, _mm512_packus_epi16(w16, w16))));
}

/* Quad products of P pixels (P a constant): a01[p] += v[p step] . w[0..63], a23[p] +=
 * v[p step + 2] . w[64..127]. */
LB_V512 void lb_dwv_quad(const __m256i *v, int64_t step, const int8_t *wg, __m512i *a01,
                         __m512i *a23, const int P) {
    const __m512i w01 = _mm512_loadu_si512((const void *)wg);
    const __m512i w23 = _mm512_loadu_si512((const void *)(wg + 64));
#pragma GCC unroll 4
    for (int p = 0; p < P; p++) {
        a01[p] = _mm512_dpbusd_epi32(a01[p], _mm512_load_si512((const void *)(v + p * step)),
                                     w01);
        a23[p] = _mm512_dpbusd_epi32(a23[p],
                                     _mm512_load_si512((const void *)(v + p * step + 2)), w23);
    }
}

/* P consecutive output pixels of one chunk (P a constant): pixel p's interleaved columns start
 * at v + p * step, its 32 codes go to dst + p * ldc. The P pixels' products are independent
 * chains, interleaved so that one pixel's `vpdpbusd` does not wait for the latency of its
 * previous one (a single pixel's products form one dependent chain per accumulator).
 * G (1 or 2) column groups and H (0 or 1, with G = 1) a horizontal group: constants. */
#define LB_DWV_PIX 4
LB_V512 void lb_dwv_pixels(const __m256i *v, int64_t step, const int8_t *wq, int64_t kw,
                           int64_t dw, const lb_dwbq *b01, const lb_dwbq *b23,
                           const lb_dwrq *r01, const lb_dwrq *r23, __m512i qmin, __m512i qmax,
                           uint8_t *dst, int64_t ldc, __mmask32 k, const int METHOD,
                           const int P, const int G, const int H) {
    const int GB = G + H; /* groups a column of vbuf holds */
    __m512i a01[LB_DWV_PIX], a23[LB_DWV_PIX];
#pragma GCC unroll 4
    for (int p = 0; p < P; p++) a01[p] = a23[p] = _mm512_setzero_si512();
    for (int64_t dx = 0; dx < kw; dx++) {
#pragma GCC unroll 2
        for (int g = 0; g < G; g++)
            lb_dwv_quad(v + (dx * dw * GB + g) * 4, step, wq + (dx * G + g) * 128, a01, a23, P);
    }
    for (int64_t h = 0; H && h < (kw + 3) / 4; h++)
        lb_dwv_quad(v + (4 * h * dw * GB + G) * 4, step, wq + (kw * G + h) * 128, a01, a23, P);
#pragma GCC unroll 4
    for (int p = 0; p < P; p++)
        lb_dwv_store(b01, b23, r01, r23, qmin, qmax, a01[p], a23[p], dst + p * ldc, k, METHOD);
}

/* KWc: the kernel width as a constant (0: read from the window); G: column groups of 4 rows
 * (1: kernels of at most 4 rows, 2: of 6-8 rows); H: row 4 as horizontal quads (5 rows, G = 1). */
LB_V512 void lb_dwv_row(const lb_dw512_job *j, int64_t t, const int METHOD, const int KWc,
                        const int G, const int H) {
    const int GB = G + H;
    const lb_dwconv *p = j->p;
    const lb_window *w = &p->win;
    const lb_epilogue *ep = &p->ep;
    int64_t row = t / j->chunks, n = row / w->oh, oy = row % w->oh;
    int64_t c = w->c, c_lo = (t % j->chunks) * j->chunk_c, c_hi = LB_MIN(c, c_lo + j->chunk_c);
    const int64_t kw = KWc ? KWc : w->kw, kh = w->kh;
    const int64_t sw = w->sw, dw = w->dw, ih = w->ih, iw = w->iw;
    uint8_t *const out = (uint8_t *)j->tile.C;
    const uint8_t *const img = j->in + n * ih * iw * c, *const zero = p->zero_row;
    const int64_t iy0 = oy * w->sh - w->pt;
    __attribute__((aligned(64))) __m256i vbuf[LB_DWV_COLS * 4 * LB_DWV_MAX_GROUPS];
    /* the input rows of each kernel row (NULL: outside the image or past kh) */
    const uint8_t *rows[4 * LB_DWV_MAX_GROUPS] = {NULL};
    for (int64_t ky = 0; ky < kh; ky++) {
        int64_t iy = iy0 + ky * w->dh;
        rows[ky] = iy >= 0 && iy < ih ? img + iy * iw * c : NULL;
    }
    const int64_t quads = kw * G + H * ((kw + 3) / 4);
    const __m512i qmin = _mm512_set1_epi32(ep->rq.qmin), qmax = _mm512_set1_epi32(ep->rq.qmax);
    for (int64_t ox0 = 0; ox0 < w->ow; ox0 += j->pix) {
        const int64_t count = LB_MIN(j->pix, w->ow - ox0), ix0 = ox0 * sw - w->pl;
        const int64_t nv = (count - 1) * sw + (kw - 1) * dw + 1;
        for (int64_t c0 = c_lo; c0 < c_hi; c0 += 32) {
            const __mmask32 k = lb_dw_lanes(c, c0);
            for (int64_t x = 0; x < nv; x++) {
                int64_t ix = ix0 + x;
                int inside = ix >= 0 && ix < iw;
                const uint8_t *q[4 * LB_DWV_MAX_GROUPS];
                for (int i = 0; i < 4 * G; i++)
                    q[i] = (inside && rows[i] ? rows[i] + ix * c : zero) + c0;
                for (int g = 0; g < G; g++)
                    lb_dwv_interleave(q[4 * g], q[4 * g + 1], q[4 * g + 2], q[4 * g + 3], k,
                                      vbuf + (x * GB + g) * 4);
                if (H) { /* row 4, columns x, x + dw, x + 2 dw, x + 3 dw */
                    const uint8_t *h[4];
                    for (int i = 0; i < 4; i++) {
                        int64_t hx = ix + i * dw;
                        h[i] = (rows[4] && hx >= 0 && hx < iw ? rows[4] + hx * c : zero) + c0;
                    }
                    lb_dwv_interleave(h[0], h[1], h[2], h[3], k, vbuf + (x * GB + G) * 4);
                }
            }
            const int8_t *wq = p->w_quads + (c0 / 32) * quads * 128;
            lb_dwrq r01, r23;
            lb_dwbq b01, b23;
            lb_dw_gather(ep, c0, k, METHOD, &r01, &r23, &b01, &b23);
            uint8_t *const dst = out + ((n * w->oh + oy) * w->ow + ox0) * c + c0;
            int64_t i = 0;
            const int64_t step = sw * GB * 4;
            for (; i + LB_DWV_PIX <= count; i += LB_DWV_PIX)
                lb_dwv_pixels(vbuf + i * step, step, wq, kw, dw, &b01, &b23, &r01, &r23, qmin,
                              qmax, dst + i * c, c, k, METHOD, LB_DWV_PIX, G, H);
            for (; i < count; i++)
                lb_dwv_pixels(vbuf + i * step, step, wq, kw, dw, &b01, &b23, &r01, &r23, qmin,
                              qmax, dst + i * c, c, k, METHOD, 1, G, H);
        }
    }
}

/* Column-quad kernels: METHOD x {at most 4 rows: 3 columns, any; 5 rows: 5 columns, any;
 * 6-8 rows}. */
#define LB_DWV_FN(NAME, M, KW, G, H)                                                     \
    LB_TARGET_AVX512 static void lb_dwv_##NAME(void *arg, int64_t t, int worker) {      \
        (void)worker;                                                                   \
        lb_dwv_row((const lb_dw512_job *)arg, t, M, KW, G, H);                          \
    }
#define LB_DWV_SHAPES(NAME, M)                                                         \
    LB_DWV_FN(NAME##_3, M, 3, 1, 0) LB_DWV_FN(NAME##_any, M, 0, 1, 0)                  \
    LB_DWV_FN(NAME##_5h, M, 5, 1, 1) LB_DWV_FN(NAME##_anyh, M, 0, 1, 1)                \
    LB_DWV_FN(NAME##_anyg2, M, 0, 2, 0)
LB_DWV_SHAPES(q31, LB_RQ_Q31)
LB_DWV_SHAPES(prescale, LB_RQ_PRESCALE)
LB_DWV_SHAPES(bounded, LB_DW_BOUNDED)
static const lb_task_fn lb_dwv_fns[3][5] = {
    {lb_dwv_q31_3, lb_dwv_q31_any, lb_dwv_q31_5h, lb_dwv_q31_anyh, lb_dwv_q31_anyg2},
    {lb_dwv_prescale_3, lb_dwv_prescale_any, lb_dwv_prescale_5h, lb_dwv_prescale_anyh,
     lb_dwv_prescale_anyg2},
    {lb_dwv_bounded_3, lb_dwv_bounded_any, lb_dwv_bounded_5h, lb_dwv_bounded_anyh,
     lb_dwv_bounded_anyg2}};

#define LB_DWQ_FN(NAME, METHOD, OUT)                                            \
    LB_TARGET_AVX512 static void NAME(void *arg, int64_t t, int worker) {       \
        (void)worker;                                                           \
        lb_dwq_row((const lb_dw512_job *)arg, t, METHOD, OUT);                  \
    }
LB_DWQ_FN(lb_dwq_q31, LB_RQ_Q31, LB_U8)
LB_DWQ_FN(lb_dwq_prescale, LB_RQ_PRESCALE, LB_U8)
LB_DWQ_FN(lb_dwq_bounded, LB_DW_BOUNDED, LB_U8)
LB_DWQ_FN(lb_dwq_q31_i16, LB_RQ_Q31, LB_I16)
LB_DWQ_FN(lb_dwq_prescale_i16, LB_RQ_PRESCALE, LB_I16)
LB_DWQ_FN(lb_dwq_q31_u16, LB_RQ_Q31, LB_U16)
LB_DWQ_FN(lb_dwq_prescale_u16, LB_RQ_PRESCALE, LB_U16)

/* Other epilogues (float or int32 results, ONNX Runtime's float requantization): per pixel
 * through the general epilogue. */
LB_TARGET_AVX512 static void lb_dw512_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_dw512_job *j = (const lb_dw512_job *)arg;
    const lb_dwconv *p = j->p;
    const lb_window *w = &p->win;
    int64_t row = t / j->chunks, n = row / w->oh, oy = row % w->oh, taps = w->kh * w->kw;
    int64_t c = w->c, c_lo = (t % j->chunks) * j->chunk_c, c_hi = LB_MIN(c, c_lo + j->chunk_c);
    const uint8_t *tap[LB_DW_MAX_TAPS + 1];
    const __m512i lo_idx = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21,
                                             22, 23);
    const __m512i hi_idx = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28,
                                             29, 30, 31);
    const lb_epilogue *ep = &p->ep;
    int quantized = ep->out_type != LB_I32 && ep->out_type != LB_F32;
    lb_add512 addv;
    memset(&addv, 0, sizeof(addv));
    if (ep->residual) addv = lb_add512_load(ep->add);
    for (int64_t ox = 0; ox < w->ow; ox++) {
        lb_dw_taps(w, j->in, p->zero_row, j->offsets, n, oy, ox, tap);
        tap[taps] = p->zero_row;
        int64_t m = (n * w->oh + oy) * w->ow + ox;
        for (int64_t c0 = c_lo; c0 < c_hi; c0 += 32) {
            const __mmask32 k = lb_dw_lanes(c, c0);
            __m512i acc_lo = _mm512_setzero_si512(), acc_hi = acc_lo;
            const int16_t *wp = p->w_pairs + (c0 / 32) * j->pairs * 64;
            for (int64_t q = 0; q < j->pairs; q++) {
                __m512i x0 = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(k, tap[2 * q] + c0));
                __m512i x1 = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(k, tap[2 * q + 1] + c0));
                acc_lo = _mm512_dpwssd_epi32(acc_lo, _mm512_unpacklo_epi16(x0, x1),
                                             _mm512_loadu_si512(wp + q * 64));
                acc_hi = _mm512_dpwssd_epi32(acc_hi, _mm512_unpackhi_epi16(x0, x1),
                                             _mm512_loadu_si512(wp + q * 64 + 32));
            }
            __m512i first = _mm512_permutex2var_epi32(acc_lo, lo_idx, acc_hi);
            __m512i second = _mm512_permutex2var_epi32(acc_lo, hi_idx, acc_hi);
            lb_rq512 rv;
            memset(&rv, 0, sizeof(rv));
            if (quantized) rv = lb_rq512_load(&ep->rq, c0);
            lb_epilogue_v512(&j->tile, m, c0, first, &rv, &addv);
            if (c0 + 16 < c) {
                if (quantized) rv = lb_rq512_load(&ep->rq, c0 + 16);
                lb_epilogue_v512(&j->tile, m, c0 + 16, second, &rv, &addv);
            }
        }
    }
}

LB_TARGET_AVX512 void lb_dwconv_avx512(const lb_ctx *ctx, const lb_dwconv *p,
                                       const uint8_t *in, void *out, const int64_t *offsets) {
    const lb_window *w = &p->win;
    lb_dw512_job j;
    memset(&j, 0, sizeof(j));
    j.p = p;
    j.in = in;
    j.tile.M = w->n * w->oh * w->ow;
    j.tile.N = w->c;
    j.tile.ep = &p->ep;
    j.tile.C = out;
    j.tile.ldc = w->c;
    j.offsets = offsets;
    j.pairs = (w->kh * w->kw + 1) / 2;
    const lb_epilogue *ep = &p->ep;
    int method = ep->rq.method, otype = ep->out_type;
    lb_task_fn fn = lb_dw512_task;
    if ((method == LB_RQ_Q31 || method == LB_RQ_PRESCALE) &&
        (otype == LB_U8 || otype == LB_I16 || otype == LB_U16) && !ep->post)
        fn = lb_dw512_fns[method][otype != LB_U8][ep->residual != NULL];
    int quads_ok = p->w_quads && !ep->residual && !ep->post &&
                   w->kh * w->kw <= LB_DW_MAX_TAPS &&
                   (method == LB_RQ_Q31 || method == LB_RQ_PRESCALE);
    int form = method == LB_RQ_Q31 ? 0 : ep->bounded ? 2 : 1;
    if (quads_ok && otype == LB_U8 && p->quad_order == LB_DW_TAPS)
        fn = form == 0 ? lb_dwq_q31 : form == 2 ? lb_dwq_bounded : lb_dwq_prescale;
    if (quads_ok && otype == LB_U8 && p->quad_order != LB_DW_TAPS &&
        w->kh <= 4 * LB_DWV_MAX_GROUPS && w->kw <= 8 && w->sw <= 2 && w->dw <= 2) {
        /* the code generator checked kh <= 8, kw <= 8, sw, dw <= 2: pix >= 32 */
        j.pix = LB_MIN(32, (LB_DWV_COLS - 1 - (w->kw - 1) * w->dw) / w->sw + 1);
        int shape = w->kh <= 4 ? (w->kw == 3 ? 0 : 1) : w->kh == 5 ? (w->kw == 5 ? 2 : 3) : 4;
        fn = lb_dwv_fns[form][shape];
    }
    if (quads_ok && (otype == LB_I16 || otype == LB_U16) && p->quad_order == LB_DW_TAPS)
        fn = otype == LB_I16 ? (method == LB_RQ_Q31 ? lb_dwq_q31_i16 : lb_dwq_prescale_i16)
                             : (method == LB_RQ_Q31 ? lb_dwq_q31_u16 : lb_dwq_prescale_u16);
    /* few output rows (7 x 7 images): channel blocks split too, for 4 tasks per thread */
    int64_t rows = w->n * w->oh, blocks = (w->c + 31) / 32, want = 4 * (int64_t)ctx->threads;
    int64_t split = ctx->threads > 1 && rows < want ? LB_MIN(blocks, (want + rows - 1) / rows) : 1;
    j.chunk_c = 32 * ((blocks + split - 1) / split);
    j.chunks = (w->c + j.chunk_c - 1) / j.chunk_c;
    lb_parallel_for(ctx, rows * j.chunks, fn, &j);
}
#endif /* LB_HAVE_AVX512 */

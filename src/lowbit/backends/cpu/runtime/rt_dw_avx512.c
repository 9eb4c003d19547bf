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

#if LB_HAVE_X86
#include "rt_vec512.h"

typedef struct lb_dw512_job {
    const lb_dwconv *p;
    const uint8_t *in;
    lb_gemm_tile tile;
    const int64_t *offsets;
    int64_t pairs;
} lb_dw512_job;

LB_TARGET_AVX512 static void lb_dw512_task(void *arg, int64_t t, int worker) {
    (void)worker;
    const lb_dw512_job *j = (const lb_dw512_job *)arg;
    const lb_dwconv *p = j->p;
    const lb_window *w = &p->win;
    int64_t n = t / w->oh, oy = t % w->oh, taps = w->kh * w->kw, c = w->c;
    const uint8_t *tap[LB_DW_MAX_TAPS + 1];
    const __m512i lo_idx = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21,
                                             22, 23);
    const __m512i hi_idx = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28,
                                             29, 30, 31);
    const lb_epilogue *ep = &p->ep;
    int quantized = ep->out_type != LB_I32 && ep->rq.method != LB_RQ_DEQUANT;
    lb_add512 addv;
    memset(&addv, 0, sizeof(addv));
    if (ep->residual) addv = lb_add512_load(ep->add);
    for (int64_t ox = 0; ox < w->ow; ox++) {
        lb_dw_taps(w, j->in, p->zero_row, j->offsets, n, oy, ox, tap);
        tap[taps] = p->zero_row; /* the odd tap's partner: zero weights */
        int64_t m = (n * w->oh + oy) * w->ow + ox;
        for (int64_t c0 = 0; c0 < c; c0 += 32) {
            __mmask32 k = c - c0 >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << (c - c0)) - 1u);
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
    lb_parallel_for(ctx, w->n * w->oh, lb_dw512_task, &j);
}
#endif /* LB_HAVE_X86 */

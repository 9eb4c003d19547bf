/* AVX-512 rows of the quantized Add/Sub/Mul (rt_quant.c): 16 elements at a time through the
 * same integer expressions (rt_vec512.h). */
#include "rt_internal.h"

#if LB_HAVE_AVX512
#include "rt_vec512.h"

/* 16 codes of type `type` at p (stride 1, or 0: one code broadcast) as int32 lanes. */
LB_V512 __m512i lb_load16(const void *p, int32_t type, int64_t stride, __mmask16 k) {
    if (stride == 0) {
        int32_t v = type == LB_U8 ? *(const uint8_t *)p
                    : type == LB_I16 ? *(const int16_t *)p : *(const uint16_t *)p;
        return _mm512_set1_epi32(v);
    }
    switch (type) {
    case LB_U8:
        return _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, p));
    case LB_I16:
        return _mm512_cvtepi16_epi32(_mm256_maskz_loadu_epi16(k, p));
    default:
        return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, p));
    }
}

static int64_t lb_tsize(int32_t type) { return type == LB_U8 ? 1 : 2; }

/* out[i] = op(a[i * sa], b[i * sb]) for i < n, with sa, sb in {0, 1}; Mul products must fit
 * int32 (the caller checks: `narrow`). */
LB_TARGET_AVX512 void lb_qbinary_row_avx512(const lb_qbinary *op, const void *a, int64_t sa,
                                            const void *b, int64_t sb, void *out, int64_t n) {
    const lb_add_params *p = &op->p;
    lb_add512 av = lb_add512_load(p);
    const __m512i z1 = _mm512_set1_epi32(p->z1), z2 = _mm512_set1_epi32(p->z2);
    const int64_t ea = lb_tsize(op->a_type), eb = lb_tsize(op->b_type);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = lb_tail_mask(n - i);
        __m512i x = lb_load16((const char *)a + i * sa * ea, op->a_type, sa, k);
        __m512i y = lb_load16((const char *)b + i * sb * eb, op->b_type, sb, k);
        __m512i r;
        if (op->op == LB_QMUL) {
            __m512i prod = _mm512_mullo_epi32(_mm512_sub_epi32(x, z1), _mm512_sub_epi32(y, z2));
            r = lb_requant_v512(&p->out, &av.out, prod);
        } else {
            r = lb_add_v512(p, &av, x, y);
        }
        lb_store_v512(out, op->out_type, i, r, k);
    }
}
#endif

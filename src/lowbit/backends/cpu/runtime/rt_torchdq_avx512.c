/* PyTorch's dynamic activation quantization on the AVX-512 path: the portable passes of
 * rt_torchdq_impl.h compiled for AVX-512 (the same IEEE operations per value). */
#include "rt_tf_internal.h"

#if LB_HAVE_AVX512
int lb_tdq_range_avx512(const float *x, int64_t n, float *lo, float *hi);
void lb_tdq_codes_avx512(const float *x, int64_t n, double inv, double z, uint8_t *q);

#define LB_TDQ_SUFFIX avx512
#define LB_TDQ_TARGET LB_TARGET_AVX512
#include "rt_torchdq_impl.h"
#undef LB_TDQ_SUFFIX
#undef LB_TDQ_TARGET
#endif

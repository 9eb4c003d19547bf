/* PyTorch's erf-form GELU on the AVX-512 path: the portable span of rt_torchgelu_impl.h
 * compiled for AVX-512 (the same IEEE operations per value). */
#include "rt_tf_internal.h"

#include <math.h>

#if LB_HAVE_AVX512
#define LB_TGELU_CHUNK 1024
void lb_tgelu_span_avx512(int64_t n, const float *x, float divisor, float one, float half,
                          float *y);

#define LB_TGELU_SUFFIX avx512
#define LB_TGELU_TARGET LB_TARGET_AVX512
#define LB_TGELU_MAD(a, b, c) __builtin_fma((a), (b), (c))
#include "rt_torchgelu_impl.h"
#undef LB_TGELU_SUFFIX
#undef LB_TGELU_TARGET
#undef LB_TGELU_MAD
#endif

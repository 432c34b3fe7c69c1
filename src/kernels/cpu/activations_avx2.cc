// silu_mul on AVX2/FMA (compiled with -mavx2 -mfma -mf16c; entered only with an Isa >= kAvx2):
// ref::silu_f32 on 8 lanes, the same operations in the same order (simd::exp8 is ref::exp_f32's).
#include <immintrin.h>

#include "kernels/cpu/kernels_impl.h"
#include "kernels/cpu/simd_avx2.h"

namespace pagellm::kernels::avx2 {

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
  const __m256 limit = _mm256_set1_ps(ref::kSiluExpMax);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 x = _mm256_xor_ps(g, sign);  // -g
    // (limit < x ? limit : x): NaN stays NaN, as in exp_f32; x > limit gives -0 below.
    const __m256 e = simd::exp8(_mm256_min_ps(limit, x));
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
    const __m256 big = _mm256_cmp_ps(x, limit, _CMP_GT_OQ);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_blendv_ps(s, sign, big), _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = ref::silu_f32(gate[i]) * up[i];
}

}  // namespace pagellm::kernels::avx2

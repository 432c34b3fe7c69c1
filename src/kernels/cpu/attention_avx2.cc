// AVX2/FMA/F16C helpers for paged attention and the KV cache (compiled with -mavx2 -mfma -mf16c;
// entered only when use_avx2()).
#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/kernels_impl.h"

namespace pagellm::kernels::avx2 {

void axpy_f32(float a, const float* v, float* acc, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(v + i), _mm256_loadu_ps(acc + i)));
  }
  for (; i < n; ++i) acc[i] = std::fma(a, v[i], acc[i]);
}

void axpy_f16(float a, const uint16_t* v, float* acc, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i)));
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(va, vv, _mm256_loadu_ps(acc + i)));
  }
  for (; i < n; ++i) acc[i] = std::fma(a, _cvtsh_ss(v[i]), acc[i]);
}

void convert_f32_to_f16(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

}  // namespace pagellm::kernels::avx2

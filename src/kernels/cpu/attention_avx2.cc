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

namespace {

inline __m256 load_v(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load_v(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// out[i] = sum_j a[j] * v[off[j] + i], j ascending from 0, one FMA per element and key: the
// sequence of axpy_*. kVec vectors of 8 stay in registers across all keys.
template <int kVec, typename T>
void pv_regs(const T* v, const int64_t* off, int64_t n, const float* a, float* out) {
  __m256 acc[kVec];
  for (int i = 0; i < kVec; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const __m256 va = _mm256_set1_ps(a[j]);
    const T* vj = v + off[j];
#pragma GCC unroll 16
    for (int i = 0; i < kVec; ++i) acc[i] = _mm256_fmadd_ps(va, load_v(vj + 8 * i), acc[i]);
  }
  for (int i = 0; i < kVec; ++i) _mm256_storeu_ps(out + 8 * i, acc[i]);
}

template <typename T>
void pv(const T* v, const int64_t* off, int64_t n, const float* a, int64_t hd, float* out) {
  switch (hd) {
    case 32: return pv_regs<4>(v, off, n, a, out);
    case 64: return pv_regs<8>(v, off, n, a, out);
    case 96: return pv_regs<12>(v, off, n, a, out);
    case 128: return pv_regs<16>(v, off, n, a, out);
    default: break;
  }
  for (int64_t i = 0; i < hd; ++i) out[i] = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    if constexpr (sizeof(T) == 4) {
      axpy_f32(a[j], reinterpret_cast<const float*>(v + off[j]), out, hd);
    } else {
      axpy_f16(a[j], reinterpret_cast<const uint16_t*>(v + off[j]), out, hd);
    }
  }
}

}  // namespace

void pv_accumulate_f32(const float* v, const int64_t* off, int64_t n, const float* a, int64_t hd, float* out) {
  pv(v, off, n, a, hd, out);
}
void pv_accumulate_f16(const uint16_t* v, const int64_t* off, int64_t n, const float* a, int64_t hd, float* out) {
  pv(v, off, n, a, hd, out);
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

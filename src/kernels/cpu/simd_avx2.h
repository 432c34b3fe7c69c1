// Internal to src/kernels/cpu: the AVX2/FMA/F16C helpers shared by the *_avx2.cc and *_avx512*.cc
// files (include only from those: the intrinsics need their -m flags, CMakeLists.txt).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/kernels_impl.h"

namespace pagellm::kernels::simd {

// Sum of the 8 lanes in a fixed order: (lo4 + hi4), then (0 + 2, 1 + 3), then their sum.
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// ref::exp_f32 on 8 lanes, the same operations in the same order.
inline __m256 exp8(__m256 x) {
  const __m256 round = _mm256_set1_ps(ref::kExpRound);
  const __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(ref::kExpLog2e), round), round);
  const __m256 r =
      _mm256_fmadd_ps(n, _mm256_set1_ps(-ref::kExpLn2Lo), _mm256_fmadd_ps(n, _mm256_set1_ps(-ref::kExpLn2Hi), x));
  __m256 p = _mm256_set1_ps(ref::kExpP[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ref::kExpP[i]));
  const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 v = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  // x < kExpMin (and -inf) -> 0; NaN fails the ordered compare and stays NaN.
  return _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(ref::kExpMin), _CMP_LT_OQ), v);
}

// r[i] = element i of rows 0..7 (the 8 x 8 transpose of rows r[0..8)).
inline void transpose8(__m256 (&r)[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {  // u[4 i + m], 128-bit half L: element 4 L + m of rows 4 i .. 4 i + 3
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int m = 0; m < 4; ++m) {
    r[m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x20);
    r[4 + m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x31);
  }
}

// Loads of weight elements as f32 (exact), one struct per element type:
// load8(p) = elements p[0 .. 8) in a ymm, scalar(p) = p[0].
struct F32Load {
  using T = float;
  static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
  static float scalar(const float* p) { return *p; }
};
struct F16Load {
  using T = uint16_t;
  static __m256 load8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float scalar(const uint16_t* p) { return _cvtsh_ss(*p); }
};
struct BF16Load {
  using T = uint16_t;
  static __m256 load8(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float scalar(const uint16_t* p) { return bf16_to_fp32(*p); }
};

// Prefetches `ahead` bytes ahead, into L1 (kHint _MM_HINT_T0) or L2 (_MM_HINT_T1), the weights of
// steps [k, k + kSteps) of R repacked float tiles (16 rows of T a step): tile i's step k at
// w + i * ts + k * ss elements. Tiles side by side in a group (kSideBySide, ts = 16:
// kernel_traits.h tile_place): the lines their steps cover; tiles one after the other: one line
// per tile (kSteps of a tile being one 64-byte line).
// (A compile-time choice: GCC 12 dropped every prefetch of a helper that chose at run time.)
template <bool kSideBySide, int R, int64_t kSteps, decltype(_MM_HINT_T0) kHint = _MM_HINT_T0, typename T>
inline void prefetch_tile_steps(const T* w, int64_t ts, int64_t ss, int64_t k, int64_t ahead) {
  if constexpr (kSideBySide) {
    constexpr int64_t kLines = (R * 16 * static_cast<int64_t>(sizeof(T)) + 63) / 64;
    for (int64_t s = 0; s < kSteps; ++s) {
      for (int64_t q = 0; q < kLines; ++q)
        _mm_prefetch(reinterpret_cast<const char*>(w + (k + s) * ss) + 64 * q + ahead, kHint);
    }
  } else {
    for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(w + r * ts + k * ss) + ahead, kHint);
  }
}

}  // namespace pagellm::kernels::simd

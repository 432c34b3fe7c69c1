// AVX-512 q . k tiles for paged attention with an F32 KV cache (compiled for AVX-512 F/BW/VL/DQ,
// CMakeLists.txt; entered only when the KvLayerView's isa >= kAvx512; contract in
// kernels_avx512.h).
//
// avx2::dot_f32 (attention_avx2.cc) keeps 4 accumulators of 8 lanes per output (elements
// i + 8a + l of each step of 32 go to accumulator a, lane l), then 8-element steps into
// accumulator 0, then hsum8((a0 + a1) + (a2 + a3)) and a scalar FMA tail. Here a zmm holds two of
// them, [a0 | a1] and [a2 | a3]: each lane sees the same FMA sequence, and the reduction takes the
// halves apart in the same order, so the bits are the same; a tile of R keys x 2 query heads keeps
// 4 R accumulators in registers and loads each key vector once for both heads.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "kernels/cpu/kernels_avx512.h"
#include "kernels/cpu/simd_avx2.h"

namespace pagellm::kernels::avx512 {
namespace {

constexpr int64_t kPrefetchBytes = 8192;

// R keys (key r at k + r * ks) x 2 queries (at q, q + n): out[r * 2 + j].
template <int R>
void qk_tile(const float* k, int64_t ks, const float* q, int64_t n, float* out) {
  constexpr int M = 2;
  __m512 a01[R][M], a23[R][M];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < M; ++j) a01[r][j] = a23[r][j] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 w01[R], w23[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const char* kr = reinterpret_cast<const char*>(k + r * ks + i);
      _mm_prefetch(kr + kPrefetchBytes, _MM_HINT_T0);  // (the keys of later slots)
      _mm_prefetch(kr + kPrefetchBytes + 64, _MM_HINT_T0);
      w01[r] = _mm512_loadu_ps(k + r * ks + i);
      w23[r] = _mm512_loadu_ps(k + r * ks + i + 16);
    }
#pragma GCC unroll 2
    for (int j = 0; j < M; ++j) {
      const __m512 x01 = _mm512_loadu_ps(q + j * n + i), x23 = _mm512_loadu_ps(q + j * n + i + 16);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        a01[r][j] = _mm512_fmadd_ps(w01[r], x01, a01[r][j]);
        a23[r][j] = _mm512_fmadd_ps(w23[r], x23, a23[r][j]);
      }
    }
  }
  for (; i + 8 <= n; i += 8) {  // into accumulator 0 = lanes 0..7 of a01
    for (int r = 0; r < R; ++r) {
      const __m512 w0 = _mm512_castps256_ps512(_mm256_loadu_ps(k + r * ks + i));
      for (int j = 0; j < M; ++j) {
        const __m512 xv = _mm512_castps256_ps512(_mm256_loadu_ps(q + j * n + i));
        a01[r][j] = _mm512_mask3_fmadd_ps(w0, xv, a01[r][j], 0x00FF);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < M; ++j) {
      const __m256 a0 = _mm512_castps512_ps256(a01[r][j]), a1 = _mm512_extractf32x8_ps(a01[r][j], 1);
      const __m256 a2 = _mm512_castps512_ps256(a23[r][j]), a3 = _mm512_extractf32x8_ps(a23[r][j], 1);
      float s = simd::hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
      for (int64_t e = i; e < n; ++e) s = std::fma(k[r * ks + e], q[j * n + e], s);
      out[r * M + j] = s;
    }
  }
}

}  // namespace

void qk_f32_pair_tile(const float* k, int64_t k_stride, int r, const float* q, int64_t n, float* out) {
  if (r == 4) return qk_tile<4>(k, k_stride, q, n, out);
  PAGELLM_CHECK(r == 1, "qk_f32_pair_tile: r " + std::to_string(r));
  qk_tile<1>(k, k_stride, q, n, out);
}

}  // namespace pagellm::kernels::avx512

// The "wide" F32/F16/BF16 arithmetic (ref::dot_*_wide: 16 lanes, element i to lane i % 16, FMA in
// order, then hsum8(lanes 0..7 + lanes 8..15)) on AVX2 CPUs, bit-identical to the AVX-512 tiles
// of matmul_float_avx512.cc: a 16-lane accumulator is a pair of ymm (lanes 0..7, 8..15), so each
// lane sees the same FMAs and the reduction is the same.
//
// Register budget (16 ymm): a tile of 2 rows x 3 tokens keeps 12 accumulators; each half-step
// (8 elements) loads 2 weight vectors and 3 activation vectors for 6 FMAs. Activations come
// packed per tile of 3 tokens (pack_wide: the 3 vectors of one step adjacent), rows are walked in
// blocks of kWideBlockRows that stay in L2 while every token tile runs over their sub-blocks of
// kWideSubRows, and the next block is prefetched into L2 meanwhile (as the AVX-512 path, without
// the conversion to f32).
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/kernels_impl.h"

namespace pagellm::kernels::avx2 {
namespace {

constexpr int64_t kPrefetchBytes = 8192;

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

struct F32W {
  using T = float;
  static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
  static float scalar(const float* p) { return *p; }
};
struct F16W {
  using T = uint16_t;
  static __m256 load8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float scalar(const uint16_t* p) { return _cvtsh_ss(*p); }
};
struct BF16W {
  using T = uint16_t;
  static __m256 load8(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float scalar(const uint16_t* p) { return bf16_to_fp32(*p); }
};

// R rows x M tokens (packed tile xp), all n elements -> y[k * y_stride + r]. `stream`: prefetch
// ahead in each row (rows coming from DRAM); pf: prefetch pf_lines lines into L2, one per step.
template <typename L, int R, int M>
void wide_tile(const typename L::T* w, int64_t ws, const float* xp, int64_t n, float* y, int64_t y_stride,
               bool stream, const char* pf, int64_t pf_lines) {
  __m256 lo[R][M], hi[R][M];
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < M; ++k) lo[r][k] = hi[r][k] = _mm256_setzero_ps();
  const int64_t n16 = n - n % 16;
  const float* xs = xp;
  for (int64_t i = 0; i < n16; i += 16, xs += M * 16) {
    if (i / 16 < pf_lines) _mm_prefetch(pf + i / 16 * 64, _MM_HINT_T1);
    if (stream && i % (64 / sizeof(typename L::T)) == 0) {
      for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(w + r * ws + i) + kPrefetchBytes, _MM_HINT_T0);
    }
    __m256 wv[R];
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) wv[r] = L::load8(w + r * ws + i);
#pragma GCC unroll 3
    for (int k = 0; k < M; ++k) {
      const __m256 xv = _mm256_load_ps(xs + k * 16);
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) lo[r][k] = _mm256_fmadd_ps(wv[r], xv, lo[r][k]);
    }
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) wv[r] = L::load8(w + r * ws + i + 8);
#pragma GCC unroll 3
    for (int k = 0; k < M; ++k) {
      const __m256 xv = _mm256_load_ps(xs + k * 16 + 8);
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) hi[r][k] = _mm256_fmadd_ps(wv[r], xv, hi[r][k]);
    }
  }
  if (n16 < n) {  // the partial step: only its lanes change (blend, as the AVX-512 mask)
    alignas(32) int32_t lanes[16];
    for (int l = 0; l < 16; ++l) lanes[l] = n16 + l < n ? -1 : 0;
    const __m256 mlo = _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(lanes)));
    const __m256 mhi = _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(lanes + 8)));
    for (int r = 0; r < R; ++r) {
      alignas(32) float wt[16] = {};
      for (int64_t j = n16; j < n; ++j) wt[j - n16] = L::scalar(w + r * ws + j);
      const __m256 wl = _mm256_load_ps(wt), wh = _mm256_load_ps(wt + 8);
      for (int k = 0; k < M; ++k) {
        lo[r][k] = _mm256_blendv_ps(lo[r][k], _mm256_fmadd_ps(wl, _mm256_load_ps(xs + k * 16), lo[r][k]), mlo);
        hi[r][k] = _mm256_blendv_ps(hi[r][k], _mm256_fmadd_ps(wh, _mm256_load_ps(xs + k * 16 + 8), hi[r][k]), mhi);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < M; ++k) y[k * y_stride + r] = hsum8(_mm256_add_ps(lo[r][k], hi[r][k]));
}

template <typename L, int M>
void wide_sub(const typename L::T* w, int64_t ws, int64_t sub, const float* xp, int64_t n, float* y, int64_t y_stride,
              bool stream, const char*& pf, int64_t& pf_lines) {
  const int64_t steps = n / 16;
  for (int64_t r = 0; r < sub;) {
    const int64_t lines = std::min(pf_lines, steps);
    if (r + 2 <= sub) {
      wide_tile<L, 2, M>(w + r * ws, ws, xp, n, y + r, y_stride, stream, pf, lines);
      r += 2;
    } else {
      wide_tile<L, 1, M>(w + r * ws, ws, xp, n, y + r, y_stride, stream, pf, lines);
      r += 1;
    }
    pf += lines * 64;
    pf_lines -= lines;
  }
}

template <typename L>
void wide_rows(const typename L::T* w, int64_t ws, int64_t rows, const float* xp, int64_t n, int64_t num_tokens,
               float* y, int64_t y_stride) {
  const int64_t steps = (n + 15) / 16;
  const int64_t tiles = (num_tokens + kWideTileTokens - 1) / kWideTileTokens;
  // Several token tiles: blocks of kWideBlockRows rows stay in L2 while every token tile runs over
  // their 16-row sub-blocks, so a tile's activations come from L3 once per block.
  const int64_t block_rows = tiles > 1 ? kWideBlockRows : kWideSubRows;
  for (int64_t s = 0; s < rows; s += block_rows) {
    const int64_t blk = std::min<int64_t>(block_rows, rows - s);
    const char* pf = reinterpret_cast<const char*>(w + (s + blk) * ws);
    const int64_t next_rows = std::min<int64_t>(block_rows, rows - s - blk);
    int64_t pf_lines = tiles > 1 ? (next_rows * ws * static_cast<int64_t>(sizeof(typename L::T)) + 63) / 64 : 0;
    const bool stream = tiles == 1 || s == 0;
    for (int64_t t0 = 0; t0 < num_tokens; t0 += kWideTileTokens) {
      const int m = static_cast<int>(std::min<int64_t>(kWideTileTokens, num_tokens - t0));
      const float* xt = xp + t0 * steps * 16;
      for (int64_t s1 = 0; s1 < blk; s1 += kWideSubRows) {
        const int64_t sub = std::min<int64_t>(kWideSubRows, blk - s1);
        const typename L::T* ws0 = w + (s + s1) * ws;
        float* yt = y + t0 * y_stride + s + s1;
        switch (m) {
          case 1: wide_sub<L, 1>(ws0, ws, sub, xt, n, yt, y_stride, stream, pf, pf_lines); break;
          case 2: wide_sub<L, 2>(ws0, ws, sub, xt, n, yt, y_stride, stream, pf, pf_lines); break;
          default: wide_sub<L, 3>(ws0, ws, sub, xt, n, yt, y_stride, stream, pf, pf_lines); break;
        }
      }
    }
  }
}

}  // namespace

void pack_wide(GgmlType type, const float* x, int64_t num_tokens, int64_t n, float* out) {
  const int64_t steps = (n + 15) / 16;
  for (int64_t t0 = 0; t0 < num_tokens; t0 += kWideTileTokens) {
    const int m = static_cast<int>(std::min<int64_t>(kWideTileTokens, num_tokens - t0));
    float* tile = out + t0 * steps * 16;
    for (int k = 0; k < m; ++k) {
      const float* xk = x + (t0 + k) * n;
      for (int64_t j = 0; j < steps; ++j) {
        float* dst = tile + (j * m + k) * 16;
        const int64_t len = std::min<int64_t>(16, n - 16 * j);
        for (int64_t e = 0; e < 16; ++e) {
          const float v = e < len ? xk[16 * j + e] : 0.0f;
          dst[e] = type == GgmlType::F16 ? _cvtsh_ss(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT))
                   : type == GgmlType::BF16 ? bf16_to_fp32(fp32_to_bf16(v))
                                            : v;
        }
      }
    }
  }
}

void dot_wide_rows(GgmlType type, const void* w, int64_t w_stride, int64_t rows, const float* xp, int64_t n,
                   int64_t num_tokens, float* y, int64_t y_stride) {
  switch (type) {
    case GgmlType::F32:
      return wide_rows<F32W>(static_cast<const float*>(w), w_stride, rows, xp, n, num_tokens, y, y_stride);
    case GgmlType::F16:
      return wide_rows<F16W>(static_cast<const uint16_t*>(w), w_stride, rows, xp, n, num_tokens, y, y_stride);
    case GgmlType::BF16:
      return wide_rows<BF16W>(static_cast<const uint16_t*>(w), w_stride, rows, xp, n, num_tokens, y, y_stride);
    default: break;
  }
}

}  // namespace pagellm::kernels::avx2

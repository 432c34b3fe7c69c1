// AVX2 matmul tiles on repacked Q8_0 / Q4_0 weights (layout and arithmetic: kernels_r16.h), for
// CPUs without AVX-512 VNNI. Bit-identical to matmul_r16_avx512.cc: both form the exact int32
// block sum of each row, then one convert / scale / FMA per 8 rows.
//
// A ymm holds 8 rows (lanes) of a 64-byte vector of the layout. There is no VPDPBUSD here:
// VPMADDUBSW multiplies the unsigned weight bytes by the 4 broadcast activation bytes into int16
// pairs, VPMADDWD against ones adds the pairs into the int32 lane.
//   Q4_0: weights are nibbles 0..15, a pair is at most 2 * 15 * 127 = 3810 in magnitude, so the 8
//         vectors of a block add up in int16 (<= 30480) before one VPMADDWD; the -8 offset comes
//         in through XBlock::init.
//   Q8_0: the layout stores w + 128; VPMADDUBSW would saturate on it (2 * 255 * 127), so the
//         signed weight w is split as |w| (unsigned) and the activation takes w's sign
//         (VPSIGNB), |pair| <= 2 * 128 * 127 = 32512; each vector goes to int32 on its own, and
//         init (the +128 correction) is not used.
#include <immintrin.h>

#include "kernels/cpu/dispatch_m.h"
#include "kernels/cpu/kernels_r16.h"

namespace pagellm::kernels::r16 {
namespace {

// As matmul_r16_avx512vnni.cc: 8 KiB ahead, into L2 (T1) in the one-pass tile of decode
// (PAGELLM_NO_AVX512=1 on the model 207 Xeon, alternating runs: Q4_0 1.04x, Q8_0 1.05x median;
// not measured on AMD). half_m's first pass, a prefill's, keeps T0.
constexpr int64_t kPrefetchBytes = 8192;

template <bool kQ4>
constexpr int64_t group_bytes() {
  return kRows * static_cast<int64_t>(kQ4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0));
}

inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Rows 8h .. 8h + 7 of block group g against M tokens' blocks b: acc[k] += ...
template <bool kQ4, int M>
inline void half_block(const uint8_t* g, int h, const XBlock* x, int64_t xs, int64_t b, __m256* acc) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16 * h)));
  const uint8_t* q = g + 2 * kRows + 32 * h;
  __m256i wv[8];
  if constexpr (kQ4) {
    const __m256i nib = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m256i z = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * v));
      wv[v] = _mm256_and_si256(z, nib);
      wv[v + 4] = _mm256_and_si256(_mm256_srli_epi16(z, 4), nib);
    }
  } else {
    const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {  // the signed weight
      wv[c] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * c)), bias);
    }
  }
#pragma GCC unroll 4
  for (int k = 0; k < M; ++k) {
    const XBlock& xb = x[k * xs + b];
    __m256i isum;
    if constexpr (kQ4) {
      __m256i s16 = _mm256_maddubs_epi16(wv[0], bcast4(xb.qs));
#pragma GCC unroll 8
      for (int c = 1; c < 8; ++c) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(wv[c], bcast4(xb.qs + 4 * c)));
      isum = _mm256_add_epi32(_mm256_madd_epi16(s16, ones), _mm256_set1_epi32(xb.init));
    } else {
      isum = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(wv[c]), _mm256_sign_epi8(bcast4(xb.qs + 4 * c), wv[c]));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, ones));
      }
    }
    const __m256 s = _mm256_mul_ps(dw, _mm256_set1_ps(xb.d));
    acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), s, acc[k]);
  }
}

// A tile (both halves, one pass over its blocks) x M <= 2 tokens: 4 accumulators + 8 weight
// vectors of the 16 ymm registers.
template <bool kQ4, int M>
void tile_m(const uint8_t* tile, const XBlock* x, int64_t xs, int64_t nb, float* out) {
  __m256 acc0[M], acc1[M];
  for (int k = 0; k < M; ++k) acc0[k] = acc1[k] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* g = tile + b * group_bytes<kQ4>();
    for (int64_t o = 0; o < group_bytes<kQ4>(); o += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(g + kPrefetchBytes + o), _MM_HINT_T1);
    }
    half_block<kQ4, M>(g, 0, x, xs, b, acc0);
    half_block<kQ4, M>(g, 1, x, xs, b, acc1);
  }
  for (int k = 0; k < M; ++k) {
    _mm256_storeu_ps(out + k * kRows, acc0[k]);
    _mm256_storeu_ps(out + k * kRows + 8, acc1[k]);
  }
}

// One half of a tile (rows 8h .. 8h + 7) x M <= 4 tokens, over all its blocks: 4 accumulators
// + 8 weight vectors; a tile's bytes are read twice (the second half from cache).
template <bool kQ4, int M>
void half_m(const uint8_t* tile, int h, const XBlock* x, int64_t xs, int64_t nb, float* out) {
  __m256 acc[M];
  for (int k = 0; k < M; ++k) acc[k] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* g = tile + b * group_bytes<kQ4>();
    if (h == 0) {  // the first pass may read the tile from DRAM (the others find it in cache)
      for (int64_t o = 0; o < group_bytes<kQ4>(); o += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(g + kPrefetchBytes + o), _MM_HINT_T0);
      }
    }
    half_block<kQ4, M>(g, h, x, xs, b, acc);
  }
  for (int k = 0; k < M; ++k) _mm256_storeu_ps(out + k * kRows + 8 * h, acc[k]);
}

// Up to 2 tokens: both halves in one pass (the tile streams once, decode). More: half passes of
// up to 4 tokens (the weights are unpacked once per 4 tokens instead of per 2; microbench,
// 1 thread, Q4_0 at 64 tokens 85-115 -> 115-137 GFLOP/s).
template <bool kQ4>
void dispatch(const void* tile, const XBlock* x, int64_t xs, int64_t nb, int m, float* out) {
  const auto* t = static_cast<const uint8_t*>(tile);
  if (m <= 2) {
    for (int k0 = 0; k0 < m; k0 += 2) {
      if (m - k0 >= 2) {
        tile_m<kQ4, 2>(t, x + k0 * xs, xs, nb, out + k0 * kRows);
      } else {
        tile_m<kQ4, 1>(t, x + k0 * xs, xs, nb, out + k0 * kRows);
      }
    }
    return;
  }
  for (int k0 = 0; k0 < m; k0 += 4) {
    const XBlock* xk = x + k0 * xs;
    float* o = out + k0 * kRows;
    for (int h = 0; h < 2; ++h) {
      with_m<4>(m - k0, [&](auto mc) { half_m<kQ4, mc.value>(t, h, xk, xs, nb, o); });
    }
  }
}

}  // namespace

void dot_q4_0_tile_avx2(const void* tile, const XBlock* x, int64_t xs, int64_t nb, int m, float* out) {
  dispatch<true>(tile, x, xs, nb, m, out);
}
void dot_q8_0_tile_avx2(const void* tile, const XBlock* x, int64_t xs, int64_t nb, int m, float* out) {
  dispatch<false>(tile, x, xs, nb, m, out);
}

}  // namespace pagellm::kernels::r16

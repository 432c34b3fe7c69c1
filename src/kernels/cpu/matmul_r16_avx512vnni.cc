// AVX-512 VNNI matmul tiles on repacked Q8_0 / Q4_0 weights (layout and arithmetic:
// kernels_r16.h, WeightLayout::kRepacked16). Entered only with Isa::kAvx512Vnni.
//
// One zmm lane per weight row: VPDPBUSD multiplies 4 unsigned weight bytes of 16 rows by 4
// broadcast activation bytes, so 8 instructions make the exact int32 block sums of 16 rows for
// one token, and the float work (convert, scale, FMA) is one instruction each per 16 rows,
// against 16 x 4 for ggml's lane-wise arithmetic.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/dispatch_m.h"
#include "kernels/cpu/kernels_r16.h"

namespace pagellm::kernels::r16 {
namespace {

// Weight rows are read once per decode step from DRAM: the one-tile kernel (a few tokens, or a
// decode's odd last tile) prefetches 8 KiB ahead (see matmul_seq_avx512.cc; the hardware
// prefetcher alone leaves a thread's stream ~40% short here), into L2 only (T1): a T0 prefetch
// holds an L1 fill buffer until the line reaches L1, and Q4_0 decode on the 2-vCPU Xeon (model
// 207) ran ~5-9% faster with T1 in alternating runs.
constexpr int64_t kPrefetchBytes = 8192;
// The two-tile decode kernel's streams each prefetch 1 KiB ahead into L1. Xeon model 167, Q4_0
// TinyLlama decode, 2 threads, 3 alternating rounds: 43.2-45.8 tokens/s; 2 KiB into L1 or L2 the
// same (43.0-45.7), 512 bytes 41.7-42.7. Q8_0 (544-byte groups), 3 rounds: 25.5-26.9, 2 KiB
// into L1 24.5-25.3, into L2 24.8-25.2.
constexpr int64_t kPairPrefetchBytes = 1024;

template <bool kQ4>
constexpr int64_t group_bytes() {
  return kRows * static_cast<int64_t>(kQ4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0));
}

// The 8 unsigned byte vectors of a block group's quants q (kernels_r16.h): vector c, lane r =
// row r's 4 weight bytes that meet activation bytes 4c .. 4c + 3.
template <bool kQ4>
inline void load_quants(const uint8_t* q, __m512i wv[8]) {
  if constexpr (kQ4) {
    const __m512i nib = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m512i z = _mm512_loadu_si512(q + 64 * v);
      wv[v] = _mm512_and_si512(z, nib);
      wv[v + 4] = _mm512_and_si512(_mm512_srli_epi16(z, 4), nib);
    }
  } else {
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) wv[c] = _mm512_loadu_si512(q + 64 * c);
  }
}

template <bool kQ4, int M>
void r16_tile(const uint8_t* tile, const XBlock* x, int64_t xs, int64_t nb, float* out) {
  // Integer sums are exact, so splitting a block's 8 VPDPBUSD over KI chains changes nothing;
  // it hides their latency when few tokens share the weights.
  constexpr int KI = M == 1 ? 4 : 2;
  __m512 acc[M];
  for (int k = 0; k < M; ++k) acc[k] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* g = tile + b * group_bytes<kQ4>();
    for (int64_t o = 0; o < group_bytes<kQ4>(); o += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(g + kPrefetchBytes + o), _MM_HINT_T1);
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g)));
    __m512i wv[8];
    load_quants<kQ4>(g + 2 * kRows, wv);
#pragma GCC unroll 8
    for (int k = 0; k < M; ++k) {
      const XBlock& xb = x[k * xs + b];
      __m512i ia[KI];
      ia[0] = _mm512_set1_epi32(xb.init);
      for (int i = 1; i < KI; ++i) ia[i] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        // 4 activation bytes to every lane, straight from memory (a load-port broadcast).
        const __m512i xc = _mm512_broadcastd_epi32(_mm_loadu_si32(xb.qs + 4 * c));
        ia[c % KI] = _mm512_dpbusd_epi32(ia[c % KI], wv[c], xc);
      }
      __m512i isum = ia[0];
      for (int i = 1; i < KI; ++i) isum = _mm512_add_epi32(isum, ia[i]);
      const __m512 s = _mm512_mul_ps(dw, _mm512_set1_ps(xb.d));
      acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), s, acc[k]);
    }
  }
  for (int k = 0; k < M; ++k) _mm512_storeu_ps(out + k * kRows, acc[k]);
}

// One token, two tiles at once: tile a and tile b (r16_tiles pairs tile i of a range with tile
// i + half), so a thread reads two DRAM streams, each prefetched kPairPrefetchBytes ahead into
// L1. Two streams read faster than one on the model 167 Xeon: a plain sum over each thread's
// half of 1 GiB, 2 threads, read 34-36 GB/s as two interleaved streams against 30-31 as one (the
// bandwidth probe, cli/bandwidth_probe.cc, now tries both), and TinyLlama decode ran Q4_0
// 40.5-41.9 -> 43.9-45.0 tokens/s, Q8_0 23.7-24.1 -> 25.5-25.7 (alternating runs, 3 and 2
// rounds). The activation bytes are broadcast once per block for both tiles. Each row's sums
// are r16_tile<kQ4, 1>'s (exact integer block sums, the same float steps): the same bits.
template <bool kQ4>
void r16_tile_pair(const uint8_t* tile_a, const uint8_t* tile_b, const XBlock* x, int64_t nb, float* out_a,
                   float* out_b) {
  const uint8_t* const tiles[2] = {tile_a, tile_b};
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int64_t b = 0; b < nb; ++b) {
    const XBlock& xb = x[b];
    __m512i xc[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) xc[c] = _mm512_broadcastd_epi32(_mm_loadu_si32(xb.qs + 4 * c));
    const __m512 xd = _mm512_set1_ps(xb.d);
#pragma GCC unroll 2
    for (int t = 0; t < 2; ++t) {
      const uint8_t* g = tiles[t] + b * group_bytes<kQ4>();
      for (int64_t o = 0; o < group_bytes<kQ4>(); o += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(g + kPairPrefetchBytes + o), _MM_HINT_T0);
      }
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g)));
      __m512i isum;
      if constexpr (kQ4) {
        // High nibbles in place (16 x the nibble): VPDPBUSD sums 16 x the products exactly, and
        // an arithmetic shift by 4 divides that multiple of 16 exactly, so isum is the same
        // integer with one instruction less per 64 bytes (no shift of the bytes before the
        // mask). Per-token A/B (matmul.cc's method), Q4_0 decode: 1.008-1.013x.
        const __m512i lo_mask = _mm512_set1_epi8(0x0F), hi_mask = _mm512_set1_epi8(static_cast<char>(0xF0));
        __m512i lo = _mm512_set1_epi32(xb.init), hi16 = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
          const __m512i z = _mm512_loadu_si512(g + 2 * kRows + 64 * v);
          lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(z, lo_mask), xc[v]);
          hi16 = _mm512_dpbusd_epi32(hi16, _mm512_and_si512(z, hi_mask), xc[v + 4]);
        }
        isum = _mm512_add_epi32(lo, _mm512_srai_epi32(hi16, 4));
      } else {
        __m512i wv[8];
        load_quants<kQ4>(g + 2 * kRows, wv);
        __m512i ia[2] = {_mm512_set1_epi32(xb.init), _mm512_setzero_si512()};
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) ia[c % 2] = _mm512_dpbusd_epi32(ia[c % 2], wv[c], xc[c]);
        isum = _mm512_add_epi32(ia[0], ia[1]);
      }
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, xd), acc[t]);
    }
  }
  _mm512_storeu_ps(out_a, acc[0]);
  _mm512_storeu_ps(out_b, acc[1]);
}

template <bool kQ4>
void dispatch(const void* tile, const XBlock* x, int64_t xs, int64_t nb, int m, float* out) {
  const auto* t = static_cast<const uint8_t*>(tile);
  with_m<kMaxTileTokens>(m, [&](auto mc) { r16_tile<kQ4, mc.value>(t, x, xs, nb, out); });
}

}  // namespace

void dot_q4_0_tile_avx512(const void* tile, const XBlock* x, int64_t xs, int64_t nb, int m, float* out) {
  dispatch<true>(tile, x, xs, nb, m, out);
}
void dot_q8_0_tile_avx512(const void* tile, const XBlock* x, int64_t xs, int64_t nb, int m, float* out) {
  dispatch<false>(tile, x, xs, nb, m, out);
}
void dot_q4_0_tile_pair_avx512(const void* tile_a, const void* tile_b, const XBlock* x, int64_t nb, float* out_a,
                               float* out_b) {
  r16_tile_pair<true>(static_cast<const uint8_t*>(tile_a), static_cast<const uint8_t*>(tile_b), x, nb, out_a, out_b);
}
void dot_q8_0_tile_pair_avx512(const void* tile_a, const void* tile_b, const XBlock* x, int64_t nb, float* out_a,
                               float* out_b) {
  r16_tile_pair<false>(static_cast<const uint8_t*>(tile_a), static_cast<const uint8_t*>(tile_b), x, nb, out_a, out_b);
}

}  // namespace pagellm::kernels::r16

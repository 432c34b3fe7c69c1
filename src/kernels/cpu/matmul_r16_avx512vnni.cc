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

// Weight rows are read once per decode step from DRAM: prefetch 8 KiB ahead (see
// matmul_seq_avx512.cc; the hardware prefetcher alone leaves a thread's stream ~40% short here),
// into L2 only (T1): a T0 prefetch holds an L1 fill buffer until the line reaches L1, and
// Q4_0 decode on the 2-vCPU Xeon (model 207) ran ~5-9% faster with T1 in alternating runs.
constexpr int64_t kPrefetchBytes = 8192;

template <bool kQ4>
constexpr int64_t group_bytes() {
  return kRows * static_cast<int64_t>(kQ4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0));
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
    const uint8_t* q = g + 2 * kRows;
    __m512i wv[8];
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

}  // namespace pagellm::kernels::r16

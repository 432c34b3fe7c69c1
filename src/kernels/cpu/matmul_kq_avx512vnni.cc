// AVX-512 VNNI matmul tiles on repacked K-quant weights (Q2_K .. Q6_K, IQ4_XS; layout and
// arithmetic: kernels_kq.h, decoders: kq_decoders.h). Entered only with Isa::kAvx512Vnni.
//
// One zmm lane per weight row. Per super-block the f16 factors of 16 rows convert in one
// instruction and each sub-block's 6-bit scales decode once for all tokens, one byte per row;
// per sub-block and token, VPDPBUSD multiplies 4 unsigned quant bytes (q + offset) of 16 rows by
// 4 broadcast activation bytes. The int32 sums are exact, so this order gives the oracle's
// integers, and the float steps are the oracle's.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/dispatch_m.h"
#include "kernels/cpu/kq_decoders.h"
#include "kernels/cpu/prefetch_out_of_line.h"

namespace pagellm::kernels::kq {
namespace {

// Weight rows are read once per decode step from DRAM: prefetch 8 KiB ahead (as
// matmul_r16_avx512vnni.cc), one cache line per quant step, out of line (prefetch_out_of_line.h).
constexpr int64_t kPrefetchBytes = 8192;

// The SIMD adapter of kq_decoders.h: all 16 rows of a tile in one register.
struct S512 {
  using I = __m512i;  // 16 int32 lanes, or 64 bytes: 4 per row
  using B = __m128i;  // one byte per row
  I vec(const uint8_t* p) const { return _mm512_loadu_si512(p); }
  B bytes(const uint8_t* p) const { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
  __m512 halves(const uint8_t* p) const {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  I u16_to_i32(const uint8_t* p) const {
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  I srl(I v, int n) const { return _mm512_srli_epi16(v, n); }
  B srl(B v, int n) const { return _mm_srli_epi16(v, n); }
  I sll(I v, int n) const { return _mm512_slli_epi16(v, n); }
  B sll(B v, int n) const { return _mm_slli_epi16(v, n); }
  I and8(I v, int m) const { return _mm512_and_si512(v, _mm512_set1_epi8(static_cast<char>(m))); }
  B and8(B v, int m) const { return _mm_and_si128(v, _mm_set1_epi8(static_cast<char>(m))); }
  I or8(I a, I b) const { return _mm512_or_si512(a, b); }
  B or8(B a, B b) const { return _mm_or_si128(a, b); }
  I u8_to_i32(B v) const { return _mm512_cvtepu8_epi32(v); }
  I i8_to_i32(B v) const { return _mm512_cvtepi8_epi32(v); }
  I sub32(I v, int c) const { return _mm512_sub_epi32(v, _mm512_set1_epi32(c)); }
  I srl32(I v, int n) const { return _mm512_srli_epi32(v, n); }
  I sll32(I v, int n) const { return _mm512_slli_epi32(v, n); }
  I and32(I v, int m) const { return _mm512_and_si512(v, _mm512_set1_epi32(m)); }
  I or32(I a, I b) const { return _mm512_or_si512(a, b); }
  I set32(int c) const { return _mm512_set1_epi32(c); }
  I mul32(I a, int c) const { return _mm512_mullo_epi32(a, _mm512_set1_epi32(c)); }
  I lookup16(const uint8_t* table, I idx) const {
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(bytes(table)), idx);
  }
};

// Super-block types with a min, no offset and 32-element sub-blocks (Q4_K, Q5_K): each
// sub-block's activation sum is the pair of int16 q8_K bsums at 2 s (|bsum| <= 16 x 127, a min
// <= 63), so one VPDPWSSD gives min x xsum exactly.
template <class D>
constexpr bool kMinPairs = (D::kHasMin) && (D::kOffset == 0) && (D::kQK == kQK_K) && (D::kSub == 32);

inline int32_t load_i32(const int16_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <class D, int M>
void kq_tile(const uint8_t* tile, const void* xv, int64_t xs, int64_t nb, float* out) {
  using A = Act<D::kQK>;
  const auto* x = static_cast<const typename A::Block*>(xv);
  constexpr int kSubs = D::kQK / D::kSub;
  constexpr int64_t kGroup = kRows * static_cast<int64_t>(sizeof(typename D::Block));
  const S512 v;
  __m512 acc[M];
  for (int k = 0; k < M; ++k) acc[k] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* g = tile + b * kGroup;
    __m512i isum[M], msum[M];
    for (int k = 0; k < M; ++k) isum[k] = msum[k] = _mm512_setzero_si512();
#pragma GCC unroll 16
    for (int s = 0; s < kSubs; ++s) {
      __m512i sc, mn;
      D::scale(v, g, s, sc, mn);
      // One VPDPBUSD chain per token and sub-block: the sub-blocks' chains are independent, and
      // unrolled they overlap out of order. Four chains per token (to hide VPDPBUSD's latency)
      // cost the adds that joined them. EPYC Zen 5 VM, one token, 2 threads: from cache Q6_K
      // 84 -> 105 GB/s, IQ4_XS 80 -> 114; TinyLlama Q6_K decode 44-45 -> 53-55 tokens/s.
      __m512i a[M];
      for (int k = 0; k < M; ++k) a[k] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int j = 0; j < D::kSub / 4; ++j) {
        if (const int64_t line = 64 * (s * (D::kSub / 4) + j); line < kGroup) {
          prefetch_out_of_line<(M < kMaxTileTokens)>(g + kPrefetchBytes + line, a[0]);
        }
        const __m512i u = D::quants(v, g, s, j);
        for (int k = 0; k < M; ++k) {
          const __m512i xc = _mm512_broadcastd_epi32(_mm_loadu_si32(x[k * xs + b].qs + s * D::kSub + 4 * j));
          a[k] = _mm512_dpbusd_epi32(a[k], u, xc);
        }
      }
      if constexpr (kMinPairs<D>) {
        // min x xsum as VPDPWSSD of (mn, mn) by the sub-block's two 16-element q8_K sums: the
        // same int32, without VPMULLD (two port-0 uops on Intel, where VPDPBUSD also runs only
        // on port 0).
        const __m512i mn2 = _mm512_or_si512(mn, _mm512_slli_epi32(mn, 16));
        for (int k = 0; k < M; ++k) {
          const __m512i xsum2 = _mm512_set1_epi32(load_i32(x[k * xs + b].bsums + 2 * s));
          msum[k] = _mm512_dpwssd_epi32(msum[k], mn2, xsum2);
          isum[k] = _mm512_add_epi32(isum[k], _mm512_mullo_epi32(sc, a[k]));
        }
      } else {
        for (int k = 0; k < M; ++k) {
          const int32_t xsum = A::xsum(x[k * xs + b], s, D::kSub);
          if constexpr (D::kOffset != 0) a[k] = _mm512_sub_epi32(a[k], _mm512_set1_epi32(D::kOffset * xsum));
          isum[k] = _mm512_add_epi32(isum[k], _mm512_mullo_epi32(sc, a[k]));
          if constexpr (D::kHasMin)
            msum[k] = _mm512_add_epi32(msum[k], _mm512_mullo_epi32(mn, _mm512_set1_epi32(xsum)));
        }
      }
    }
    const __m512 d = v.halves(field(g, D::kD));
    const __m512 dm = D::kNegMin ? _mm512_sub_ps(_mm512_setzero_ps(), v.halves(field(g, D::kDmin)))
                                 : v.halves(field(g, D::kDmin));  // -dmin or +m
    for (int k = 0; k < M; ++k) {
      const __m512 dx = _mm512_set1_ps(x[k * xs + b].d);
      acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[k]), _mm512_mul_ps(d, dx), acc[k]);
      if constexpr (D::kHasMin) acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum[k]), _mm512_mul_ps(dm, dx), acc[k]);
    }
  }
  for (int k = 0; k < M; ++k) _mm512_storeu_ps(out + k * kRows, acc[k]);
}

}  // namespace

template <GgmlType T>
void dot_tile_avx512(const void* tile, const void* x, int64_t xs, int64_t nb, int m, float* out) {
  const auto* t = static_cast<const uint8_t*>(tile);
  with_m<kMaxTileTokens>(m, [&](auto mc) { kq_tile<typename DecoderOf<T, S512>::type, mc.value>(t, x, xs, nb, out); });
}
template void dot_tile_avx512<GgmlType::Q4_1>(const void*, const void*, int64_t, int64_t, int, float*);
template void dot_tile_avx512<GgmlType::Q5_0>(const void*, const void*, int64_t, int64_t, int, float*);
template void dot_tile_avx512<GgmlType::Q5_1>(const void*, const void*, int64_t, int64_t, int, float*);
template void dot_tile_avx512<GgmlType::IQ4_NL>(const void*, const void*, int64_t, int64_t, int, float*);
template void dot_tile_avx512<GgmlType::Q2_K>(const void*, const void*, int64_t, int64_t, int, float*);
template void dot_tile_avx512<GgmlType::Q3_K>(const void*, const void*, int64_t, int64_t, int, float*);
template void dot_tile_avx512<GgmlType::Q4_K>(const void*, const void*, int64_t, int64_t, int, float*);
template void dot_tile_avx512<GgmlType::Q5_K>(const void*, const void*, int64_t, int64_t, int, float*);
template void dot_tile_avx512<GgmlType::Q6_K>(const void*, const void*, int64_t, int64_t, int, float*);
template void dot_tile_avx512<GgmlType::IQ4_XS>(const void*, const void*, int64_t, int64_t, int, float*);

}  // namespace pagellm::kernels::kq

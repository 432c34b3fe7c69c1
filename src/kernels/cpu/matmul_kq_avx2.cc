// AVX2 matmul tiles on repacked K-quant weights (Q2_K .. Q6_K, IQ4_XS; layout and arithmetic:
// kernels_kq.h, decoders: kq_decoders.h), for CPUs without AVX-512 VNNI. Bit-identical to
// matmul_kq_avx512vnni.cc: both form the oracle's exact int32 sums, then its float steps.
//
// A ymm holds 8 rows: the tile is done in two halves (rows 8h .. 8h + 7 are the h-th 32 bytes of
// every 64-byte quant vector), side by side for 1 or 2 tokens, one after the other for more. There is no VPDPBUSD:
// VPMADDUBSW multiplies the unsigned quant bytes by 4 broadcast activation bytes into int16 pairs (at most 2 * 63 * 127
// = 16002: no saturation), VPMADDWD against ones adds the pairs into the row's int32 lane. IQ4_XS's q + 128 would
// saturate (2 * 241 * 127), so there the signed code-book value is split as |q| and the activation takes q's sign
// (VPSIGNB), and no offset is subtracted.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dispatch_m.h"
#include "kernels/cpu/kq_decoders.h"
#include "kernels/cpu/prefetch_out_of_line.h"

namespace pagellm::kernels::kq {
namespace {

// As matmul_kq_avx512vnni.cc: 8 KiB ahead, one line per quant step, out of line.
constexpr int64_t kPrefetchBytes = 8192;

// The SIMD adapter of kq_decoders.h for half h of a tile (8 rows).
struct S256 {
  using I = __m256i;  // 8 int32 lanes, or 32 bytes: 4 per row
  using B = __m128i;  // one byte per row (the low 8 bytes)
  int h = 0;
  I vec(const uint8_t* p) const { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * h)); }
  B bytes(const uint8_t* p) const { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * h)); }
  __m256 halves(const uint8_t* p) const {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
  }
  I u16_to_i32(const uint8_t* p) const {
    return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
  }
  I srl(I v, int n) const { return _mm256_srli_epi16(v, n); }
  B srl(B v, int n) const { return _mm_srli_epi16(v, n); }
  I sll(I v, int n) const { return _mm256_slli_epi16(v, n); }
  B sll(B v, int n) const { return _mm_slli_epi16(v, n); }
  I and8(I v, int m) const { return _mm256_and_si256(v, _mm256_set1_epi8(static_cast<char>(m))); }
  B and8(B v, int m) const { return _mm_and_si128(v, _mm_set1_epi8(static_cast<char>(m))); }
  I or8(I a, I b) const { return _mm256_or_si256(a, b); }
  B or8(B a, B b) const { return _mm_or_si128(a, b); }
  I u8_to_i32(B v) const { return _mm256_cvtepu8_epi32(v); }
  I i8_to_i32(B v) const { return _mm256_cvtepi8_epi32(v); }
  I sub32(I v, int c) const { return _mm256_sub_epi32(v, _mm256_set1_epi32(c)); }
  I srl32(I v, int n) const { return _mm256_srli_epi32(v, n); }
  I sll32(I v, int n) const { return _mm256_slli_epi32(v, n); }
  I and32(I v, int m) const { return _mm256_and_si256(v, _mm256_set1_epi32(m)); }
  I or32(I a, I b) const { return _mm256_or_si256(a, b); }
  I set32(int c) const { return _mm256_set1_epi32(c); }
  I mul32(I a, int c) const { return _mm256_mullo_epi32(a, _mm256_set1_epi32(c)); }
  I lookup16(const uint8_t* table, I idx) const {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table))),
                               idx);
  }
};

inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// The software prefetch of quant step q (counted from half 0's first) of a super-block group g:
// the group kPrefetchBytes ahead has kLines cache lines, one per step of half 0 from its first
// (prefetch_head; the caller decides which pass prefetches), or (prefetch_spread, for two halves
// walked one after the other) one at every (kSteps / kLines)-th step of both halves, evenly over
// the walk. order: see prefetch_out_of_line.
template <class D>
constexpr int kLines = static_cast<int>((kRows * static_cast<int64_t>(sizeof(typename D::Block)) + 63) / 64);
template <class D>
__attribute__((always_inline)) inline void prefetch_head(const uint8_t* g, int q, __m256i& order) {
  if (q < kLines<D>) prefetch_out_of_line(g + kPrefetchBytes + 64 * q, order);
}
template <class D>
__attribute__((always_inline)) inline void prefetch_spread(const uint8_t* g, int q, __m256i& order) {
  constexpr int kSteps = 2 * (D::kQK / 4);
  if (const int line = (q * kLines<D> + kSteps - 1) / kSteps; line < kLines<D> && line * kSteps / kLines<D> == q) {
    prefetch_out_of_line(g + kPrefetchBytes + 64 * line, order);
  }
}
// The types with an Avx2Order::kShared (kernels_kq.h): Q4_K spreads its prefetch, Q5_K and Q6_K
// also decode their load-sharing sub-blocks side by side for one token. Not the others: with the
// spread prefetch Q2_K, Q3_K and IQ4_XS read 0.89-0.94x as fast on the Zen 3 EPYC, and sharing
// Q2_K's and Q3_K's loads 0.94-0.97x.
template <class D>
constexpr bool kHasSharedOrder =
    std::is_same_v<D, Q4K<S256>> || std::is_same_v<D, Q5K<S256>> || std::is_same_v<D, Q6K<S256>>;

// One super-block group g (block b of each token's activations) for rows 8h .. 8h + 7 (v.h) of
// the tile x M tokens, into acc[k]. prefetch: this call also prefetches the group's lines
// kPrefetchBytes ahead (one of the halves does; prefetch_head). HS >= 0 (Avx2Order::kShared):
// this is half HS = v.h of a walk over both halves, which share the prefetches (prefetch_spread).
template <class D, int M, int HS = -1>
__attribute__((always_inline)) inline void kq_group_half(const S256& v, const uint8_t* g, const void* xv, int64_t xs,
                                                         int64_t b, bool prefetch, __m256* acc) {
  using A = Act<D::kQK>;
  const auto* x = static_cast<const typename A::Block*>(xv);
  constexpr int kSubs = D::kQK / D::kSub;
  constexpr bool kSigned = D::kOffset == 128;  // see the file comment
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i isum[M], msum[M];
  for (int k = 0; k < M; ++k) isum[k] = msum[k] = _mm256_setzero_si256();
#pragma GCC unroll 16
  for (int s = 0; s < kSubs; ++s) {
    __m256i sc, mn;
    D::scale(v, g, s, sc, mn);
    // KI independent chains per token (exact integers: any split is the same sum), to hide
    // their latency when few tokens share the weights. The int16 pair sums of G consecutive
    // quant steps add up without overflow (|pair| <= 2 * kUMax * 127, or 2 * 127 * 127 signed)
    // before one VPMADDWD takes them to int32.
    constexpr int KI = M == 1 ? 4 : M == 2 ? 2 : 1;
    constexpr int kPair = 2 * (kSigned ? 127 : D::kUMax) * 127;
    constexpr int G = std::min(D::kSub / 4, 32767 / kPair);
    __m256i a[M][KI];
    for (int k = 0; k < M; ++k)
      for (int i = 0; i < KI; ++i) a[k][i] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int j0 = 0; j0 < D::kSub / 4; j0 += G) {
      __m256i p16[M];
      for (int k = 0; k < M; ++k) p16[k] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int j = j0; j < j0 + G; ++j) {
        if constexpr (HS >= 0) {
          prefetch_spread<D>(g, HS * kSubs * (D::kSub / 4) + s * (D::kSub / 4) + j, p16[0]);
        } else if (prefetch) {
          prefetch_head<D>(g, s * (D::kSub / 4) + j, p16[0]);
        }
        __m256i u = D::quants(v, g, s, j), w = u;
        if constexpr (kSigned) {
          w = _mm256_xor_si256(u, _mm256_set1_epi8(static_cast<char>(0x80)));  // the signed value
          u = _mm256_sign_epi8(w, w);                                          // |q|
        }
        for (int k = 0; k < M; ++k) {
          __m256i xc = bcast4(x[k * xs + b].qs + s * D::kSub + 4 * j);
          if constexpr (kSigned) xc = _mm256_sign_epi8(xc, w);
          p16[k] = _mm256_add_epi16(p16[k], _mm256_maddubs_epi16(u, xc));
        }
      }
      for (int k = 0; k < M; ++k) {
        __m256i& acc_k = a[k][(j0 / G) % KI];
        acc_k = _mm256_add_epi32(acc_k, _mm256_madd_epi16(p16[k], ones));
      }
    }
    for (int k = 0; k < M; ++k) {
      for (int i = 1; i < KI; ++i) a[k][0] = _mm256_add_epi32(a[k][0], a[k][i]);
      const int32_t xsum = A::xsum(x[k * xs + b], s, D::kSub);
      if constexpr (D::kOffset != 0 && !kSigned) {
        a[k][0] = _mm256_sub_epi32(a[k][0], _mm256_set1_epi32(D::kOffset * xsum));
      }
      isum[k] = _mm256_add_epi32(isum[k], _mm256_mullo_epi32(sc, a[k][0]));
      if constexpr (D::kHasMin) msum[k] = _mm256_add_epi32(msum[k], _mm256_mullo_epi32(mn, _mm256_set1_epi32(xsum)));
    }
  }
  const __m256 d = v.halves(field(g, D::kD));
  const __m256 dm = D::kNegMin ? _mm256_sub_ps(_mm256_setzero_ps(), v.halves(field(g, D::kDmin)))
                               : v.halves(field(g, D::kDmin));  // -dmin or +m
  for (int k = 0; k < M; ++k) {
    const __m256 dx = _mm256_set1_ps(x[k * xs + b].d);
    acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[k]), _mm256_mul_ps(d, dx), acc[k]);
    if constexpr (D::kHasMin) acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum[k]), _mm256_mul_ps(dm, dx), acc[k]);
  }
}

// As kq_group_half for one token (NH = 2), with the D::kShare sub-blocks that share their weight
// loads (D::sub_of) decoded side by side: each loaded quant vector is used at once by every
// sub-block that needs it, instead of being kept (and spilled) until a later sub-block reads it
// again. The same exact int32 sums, in another order.
template <class D, int H>
__attribute__((always_inline)) inline void kq_group_half_shared(const uint8_t* g, const void* xv, int64_t b,
                                                                __m256* acc) {
  using A = Act<D::kQK>;
  const S256 v{H};
  const auto& x = static_cast<const typename A::Block*>(xv)[b];
  constexpr int kSubs = D::kQK / D::kSub, kShare = D::kShare;
  constexpr int kPair = 2 * D::kUMax * 127;
  constexpr int G = std::min(D::kSub / 4, 32767 / kPair);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i isum = _mm256_setzero_si256(), msum = _mm256_setzero_si256();
#pragma GCC unroll 16
  for (int grp = 0; grp < kSubs / kShare; ++grp) {
    __m256i a[kShare];
    for (int m = 0; m < kShare; ++m) a[m] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int j0 = 0; j0 < D::kSub / 4; j0 += G) {
      __m256i p16[kShare];
      for (int m = 0; m < kShare; ++m) p16[m] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int j = j0; j < j0 + G; ++j) {
        for (int m = 0; m < kShare; ++m) {
          const int s = D::sub_of(grp, m);
          __m256i u = D::quants(v, g, s, j);
          prefetch_spread<D>(g, H * kSubs * (D::kSub / 4) + (grp * (D::kSub / 4) + j) * kShare + m, u);
          __m256i sum = _mm256_add_epi16(p16[m], _mm256_maddubs_epi16(u, bcast4(x.qs + s * D::kSub + 4 * j)));
          asm volatile("" : "+x"(sum));  // keeps the steps in order: GCC would reassociate the sums and spill
          p16[m] = sum;
        }
      }
      for (int m = 0; m < kShare; ++m) a[m] = _mm256_add_epi32(a[m], _mm256_madd_epi16(p16[m], ones));
    }
    for (int m = 0; m < kShare; ++m) {
      const int s = D::sub_of(grp, m);
      __m256i sc, mn;
      D::scale(v, g, s, sc, mn);
      const int32_t xsum = A::xsum(x, s, D::kSub);
      if constexpr (D::kOffset != 0) a[m] = _mm256_sub_epi32(a[m], _mm256_set1_epi32(D::kOffset * xsum));
      isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(sc, a[m]));
      if constexpr (D::kHasMin) msum = _mm256_add_epi32(msum, _mm256_mullo_epi32(mn, _mm256_set1_epi32(xsum)));
    }
  }
  const __m256 d = v.halves(field(g, D::kD));
  const __m256 dx = _mm256_set1_ps(x.d);
  *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d, dx), *acc);
  if constexpr (D::kHasMin) {
    const __m256 dm =
        D::kNegMin ? _mm256_sub_ps(_mm256_setzero_ps(), v.halves(field(g, D::kDmin))) : v.halves(field(g, D::kDmin));
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dm, dx), *acc);
  }
}

// Halves [h0, h0 + NH) of the tile x M tokens -> out[k * 16 + 8h + r]. NH = 2 walks the weights
// once, both halves of each group together, so the weight stream is even (decode: the group's
// lines are consumed while the next ones arrive); NH = 1 is for many tokens, whose accumulators
// of both halves would not fit the 16 ymm registers. Either way the same sums in the same order.
// kShared (NH = 2 only): Avx2Order::kShared, the same int32 sums in another order.
template <class D, int M, int NH, bool kShared = false>
void kq_pass(const uint8_t* tile, int h0, const void* x, int64_t xs, int64_t nb, float* out) {
  constexpr int64_t kGroup = kRows * static_cast<int64_t>(sizeof(typename D::Block));
  __m256 acc[NH][M];
  for (int hh = 0; hh < NH; ++hh)
    for (int k = 0; k < M; ++k) acc[hh][k] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* g = tile + b * kGroup;
    if constexpr (kShared && M == 1 && D::kShare > 1) {
      kq_group_half_shared<D, 0>(g, x, b, acc[0]);
      kq_group_half_shared<D, 1>(g, x, b, acc[1]);
    } else if constexpr (kShared) {
      static_assert(NH == 2 && kHasSharedOrder<D>);
      kq_group_half<D, M, 0>(S256{0}, g, x, xs, b, true, acc[0]);
      kq_group_half<D, M, 1>(S256{1}, g, x, xs, b, true, acc[1]);
    } else {
      for (int hh = 0; hh < NH; ++hh) kq_group_half<D, M>(S256{h0 + hh}, g, x, xs, b, h0 + hh == 0, acc[hh]);
    }
  }
  for (int hh = 0; hh < NH; ++hh)
    for (int k = 0; k < M; ++k) _mm256_storeu_ps(out + k * kRows + 8 * (h0 + hh), acc[hh][k]);
}

// The 3- and 4-token passes (prefill) out of line, as GCC chose for them before kShared: inlined
// (as it then chose), the Zen 3 EPYC's Q3_K one-token tile ran 0.92x as fast (code placement).
template <class D, int M>
__attribute__((noinline)) void kq_pass_out_of_line(const uint8_t* tile, int h0, const void* x, int64_t xs, int64_t nb,
                                                   float* out) {
  kq_pass<D, M, 1>(tile, h0, x, xs, nb, out);
}

// Avx2Order::kShared where it measured faster: AMD CPUs (kernels_kq.h).
const bool g_shared_order = cpu_is_amd();

}  // namespace

template <GgmlType T, Avx2Order O>
void dot_tile_avx2_order(const void* tile, const void* x, int64_t xs, int64_t nb, int m, float* out) {
  using D = typename DecoderOf<T, S256>::type;
  static_assert(O == Avx2Order::kPlain || kHasSharedOrder<D>);
  const auto* t = static_cast<const uint8_t*>(tile);
  with_m<kMaxTileTokens>(m, [&](auto mc) {
    if constexpr (mc.value <= 2) {
      kq_pass<D, mc.value, 2, O == Avx2Order::kShared>(t, 0, x, xs, nb, out);
    } else {
      kq_pass_out_of_line<D, mc.value>(t, 0, x, xs, nb, out);
      kq_pass_out_of_line<D, mc.value>(t, 1, x, xs, nb, out);
    }
  });
}
template void dot_tile_avx2_order<GgmlType::Q4_K, Avx2Order::kShared>(const void*, const void*, int64_t, int64_t, int,
                                                                      float*);
template void dot_tile_avx2_order<GgmlType::Q5_K, Avx2Order::kShared>(const void*, const void*, int64_t, int64_t, int,
                                                                      float*);
template void dot_tile_avx2_order<GgmlType::Q6_K, Avx2Order::kShared>(const void*, const void*, int64_t, int64_t, int,
                                                                      float*);
template void dot_tile_avx2_order<GgmlType::Q4_K, Avx2Order::kPlain>(const void*, const void*, int64_t, int64_t, int,
                                                                     float*);
template void dot_tile_avx2_order<GgmlType::Q5_K, Avx2Order::kPlain>(const void*, const void*, int64_t, int64_t, int,
                                                                     float*);
template void dot_tile_avx2_order<GgmlType::Q6_K, Avx2Order::kPlain>(const void*, const void*, int64_t, int64_t, int,
                                                                     float*);

template <GgmlType T>
void dot_tile_avx2(const void* tile, const void* x, int64_t xs, int64_t nb, int m, float* out) {
  if constexpr (kHasSharedOrder<typename DecoderOf<T, S256>::type>) {
    if (g_shared_order) {
      dot_tile_avx2_order<T, Avx2Order::kShared>(tile, x, xs, nb, m, out);
      return;
    }
  }
  dot_tile_avx2_order<T, Avx2Order::kPlain>(tile, x, xs, nb, m, out);
}
template void dot_tile_avx2<GgmlType::Q4_1>(const void*, const void*, int64_t, int64_t, int, float*);
template void dot_tile_avx2<GgmlType::Q5_0>(const void*, const void*, int64_t, int64_t, int, float*);
template void dot_tile_avx2<GgmlType::Q5_1>(const void*, const void*, int64_t, int64_t, int, float*);
template void dot_tile_avx2<GgmlType::IQ4_NL>(const void*, const void*, int64_t, int64_t, int, float*);
template void dot_tile_avx2<GgmlType::Q2_K>(const void*, const void*, int64_t, int64_t, int, float*);
template void dot_tile_avx2<GgmlType::Q3_K>(const void*, const void*, int64_t, int64_t, int, float*);
template void dot_tile_avx2<GgmlType::Q4_K>(const void*, const void*, int64_t, int64_t, int, float*);
template void dot_tile_avx2<GgmlType::Q5_K>(const void*, const void*, int64_t, int64_t, int, float*);
template void dot_tile_avx2<GgmlType::Q6_K>(const void*, const void*, int64_t, int64_t, int, float*);
template void dot_tile_avx2<GgmlType::IQ4_XS>(const void*, const void*, int64_t, int64_t, int, float*);

}  // namespace pagellm::kernels::kq

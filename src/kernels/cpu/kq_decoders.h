// Internal to src/kernels/cpu, included only by matmul_kq_avx512vnni.cc and matmul_kq_avx2.cc:
// the per-type decoders of the tiled K-quant layout (kernels_kq.h), written once over a SIMD
// adapter S (that file's: 16 rows per zmm, or 8 rows per ymm for one half of the tile). With
// internal linkage, so each file compiles its own copy with its own flags.
//
// A decoder D<S> gives, for super-block group g:
//   scale(v, g, s, sc, mn)  sub-block s's integer scale (and min) of every row, as int32 lanes;
//   quants(v, g, s, j)      the 4 quants e = s * kSub + 4 j .. + 4 of every row as unsigned
//                           bytes q + kOffset, one 4-byte lane per row;
//   kD / kDmin              byte offsets of the f16 factors in the block struct; the min factor
//                           is -dmin (kNegMin) or +m;
//   kQK / kSub              elements per block / per sub-block;
//   kUMax                   the largest q + kOffset (bounds the AVX2 tile's int16 sums).
// Byte shifts are 16-bit shifts whose bits from the neighbouring byte the masks drop.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/kernels_kq.h"

namespace pagellm::kernels::kq {
namespace {  // NOLINT: one copy per including file, compiled with that file's ISA flags

// Field at byte offset o of the block struct, in a group.
inline const uint8_t* field(const uint8_t* g, int o) { return g + 16 * o; }

// Q4_K / Q5_K scale and min of sub-block s (ggml's get_scale_min_k4), one byte per row.
template <class S>
__attribute__((always_inline)) inline void scale_min_k4(const S& v, const uint8_t* sc12, int s, typename S::I& sc,
                                                        typename S::I& mn) {
  auto b = [&](int k) { return v.bytes(sc12 + 16 * k); };
  if (s < 4) {
    sc = v.u8_to_i32(v.and8(b(s), 63));
    mn = v.u8_to_i32(v.and8(b(s + 4), 63));
  } else {
    const auto hi = b(s + 4);
    sc = v.u8_to_i32(v.or8(v.and8(hi, 15), v.sll(v.and8(v.srl(b(s - 4), 6), 3), 4)));
    mn = v.u8_to_i32(v.or8(v.and8(v.srl(hi, 4), 15), v.sll(v.and8(v.srl(b(s), 6), 3), 4)));
  }
}

template <class S>
struct Q4K {
  static constexpr int kShare = 1;
  static constexpr int kUMax = 15;  // largest q + kOffset
  static constexpr int kQK = kQK_K;
  static constexpr bool kNegMin = true;
  using Block = BlockQ4_K;
  static constexpr int kSub = 32, kOffset = 0;
  static constexpr bool kHasMin = true;
  static constexpr int kD = 0, kDmin = 2, kScales = 4, kQs = 16;
  static void scale(const S& v, const uint8_t* g, int s, typename S::I& sc, typename S::I& mn) {
    scale_min_k4(v, field(g, kScales), s, sc, mn);
  }
  static typename S::I quants(const S& v, const uint8_t* g, int s, int j) {
    const auto q = v.vec(field(g, kQs) + 64 * (8 * (s / 2) + j));
    return v.and8(s % 2 == 0 ? q : v.srl(q, 4), 15);
  }
};
template <class S>
struct Q5K {
  // Sub-blocks 2p and 2p + 1 share their loads (low and high nibbles, the same qh).
  static constexpr int kShare = 2;
  static constexpr int sub_of(int grp, int m) { return 2 * grp + m; }
  static constexpr int kUMax = 31;  // largest q + kOffset
  static constexpr int kQK = kQK_K;
  static constexpr bool kNegMin = true;
  using Block = BlockQ5_K;
  static constexpr int kSub = 32, kOffset = 0;
  static constexpr bool kHasMin = true;
  static constexpr int kD = 0, kDmin = 2, kScales = 4, kQh = 16, kQs = 48;
  static void scale(const S& v, const uint8_t* g, int s, typename S::I& sc, typename S::I& mn) {
    scale_min_k4(v, field(g, kScales), s, sc, mn);
  }
  static typename S::I quants(const S& v, const uint8_t* g, int s, int j) {
    const auto q = v.vec(field(g, kQs) + 64 * (8 * (s / 2) + j));
    const auto lo = v.and8(s % 2 == 0 ? q : v.srl(q, 4), 15);
    const auto h = v.and8(v.srl(v.vec(field(g, kQh) + 64 * j), s), 1);
    return v.or8(lo, v.sll(h, 4));
  }
};
// Sub-block s of Q6_K: n = s / 8, c = (s % 8) / 2, l = 16 (s % 2) + 4 j .. + 4; q + 32 is 6 bits.
template <class S>
struct Q6K {
  // Sub-blocks 8n + 2c + t (c = 0 .. 3) share their ql and qh loads.
  static constexpr int kShare = 4;
  static constexpr int sub_of(int grp, int m) { return 8 * (grp / 2) + 2 * m + grp % 2; }
  static constexpr int kUMax = 63;  // largest q + kOffset
  static constexpr int kQK = kQK_K;
  static constexpr bool kNegMin = true;
  using Block = BlockQ6_K;
  static constexpr int kSub = 16, kOffset = 32;
  static constexpr bool kHasMin = false;
  static constexpr int kQl = 0, kQh = 128, kScales = 192, kD = 208, kDmin = 0;
  static void scale(const S& v, const uint8_t* g, int s, typename S::I& sc, typename S::I&) {
    sc = v.i8_to_i32(v.bytes(field(g, kScales) + 16 * s));
  }
  static typename S::I quants(const S& v, const uint8_t* g, int s, int j) {
    const int n = s / 8, c = (s % 8) / 2, l = 16 * (s % 2) + 4 * j;
    const auto ql = v.vec(field(g, kQl) + 16 * (64 * n + 32 * (c % 2) + l));
    const auto qh = v.vec(field(g, kQh) + 16 * (32 * n + l));
    return v.or8(v.and8(c < 2 ? ql : v.srl(ql, 4), 15), v.sll(v.and8(v.srl(qh, 2 * c), 3), 4));
  }
};
// Q3_K: q + 4 = crumb + 4 * hmask bit; element 128 n + 32 j2 + l, s = 8 n + 2 j2 + l / 16.
template <class S>
struct Q3K {
  static constexpr int kShare = 1;
  static constexpr int kUMax = 7;  // largest q + kOffset
  static constexpr int kQK = kQK_K;
  static constexpr bool kNegMin = true;
  using Block = BlockQ3_K;
  static constexpr int kSub = 16, kOffset = 4;
  static constexpr bool kHasMin = false;
  static constexpr int kHmask = 0, kQs = 32, kScales = 96, kD = 108, kDmin = 0;
  static void scale(const S& v, const uint8_t* g, int s, typename S::I& sc, typename S::I&) {
    const uint8_t* b = field(g, kScales);
    const auto lo = s < 8 ? v.and8(v.bytes(b + 16 * s), 15) : v.and8(v.srl(v.bytes(b + 16 * (s - 8)), 4), 15);
    const auto hi = v.and8(v.srl(v.bytes(b + 16 * (8 + s % 4)), 2 * (s / 4)), 3);
    sc = v.sub32(v.u8_to_i32(v.or8(lo, v.sll(hi, 4))), 32);
  }
  static typename S::I quants(const S& v, const uint8_t* g, int s, int j) {
    const int n = s / 8, j2 = (s % 8) / 2, l = 16 * (s % 2) + 4 * j;
    const auto q2 = v.and8(v.srl(v.vec(field(g, kQs) + 16 * (32 * n + l)), 2 * j2), 3);
    const auto h = v.and8(v.srl(v.vec(field(g, kHmask) + 16 * l), 4 * n + j2), 1);
    return v.or8(q2, v.sll(h, 2));
  }
};
template <class S>
struct Q2K {
  static constexpr int kShare = 1;
  static constexpr int kUMax = 3;  // largest q + kOffset
  static constexpr int kQK = kQK_K;
  static constexpr bool kNegMin = true;
  using Block = BlockQ2_K;
  static constexpr int kSub = 16, kOffset = 0;
  static constexpr bool kHasMin = true;
  static constexpr int kScales = 0, kQs = 16, kD = 80, kDmin = 82;
  static void scale(const S& v, const uint8_t* g, int s, typename S::I& sc, typename S::I& mn) {
    const auto b = v.bytes(field(g, kScales) + 16 * s);
    sc = v.u8_to_i32(v.and8(b, 15));
    mn = v.u8_to_i32(v.and8(v.srl(b, 4), 15));
  }
  static typename S::I quants(const S& v, const uint8_t* g, int s, int j) {
    const int n = s / 8, j2 = (s % 8) / 2, l = 16 * (s % 2) + 4 * j;
    return v.and8(v.srl(v.vec(field(g, kQs) + 16 * (32 * n + l)), 2 * j2), 3);
  }
};
// IQ4_XS: elements 32 s + 4 j are, for j < 4, the low nibbles of qs[16 s + 4 j ..], else the high
// nibbles of qs[16 s + 4 (j - 4) ..]; the code book + 128 (unsigned) by a byte shuffle.
template <class S>
struct IQ4XS {
  static constexpr int kShare = 1;
  static constexpr int kUMax = 241;  // largest q + kOffset
  static constexpr int kQK = kQK_K;
  static constexpr bool kNegMin = true;
  using Block = BlockIQ4_XS;
  static constexpr int kSub = 32, kOffset = 128;
  static constexpr bool kHasMin = false;
  static constexpr int kD = 0, kScalesH = 2, kScalesL = 4, kQs = 8, kDmin = 0;
  static void scale(const S& v, const uint8_t* g, int s, typename S::I& sc, typename S::I&) {
    const auto l4 = v.and8(v.srl(v.bytes(field(g, kScalesL) + 16 * (s / 2)), 4 * (s % 2)), 15);
    const auto h2 = v.and32(v.srl32(v.u16_to_i32(field(g, kScalesH)), 2 * s), 3);
    sc = v.sub32(v.or32(v.u8_to_i32(l4), v.sll32(h2, 4)), 32);
  }
  static typename S::I quants(const S& v, const uint8_t* g, int s, int j) {
    const auto q = v.vec(field(g, kQs) + 64 * (4 * s + j % 4));
    return v.lookup16(kIq4nlPlus128, v.and8(j < 4 ? q : v.srl(q, 4), 15));
  }
  static constexpr uint8_t kIq4nlPlus128[16] = {1,   24,  45,  63,  79,  93,  106, 118,
                                                129, 141, 153, 166, 181, 197, 217, 241};
};

// The 32-element types: one sub-block, sc = mn = 1.
template <class S>
void unit_scale(const S& v, typename S::I& sc, typename S::I& mn) {
  sc = mn = v.set32(1);
}
// Elements 4 j .. 4 j + 4 of a 32-element block whose qs[16] is at q: nibble j / 4 of qs[4 (j % 4) ..].
template <class S>
typename S::I nibbles32(const S& v, const uint8_t* q, int j) {
  const auto b = v.vec(q + 64 * (j % 4));
  return v.and8(j < 4 ? b : v.srl(b, 4), 15);
}
// Q5_0 / Q5_1's fifth bits of elements 4 j .. 4 j + 4 (bits 4 j .. of the 32-bit qh of each
// row) spread to one byte each, times 16: t * 0x204081 puts bit i of t at bit 8 i (no carries).
template <class S>
typename S::I fifth_bits(const S& v, const uint8_t* qh, int j) {
  const auto t = v.and32(v.srl32(v.vec(qh), 4 * j), 15);
  return v.sll32(v.and32(v.mul32(t, 0x204081), 0x01010101), 4);
}

template <class S>
struct Q41 {
  static constexpr int kShare = 1;
  static constexpr int kUMax = 15;  // largest q + kOffset
  using Block = BlockQ4_1;
  static constexpr int kQK = 32, kSub = 32, kOffset = 0;
  static constexpr bool kHasMin = true, kNegMin = false;
  static constexpr int kD = 0, kDmin = 2, kQs = 4;
  static void scale(const S& v, const uint8_t*, int, typename S::I& sc, typename S::I& mn) { unit_scale(v, sc, mn); }
  static typename S::I quants(const S& v, const uint8_t* g, int, int j) { return nibbles32(v, field(g, kQs), j); }
};
template <class S>
struct Q50 {
  static constexpr int kShare = 1;
  static constexpr int kUMax = 31;  // largest q + kOffset
  using Block = BlockQ5_0;
  static constexpr int kQK = 32, kSub = 32, kOffset = 16;
  static constexpr bool kHasMin = false, kNegMin = false;
  static constexpr int kD = 0, kQh = 2, kQs = 6, kDmin = 0;
  static void scale(const S& v, const uint8_t*, int, typename S::I& sc, typename S::I& mn) { unit_scale(v, sc, mn); }
  static typename S::I quants(const S& v, const uint8_t* g, int, int j) {
    return v.or8(nibbles32(v, field(g, kQs), j), fifth_bits(v, field(g, kQh), j));
  }
};
template <class S>
struct Q51 {
  static constexpr int kShare = 1;
  static constexpr int kUMax = 31;  // largest q + kOffset
  using Block = BlockQ5_1;
  static constexpr int kQK = 32, kSub = 32, kOffset = 0;
  static constexpr bool kHasMin = true, kNegMin = false;
  static constexpr int kD = 0, kDmin = 2, kQh = 4, kQs = 8;
  static void scale(const S& v, const uint8_t*, int, typename S::I& sc, typename S::I& mn) { unit_scale(v, sc, mn); }
  static typename S::I quants(const S& v, const uint8_t* g, int, int j) {
    return v.or8(nibbles32(v, field(g, kQs), j), fifth_bits(v, field(g, kQh), j));
  }
};
template <class S>
struct IQ4NL {
  static constexpr int kShare = 1;
  static constexpr int kUMax = 241;  // largest q + kOffset
  using Block = BlockIQ4_NL;
  static constexpr int kQK = 32, kSub = 32, kOffset = 128;
  static constexpr bool kHasMin = false, kNegMin = false;
  static constexpr int kD = 0, kQs = 2, kDmin = 0;
  static void scale(const S& v, const uint8_t*, int, typename S::I& sc, typename S::I& mn) { unit_scale(v, sc, mn); }
  static typename S::I quants(const S& v, const uint8_t* g, int, int j) {
    return v.lookup16(IQ4XS<S>::kIq4nlPlus128, nibbles32(v, field(g, kQs), j));
  }
};

// The activation side: q8_K blocks (super-block types) or XBlock32 (32-element types).
template <int kQK>
struct Act {
  using Block = BlockQ8_K;
  static int32_t xsum(const Block& x, int s, int sub) {
    return sub == 16 ? x.bsums[s] : x.bsums[2 * s] + x.bsums[2 * s + 1];
  }
};
template <>
struct Act<32> {
  using Block = XBlock32;
  static int32_t xsum(const Block& x, int, int) { return x.sum; }
};

template <GgmlType T, class S>
struct DecoderOf;
template <class S>
struct DecoderOf<GgmlType::Q4_1, S> {
  using type = Q41<S>;
};
template <class S>
struct DecoderOf<GgmlType::Q5_0, S> {
  using type = Q50<S>;
};
template <class S>
struct DecoderOf<GgmlType::Q5_1, S> {
  using type = Q51<S>;
};
template <class S>
struct DecoderOf<GgmlType::IQ4_NL, S> {
  using type = IQ4NL<S>;
};
template <class S>
struct DecoderOf<GgmlType::Q2_K, S> {
  using type = Q2K<S>;
};
template <class S>
struct DecoderOf<GgmlType::Q3_K, S> {
  using type = Q3K<S>;
};
template <class S>
struct DecoderOf<GgmlType::Q4_K, S> {
  using type = Q4K<S>;
};
template <class S>
struct DecoderOf<GgmlType::Q5_K, S> {
  using type = Q5K<S>;
};
template <class S>
struct DecoderOf<GgmlType::Q6_K, S> {
  using type = Q6K<S>;
};
template <class S>
struct DecoderOf<GgmlType::IQ4_XS, S> {
  using type = IQ4XS<S>;
};

}  // namespace
}  // namespace pagellm::kernels::kq

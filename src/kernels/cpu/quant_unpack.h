// Internal to src/kernels/cpu: the "unpacked block" arithmetic of every quantized weight type
// beyond Q8_0 / Q4_0 (core/quant_blocks.h), as templates with internal linkage (like
// dot_chains.h), so that each including file compiles its own copy with its own flags: the
// oracle (dot_ref.cc), its FMA build (dot_ref_avx2.cc) and the dequantizer (quants.cc).
//
// Every such type is, per block of kQK elements (32, or a 256-element super-block), integer
// quants q[e], integer sub-block scales sc[s] and (for some types) integer mins mn[s], s = e / kSub,
// with two float factors: x[e] = (d * sc[s]) * q[e] + (dm * mn[s]). unpack() turns one block into
// that form, exactly (the ints are the format's; d / dm are the block's halves, dm = -dmin or +m).
//
// The dot product with an activation block (q8_0 for 32-blocks, q8_K for super-blocks) is then:
//   isum = sum_s sc[s] * sum_{e in s} q[e] * xq[e]        (exact int32)
//   msum = sum_s mn[s] * sum_{e in s} xq[e]                (exact int32; types with mins)
//   acc = fma(float(isum), d * d_x, acc); acc = fma(float(msum), dm * d_x, acc)
// blocks in order from acc = 0. Q5_0 / IQ4_NL (sc = 1, no mins) is exactly the Q4_0 "block sums"
// arithmetic. Any kernel that forms the same integers gives the same bits.
// Sources: ggml-common.h / ggml-quants.c for the layouts (dequantize_row_*); the arithmetic is
// ours (llama.cpp sums the sub-blocks in floats, so its bits differ in the last places).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/dtype.h"

namespace pagellm::kernels {
namespace {  // NOLINT: one copy per including file, compiled with that file's ISA flags

struct Unpacked {
  int8_t q[kQK_K];
  int32_t sc[16];
  int32_t mn[16];
  float d = 0.0f, dm = 0.0f;
};

template <typename Block>
struct QuantFormat;

// The two nibbles of 16 bytes: element j low, j + 16 high.
inline void unpack_nibbles16(const uint8_t* qs, int8_t* q, int offset) {
  for (int j = 0; j < 16; ++j) {
    q[j] = static_cast<int8_t>((qs[j] & 0x0F) - offset);
    q[j + 16] = static_cast<int8_t>((qs[j] >> 4) - offset);
  }
}
inline void unpack_fifth_bit(const uint8_t* qh_bytes, int8_t* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(q[j] + static_cast<int>(((qh >> j) & 1) << 4));
}
inline void unpack_iq4(const uint8_t* qs, int8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = kIq4nlValues[qs[j] & 0x0F];
    q[j + 16] = kIq4nlValues[qs[j] >> 4];
  }
}

template <>
struct QuantFormat<BlockQ4_1> {
  static constexpr int kQK = 32, kSub = 32;
  static constexpr bool kHasMin = true;
  static void unpack(const BlockQ4_1& b, Unpacked& u) {
    unpack_nibbles16(b.qs, u.q, 0);
    u.sc[0] = u.mn[0] = 1;
    u.d = fp16_to_fp32(b.d);
    u.dm = fp16_to_fp32(b.m);
  }
};
template <>
struct QuantFormat<BlockQ5_0> {
  static constexpr int kQK = 32, kSub = 32;
  static constexpr bool kHasMin = false;
  static void unpack(const BlockQ5_0& b, Unpacked& u) {
    unpack_nibbles16(b.qs, u.q, 0);
    unpack_fifth_bit(b.qh, u.q);
    for (int j = 0; j < 32; ++j) u.q[j] = static_cast<int8_t>(u.q[j] - 16);
    u.sc[0] = 1;
    u.d = fp16_to_fp32(b.d);
  }
};
template <>
struct QuantFormat<BlockQ5_1> {
  static constexpr int kQK = 32, kSub = 32;
  static constexpr bool kHasMin = true;
  static void unpack(const BlockQ5_1& b, Unpacked& u) {
    unpack_nibbles16(b.qs, u.q, 0);
    unpack_fifth_bit(b.qh, u.q);
    u.sc[0] = u.mn[0] = 1;
    u.d = fp16_to_fp32(b.d);
    u.dm = fp16_to_fp32(b.m);
  }
};
template <>
struct QuantFormat<BlockIQ4_NL> {
  static constexpr int kQK = 32, kSub = 32;
  static constexpr bool kHasMin = false;
  static void unpack(const BlockIQ4_NL& b, Unpacked& u) {
    unpack_iq4(b.qs, u.q);
    u.sc[0] = 1;
    u.d = fp16_to_fp32(b.d);
  }
};

// Q2_K / Q3_K: the 2-bit planes of qs, element 128 n + 32 j + l in bits 2j of qs[32 n + l].
inline int crumb(const uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

template <>
struct QuantFormat<BlockQ2_K> {
  static constexpr int kQK = kQK_K, kSub = 16;
  static constexpr bool kHasMin = true;
  static void unpack(const BlockQ2_K& b, Unpacked& u) {
    for (int e = 0; e < kQK_K; ++e) u.q[e] = static_cast<int8_t>(crumb(b.qs, e));
    for (int s = 0; s < 16; ++s) {
      u.sc[s] = b.scales[s] & 0x0F;
      u.mn[s] = b.scales[s] >> 4;
    }
    u.d = fp16_to_fp32(b.d);
    u.dm = -fp16_to_fp32(b.dmin);
  }
};
template <>
struct QuantFormat<BlockQ3_K> {
  static constexpr int kQK = kQK_K, kSub = 16;
  static constexpr bool kHasMin = false;
  static void unpack(const BlockQ3_K& b, Unpacked& u) {
    for (int e = 0; e < kQK_K; ++e) {
      const int bit = (b.hmask[e % 32] >> (4 * (e / 128) + (e % 128) / 32)) & 1;
      u.q[e] = static_cast<int8_t>(crumb(b.qs, e) - (bit != 0 ? 0 : 4));
    }
    for (int s = 0; s < 16; ++s) {
      const int lo = s < 8 ? b.scales[s] & 0x0F : b.scales[s - 8] >> 4;
      const int hi = (b.scales[8 + s % 4] >> (2 * (s / 4))) & 3;
      u.sc[s] = (lo | hi << 4) - 32;
    }
    u.d = fp16_to_fp32(b.d);
  }
};

// Q4_K / Q5_K: scale and min of sub-block s (ggml's get_scale_min_k4), 6 bits each.
inline void scale_min_k4(const uint8_t* s12, int s, int32_t& sc, int32_t& mn) {
  if (s < 4) {
    sc = s12[s] & 63;
    mn = s12[s + 4] & 63;
  } else {
    sc = (s12[s + 4] & 0x0F) | ((s12[s - 4] >> 6) << 4);
    mn = (s12[s + 4] >> 4) | ((s12[s] >> 6) << 4);
  }
}
inline void unpack_k4(const uint8_t* qs, const uint8_t* s12, uint16_t d, uint16_t dmin, Unpacked& u) {
  for (int e = 0; e < kQK_K; ++e)
    u.q[e] = static_cast<int8_t>((qs[32 * (e / 64) + e % 32] >> (4 * ((e % 64) / 32))) & 15);
  for (int s = 0; s < 8; ++s) scale_min_k4(s12, s, u.sc[s], u.mn[s]);
  u.d = fp16_to_fp32(d);
  u.dm = -fp16_to_fp32(dmin);
}

template <>
struct QuantFormat<BlockQ4_K> {
  static constexpr int kQK = kQK_K, kSub = 32;
  static constexpr bool kHasMin = true;
  static void unpack(const BlockQ4_K& b, Unpacked& u) { unpack_k4(b.qs, b.scales, b.d, b.dmin, u); }
};
template <>
struct QuantFormat<BlockQ5_K> {
  static constexpr int kQK = kQK_K, kSub = 32;
  static constexpr bool kHasMin = true;
  static void unpack(const BlockQ5_K& b, Unpacked& u) {
    unpack_k4(b.qs, b.scales, b.d, b.dmin, u);
    for (int e = 0; e < kQK_K; ++e) u.q[e] = static_cast<int8_t>(u.q[e] + (((b.qh[e % 32] >> (e / 32)) & 1) << 4));
  }
};
template <>
struct QuantFormat<BlockQ6_K> {
  static constexpr int kQK = kQK_K, kSub = 16;
  static constexpr bool kHasMin = false;
  static void unpack(const BlockQ6_K& b, Unpacked& u) {
    for (int e = 0; e < kQK_K; ++e) {
      const int n = e / 128, c = (e % 128) / 32, l = e % 32;
      const int lo = (b.ql[64 * n + 32 * (c % 2) + l] >> (4 * (c / 2))) & 15;
      const int hi = (b.qh[32 * n + l] >> (2 * c)) & 3;
      u.q[e] = static_cast<int8_t>((lo | hi << 4) - 32);
    }
    for (int s = 0; s < 16; ++s) u.sc[s] = b.scales[s];  // NOLINT(bugprone-signed-char-misuse): signed by the format
    u.d = fp16_to_fp32(b.d);
  }
};
template <>
struct QuantFormat<BlockIQ4_XS> {
  static constexpr int kQK = kQK_K, kSub = 32;
  static constexpr bool kHasMin = false;
  static void unpack(const BlockIQ4_XS& b, Unpacked& u) {
    for (int s = 0; s < 8; ++s) {
      const int ls = ((b.scales_l[s / 2] >> (4 * (s % 2))) & 15) | (((b.scales_h >> (2 * s)) & 3) << 4);
      u.sc[s] = ls - 32;
      unpack_iq4(b.qs + 16 * s, u.q + 32 * s);
    }
    u.d = fp16_to_fp32(b.d);
  }
};

// GGUF type -> block struct.
template <GgmlType T>
struct BlockOf;
template <>
struct BlockOf<GgmlType::Q4_1> {
  using type = BlockQ4_1;
};
template <>
struct BlockOf<GgmlType::Q5_0> {
  using type = BlockQ5_0;
};
template <>
struct BlockOf<GgmlType::Q5_1> {
  using type = BlockQ5_1;
};
template <>
struct BlockOf<GgmlType::IQ4_NL> {
  using type = BlockIQ4_NL;
};
template <>
struct BlockOf<GgmlType::Q2_K> {
  using type = BlockQ2_K;
};
template <>
struct BlockOf<GgmlType::Q3_K> {
  using type = BlockQ3_K;
};
template <>
struct BlockOf<GgmlType::Q4_K> {
  using type = BlockQ4_K;
};
template <>
struct BlockOf<GgmlType::Q5_K> {
  using type = BlockQ5_K;
};
template <>
struct BlockOf<GgmlType::Q6_K> {
  using type = BlockQ6_K;
};
template <>
struct BlockOf<GgmlType::IQ4_XS> {
  using type = BlockIQ4_XS;
};

// The activation block of a format: q8_0 (f16 d) for 32-blocks, q8_K (f32 d) for super-blocks.
inline float act_d(const BlockQ8_0& x) { return fp16_to_fp32(x.d); }
inline float act_d(const BlockQ8_K& x) { return x.d; }
template <typename Block>
using ActBlock = std::conditional_t<QuantFormat<Block>::kQK == kQK_K, BlockQ8_K, BlockQ8_0>;

// The dot product above: nb blocks of w . nb activation blocks of x.
template <typename Block>
float unpacked_dot(const Block* w, const ActBlock<Block>* x, int64_t nb) {
  using F = QuantFormat<Block>;
  Unpacked u;
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    F::unpack(w[b], u);
    int32_t isum = 0, msum = 0;
    for (int s = 0; s < F::kQK / F::kSub; ++s) {
      int32_t qx = 0, xs = 0;
      for (int e = s * F::kSub; e < (s + 1) * F::kSub; ++e) {
        qx += u.q[e] * x[b].qs[e];
        xs += x[b].qs[e];
      }
      isum += u.sc[s] * qx;
      if constexpr (F::kHasMin) msum += u.mn[s] * xs;
    }
    const float dx = act_d(x[b]);
    acc = std::fma(static_cast<float>(isum), u.d * dx, acc);
    if constexpr (F::kHasMin) acc = std::fma(static_cast<float>(msum), u.dm * dx, acc);
  }
  return acc;
}

// One block -> kQK floats: x[e] = (d * sc[s]) * q[e] (+ dm * mn[s]).
template <typename Block>
void unpacked_dequantize(const Block& blk, float* out) {
  using F = QuantFormat<Block>;
  Unpacked u;
  F::unpack(blk, u);
  for (int s = 0; s < F::kQK / F::kSub; ++s) {
    const float ds = u.d * static_cast<float>(u.sc[s]);
    const float ms = F::kHasMin ? u.dm * static_cast<float>(u.mn[s]) : 0.0f;
    for (int e = s * F::kSub; e < (s + 1) * F::kSub; ++e) {
      out[e] = F::kHasMin ? ds * static_cast<float>(u.q[e]) + ms : ds * static_cast<float>(u.q[e]);
    }
  }
}

}  // namespace
}  // namespace pagellm::kernels

// Every type above, for the explicit instantiations (dot_ref.cc, dot_ref_avx2.cc).
#define PAGELLM_FOR_EACH_UNPACKED_TYPE(X) \
  X(Q4_1) X(Q5_0) X(Q5_1) X(IQ4_NL) X(Q2_K) X(Q3_K) X(Q4_K) X(Q5_K) X(Q6_K) X(IQ4_XS)

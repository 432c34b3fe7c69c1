// Block formats of the ggml quantized types beyond Q8_0 / Q4_0 (dtype.h), as GGUF files store
// them. Source: ggml/src/ggml-common.h (the block structs) and ggml-quants.c (dequantize_row_*),
// read for the layout only. Every d / m / dmin is an IEEE half unless noted; element order inside
// a block is what kernels::dequantize_row (quants.cc) writes, one comment per struct below.
#pragma once

#include <cstdint>

namespace pagellm {

constexpr int kQK4_1 = 32;
constexpr int kQK5_0 = 32;
constexpr int kQK4_NL = 32;
constexpr int kQK_K = 256;  // elements of a K-quant super-block

// x = d * q + m, q in [0, 16): element j in the low nibble of qs[j], j + 16 in the high nibble.
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[kQK4_1 / 2];
};
// x = d * (q - 16), q = nibble | bit << 4; nibbles as Q4_1, bit j of the little-endian qh.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};
// x = d * q + m, q as Q5_0's (without the - 16).
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};
// x = d * kIq4nlValues[nibble]; nibbles as Q4_1.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK4_NL / 2];
};
// The K-quant activation type: d is an f32, q = round(x / d) in [-127, 127]; bsums[i] is the
// sum of qs[16 i .. 16 i + 16).
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
// 16 sub-blocks of 16: x = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4), q in [0, 4);
// element e = 128 n + 32 j + l has q = (qs[32 n + l] >> 2 j) & 3, sub-block e / 16.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d, dmin;
};
// 16 sub-blocks of 16: x = d * (scale[s] - 32) * q, q = ((qs[32 n + l] >> 2 j) & 3) - 4 unless
// bit 4 n + j of hmask[l] is set (e as Q2_K); scale[s] 6 bits: the low 4 in the nibbles of
// scales[0..8), the high 2 in the bit pairs of scales[8..12).
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
// 8 sub-blocks of 32: x = d * sc[s] * q - dmin * mn[s], q in [0, 16): element e = 64 g + 32 h + l
// in nibble h of qs[32 g + l]; sc / mn 6-bit, packed in scales[12] (kernels' get_scale_min_k4).
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};
// Q4_K with a fifth bit: q += 16 * ((qh[e % 32] >> (e / 32)) & 1).
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
// 16 sub-blocks of 16: x = d * scales[s] * (q - 32), q 6-bit: element e = 128 n + 32 c + l has
// its low 4 bits in nibble c / 2 of ql[64 n + 32 (c % 2) + l], its high 2 in bits 2c of qh[32 n + l].
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
// 8 sub-blocks of 32: x = d * (ls[s] - 32) * kIq4nlValues[nibble]; ls 6-bit: the low 4 in nibble
// s % 2 of scales_l[s / 2], the high 2 in bits 2s of scales_h; sub-block s's 16 bytes of qs
// hold its elements as IQ4_NL's.
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};

// The 16 values of the IQ4_NL / IQ4_XS code book (ggml-common.h kvalues_iq4nl).
constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static_assert(sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockIQ4_XS) == 136);

}  // namespace pagellm

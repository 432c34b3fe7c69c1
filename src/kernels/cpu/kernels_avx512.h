// Internal to src/kernels/cpu: AVX-512 VNNI quantized dot products (matmul_avx512.cc). Call only
// when use_avx512_vnni() (cpu_features.h) is true. No intrinsic types appear here.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace pagellm::kernels::avx512 {

// Two consecutive q8_0 activation blocks (b = 2p, b1 = 2p + 1) in the "P" lane layout of
// matmul_avx512.cc, prepared once per token and shared by every weight row.
//   qs:   64 bytes [b[0..16) b1[0..16) b[16..32) b1[16..32)]; signed x for Q4_0 weights,
//         x + 128 (unsigned) for Q8_0 weights. A missing b1 (odd block count) is x = 0.
//   bias: int32 lane l = -8 * (sum of qs[4l .. 4l+4)) for Q4_0 weights, 0 for Q8_0.
//   d:    float lane l = the scale of the block lane l belongs to.
struct alignas(64) PairQ8 {
  int8_t qs[64];
  int32_t bias[16];
  float d[16];
};

// xq: [nb] activation blocks of one token -> out: [(nb + 1) / 2] pairs for `weight_type`.
void prepare_pairs(GgmlType weight_type, const BlockQ8_0* xq, int64_t nb, PairQ8* out);

// One weight row (nb blocks) against m in [1, kMaxTileTokens] tokens; token k's pairs start at
// x + k * x_stride. out[k] is bit-identical to avx2::dot_*_q8_0 of the same row and token.
constexpr int kMaxTileTokens = 8;
void dot_q8_0_tile(const BlockQ8_0* w, const PairQ8* x, int64_t x_stride, int64_t nb, int m, float* out);
void dot_q4_0_tile(const BlockQ4_0* w, const PairQ8* x, int64_t x_stride, int64_t nb, int m, float* out);

// Repacked rows (WeightLayout::kRepackedX8, made by repack.cc): the same bytes per row as GGUF,
// regrouped so that one group of kX8Group blocks needs one scale conversion and, for Q4_0, one
// 64-byte load per two pairs:
//   per group:  d[8] (f16, the 8 blocks' scales in order), then the quants of pairs 0..3 in
//               P layout: Q8_0: 4 x 64 signed bytes; Q4_0: 2 x 64 bytes, byte k of vector v =
//               P(pair 2v)[k] | P(pair 2v + 1)[k] << 4 (unsigned nibbles).
//   then the last nb % kX8Group blocks unchanged (GGUF blocks).
// Same arithmetic, same lanes, same order: bit-identical to dot_*_tile on the GGUF row.
// A tile is r rows (row i at w + i * w_stride bytes) x m tokens, out[i * m + k]; r is
// x8_tile_rows(m) for a full tile (several rows hide the FMA latency when m is small) or 1.
constexpr int kX8Group = 8;
int x8_tile_rows(int m);
void dot_q8_0_x8_tile(const void* w, int64_t w_stride, int r, const PairQ8* x, int64_t x_stride, int64_t nb, int m,
                      float* out);
void dot_q4_0_x8_tile(const void* w, int64_t w_stride, int r, const PairQ8* x, int64_t x_stride, int64_t nb, int m,
                      float* out);

}  // namespace pagellm::kernels::avx512

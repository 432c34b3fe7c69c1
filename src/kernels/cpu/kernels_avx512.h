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

// quantize_row_q8_0_activations (ops.h) vectorised, bit-identical for finite x (n % 32 == 0).
void quantize_q8_0_activations(const float* x, int64_t n, BlockQ8_0* y);

// xq: [nb] activation blocks of one token -> out: [(nb + 1) / 2] pairs for `weight_type`.
void prepare_pairs(GgmlType weight_type, const BlockQ8_0* xq, int64_t nb, PairQ8* out);

// One weight row (nb blocks) against m in [1, kMaxTileTokens] tokens; token k's pairs start at
// x + k * x_stride. out[k] is bit-identical to avx2::dot_*_q8_0 of the same row and token.
constexpr int kMaxTileTokens = 8;
void dot_q8_0_tile(const BlockQ8_0* w, const PairQ8* x, int64_t x_stride, int64_t nb, int m, float* out);
void dot_q4_0_tile(const BlockQ4_0* w, const PairQ8* x, int64_t x_stride, int64_t nb, int m, float* out);

// ---- F32 / F16 / BF16 weights (matmul_float_avx512.cc; used when use_avx512_vnni()) ---------
// A tile of r rows (row i at w + i * w_stride elements) x m tokens (token k at x + k * x_stride,
// m in [1, 4]), n elements per row: out[i * m + k], bit-identical to avx2::dot_*_tile.
// (matmul uses tiles of 4 rows x 1 or 2 tokens.)
// r = float_tile_rows(m) for a full tile, else 1.
int float_tile_rows(int m);
void dot_float_tile(GgmlType type, const void* w, int64_t w_stride, int r, const float* x, int64_t x_stride,
                    int64_t n, int m, float* out);

// "Wide" arithmetic for F32/F16/BF16 matrices of at least kMinWideCols columns on AVX-512 CPUs:
// one 16-lane accumulator per output (ref::dot_*_wide), so a tile of 4 rows x up to
// kWideTileTokens tokens fits in registers with each activation vector loaded once for 4 rows.
//
// pack_wide: x [num_tokens, n] f32 -> out, rounded to the weight type (F16/BF16, as
// round_activations) and packed per tile of kWideTileTokens tokens (the last tile has m =
// num_tokens mod kWideTileTokens): the tile of tokens t0 .. t0 + m starts at out + t0 * S * 16,
// S = ceil(n / 16) steps, and holds for each step j and token k the 16 floats of elements
// 16j .. 16j + 15 at (j * m + k) * 16 (zero past n). out: num_tokens * S * 16 floats, 64-byte
// aligned.
// dot_wide_rows: `rows` rows (row i at w + i * w_stride elements) x num_tokens packed tokens (xp,
// from pack_wide), n elements per row -> y[t * y_stride + i]. With several token tiles, rows go
// in blocks of kWideBlockRows (converted to f32 and packed once from kWidePackTiles tiles on),
// kept in L2 while every token tile runs over them (the next block prefetched meanwhile), in
// sub-blocks of kWideSubRows rows and chunks of kWideChunk elements (accumulators parked between
// chunks); the bits do not depend on this blocking.
constexpr int64_t kMinWideCols = 256;
constexpr int kWideTileTokens = 6;
constexpr int kWideSubRows = 16;
constexpr int kWideBlockRows = 64;
constexpr int kWidePackTiles = 4;  // token tiles from which a block is converted to f32 first
constexpr int64_t kWideChunk = 2048;  // (512, 1024, 2048, whole rows: 2048 and up best on TinyLlama)
void pack_wide(GgmlType type, const float* x, int64_t num_tokens, int64_t n, float* out);

// The "sequential" arithmetic (ref::dot_*_seq) on repacked F32/F16/BF16 tiles, as
// avx2::seq_tiles (kernels_impl.h) with token tiles of kSeqTileTokens: activations packed by
// avx2::pack_seq(..., kSeqTileTokens, ...). The same bits as avx2::seq_tiles.
constexpr int kSeqTileTokens = 12;
void seq_tiles(GgmlType type, const void* w, int64_t tiles, const float* xp, int64_t n, int64_t num_tokens, float* y,
               int64_t y_stride);
void dot_wide_rows(GgmlType type, const void* w, int64_t w_stride, int64_t rows, const float* xp, int64_t n,
                   int64_t num_tokens, float* y, int64_t y_stride);

}  // namespace pagellm::kernels::avx512

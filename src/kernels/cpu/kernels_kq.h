// Internal to src/kernels/cpu: the repacked layout of the K-quant super-block types (Q2_K .. Q6_K,
// IQ4_XS; WeightLayout::kRepacked16, made by repack.cc through the kernel table) and their matmul
// tiles, one per ISA with the oracle's bits (quant_unpack.h's arithmetic): matmul_kq_avx512vnni.cc
// (VPDPBUSD) and matmul_kq_avx2.cc (VPMADDUBSW + VPMADDWD). No intrinsic types appear here.
//
// Rows in tiles of kRows = 16; tile i occupies the bytes of its 16 GGUF rows, super-block by
// super-block: for block b a group of 16 x block_bytes, each field of the block struct (in
// struct order, at 16 x its offset in the block) stored for the 16 rows as lanes of `lane` bytes:
// byte i of row r's field at 16 * offset + ((i / lane) * 16 + r) * lane + i % lane. So f16
// factors (lane 2) load as 16 halves, scale bytes (lane 1) as one byte per row, and quants (lane
// 4) as 64-byte vectors of 4 bytes per row, the bytes a VPDPBUSD lane multiplies.
//
// Arithmetic: per super-block and row, the exact int32 sums isum = sum_s sc[s] (q . x_q)_s and
// msum = sum_s mn[s] sum(x_q)_s, then acc = fma(float(isum), d d_x, acc) and, with mins,
// acc = fma(float(msum), -dmin d_x, acc); the tiles multiply q + offset (unsigned) and subtract
// offset * sum(x_q) per sub-block, which is the same integer.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace pagellm::kernels::kq {

constexpr int kRows = 16;

// One field of a block struct: byte offset, size, lane width in the tiled layout.
struct Field {
  int offset, size, lane;
};
// The fields of T's block struct in struct order (T: Q2_K .. Q6_K, IQ4_XS), or nullptr.
const Field* fields_of(GgmlType type, int* num_fields);

// One tile of 16 GGUF rows (row_bytes apart, cols elements) <-> the tiled layout (repack.cc).
void repack_tile(GgmlType type, const uint8_t* src, int64_t row_bytes, int64_t cols, uint8_t* dst);
void unpack_row(GgmlType type, const uint8_t* tile, int r, int64_t cols, uint8_t* row);

// One tile (16 rows of nb super-blocks) x m in [1, kMaxTileTokens] tokens of q8_K blocks, token
// k's at x + k * x_stride: out[k * 16 + r] = row r . token k, the oracle's bits.
// *_avx512: only with Isa::kAvx512Vnni; *_avx2: only with an Isa >= kAvx2.
constexpr int kMaxTileTokens = 4;
using TileFn = void (*)(const void* tile, const BlockQ8_K* x, int64_t x_stride, int64_t nb, int m, float* out);
template <GgmlType T>
void dot_tile_avx512(const void* tile, const BlockQ8_K* x, int64_t x_stride, int64_t nb, int m, float* out);
template <GgmlType T>
void dot_tile_avx2(const void* tile, const BlockQ8_K* x, int64_t x_stride, int64_t nb, int m, float* out);

}  // namespace pagellm::kernels::kq

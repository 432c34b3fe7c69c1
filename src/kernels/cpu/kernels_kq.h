// Internal to src/kernels/cpu: the repacked layout of the quantized types with unpacked-block
// arithmetic (quant_unpack.h): the K-quant super-block types Q2_K .. Q6_K, IQ4_XS and the
// 32-element Q4_1, Q5_0, Q5_1, IQ4_NL (WeightLayout::kRepacked16, made by repack.cc through the
// kernel table), and their matmul
// tiles, one per ISA with the oracle's bits (quant_unpack.h's arithmetic): matmul_kq_avx512vnni.cc
// (VPDPBUSD) and matmul_kq_avx2.cc (VPMADDUBSW + VPMADDWD). No intrinsic types appear here.
//
// Rows in tiles of kRows = 16; tile i occupies the bytes of its 16 GGUF rows, block by block:
// for block b a group of 16 x block_bytes, each field of the block struct (in
// struct order, at 16 x its offset in the block) stored for the 16 rows as lanes of `lane` bytes:
// byte i of row r's field at 16 * offset + ((i / lane) * 16 + r) * lane + i % lane. So f16
// factors (lane 2) load as 16 halves, scale bytes (lane 1) as one byte per row, and quants (lane
// 4) as 64-byte vectors of 4 bytes per row, the bytes a VPDPBUSD lane multiplies.
//
// Arithmetic: per block and row, the exact int32 sums isum = sum_s sc[s] (q . x_q)_s and
// msum = sum_s mn[s] sum(x_q)_s, then acc = fma(float(isum), d d_x, acc) and, with mins,
// acc = fma(float(msum), dm d_x, acc) (dm = -dmin, or +m for Q4_1 / Q5_1); the tiles multiply
// q + offset (unsigned) and subtract offset * sum(x_q) per sub-block, which is the same integer.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace pagellm::kernels::kq {

constexpr int kRows = 16;

// One field of a block struct: byte offset, size, lane width in the tiled layout.
struct Field {
  int offset, size, lane;
};
// The fields of T's block struct in struct order (T: a tiled type above), or nullptr.
const Field* fields_of(GgmlType type, int* num_fields);

// One tile of 16 GGUF rows (row_bytes apart, cols elements) <-> the tiled layout (repack.cc).
void repack_tile(GgmlType type, const uint8_t* src, int64_t row_bytes, int64_t cols, uint8_t* dst);
void unpack_row(GgmlType type, const uint8_t* tile, int r, int64_t cols, uint8_t* row);

// The activation block of the 32-element types' tiles: a q8_0 block with its sum and d as f32.
struct XBlock32 {
  int8_t qs[32];
  int32_t sum;
  float d;
};
// xq: [nb] q8_0 blocks of one token -> out [nb] (repack_kq.cc).
void prepare32(const BlockQ8_0* xq, int64_t nb, XBlock32* out);

// One tile (16 rows of nb blocks) x m in [1, kMaxTileTokens] tokens of activation blocks (q8_K
// for super-block types, XBlock32 for the others), token k's at x + k * x_stride:
// out[k * 16 + r] = row r . token k, the oracle's bits.
// *_avx512: only with Isa::kAvx512Vnni; *_avx2: only with an Isa >= kAvx2.
constexpr int kMaxTileTokens = 4;
using TileFn = void (*)(const void* tile, const void* x, int64_t x_stride, int64_t nb, int m, float* out);
template <GgmlType T>
void dot_tile_avx512(const void* tile, const void* x, int64_t x_stride, int64_t nb, int m, float* out);
template <GgmlType T>
void dot_tile_avx2(const void* tile, const void* x, int64_t x_stride, int64_t nb, int m, float* out);

// The two orders of the AVX2 one- and two-token tiles of Q4_K, Q5_K and Q6_K, the same bits:
// kPlain walks the sub-blocks one by one and prefetches the group 8 KiB ahead from the first
// half's first quant steps; kShared spreads those prefetches evenly over both halves and, for one
// token, decodes the Q5_K / Q6_K sub-blocks that share their weight loads (2 and 4) side by side,
// so that GCC keeps no loaded vector for later (it spilled them). dot_tile_avx2 runs kShared on
// AMD CPUs (cpu_is_amd()) and kPlain on the others: decode of TinyLlama-1.1B-shaped files, 2
// threads, kShared / kPlain: AMD EPYC Zen 3, Q4_K_M 1.06x, Q5_K_M 1.10x, Q6_K 1.12x; Intel Xeon
// "model 167" (PAGELLM_NO_AVX512=1), 0.97x, 1.01x, 0.96x (docs/benchmarks.md).
enum class Avx2Order : uint8_t { kPlain, kShared };
template <GgmlType T, Avx2Order O>
void dot_tile_avx2_order(const void* tile, const void* x, int64_t x_stride, int64_t nb, int m, float* out);

}  // namespace pagellm::kernels::kq

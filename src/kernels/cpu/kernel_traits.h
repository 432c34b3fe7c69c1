// Internal to src/kernels/cpu: the per-type kernel table (the role of ggml's type_traits /
// type_traits_cpu, written here). One row per weight type; matmul (matmul.cc) and repack.cc read
// the row and know nothing else about the type. No intrinsic types appear here.
//
// One arithmetic per weight family, on every CPU (docs/design.md, "Kernel table"):
//   F32/F16/BF16  "sequential": x rounded to the weight's type, then one FMA chain per output,
//                 s = fma(w[k], x[k], s) for k = 0 .. cols - 1 from s = 0 (ref::dot_*_seq);
//                 BF16 with AVX512_BF16 two links per VDPBF16PS (subnormals flushed).
//   Q8_0/Q4_0     "block sums": x quantized to q8_0 (ggml's x86 activation quantizer), per block
//                 the exact int32 sum, s = fma(float(isum), d_w * d_x, s), blocks in order
//                 (ref::dot_*_blocksum).
//   Q4_1 .. IQ4_XS "unpacked blocks" (quant_unpack.h): x quantized to q8_0 (32-element formats)
//                 or q8_K (K-quant super-blocks); per block exact int32 sums of sub-block
//                 scale x (q . x_q) and of min x sum(x_q), then one or two FMAs (ref::dot_unpacked);
//                 their tiles: kernels_kq.h.
// The scalar `vec_dot` is the oracle (matmul_ref) and the fallback without AVX2; with AVX2 the
// rows after the last 16-row tile run on `row_dot`, the same source compiled with FMA. The tiles
// of every ISA give the same bits as the oracle.
//
// Adding a weight type: a block struct (core/dtype.h), scalar dequant / quant / vec_dot, a
// repack_tile, one tile decoder per ISA, and one row in kernel_traits.cc.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/cpu_features.h"

namespace pagellm::kernels {

// Rows per tile of WeightLayout::kRepacked16.
constexpr int64_t kTileRows = 16;

// Tiles per group of repacked F16 and BF16 (KernelTraits::tile_group).
constexpr int64_t kFloatTileGroup = 4;

// Where tile t of a repacked matrix of `tiles` tiles lies. Types with tile_group g > 1 (F16,
// BF16) keep their tiles in groups of g (the matrix's last group holds what is left): element
// (r, k) of tile j of a group of n tiles at k * 16 n + 16 j + r from the group's start, so the
// decode tiles, which run a group's tiles at once, read one stream instead of g (four streams per
// thread read 1.2-1.4x slower from DRAM on a Zen 5 VM, docs/benchmarks.md). Other types: g = 1,
// tile t at t * tile_bytes with its steps 16 elements apart.
struct TilePlace {
  int64_t offset_bytes = 0;  // from the matrix's start
  int64_t step_rows = 0;     // elements from one step k of the tile to step k + 1: 16 n
};
inline TilePlace tile_place(int64_t t, int64_t tiles, int64_t tile_group, int64_t tile_bytes, int64_t cols) {
  const int64_t g0 = t / tile_group * tile_group, n = tiles - g0 < tile_group ? tiles - g0 : tile_group;
  return {g0 * tile_bytes + (t - g0) * (tile_bytes / cols), kTileRows * n};
}

// The tiles of one ISA for one weight type.
struct IsaKernels {
  // Bytes of prepared activations for num_tokens tokens of cols elements.
  int64_t (*prepared_bytes)(int64_t num_tokens, int64_t cols) = nullptr;
  // x: [num_tokens, cols] f32; xa: the same rows in vec_dot_type (as from_float wrote them) ->
  // out (prepared_bytes; matmul passes a chunk of tokens at prepared_bytes(t0, cols) into a
  // 64-byte aligned buffer, so only the first chunk is sure to be aligned): what `tiles` reads.
  void (*prepare)(const float* x, const void* xa, int64_t num_tokens, int64_t cols, void* out) = nullptr;
  // `tiles` consecutive 16-row tiles of repacked weights from w (cols columns) x every token:
  // y[t * y_stride + 16 i + r] = vec_dot(row 16 i + r, token t), bit for bit (BF16 on
  // kAvx512Bf16: but for subnormals, which VDPBF16PS flushes).
  void (*tiles)(const void* w, int64_t tiles, const void* xp, int64_t cols, int64_t num_tokens, float* y,
                int64_t y_stride) = nullptr;
  // The oracle's vec_dot compiled for this ISA (the same bits): the rows outside the tiles.
  float (*row_dot)(const void* w, const void* xa, int64_t cols) = nullptr;
};

struct KernelTraits {
  GgmlType type = GgmlType::F32;
  int64_t block_size = 1;   // elements per block
  int64_t block_bytes = 4;  // bytes per block
  // The activation type the weights multiply: F32 (x rounded to the weight's type), Q8_0 or Q8_K.
  GgmlType vec_dot_type = GgmlType::F32;
  // One activation row: x [cols] f32 -> out, cols elements of vec_dot_type (f32 or q8_0 blocks).
  // isa picks a vectorised version with the same bits.
  void (*from_float)(Isa isa, const float* x, int64_t cols, void* out) = nullptr;
  int64_t (*vec_dot_row_bytes)(int64_t cols) = nullptr;
  // The scalar oracle: one weight row in GGUF layout . one activation row in vec_dot_type.
  float (*vec_dot)(const void* w, const void* xa, int64_t cols) = nullptr;
  // One tile of 16 GGUF rows (stride row_bytes) -> WeightLayout::kRepacked16 at dst, the tile's
  // start (tile_place), its steps step_rows elements apart (16 but in a group of tile_group > 1).
  // nullptr: the type has no tiles (its rows run on row_dot in GGUF layout; IsaKernels then
  // holds only row_dot).
  void (*repack_tile)(const uint8_t* src, int64_t row_bytes, int64_t cols, uint8_t* dst, int64_t step_rows) = nullptr;
  // Its inverse for one row: row r in [0, 16) of a repacked tile -> its GGUF bytes (row_bytes).
  void (*unpack_row)(const uint8_t* tile, int r, int64_t cols, uint8_t* row, int64_t step_rows) = nullptr;
  // Tiles per group of the repacked layout (tile_place): 4 for F16 and BF16, else 1. matmul hands
  // its threads whole groups; `tiles` below always starts at a group's start.
  int64_t tile_group = 1;
  // The AVX-512 tiles need this level (kAvx512 for floats, kAvx512Vnni for the integer tiles).
  Isa avx512_needs = Isa::kAvx512;
  IsaKernels avx2, avx512;
  // Tiles for Isa::kAvx512Bf16 where the type has them (BF16's VDPBF16PS tiles), else empty.
  IsaKernels avx512bf16;

  // The tiles for isa (>= kAvx2).
  const IsaKernels& tiles_for(Isa isa) const {
    if (isa >= Isa::kAvx512Bf16 && avx512bf16.tiles != nullptr) return avx512bf16;
    return isa >= avx512_needs ? avx512 : avx2;
  }
};

// The row of `type`, or nullptr when matmul does not support it.
const KernelTraits* kernel_traits(GgmlType type);

}  // namespace pagellm::kernels

// Internal to src/kernels/cpu: the repacked Q8_0 / Q4_0 layout (WeightLayout::kRepacked16, made
// by repack.cc) and its matmul tiles, one per ISA with the same bits: matmul_r16_avx512vnni.cc
// (VPDPBUSD, AVX-512 VNNI CPUs) and matmul_r16_avx2.cc (VPMADDUBSW + VPMADDWD, AVX2 CPUs), and
// for Q8_0 prompts matmul_r16_amx.cc (TDPBSUD, 16 tokens at once). No intrinsic types appear here.
//
// Rows in tiles of kRows = 16; tile i (rows 16i .. 16i + 15) occupies the bytes of those 16 GGUF
// rows, block by block: for block b, a group of
//   d[16]   f16, the block's scale in each row
//   quants  Q4_0: 4 x 64 bytes, vector v, lane r (4 bytes) = row r's qs[4v .. 4v + 4) (low
//           nibbles: elements 4v.., high nibbles: elements 16 + 4v..);
//           Q8_0: 8 x 64 bytes, vector c, lane r = row r's qs[4c .. 4c + 4) + 128 (unsigned).
// Rows past the last full tile stay in GGUF layout at their usual offsets. (An AVX2 register
// holds lanes 0..7 of a 64-byte vector in its first 32 bytes, lanes 8..15 in the other.)
//
// Arithmetic ("block sums", as llama.cpp's own repacked Q4_0 GEMV/GEMM): per block an exact
// int32 sum isum = sum (w - offset) * x_q, then acc = fma(float(isum), d_w * d_x, acc), blocks
// in order from acc = 0 (ref::dot_*_blocksum). It differs from the GGUF-layout kernels (ggml's
// 8 float lanes per block) in the last bits; it is the same for every batch, thread count and
// ISA (the integer sums are exact).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace pagellm::kernels::r16 {

constexpr int kRows = 16;
// One token's q8_0 block for these kernels: init = -offset * sum(qs) (offset 8 for Q4_0 weights,
// 128 for Q8_0), d as float.
struct XBlock {
  int8_t qs[32];
  int32_t init;
  float d;
};
// xq: [nb] activation blocks of one token -> out: [nb] (repack.cc, baseline code).
void prepare(GgmlType weight_type, const BlockQ8_0* xq, int64_t nb, XBlock* out);

// One tile (16 rows of nb blocks) x m in [1, kMaxTileTokens] tokens; token k's blocks start at
// x + k * x_stride. out[k * 16 + r] = row r . token k. *_avx512 only with Isa::kAvx512Vnni,
// *_avx2 only with an Isa >= kAvx2 (matmul_r16_avx512vnni.cc, matmul_r16_avx2.cc).
constexpr int kMaxTileTokens = 8;
void dot_q4_0_tile_avx512(const void* tile, const XBlock* x, int64_t x_stride, int64_t nb, int m, float* out);
void dot_q8_0_tile_avx512(const void* tile, const XBlock* x, int64_t x_stride, int64_t nb, int m, float* out);
void dot_q4_0_tile_avx2(const void* tile, const XBlock* x, int64_t x_stride, int64_t nb, int m, float* out);
void dot_q8_0_tile_avx2(const void* tile, const XBlock* x, int64_t x_stride, int64_t nb, int m, float* out);
// One token (a decode) on two tiles at once, tile_a and tile_b anywhere in the weights: out_a[r] =
// row r of tile_a . token, out_b likewise; the bits of the one-tile kernel with m = 1 (AVX-512
// VNNI only): each thread then reads two weight streams, which DRAM serves faster than one.
void dot_q4_0_tile_pair_avx512(const void* tile_a, const void* tile_b, const XBlock* x, int64_t nb, float* out_a,
                               float* out_b);
void dot_q8_0_tile_pair_avx512(const void* tile_a, const void* tile_b, const XBlock* x, int64_t nb, float* out_a,
                               float* out_b);

// Q8_0 only: `tiles` consecutive tiles (tile_bytes apart) x `runs` runs of 16 tokens on
// AMX-INT8 (matmul_r16_amx.cc; only when amx_int8_usable() and the Isa is kAvx512Vnni or above):
// run i is tokens 16 i .. 16 i + 15, token k's blocks at x + k * x_stride; y[k * y_stride + 16 t +
// r] = row r of tile t . token k (the bits of the tiles above).
constexpr int kAmxTokens = 16;
constexpr int kAmxTiles = 3;  // weight tiles per step (one A tile, three C tiles)
// One tile multiply of known bytes, its sums checked (matmul_r16_amx.cc): the last check of
// amx_int8_usable(), which runs it under run_catching_sigill.
bool amx_self_test();
void dot_q8_0_tiles16_amx(const void* w, int64_t tiles, int64_t tile_bytes, const XBlock* x, int64_t x_stride,
                          int64_t nb, int64_t runs, float* y, int64_t y_stride);

}  // namespace pagellm::kernels::r16

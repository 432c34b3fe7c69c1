// The kernel table (kernel_traits.h): one row per weight type.
#include "kernels/cpu/kernel_traits.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "kernels/cpu/kernels_avx512.h"
#include "kernels/cpu/kernels_impl.h"
#include "kernels/cpu/kernels_kq.h"
#include "kernels/cpu/kernels_r16.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_unpack.h"

namespace pagellm::kernels {
namespace {

// ---- F32 / F16 / BF16: the sequential chain ---------------------------------------------------
int64_t f32_row_bytes(int64_t cols) { return cols * 4; }

template <GgmlType T>
void round_row(Isa, const float* x, int64_t cols, void* out) {
  round_activations(T, x, cols, static_cast<float*>(out));
}

template <GgmlType T>
float seq_dot(const void* w, const void* xa, int64_t cols) {
  const auto* x = static_cast<const float*>(xa);
  if constexpr (T == GgmlType::F32) return ref::dot_f32_seq(static_cast<const float*>(w), 1, x, cols);
  if constexpr (T == GgmlType::F16) return ref::dot_f16_seq(static_cast<const uint16_t*>(w), 1, x, cols);
  return ref::dot_bf16_seq(static_cast<const uint16_t*>(w), 1, x, cols);
}

template <GgmlType T>
float seq_dot_avx2(const void* w, const void* xa, int64_t cols) {
  const auto* x = static_cast<const float*>(xa);
  if constexpr (T == GgmlType::F32) return avx2::dot_f32_seq(static_cast<const float*>(w), x, cols);
  if constexpr (T == GgmlType::F16) return avx2::dot_f16_seq(static_cast<const uint16_t*>(w), x, cols);
  return avx2::dot_bf16_seq(static_cast<const uint16_t*>(w), x, cols);
}

int64_t seq_prepared_bytes(int64_t num_tokens, int64_t cols) { return num_tokens * cols * 4; }

// Token tiles of kTokens, rounded to T while packed (avx2::pack_seq serves both ISAs).
template <GgmlType T, int kTokens>
void seq_prepare(const float* x, const void*, int64_t num_tokens, int64_t cols, void* out) {
  avx2::pack_seq(T, x, num_tokens, cols, kTokens, static_cast<float*>(out));
}

template <GgmlType T>
void seq_tiles_avx2(const void* w, int64_t tiles, const void* xp, int64_t cols, int64_t num_tokens, float* y,
                    int64_t ys) {
  avx2::seq_tiles<T>(w, tiles, static_cast<const float*>(xp), cols, num_tokens, y, ys);
}
template <GgmlType T>
void seq_tiles_avx512(const void* w, int64_t tiles, const void* xp, int64_t cols, int64_t num_tokens, float* y,
                      int64_t ys) {
  avx512::seq_tiles<T>(w, tiles, static_cast<const float*>(xp), cols, num_tokens, y, ys);
}

// BF16 with AVX512_BF16 (even cols): activations as bf16 pairs (avx512::pack_bf16_pairs, half the
// bytes of f32), tiles on VDPBF16PS; odd cols fall back to the AVX-512 FMA tiles.
int64_t bf16_pairs_prepared_bytes(int64_t num_tokens, int64_t cols) {
  return cols % 2 == 0 ? num_tokens * cols * 2 : seq_prepared_bytes(num_tokens, cols);
}
void bf16_pairs_prepare(const float* x, const void* xa, int64_t num_tokens, int64_t cols, void* out) {
  if (cols % 2 != 0) return seq_prepare<GgmlType::BF16, avx512::kSeqTileTokens>(x, xa, num_tokens, cols, out);
  avx512::pack_bf16_pairs(x, num_tokens, cols, static_cast<uint32_t*>(out));
}
void bf16_pairs_tiles(const void* w, int64_t tiles, const void* xp, int64_t cols, int64_t num_tokens, float* y,
                      int64_t ys) {
  if (cols % 2 != 0) return seq_tiles_avx512<GgmlType::BF16>(w, tiles, xp, cols, num_tokens, y, ys);
  avx512::seq_tiles_bf16_pairs(w, tiles, static_cast<const uint32_t*>(xp), cols, num_tokens, y, ys);
}

template <GgmlType T>
void seq_repack_tile(const uint8_t* src, int64_t rb, int64_t cols, uint8_t* dst, int64_t step_rows) {
  constexpr size_t kElem = T == GgmlType::F32 ? 4 : 2;
  for (int r = 0; r < kTileRows; ++r) {
    const uint8_t* row = src + r * rb;
    for (int64_t k = 0; k < cols; ++k) std::memcpy(dst + (k * step_rows + r) * kElem, row + k * kElem, kElem);
  }
}

template <GgmlType T>
void seq_unpack_row(const uint8_t* tile, int r, int64_t cols, uint8_t* row, int64_t step_rows) {
  constexpr size_t kElem = T == GgmlType::F32 ? 4 : 2;
  for (int64_t k = 0; k < cols; ++k) std::memcpy(row + k * kElem, tile + (k * step_rows + r) * kElem, kElem);
}

template <GgmlType T, int64_t kBytes>
constexpr KernelTraits float_row() {
  KernelTraits t;
  t.type = T;
  t.block_size = 1;
  t.block_bytes = kBytes;
  t.vec_dot_type = GgmlType::F32;
  t.from_float = round_row<T>;
  t.vec_dot_row_bytes = f32_row_bytes;
  t.vec_dot = seq_dot<T>;
  t.repack_tile = seq_repack_tile<T>;
  t.unpack_row = seq_unpack_row<T>;
  t.tile_group = T == GgmlType::F32 ? 1 : kFloatTileGroup;
  t.avx512_needs = Isa::kAvx512;
  t.avx2 = {seq_prepared_bytes, seq_prepare<T, avx2::kSeqTileTokens>, seq_tiles_avx2<T>, seq_dot_avx2<T>};
  t.avx512 = {seq_prepared_bytes, seq_prepare<T, avx512::kSeqTileTokens>, seq_tiles_avx512<T>, seq_dot_avx2<T>};
  if constexpr (T == GgmlType::BF16) {
    t.avx512bf16 = {bf16_pairs_prepared_bytes, bf16_pairs_prepare, bf16_pairs_tiles, seq_dot_avx2<T>};
  }
  return t;
}

// ---- Q8_0 / Q4_0: block sums over q8_0 activations ---------------------------------------------
int64_t q8_row_bytes(int64_t cols) { return cols / kQK8_0 * static_cast<int64_t>(sizeof(BlockQ8_0)); }

void q8_from_float(Isa isa, const float* x, int64_t cols, void* out) {
  quantize_activations_q8_0(x, 1, cols, static_cast<BlockQ8_0*>(out), isa);
}

template <GgmlType T>
float blocksum_dot(const void* w, const void* xa, int64_t cols) {
  const auto* x = static_cast<const BlockQ8_0*>(xa);
  if constexpr (T == GgmlType::Q8_0)
    return ref::dot_q8_0_q8_0_blocksum(static_cast<const BlockQ8_0*>(w), x, cols / kQK8_0);
  return ref::dot_q4_0_q8_0_blocksum(static_cast<const BlockQ4_0*>(w), x, cols / kQK8_0);
}

template <GgmlType T>
float blocksum_dot_avx2(const void* w, const void* xa, int64_t cols) {
  const auto* x = static_cast<const BlockQ8_0*>(xa);
  if constexpr (T == GgmlType::Q8_0)
    return avx2::dot_q8_0_q8_0_blocksum(static_cast<const BlockQ8_0*>(w), x, cols / kQK8_0);
  return avx2::dot_q4_0_q8_0_blocksum(static_cast<const BlockQ4_0*>(w), x, cols / kQK8_0);
}

int64_t r16_prepared_bytes(int64_t num_tokens, int64_t cols) {
  return num_tokens * (cols / kQK8_0) * static_cast<int64_t>(sizeof(r16::XBlock));
}

template <GgmlType T>
void r16_prepare(const float*, const void* xa, int64_t num_tokens, int64_t cols, void* out) {
  const int64_t nb = cols / kQK8_0;
  const auto* xq = static_cast<const BlockQ8_0*>(xa);
  auto* xb = static_cast<r16::XBlock*>(out);
  for (int64_t t = 0; t < num_tokens; ++t) r16::prepare(T, xq + t * nb, nb, xb + t * nb);
}

using R16Tile = void (*)(const void* tile, const r16::XBlock* x, int64_t x_stride, int64_t nb, int m, float* out);
using R16Amx = void (*)(const void* w, int64_t tiles, int64_t tile_bytes, const r16::XBlock* x, int64_t x_stride,
                        int64_t nb, int64_t runs, float* y, int64_t y_stride);
using R16Pair = void (*)(const void* tile_a, const void* tile_b, const r16::XBlock* x, int64_t nb, float* out_a,
                         float* out_b);

// Every tile x token tiles of up to r16::kMaxTileTokens (the tile's weights stay in cache); with
// kAmx (AVX-512 row) and amx_int8_usable(), the tokens up to the last multiple of 16 on AMX,
// r16::kAmxTiles tiles at a time (then the rest of the tokens on those tiles, while they are in cache).
// One token with kPair: tile i with tile i + h (h = tiles / 2), two streams far apart; an odd
// last tile alone.
template <GgmlType T, R16Tile kDot, R16Amx kAmx, R16Pair kPair>
void r16_tiles(const void* w, int64_t tiles, const void* xp, int64_t cols, int64_t num_tokens, float* y, int64_t ys) {
  if (kPair != nullptr && num_tokens == 1 && tiles >= 2) {
    const int64_t nb = cols / kQK8_0, tile_bytes = kTileRows * row_size_bytes(T, cols), h = tiles / 2;
    const auto* xb = static_cast<const r16::XBlock*>(xp);
    const auto* w8 = static_cast<const uint8_t*>(w);
    for (int64_t i = 0; i < h; ++i) {
      kPair(w8 + i * tile_bytes, w8 + (i + h) * tile_bytes, xb, nb, y + i * kTileRows, y + (i + h) * kTileRows);
    }
    if (tiles % 2 != 0) kDot(w8 + (tiles - 1) * tile_bytes, xb, nb, nb, 1, y + (tiles - 1) * kTileRows);
    return;
  }
  const int64_t nb = cols / kQK8_0, tile_bytes = kTileRows * row_size_bytes(T, cols);
  const auto* xb = static_cast<const r16::XBlock*>(xp);
  const bool amx = kAmx != nullptr && num_tokens >= r16::kAmxTokens && amx_int8_usable();
  const int64_t amx_tokens = amx ? num_tokens / r16::kAmxTokens * r16::kAmxTokens : 0;
  const int64_t step = amx ? r16::kAmxTiles : 1;
  float out[kTileRows * r16::kMaxTileTokens];
  for (int64_t i0 = 0; i0 < tiles; i0 += step) {
    const int64_t i1 = std::min(tiles, i0 + step);
    const uint8_t* tile0 = static_cast<const uint8_t*>(w) + i0 * tile_bytes;
    if (amx) kAmx(tile0, i1 - i0, tile_bytes, xb, nb, nb, amx_tokens / r16::kAmxTokens, y + i0 * kTileRows, ys);
    for (int64_t i = i0; i < i1; ++i) {
      const uint8_t* tile = static_cast<const uint8_t*>(w) + i * tile_bytes;
      for (int64_t t0 = amx_tokens; t0 < num_tokens; t0 += r16::kMaxTileTokens) {
        const int m = static_cast<int>(std::min<int64_t>(r16::kMaxTileTokens, num_tokens - t0));
        kDot(tile, xb + t0 * nb, nb, nb, m, out);
        for (int k = 0; k < m; ++k) {
          std::memcpy(y + (t0 + k) * ys + i * kTileRows, out + k * kTileRows, kTileRows * sizeof(float));
        }
      }
    }
  }
}

// One tile of 16 GGUF rows -> kRepacked16 (kernels_r16.h): per block the 16 scales, then the
// quants in 4-byte lanes, one lane per row (Q8_0 stored as w + 128, unsigned).
template <GgmlType T>
void r16_repack_tile(const uint8_t* src, int64_t rb, int64_t cols, uint8_t* dst, int64_t /*step_rows: 16*/) {
  constexpr bool kQ4 = T == GgmlType::Q4_0;
  constexpr int64_t kBs = kQ4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  constexpr int kVectors = kQ4 ? 4 : 8;
  for (int64_t b = 0; b < cols / kQK8_0; ++b) {
    uint8_t* g = dst + b * kTileRows * kBs;
    uint8_t* q = g + 2 * kTileRows;
    for (int r = 0; r < kTileRows; ++r) {
      const uint8_t* blk = src + r * rb + b * kBs;
      std::memcpy(g + 2 * r, blk, 2);  // d (f16)
      for (int v = 0; v < kVectors; ++v) {
        for (int j = 0; j < 4; ++j) {
          const uint8_t byte = blk[2 + 4 * v + j];
          q[64 * v + 4 * r + j] = kQ4 ? byte : static_cast<uint8_t>(byte ^ 0x80);
        }
      }
    }
  }
}

template <GgmlType T>
void r16_unpack_row(const uint8_t* tile, int r, int64_t cols, uint8_t* row, int64_t /*step_rows: 16*/) {
  constexpr bool kQ4 = T == GgmlType::Q4_0;
  constexpr int64_t kBs = kQ4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  constexpr int kVectors = kQ4 ? 4 : 8;
  for (int64_t b = 0; b < cols / kQK8_0; ++b) {
    const uint8_t* g = tile + b * kTileRows * kBs;
    const uint8_t* q = g + 2 * kTileRows;
    uint8_t* blk = row + b * kBs;
    std::memcpy(blk, g + 2 * r, 2);
    for (int v = 0; v < kVectors; ++v) {
      for (int j = 0; j < 4; ++j) {
        const uint8_t byte = q[64 * v + 4 * r + j];
        blk[2 + 4 * v + j] = kQ4 ? byte : static_cast<uint8_t>(byte ^ 0x80);
      }
    }
  }
}

template <GgmlType T, R16Tile kAvx2, R16Tile kAvx512, R16Amx kAmx, R16Pair kAvx512Pair>
constexpr KernelTraits quant_row() {
  KernelTraits t;
  t.type = T;
  t.block_size = 32;
  t.block_bytes = T == GgmlType::Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  t.vec_dot_type = GgmlType::Q8_0;
  t.from_float = q8_from_float;
  t.vec_dot_row_bytes = q8_row_bytes;
  t.vec_dot = blocksum_dot<T>;
  t.repack_tile = r16_repack_tile<T>;
  t.unpack_row = r16_unpack_row<T>;
  t.avx512_needs = Isa::kAvx512Vnni;
  t.avx2 = {r16_prepared_bytes, r16_prepare<T>, r16_tiles<T, kAvx2, nullptr, nullptr>, blocksum_dot_avx2<T>};
  t.avx512 = {r16_prepared_bytes, r16_prepare<T>, r16_tiles<T, kAvx512, kAmx, kAvx512Pair>, blocksum_dot_avx2<T>};
  return t;
}

// ---- Q4_1 .. IQ4_XS: the unpacked-block arithmetic (quant_unpack.h) ----------------------------
int64_t q8k_row_bytes(int64_t cols) { return cols / kQK_K * static_cast<int64_t>(sizeof(BlockQ8_K)); }

void q8k_from_float(Isa isa, const float* x, int64_t cols, void* out) {
  if (isa >= Isa::kAvx2) {
    PAGELLM_CHECK(cols % kQK_K == 0, "q8_K row of " + std::to_string(cols));
    return avx2::quantize_q8_K_activations(x, cols, static_cast<BlockQ8_K*>(out));
  }
  quantize_row_q8_K(x, cols, out);
}

// The oracle's columns of the row (kq_row adds the tiles).
template <GgmlType T>
constexpr KernelTraits unpacked_row() {
  KernelTraits t;
  using B = typename BlockOf<T>::type;
  t.type = T;
  t.block_size = QuantFormat<B>::kQK;
  t.block_bytes = sizeof(B);
  const bool super = t.block_size == kQK_K;
  t.vec_dot_type = super ? GgmlType::Q8_K : GgmlType::Q8_0;
  t.from_float = super ? q8k_from_float : q8_from_float;
  t.vec_dot_row_bytes = super ? q8k_row_bytes : q8_row_bytes;
  t.vec_dot = ref::dot_unpacked<T>;
  t.avx2 = {nullptr, nullptr, nullptr, avx2::dot_unpacked<T>};
  t.avx512 = t.avx2;
  return t;
}

const KernelTraits kF32 = float_row<GgmlType::F32, 4>();
const KernelTraits kF16 = float_row<GgmlType::F16, 2>();
const KernelTraits kBF16 = float_row<GgmlType::BF16, 2>();
const KernelTraits kQ8_0 = quant_row<GgmlType::Q8_0, r16::dot_q8_0_tile_avx2, r16::dot_q8_0_tile_avx512,
                                     r16::dot_q8_0_tiles16_amx, r16::dot_q8_0_tile_pair_avx512>();
const KernelTraits kQ4_0 = quant_row<GgmlType::Q4_0, r16::dot_q4_0_tile_avx2, r16::dot_q4_0_tile_avx512, nullptr,
                                     r16::dot_q4_0_tile_pair_avx512>();

// ---- the same arithmetic on repacked tiles (kernels_kq.h) ---------------------------------------
// Activations: q8_K rows as they are (super-block types), or q8_0 blocks with their sums.
template <GgmlType T>
constexpr bool kSuper = QuantFormat<typename BlockOf<T>::type>::kQK == kQK_K;
template <GgmlType T>
using KqAct = std::conditional_t<kSuper<T>, BlockQ8_K, kq::XBlock32>;

template <GgmlType T>
int64_t kq_prepared_bytes(int64_t num_tokens, int64_t cols) {
  return num_tokens * (cols / QuantFormat<typename BlockOf<T>::type>::kQK) * static_cast<int64_t>(sizeof(KqAct<T>));
}

template <GgmlType T>
void kq_prepare(const float*, const void* xa, int64_t num_tokens, int64_t cols, void* out) {
  if constexpr (kSuper<T>) {
    std::memcpy(out, xa, static_cast<size_t>(kq_prepared_bytes<T>(num_tokens, cols)));
  } else {
    kq::prepare32(static_cast<const BlockQ8_0*>(xa), num_tokens * (cols / kQK8_0), static_cast<kq::XBlock32*>(out));
  }
}

// Every tile x token tiles of up to kq::kMaxTileTokens (the tile's weights stay in cache).
template <GgmlType T, kq::TileFn kDot>
void kq_tiles(const void* w, int64_t tiles, const void* xp, int64_t cols, int64_t num_tokens, float* y, int64_t ys) {
  const int64_t nb = cols / QuantFormat<typename BlockOf<T>::type>::kQK;
  const int64_t tile_bytes = kTileRows * row_size_bytes(T, cols);
  const auto* xb = static_cast<const KqAct<T>*>(xp);
  float out[kTileRows * kq::kMaxTileTokens];
  for (int64_t i = 0; i < tiles; ++i) {
    const uint8_t* tile = static_cast<const uint8_t*>(w) + i * tile_bytes;
    for (int64_t t0 = 0; t0 < num_tokens; t0 += kq::kMaxTileTokens) {
      const int m = static_cast<int>(std::min<int64_t>(kq::kMaxTileTokens, num_tokens - t0));
      kDot(tile, xb + t0 * nb, nb, nb, m, out);
      for (int k = 0; k < m; ++k) {
        std::memcpy(y + (t0 + k) * ys + i * kTileRows, out + k * kTileRows, kTileRows * sizeof(float));
      }
    }
  }
}

template <GgmlType T>
void kq_repack_tile(const uint8_t* src, int64_t rb, int64_t cols, uint8_t* dst, int64_t /*step_rows: 16*/) {
  kq::repack_tile(T, src, rb, cols, dst);
}
template <GgmlType T>
void kq_unpack_row(const uint8_t* tile, int r, int64_t cols, uint8_t* row, int64_t /*step_rows: 16*/) {
  kq::unpack_row(T, tile, r, cols, row);
}

template <GgmlType T>
constexpr KernelTraits kq_row() {
  KernelTraits t = unpacked_row<T>();
  t.repack_tile = kq_repack_tile<T>;
  t.unpack_row = kq_unpack_row<T>;
  t.avx512_needs = Isa::kAvx512Vnni;
  t.avx2 = {kq_prepared_bytes<T>, kq_prepare<T>, kq_tiles<T, kq::dot_tile_avx2<T>>, avx2::dot_unpacked<T>};
  t.avx512 = {kq_prepared_bytes<T>, kq_prepare<T>, kq_tiles<T, kq::dot_tile_avx512<T>>, avx2::dot_unpacked<T>};
  return t;
}

const KernelTraits kQ4_1 = kq_row<GgmlType::Q4_1>();
const KernelTraits kQ5_0 = kq_row<GgmlType::Q5_0>();
const KernelTraits kQ5_1 = kq_row<GgmlType::Q5_1>();
const KernelTraits kIQ4_NL = kq_row<GgmlType::IQ4_NL>();
const KernelTraits kQ2_K = kq_row<GgmlType::Q2_K>();
const KernelTraits kQ3_K = kq_row<GgmlType::Q3_K>();
const KernelTraits kQ4_K = kq_row<GgmlType::Q4_K>();
const KernelTraits kQ5_K = kq_row<GgmlType::Q5_K>();
const KernelTraits kQ6_K = kq_row<GgmlType::Q6_K>();
const KernelTraits kIQ4_XS = kq_row<GgmlType::IQ4_XS>();

}  // namespace

const KernelTraits* kernel_traits(GgmlType type) {
  switch (type) {
    case GgmlType::F32: return &kF32;
    case GgmlType::F16: return &kF16;
    case GgmlType::BF16: return &kBF16;
    case GgmlType::Q8_0: return &kQ8_0;
    case GgmlType::Q4_0: return &kQ4_0;
#define PAGELLM_CASE(T) \
  case GgmlType::T: return &k##T;
      PAGELLM_FOR_EACH_UNPACKED_TYPE(PAGELLM_CASE)
#undef PAGELLM_CASE
    default: return nullptr;
  }
}

}  // namespace pagellm::kernels

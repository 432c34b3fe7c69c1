// Repacking of Q8_0 / Q4_0 weight rows into WeightLayout::kRepacked16 (layout: kernels_avx512.h).
// Plain byte moves: baseline code, no intrinsics.
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernels_avx512.h"
#include "kernels/cpu/ops.h"

namespace pagellm::kernels {
namespace {

// One tile of 16 GGUF rows (stride rb bytes) -> kRepacked16 layout (kernels_avx512.h).
void repack_tile(GgmlType type, const uint8_t* src, int64_t rb, int64_t nb, uint8_t* dst) {
  const bool q4 = type == GgmlType::Q4_0;
  const int64_t bs = q4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  const int vectors = q4 ? 4 : 8;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* g = dst + b * avx512::kR16Rows * bs;
    uint8_t* q = g + 2 * avx512::kR16Rows;
    for (int r = 0; r < avx512::kR16Rows; ++r) {
      const uint8_t* blk = src + r * rb + b * bs;
      std::memcpy(g + 2 * r, blk, 2);  // d (f16)
      const uint8_t* qs = blk + 2;
      for (int v = 0; v < vectors; ++v) {
        for (int j = 0; j < 4; ++j) {
          const uint8_t byte = qs[4 * v + j];
          q[64 * v + 4 * r + j] = q4 ? byte : static_cast<uint8_t>(byte ^ 0x80);  // Q8_0: w + 128
        }
      }
    }
  }
}

// Narrower matrices keep ggml's arithmetic: their matmuls cost little either way, and the small
// models that have them (stories260K: 64 columns) are the ones with llama.cpp golden data.
constexpr int64_t kMinRepackCols = 256;

}  // namespace

bool repack_pays(const WeightView& w) {
  return (w.type == GgmlType::Q8_0 || w.type == GgmlType::Q4_0) && w.layout == WeightLayout::kGguf &&
         use_repacking() && w.rows >= avx512::kR16Rows && w.cols >= kMinRepackCols;
}

WeightView repack_weight(const WeightView& w, void* out, ThreadPool* pool) {
  PAGELLM_CHECK(w.type == GgmlType::Q8_0 || w.type == GgmlType::Q4_0,
                "repack_weight: " + type_name(w.type) + " has no repacked layout");
  PAGELLM_CHECK(w.layout == WeightLayout::kGguf, "repack_weight: already repacked");
  PAGELLM_CHECK(w.cols % kQK8_0 == 0 && w.rows >= 0, "repack_weight: bad shape");
  const int64_t rb = w.row_bytes(), nb = w.cols / kQK8_0;
  const auto* src = static_cast<const uint8_t*>(w.data);
  auto* dst = static_cast<uint8_t*>(out);
  const int64_t tiles = w.rows / avx512::kR16Rows, tile_bytes = avx512::kR16Rows * rb;
  auto run = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) repack_tile(w.type, src + t * tile_bytes, rb, nb, dst + t * tile_bytes);
  };
  if (pool != nullptr) {
    pool->parallel_for(tiles, run);
  } else {
    run(0, tiles);
  }
  // Rows after the last full tile keep the GGUF layout.
  std::memcpy(dst + tiles * tile_bytes, src + tiles * tile_bytes, static_cast<size_t>((w.rows - tiles * avx512::kR16Rows) * rb));
  WeightView v = w;
  v.data = out;
  v.layout = WeightLayout::kRepacked16;
  return v;
}

}  // namespace pagellm::kernels

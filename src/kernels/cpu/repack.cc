// Repacking of Q8_0 / Q4_0 weight rows into WeightLayout::kRepacked16 (layout: kernels_r16.h), and
// the activation blocks its tiles read (r16::prepare); of F32 / F16 / BF16 rows into 16-row tiles
// with element (r, k) at k * 16 + r (the "sequential" arithmetic, matmul_seq_avx2.cc).
// Plain byte moves: baseline code, no intrinsics.
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernels_r16.h"
#include "kernels/cpu/ops.h"

namespace pagellm::kernels {
namespace {

// One tile of 16 GGUF rows (stride rb bytes) -> kRepacked16 layout (kernels_r16.h).
void repack_tile(GgmlType type, const uint8_t* src, int64_t rb, int64_t nb, uint8_t* dst) {
  const bool q4 = type == GgmlType::Q4_0;
  const int64_t bs = q4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  const int vectors = q4 ? 4 : 8;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* g = dst + b * r16::kRows * bs;
    uint8_t* q = g + 2 * r16::kRows;
    for (int r = 0; r < r16::kRows; ++r) {
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

// One tile of 16 GGUF rows (stride rb bytes) of E-sized elements -> element (r, k) at k * 16 + r.
template <typename E>
void repack_float_tile(const uint8_t* src, int64_t rb, int64_t cols, uint8_t* dst) {
  E* out = reinterpret_cast<E*>(dst);  // (byte buffers: E is uint16_t or uint32_t, copied by value)
  for (int r = 0; r < r16::kRows; ++r) {
    const uint8_t* row = src + r * rb;
    for (int64_t k = 0; k < cols; ++k) {
      E v;
      std::memcpy(&v, row + k * static_cast<int64_t>(sizeof(E)), sizeof(E));
      std::memcpy(out + k * r16::kRows + r, &v, sizeof(E));
    }
  }
}

bool is_float(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

// Narrower matrices keep ggml's arithmetic: their matmuls cost little either way, and the small
// models that have them (stories260K: 64 columns) are the ones with llama.cpp golden data.
constexpr int64_t kMinRepackCols = 256;

}  // namespace

bool repack_pays(const WeightView& w) {
  const bool quantized = w.type == GgmlType::Q8_0 || w.type == GgmlType::Q4_0;
  return (quantized || is_float(w.type)) && w.layout == WeightLayout::kGguf && use_repacking() &&
         w.rows >= r16::kRows && w.cols >= kMinRepackCols;
}

WeightView repack_weight(const WeightView& w, void* out, ThreadPool* pool) {
  PAGELLM_CHECK(w.type == GgmlType::Q8_0 || w.type == GgmlType::Q4_0 || is_float(w.type),
                "repack_weight: " + type_name(w.type) + " has no repacked layout");
  PAGELLM_CHECK(w.layout == WeightLayout::kGguf, "repack_weight: already repacked");
  PAGELLM_CHECK((is_float(w.type) || w.cols % kQK8_0 == 0) && w.rows >= 0, "repack_weight: bad shape");
  const int64_t rb = w.row_bytes(), nb = w.cols / kQK8_0;
  const auto* src = static_cast<const uint8_t*>(w.data);
  auto* dst = static_cast<uint8_t*>(out);
  const int64_t tiles = w.rows / r16::kRows, tile_bytes = r16::kRows * rb;
  auto run = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (is_float(w.type)) {
        (w.type == GgmlType::F32 ? repack_float_tile<uint32_t> : repack_float_tile<uint16_t>)(
            src + t * tile_bytes, rb, w.cols, dst + t * tile_bytes);
      } else {
        repack_tile(w.type, src + t * tile_bytes, rb, nb, dst + t * tile_bytes);
      }
    }
  };
  if (pool != nullptr) {
    pool->parallel_for(tiles, run);
  } else {
    run(0, tiles);
  }
  // Rows after the last full tile keep the GGUF layout.
  std::memcpy(dst + tiles * tile_bytes, src + tiles * tile_bytes, static_cast<size_t>((w.rows - tiles * r16::kRows) * rb));
  WeightView v = w;
  v.data = out;
  v.layout = WeightLayout::kRepacked16;
  return v;
}

namespace r16 {

void prepare(GgmlType weight_type, const BlockQ8_0* xq, int64_t nb, XBlock* out) {
  const int32_t offset = weight_type == GgmlType::Q4_0 ? 8 : 128;
  for (int64_t b = 0; b < nb; ++b) {
    std::memcpy(out[b].qs, xq[b].qs, 32);
    int32_t sum = 0;
    for (int j = 0; j < 32; ++j) sum += xq[b].qs[j];
    out[b].init = -offset * sum;
    out[b].d = fp16_to_fp32(xq[b].d);
  }
}

}  // namespace r16
}  // namespace pagellm::kernels

// Repacking of weight rows into WeightLayout::kRepacked16 through the kernel table's repack_tile
// (kernel_traits.h), and the activation blocks the Q8_0 / Q4_0 tiles read (r16::prepare).
// Plain byte moves: baseline code, no intrinsics.
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/kernel_traits.h"
#include "kernels/cpu/kernels_r16.h"
#include "kernels/cpu/ops.h"

namespace pagellm::kernels {

bool repack_pays(const WeightView& w) {
  const KernelTraits* tt = kernel_traits(w.type);
  return tt != nullptr && tt->repack_tile != nullptr && w.layout == WeightLayout::kGguf && w.isa >= Isa::kAvx2 &&
         w.rows >= kTileRows;
}

WeightView repack_weight(const WeightView& w, void* out, ThreadPool* pool) {
  const KernelTraits* tt = kernel_traits(w.type);
  PAGELLM_CHECK(tt != nullptr && tt->repack_tile != nullptr,
                "repack_weight: " + type_name(w.type) + " has no repacked layout");
  PAGELLM_CHECK(w.layout == WeightLayout::kGguf, "repack_weight: already repacked");
  PAGELLM_CHECK(w.cols % tt->block_size == 0 && w.rows >= 0, "repack_weight: bad shape");
  const int64_t rb = w.row_bytes();
  const auto* src = static_cast<const uint8_t*>(w.data);
  auto* dst = static_cast<uint8_t*>(out);
  const int64_t tiles = w.rows / kTileRows, tile_bytes = kTileRows * rb;
  auto run = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const TilePlace p = tile_place(t, tiles, tt->tile_group, tile_bytes, w.cols);
      tt->repack_tile(src + t * tile_bytes, rb, w.cols, dst + p.offset_bytes, p.step_rows);
    }
  };
  if (pool != nullptr) {
    pool->parallel_for(tiles, run);
  } else {
    run(0, tiles);
  }
  // Rows after the last full tile keep the GGUF layout.
  std::memcpy(dst + tiles * tile_bytes, src + tiles * tile_bytes,
              static_cast<size_t>((w.rows - tiles * kTileRows) * rb));
  WeightView v = w;
  v.data = out;
  v.layout = WeightLayout::kRepacked16;
  return v;
}

void get_row(const WeightView& w, int64_t r, float* out, Workspace& ws) {
  PAGELLM_CHECK(r >= 0 && r < w.rows, "get_row: row " + std::to_string(r) + " of " + std::to_string(w.rows));
  const int64_t rb = w.row_bytes();
  const auto* base = static_cast<const uint8_t*>(w.data);
  if (w.layout == WeightLayout::kGguf || r >= w.rows / kTileRows * kTileRows) {
    return dequantize_row(w.type, base + r * rb, w.cols, out);
  }
  auto* row = static_cast<uint8_t*>(ws.get(Workspace::kRow, rb));
  const KernelTraits* tt = kernel_traits(w.type);
  const TilePlace p = tile_place(r / kTileRows, w.rows / kTileRows, tt->tile_group, kTileRows * rb, w.cols);
  tt->unpack_row(base + p.offset_bytes, static_cast<int>(r % kTileRows), w.cols, row, p.step_rows);
  dequantize_row(w.type, row, w.cols, out);
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

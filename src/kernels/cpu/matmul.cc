// matmul(): shape checks, activation preparation, threading and ISA dispatch.
//
// Quantized weights on CPUs with AVX-512 VNNI take avx512::dot_*_tile (tiles of up to 8 tokens,
// activations prepared once per call as PairQ8); the results are bit-identical to the AVX2 tiles.
//
// Work split (batch invariance): threads own contiguous ranges of output rows; inside a range,
// rows are walked in blocks that stay in cache while every token visits them, tokens in tiles
// of up to kMaxTileTokens. Each y[t, r] is one call-independent dot product (kernels_impl.h), so
// neither num_tokens, nor the other rows of x, nor the thread count changes a single bit.
//
//   for each thread's rows [r_begin, r_end):
//     for each row block [r0, r1) of ~kBlockBytes weight bytes:
//       for each token tile [t0, t0 + m):
//         for r in [r0, r1):  y[t0 .. t0+m, r] = tile_dot(w[r], x[t0 .. t0+m])
#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernels_avx512.h"
#include "kernels/cpu/kernels_impl.h"
#include "kernels/cpu/ops.h"

namespace pagellm::kernels {
namespace {

constexpr int64_t kBlockBytes = 64 * 1024;
static_assert(avx512::kMaxTileTokens >= avx2::kMaxTileTokens);

bool is_quantized(GgmlType t) { return t == GgmlType::Q8_0 || t == GgmlType::Q4_0; }

// y[t0 + k, r] for k in [0, m), one weight row r. `xa` is f32 rows (stride cols) or q8_0 rows
// (stride cols / 32 blocks).
void tile(GgmlType type, bool simd, const void* wr, const void* xa, int64_t x_stride, int64_t cols, int m,
          float* out) {
  const int64_t nb = cols / kQK8_0;
  const auto* xf = static_cast<const float*>(xa);
  const auto* xq = static_cast<const BlockQ8_0*>(xa);
  if (simd) {
    switch (type) {
      case GgmlType::F32: return avx2::dot_f32_tile(static_cast<const float*>(wr), xf, x_stride, cols, m, out);
      case GgmlType::F16: return avx2::dot_f16_tile(static_cast<const uint16_t*>(wr), xf, x_stride, cols, m, out);
      case GgmlType::BF16: return avx2::dot_bf16_tile(static_cast<const uint16_t*>(wr), xf, x_stride, cols, m, out);
      case GgmlType::Q8_0:
        return avx2::dot_q8_0_q8_0_tile(static_cast<const BlockQ8_0*>(wr), xq, x_stride, nb, m, out);
      case GgmlType::Q4_0:
        return avx2::dot_q4_0_q8_0_tile(static_cast<const BlockQ4_0*>(wr), xq, x_stride, nb, m, out);
      default: break;
    }
  } else {
    for (int k = 0; k < m; ++k) {
      switch (type) {
        case GgmlType::F32: out[k] = ref::dot_f32(static_cast<const float*>(wr), xf + k * x_stride, cols); break;
        case GgmlType::F16: out[k] = ref::dot_f16(static_cast<const uint16_t*>(wr), xf + k * x_stride, cols); break;
        case GgmlType::BF16: out[k] = ref::dot_bf16(static_cast<const uint16_t*>(wr), xf + k * x_stride, cols); break;
        case GgmlType::Q8_0:
          out[k] = ref::dot_q8_0_q8_0(static_cast<const BlockQ8_0*>(wr), xq + k * x_stride, nb);
          break;
        case GgmlType::Q4_0:
          out[k] = ref::dot_q4_0_q8_0(static_cast<const BlockQ4_0*>(wr), xq + k * x_stride, nb);
          break;
        default: break;
      }
    }
    return;
  }
  PAGELLM_CHECK(false, "matmul: unsupported weight type " + type_name(type));
}

}  // namespace

// Below this many multiply-adds a matmul is not split across threads.
constexpr int64_t kMinParallelMacs = int64_t{1} << 18;

void matmul(const WeightView& w, const float* x, int64_t num_tokens, float* y, ThreadPool* pool) {
  const GgmlType type = w.type;
  const bool repacked = w.layout == WeightLayout::kRepackedX8;
  PAGELLM_CHECK(!repacked || (is_quantized(type) && cpu_has_avx512_vnni()),
                "matmul: repacked weights need Q8_0/Q4_0 and a CPU with AVX-512 VNNI");
  PAGELLM_CHECK(type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16 || is_quantized(type),
                "matmul: unsupported weight type " + type_name(type));
  PAGELLM_CHECK(w.rows >= 0 && w.cols > 0 && num_tokens >= 0, "matmul: bad shape");
  if (num_tokens == 0 || w.rows == 0) return;
  const int64_t rows = w.rows, cols = w.cols;
  const int64_t row_bytes = w.row_bytes();
  const bool simd = use_avx2();

  // Activations: f32 as given, or quantized to q8_0 once per token.
  const void* xa = x;
  int64_t x_stride = cols;
  thread_local std::vector<BlockQ8_0> xq;
  thread_local std::vector<avx512::PairQ8> xp;
  // Repacked weights exist only for the VNNI kernels (even if they were switched off since).
  const bool vnni = repacked || (simd && is_quantized(type) && use_avx512_vnni());
  if (is_quantized(type)) {
    x_stride = cols / kQK8_0;
    xq.resize(static_cast<size_t>(num_tokens * x_stride));
    for (int64_t t = 0; t < num_tokens; ++t) quantize_row_q8_0_activations(x + t * cols, cols, xq.data() + t * x_stride);
    xa = xq.data();
  }
  const int64_t nb = cols / kQK8_0, np = (nb + 1) / 2;
  if (vnni) {
    xp.resize(static_cast<size_t>(num_tokens * np));
    for (int64_t t = 0; t < num_tokens; ++t) avx512::prepare_pairs(type, xq.data() + t * nb, nb, xp.data() + t * np);
  }
  const avx512::PairQ8* xpa = xp.data();  // (workers see their own thread_local xp)
  thread_local std::vector<float> xr;
  if (type == GgmlType::F16 || type == GgmlType::BF16) {
    xr.resize(static_cast<size_t>(num_tokens * cols));
    round_activations(type, x, num_tokens * cols, xr.data());
    xa = xr.data();
  }
  const auto* wbase = static_cast<const uint8_t*>(w.data);
  const int64_t block_rows = std::max<int64_t>(1, kBlockBytes / row_bytes);
  const int64_t xa_elem = is_quantized(type) ? static_cast<int64_t>(sizeof(BlockQ8_0)) : 4;
  const int64_t max_tile = vnni ? avx512::kMaxTileTokens : avx2::kMaxTileTokens;

  // y[t0 .. t0 + m, r] -> out[0 .. m).
  auto tile_at = [&](int64_t r, int64_t t0, int m, float* out) {
    const uint8_t* wr = wbase + r * row_bytes;
    if (vnni) {
      const avx512::PairQ8* xt = xpa + t0 * np;
      if (type == GgmlType::Q4_0) return avx512::dot_q4_0_tile(reinterpret_cast<const BlockQ4_0*>(wr), xt, np, nb, m, out);
      return avx512::dot_q8_0_tile(reinterpret_cast<const BlockQ8_0*>(wr), xt, np, nb, m, out);
    }
    tile(type, simd, wr, static_cast<const uint8_t*>(xa) + t0 * x_stride * xa_elem, x_stride, cols, m, out);
  };
  auto run_rows = [&](int64_t r_begin, int64_t r_end) {
    float out[4 * avx512::kMaxTileTokens];
    for (int64_t r0 = r_begin; r0 < r_end; r0 += block_rows) {
      const int64_t r1 = std::min(r_end, r0 + block_rows);
      for (int64_t t0 = 0; t0 < num_tokens; t0 += max_tile) {
        const int m = static_cast<int>(std::min<int64_t>(max_tile, num_tokens - t0));
        if (repacked) {  // tiles of several rows
          const int rt = avx512::x8_tile_rows(m);
          const avx512::PairQ8* xt = xpa + t0 * np;
          for (int64_t r = r0; r < r1;) {
            const int rr = r + rt <= r1 ? rt : 1;
            const uint8_t* wr = wbase + r * row_bytes;
            if (type == GgmlType::Q4_0) {
              avx512::dot_q4_0_x8_tile(wr, row_bytes, rr, xt, np, nb, m, out);
            } else {
              avx512::dot_q8_0_x8_tile(wr, row_bytes, rr, xt, np, nb, m, out);
            }
            for (int i = 0; i < rr; ++i)
              for (int k = 0; k < m; ++k) y[(t0 + k) * rows + r + i] = out[i * m + k];
            r += rr;
          }
          continue;
        }
        for (int64_t r = r0; r < r1; ++r) {
          tile_at(r, t0, m, out);
          for (int k = 0; k < m; ++k) y[(t0 + k) * rows + r] = out[k];
        }
      }
    }
  };
  // Small products run on the calling thread: waking the pool costs more than the work (and
  // much more on an oversubscribed machine). The result is the same either way: each (token, row)
  // dot product is computed identically whoever runs it.
  const bool small = rows * cols * num_tokens < kMinParallelMacs;
  if (pool == nullptr || pool->num_threads() == 1 || rows < 2 || small) {
    run_rows(0, rows);
  } else {
    pool->parallel_for(rows, run_rows);
  }
}

}  // namespace pagellm::kernels

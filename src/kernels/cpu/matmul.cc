// matmul(): shape checks, activation preparation, threading and ISA dispatch.
//
// Paths, by weight and CPU (all batch invariant):
//   Q8_0/Q4_0 repacked at load (WeightLayout::kRepacked16, AVX2 or AVX-512 VNNI CPUs):
//     matmul_repacked, 16-row tiles x up to 8 tokens, exact per-block integer sums, the same bits
//     on either ISA (kernels_r16.h).
//   F32/F16/BF16 repacked at load (WeightLayout::kRepacked16, AVX2 or AVX-512 CPUs):
//     matmul_repacked_float, one sequential FMA chain per output (ref::dot_*_seq), 16-row tiles x
//     up to 12 tokens (matmul_seq_avx512.cc) or 6 tokens (matmul_seq_avx2.cc), the same bits.
//   Q8_0/Q4_0 in GGUF layout, AVX-512 VNNI: avx512::dot_*_tile (up to 8 tokens, activations
//     prepared once per call as PairQ8), bit-identical to the AVX2 tiles (ggml's arithmetic).
//   F32/F16/BF16 in GGUF layout (PAGELLM_NO_REPACK=1, or fewer than 16 rows), >= 256 columns:
//     one 16-lane accumulator per output (ref::dot_*_wide), the same
//     bits on AVX-512 (avx512::dot_wide_rows: 4-row x 6-token register tiles, 16-row sub-blocks in
//     L2 converted to f32 once, K in chunks) and AVX2 CPUs (avx2::dot_wide_rows: 2 x 3 tiles).
//   F32/F16/BF16, AVX-512, narrower: avx512::dot_float_tile (4 rows x up to 2 tokens),
//     bit-identical to the AVX2 tiles (ggml's arithmetic; the golden tests' small models).
//   Otherwise the AVX2 tiles (kernels_impl.h), or the scalar ref:: oracles without AVX2.
//
// Work split (batch invariance): threads take contiguous chunks of output rows from a shared
// counter (ThreadPool::parallel_for_dynamic, ~8 chunks per thread); inside a chunk, rows are
// walked in blocks that stay in cache while every token visits them, tokens in tiles of up to
// kMaxTileTokens. Each y[t, r] is one call-independent dot product (kernels_impl.h), so neither
// num_tokens, nor the other rows of x, nor the thread count or chunking changes a single bit.
//
//   for each chunk of rows [r_begin, r_end) a thread takes:
//     for each row block [r0, r1) of ~kBlockBytes weight bytes:
//       for each token tile [t0, t0 + m):
//         for r in [r0, r1):  y[t0 .. t0+m, r] = tile_dot(w[r], x[t0 .. t0+m])
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernels_avx512.h"
#include "kernels/cpu/kernels_impl.h"
#include "kernels/cpu/kernels_r16.h"
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

// Tokens per AVX-512 tile of narrow (< kMinWideCols) F32/F16/BF16 matrices: 4 rows x 2 tokens
// load each activation vector once per step for 4 rows.
constexpr int64_t kFloatTileTokens = 2;

// Below this many multiply-adds a matmul is not split across threads.
constexpr int64_t kMinParallelMacs = int64_t{1} << 18;

// Work units per chunk handed to a free thread: ~8 chunks per thread, so a thread whose CPU is
// slower (another tenant on a shared VM) takes fewer of them instead of holding everyone up.
int64_t dynamic_grain(int64_t units, const ThreadPool* pool) {
  return std::max<int64_t>(1, units / (8 * pool->num_threads()));
}

// WeightLayout::kRepacked16: threads take chunks of 16-row tiles (the rows after the last tile,
// in GGUF layout, are one more unit computed with the scalar block-sum code); inside a tile every
// token tile of up to 8 tokens reuses the tile's weights from cache. The AVX-512 VNNI tiles when
// use_avx512_vnni(), else the AVX2 ones (same bits; the CPU has AVX2 or nothing was repacked).
void matmul_repacked(const WeightView& w, const BlockQ8_0* xq, int64_t num_tokens, float* y, ThreadPool* pool) {
  const bool q4 = w.type == GgmlType::Q4_0;
  const int64_t rows = w.rows, nb = w.cols / kQK8_0, rb = w.row_bytes();
  constexpr int64_t kT = r16::kRows;
  thread_local std::vector<r16::XBlock> xr;
  xr.resize(static_cast<size_t>(num_tokens * nb));
  for (int64_t t = 0; t < num_tokens; ++t) r16::prepare(w.type, xq + t * nb, nb, xr.data() + t * nb);
  const r16::XBlock* xb = xr.data();  // (workers see their own thread_local xr)
  const bool vnni512 = use_avx512_vnni();
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t tiles = rows / kT, units = tiles + (rows % kT != 0 ? 1 : 0);
  auto run_units = [&](int64_t u0, int64_t u1) {
    float out[kT * r16::kMaxTileTokens];
    for (int64_t u = u0; u < u1; ++u) {
      if (u == tiles) {  // rows in GGUF layout
        for (int64_t r = tiles * kT; r < rows; ++r) {
          for (int64_t t = 0; t < num_tokens; ++t) {
            y[t * rows + r] = q4 ? ref::dot_q4_0_q8_0_blocksum(reinterpret_cast<const BlockQ4_0*>(base + r * rb), xq + t * nb, nb)
                                 : ref::dot_q8_0_q8_0_blocksum(reinterpret_cast<const BlockQ8_0*>(base + r * rb), xq + t * nb, nb);
          }
        }
        continue;
      }
      const uint8_t* tile = base + u * kT * rb;
      for (int64_t t0 = 0; t0 < num_tokens; t0 += r16::kMaxTileTokens) {
        const int m = static_cast<int>(std::min<int64_t>(r16::kMaxTileTokens, num_tokens - t0));
        const auto dot = q4 ? (vnni512 ? r16::dot_q4_0_tile_avx512 : r16::dot_q4_0_tile_avx2)
                            : (vnni512 ? r16::dot_q8_0_tile_avx512 : r16::dot_q8_0_tile_avx2);
        dot(tile, xb + t0 * nb, nb, nb, m, out);
        for (int k = 0; k < m; ++k) std::memcpy(y + (t0 + k) * rows + u * kT, out + k * kT, kT * sizeof(float));
      }
    }
  };
  if (pool == nullptr || pool->num_threads() == 1 || units < 2 || rows * w.cols * num_tokens < kMinParallelMacs) {
    run_units(0, units);
  } else {
    pool->parallel_for_dynamic(units, dynamic_grain(units, pool), run_units);
  }
}

// WeightLayout::kRepacked16 F32/F16/BF16 ("sequential" arithmetic, matmul_seq_avx2.cc): threads
// take chunks of 16-row tiles; the rows after the last tile (GGUF layout) are one more unit,
// computed with the scalar ref::dot_*_seq (the same chains, so the same bits).
void matmul_repacked_float(const WeightView& w, const float* x, int64_t num_tokens, float* y, ThreadPool* pool) {
  const int64_t rows = w.rows, cols = w.cols, rb = w.row_bytes();
  constexpr int64_t kT = r16::kRows;
  thread_local std::vector<float> xs;
  xs.resize(static_cast<size_t>(num_tokens * cols));
  const bool avx512 = use_avx512_vnni();
  avx2::pack_seq(w.type, x, num_tokens, cols, avx512 ? avx512::kSeqTileTokens : avx2::kSeqTileTokens, xs.data());
  const float* xp = xs.data();  // (workers see their own thread_local xs)
  const auto seq_tiles = avx512 ? avx512::seq_tiles : avx2::seq_tiles;  // (the same bits)
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t tiles = rows / kT, units = tiles + (rows % kT != 0 ? 1 : 0);
  auto run_units = [&](int64_t u0, int64_t u1) {
    const int64_t t1 = std::min(u1, tiles);
    if (u0 < t1) seq_tiles(w.type, base + u0 * kT * rb, t1 - u0, xp, cols, num_tokens, y + u0 * kT, rows);
    if (u1 <= tiles) return;
    std::vector<float> xr(static_cast<size_t>(cols));
    for (int64_t t = 0; t < num_tokens; ++t) {
      round_activations(w.type, x + t * cols, cols, xr.data());
      for (int64_t r = tiles * kT; r < rows; ++r) {
        const uint8_t* wr = base + r * rb;
        float v = 0.0f;
        switch (w.type) {
          case GgmlType::F32: v = ref::dot_f32_seq(reinterpret_cast<const float*>(wr), 1, xr.data(), cols); break;
          case GgmlType::F16: v = ref::dot_f16_seq(reinterpret_cast<const uint16_t*>(wr), 1, xr.data(), cols); break;
          default: v = ref::dot_bf16_seq(reinterpret_cast<const uint16_t*>(wr), 1, xr.data(), cols); break;
        }
        y[t * rows + r] = v;
      }
    }
  };
  if (pool == nullptr || pool->num_threads() == 1 || units < 2 || rows * cols * num_tokens < kMinParallelMacs) {
    run_units(0, units);
  } else {
    pool->parallel_for_dynamic(units, dynamic_grain(units, pool), run_units);
  }
}

}  // namespace

void quantize_activations_q8_0(const float* x, int64_t num_tokens, int64_t cols, BlockQ8_0* out) {
  PAGELLM_CHECK(cols % kQK8_0 == 0, "quantize_activations_q8_0: cols " + std::to_string(cols));
  const int64_t nb = cols / kQK8_0;
  const bool simd = use_avx2(), vnni = simd && use_avx512_vnni();
  for (int64_t t = 0; t < num_tokens; ++t) {
    if (vnni) {
      avx512::quantize_q8_0_activations(x + t * cols, cols, out + t * nb);
    } else if (simd) {
      avx2::quantize_q8_0_activations(x + t * cols, cols, out + t * nb);
    } else {
      quantize_row_q8_0_activations(x + t * cols, cols, out + t * nb);
    }
  }
}

void matmul(const WeightView& w, const float* x, int64_t num_tokens, float* y, ThreadPool* pool,
            const BlockQ8_0* xq_given) {
  const GgmlType type = w.type;
  const bool repacked = w.layout == WeightLayout::kRepacked16;
  PAGELLM_CHECK(!repacked || cpu_has_avx2(), "matmul: repacked weights need a CPU with AVX2");
  PAGELLM_CHECK(type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16 || is_quantized(type),
                "matmul: unsupported weight type " + type_name(type));
  PAGELLM_CHECK(w.rows >= 0 && w.cols > 0 && num_tokens >= 0, "matmul: bad shape");
  if (num_tokens == 0 || w.rows == 0) return;
  const int64_t rows = w.rows, cols = w.cols;
  const int64_t row_bytes = w.row_bytes();
  const bool simd = use_avx2();
  // Repacked weights run on their own kernels whatever use_avx2() says now (they were made for them).
  if (repacked && !is_quantized(type)) return matmul_repacked_float(w, x, num_tokens, y, pool);

  // Activations: f32 as given, or quantized to q8_0 once per token.
  const void* xa = x;
  int64_t x_stride = cols;
  thread_local std::vector<BlockQ8_0> xq;
  thread_local std::vector<avx512::PairQ8> xp;
  const bool vnni = simd && is_quantized(type) && use_avx512_vnni();
  const BlockQ8_0* xqa = xq_given;
  if (is_quantized(type)) {
    x_stride = cols / kQK8_0;
    if (xqa == nullptr) {
      xq.resize(static_cast<size_t>(num_tokens * x_stride));
      quantize_activations_q8_0(x, num_tokens, cols, xq.data());
      xqa = xq.data();
    }
    xa = xqa;
  }
  // Repacked weights run on the r16 tiles whatever use_avx2() says now (they were made for them).
  if (repacked) return matmul_repacked(w, xqa, num_tokens, y, pool);
  const int64_t nb = cols / kQK8_0, np = (nb + 1) / 2;
  if (vnni) {
    xp.resize(static_cast<size_t>(num_tokens * np));
    for (int64_t t = 0; t < num_tokens; ++t) avx512::prepare_pairs(type, xqa + t * nb, nb, xp.data() + t * np);
  }
  // F32/F16/BF16 on AVX-512 CPUs: bit-identical 16-lane tiles with more rows in registers.
  const bool float512 = simd && !is_quantized(type) && use_avx512_vnni();
  // Matrices of >= kMinWideCols columns: the "wide" arithmetic, on AVX-512 or AVX2 (same bits).
  const bool wide = simd && !is_quantized(type) && cols >= avx512::kMinWideCols;
  const avx512::PairQ8* xpa = xp.data();  // (workers see their own thread_local xp)
  thread_local std::vector<float> xr;
  if ((type == GgmlType::F16 || type == GgmlType::BF16) && !wide) {
    xr.resize(static_cast<size_t>(num_tokens * cols));
    round_activations(type, x, num_tokens * cols, xr.data());
    xa = xr.data();
  }
  const auto* wbase = static_cast<const uint8_t*>(w.data);
  const int64_t block_rows = std::max<int64_t>(1, kBlockBytes / row_bytes);
  const int64_t xa_elem = is_quantized(type) ? static_cast<int64_t>(sizeof(BlockQ8_0)) : 4;
  const int64_t max_tile = vnni ? avx512::kMaxTileTokens : float512 ? kFloatTileTokens : avx2::kMaxTileTokens;

  const bool small = rows * cols * num_tokens < kMinParallelMacs;
  const bool serial = pool == nullptr || pool->num_threads() == 1 || rows < 2 || small;
  if (wide) {
    // Threads take chunks of kWideSubRows-row units (see dot_wide_rows for the blocking inside).
    static_assert(avx512::kWideSubRows == avx2::kWideSubRows);
    constexpr int64_t kSub = avx512::kWideSubRows;
    const int64_t units = (rows + kSub - 1) / kSub;
    thread_local std::vector<float> xw;
    const int64_t steps = (cols + 15) / 16;
    xw.resize(static_cast<size_t>(num_tokens * steps * 16 + 16));
    float* xf = xw.data() + (16 - reinterpret_cast<uintptr_t>(xw.data()) / 4 % 16) % 16;  // 64-byte aligned
    const auto dot_rows = float512 ? avx512::dot_wide_rows : avx2::dot_wide_rows;
    (float512 ? avx512::pack_wide : avx2::pack_wide)(type, x, num_tokens, cols, xf);
    auto run_units = [&](int64_t u0, int64_t u1) {
      const int64_t r0 = u0 * kSub, r1 = std::min(rows, u1 * kSub);
      dot_rows(type, wbase + r0 * row_bytes, cols, r1 - r0, xf, cols, num_tokens, y + r0, rows);
    };
    if (serial) {
      run_units(0, units);
    } else {
      pool->parallel_for_dynamic(units, dynamic_grain(units, pool), run_units);
    }
    return;
  }

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
        if (float512) {  // tiles of several rows
          const int rt = avx512::float_tile_rows(m);
          for (int64_t r = r0; r < r1;) {
            const int rr = r + rt <= r1 ? rt : 1;
            avx512::dot_float_tile(type, wbase + r * row_bytes, cols, rr, static_cast<const float*>(xa) + t0 * x_stride,
                                   x_stride, cols, m, out);
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
  if (serial) {
    run_rows(0, rows);
  } else {
    pool->parallel_for_dynamic(rows, std::max(block_rows, dynamic_grain(rows, pool)), run_rows);
  }
}

}  // namespace pagellm::kernels

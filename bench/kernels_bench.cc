// Matmul micro-benchmarks: GEMV (num_tokens = 1, decode), num_tokens = 16 (16 decode streams, or
// a small prefill chunk), 64 (prefill) and, for the float types, 512 (pp512's K chunks and f32
// conversion) on TinyLlama's FFN shapes: shape 0 = ffn_up / ffn_gate
// (5632 rows x 2048 cols), 1 = ffn_down (2048 x 5632), per weight dtype. Bytes/s counts weight
// bytes streamed per call, the decode roofline quantity. Args: {dtype id, num_tokens, num_threads,
// isa (kernels::Isa, every one from AVX2 up that the CPU has), shape}; the weights are repacked
// (repack_weight) as LlamaModel loads them. For an A/B in one process:
// --benchmark_enable_random_interleaving=true --benchmark_repetitions=5.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/huge_pages.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"

namespace pagellm::kernels {
namespace {

// {rows, cols}: shape 0 = ffn_up / ffn_gate, 1 = ffn_down (the longest rows).
constexpr int64_t kShapes[2][2] = {{5632, 2048}, {2048, 5632}};

std::vector<uint8_t> make_weight(GgmlType type, int64_t kRows, int64_t kCols) {
  std::mt19937 gen(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> row(kCols);
  const int64_t rb = row_size_bytes(type, kCols);
  std::vector<uint8_t> bytes(static_cast<size_t>(kRows * rb));
  for (int64_t r = 0; r < kRows; ++r) {
    for (float& x : row) x = dist(gen);
    uint8_t* d = bytes.data() + r * rb;
    switch (type) {
      case GgmlType::F32: std::memcpy(d, row.data(), kCols * 4); break;
      case GgmlType::F16:
        for (int64_t i = 0; i < kCols; ++i) reinterpret_cast<uint16_t*>(d)[i] = fp32_to_fp16(row[i]);
        break;
      case GgmlType::BF16:
        for (int64_t i = 0; i < kCols; ++i) reinterpret_cast<uint16_t*>(d)[i] = fp32_to_bf16(row[i]);
        break;
      case GgmlType::Q8_0: quantize_row_q8_0(row.data(), kCols, d); break;
      case GgmlType::Q4_0: quantize_row_q4_0(row.data(), kCols, d); break;
      // No quantizer here for the others: 0x11 bytes make every f16 factor a small normal
      // number (2^-11 ...) and every quant and scale field valid; speed does not depend on them.
      default: std::memset(d, 0x11, static_cast<size_t>(rb)); break;
    }
  }
  return bytes;
}

void BM_Matmul(benchmark::State& state) {
  const auto type = static_cast<GgmlType>(state.range(0));
  const int64_t num_tokens = state.range(1);
  const int num_threads = static_cast<int>(state.range(2));
  const int64_t kRows = kShapes[state.range(4)][0], kCols = kShapes[state.range(4)][1];
  const auto isa = static_cast<Isa>(state.range(3));
  std::vector<uint8_t> w = make_weight(type, kRows, kCols);
  WeightView view{type, kRows, kCols, w.data()};
  view.isa = isa;
  std::vector<uint8_t> packed;
  if (repack_pays(view)) {  // repacked rows (WeightLayout::kRepacked16), as LlamaModel loads them
    packed.resize(w.size());
    view = repack_weight(view, packed.data(), nullptr);
  }
  std::vector<float> x(num_tokens * kCols, 0.5f), y(num_tokens * kRows);
  std::unique_ptr<ThreadPool> pool = num_threads > 1 ? std::make_unique<ThreadPool>(num_threads) : nullptr;
  Workspace ws;
  for (auto _ : state) {
    matmul(view, x.data(), num_tokens, y.data(), pool.get(), ws);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.size()));
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * kRows * kCols * num_tokens * state.iterations(),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.SetLabel(type_name(type) + " " + std::to_string(kRows) + "x" + std::to_string(kCols) +
                 " M=" + std::to_string(num_tokens) + " threads=" + std::to_string(num_threads) + " " + isa_name(isa));
}

void matmul_args(benchmark::internal::Benchmark* b) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                     GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                     GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS}) {
    for (int64_t m : {1, 16, 64, 512}) {
      const bool is_float = t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
      if (m == 512 && !is_float) continue;  // a prefill's float tiles (K chunks, conversion)
      for (int64_t threads : {1, 2}) {
        for (int64_t shape : {0, 1}) {
          for (Isa isa : usable_isas()) {
            if (isa != Isa::kScalar) b->Args({static_cast<int64_t>(t), m, threads, static_cast<int64_t>(isa), shape});
          }
        }
      }
    }
  }
}
BENCHMARK(BM_Matmul)->Apply(matmul_args)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Decode as the model sees it: GEMV (num_tokens = 1) over weights that come from DRAM, not from
// the caches BM_Matmul's one matrix stays in. Copies of shape 0 (ffn_up) totalling >= 256 MiB are
// used in turn, so every call streams its matrix from memory; bytes/s is then comparable with
// `pagellm bench latency`'s bandwidth probe. Args: {dtype id, num_threads, isa}.
void BM_MatmulFromDram(benchmark::State& state) {
  const auto type = static_cast<GgmlType>(state.range(0));
  const int num_threads = static_cast<int>(state.range(1));
  const auto isa = static_cast<Isa>(state.range(2));
  const int64_t kRows = kShapes[0][0], kCols = kShapes[0][1];
  const std::vector<uint8_t> w = make_weight(type, kRows, kCols);
  const int64_t copies = std::max<int64_t>(
      2, ((int64_t{256} << 20) + static_cast<int64_t>(w.size()) - 1) / static_cast<int64_t>(w.size()));
  std::vector<HugePageBuffer> packed(static_cast<size_t>(copies));
  std::vector<WeightView> views;
  WeightView src{type, kRows, kCols, w.data()};
  src.isa = isa;
  for (auto& p : packed) {
    // A private copy on huge pages, repacked in place of its bytes when that pays: as LlamaModel
    // stores its weights (core/huge_pages.h), so the TLB costs are the model's.
    p = allocate_huge_page_buffer(w.size());
    std::memcpy(p.get(), w.data(), w.size());
    WeightView view = src;
    view.data = p.get();
    if (repack_pays(src)) view = repack_weight(src, p.get(), nullptr);
    views.push_back(view);
  }
  std::vector<float> x(kCols, 0.5f), y(kRows);
  std::unique_ptr<ThreadPool> pool = num_threads > 1 ? std::make_unique<ThreadPool>(num_threads) : nullptr;
  Workspace ws;
  size_t next = 0;
  for (auto _ : state) {
    matmul(views[next], x.data(), 1, y.data(), pool.get(), ws);
    next = (next + 1) % views.size();
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.size()));
  state.SetLabel(type_name(type) + " " + std::to_string(kRows) + "x" + std::to_string(kCols) + " x" +
                 std::to_string(copies) + " threads=" + std::to_string(num_threads) + " " + isa_name(isa));
}

void dram_args(benchmark::internal::Benchmark* b) {
  for (GgmlType t : {GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q2_K, GgmlType::Q3_K,
                     GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS}) {
    for (int64_t threads : {1, 2}) {
      for (Isa isa : usable_isas()) {
        if (isa != Isa::kScalar) b->Args({static_cast<int64_t>(t), threads, static_cast<int64_t>(isa)});
      }
    }
  }
}
BENCHMARK(BM_MatmulFromDram)->Apply(dram_args)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace pagellm::kernels

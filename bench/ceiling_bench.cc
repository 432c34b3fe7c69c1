// Instruction-mix ceilings of the AVX2 matmul tiles (docs/benchmarks.md, "What limits each
// figure"): the vector instructions a tile issues per unit of work, with the weights in registers
// and the activations broadcast from L1 (as in the tiles), no other memory traffic, 4 independent
// token chains (12 for FMA), one thread. "GMAC/s" = multiply-adds per second; compare with
// BM_Matmul's GFLOP/s / 2 on the same core. Arg: the mix.
//   0 f32 FMA: per step 2 weight loads, 6 broadcasts, 12 VFMADD231PS = 96 MACs (the 1 x 6
//     sequential float tile of matmul_seq_avx2.cc once its weights are f32 in L1).
//   1 Q4_0: per 256 MACs (8 rows x one 32-element block x one token) 8 VPMADDUBSW, 7 VPADDW,
//     VPMADDWD, VPADDD, VCVTDQ2PS, VMULPS, VFMADD231PS (matmul_r16_avx2.cc without the nibble
//     unpacking, which it shares between 4 tokens).
//   2 Q8_0: per 256 MACs 8 x (VPSIGNB, VPMADDUBSW, VPMADDWD, VPADDD), VCVTDQ2PS, VMULPS,
//     VFMADD231PS (the sign trick: AVX2 has no signed x signed byte dot product).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace pagellm::kernels {
namespace {

constexpr int kBlocks = 64;  // activation blocks cycled through (64 x 4 tokens x 40 bytes: L1)
constexpr int kTokens = 4;

struct XB {
  int8_t qs[32];
  int32_t init;
  float d;
};

__attribute__((target("avx2,fma"))) inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Returns the multiply-adds done.
template <int kMix>
__attribute__((target("avx2,fma,f16c"), noinline)) int64_t run_int(const uint8_t* wbytes, const XB* x, const float* dws,
                                                                   int64_t iters, float* sink) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i w[8];
  for (int c = 0; c < 8; ++c) w[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wbytes + 32 * c));
  const __m256 dw = _mm256_loadu_ps(dws);  // 8 rows' scales (one block's, reused)
  __m256 acc[kTokens];
  for (int k = 0; k < kTokens; ++k) acc[k] = _mm256_setzero_ps();
  for (int64_t i = 0; i < iters; ++i) {
    for (int b = 0; b < kBlocks; ++b) {
#pragma GCC unroll 4
      for (int k = 0; k < kTokens; ++k) {
        const XB& xb = x[b * kTokens + k];
        __m256i isum;
        if constexpr (kMix == 1) {
          __m256i s16 = _mm256_maddubs_epi16(w[0], bcast4(xb.qs));
#pragma GCC unroll 8
          for (int c = 1; c < 8; ++c) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w[c], bcast4(xb.qs + 4 * c)));
          isum = _mm256_add_epi32(_mm256_madd_epi16(s16, ones), _mm256_set1_epi32(xb.init));
        } else {
          isum = _mm256_setzero_si256();
#pragma GCC unroll 8
          for (int c = 0; c < 8; ++c) {
            const __m256i p = _mm256_maddubs_epi16(w[c], _mm256_sign_epi8(bcast4(xb.qs + 4 * c), w[(c + 1) & 7]));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, ones));
          }
        }
        acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(xb.d)), acc[k]);
      }
    }
  }
  for (int k = 0; k < kTokens; ++k) _mm256_storeu_ps(sink + 8 * k, acc[k]);
  return iters * kBlocks * kTokens * 256;
}

__attribute__((target("avx2,fma"), noinline)) int64_t run_fma(const float* w, const float* x, int64_t iters,
                                                              float* sink) {
  constexpr int kSteps = 256;  // w: [kSteps][16] (16 KiB), x: [kSteps][6]
  __m256 lo[6], hi[6];
  for (int t = 0; t < 6; ++t) lo[t] = hi[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < iters; ++i) {
    for (int s = 0; s < kSteps; ++s) {
      const __m256 w0 = _mm256_loadu_ps(w + 16 * s), w1 = _mm256_loadu_ps(w + 16 * s + 8);
#pragma GCC unroll 6
      for (int t = 0; t < 6; ++t) {
        const __m256 b = _mm256_broadcast_ss(x + 6 * s + t);
        lo[t] = _mm256_fmadd_ps(w0, b, lo[t]);
        hi[t] = _mm256_fmadd_ps(w1, b, hi[t]);
      }
    }
  }
  for (int t = 0; t < 6; ++t) {
    _mm256_storeu_ps(sink + 16 * t, lo[t]);
    _mm256_storeu_ps(sink + 16 * t + 8, hi[t]);
  }
  return iters * kSteps * 96;
}

void BM_Avx2MixCeiling(benchmark::State& state) {
  if (cpu_isa() < Isa::kAvx2) {
    state.SkipWithError("no AVX2");
    return;
  }
  const int mix = static_cast<int>(state.range(0));
  std::vector<uint8_t> wbytes(256);
  for (size_t i = 0; i < wbytes.size(); ++i) wbytes[i] = static_cast<uint8_t>((i * 37 + 11) & (mix == 1 ? 0x0F : 0x7F));
  std::vector<XB> x(kBlocks * kTokens);
  for (size_t i = 0; i < x.size(); ++i) {
    for (int j = 0; j < 32; ++j) x[i].qs[j] = static_cast<int8_t>((i * 13 + j * 7) % 255 - 127);
    x[i].init = static_cast<int32_t>(i);
    x[i].d = 0.001f * static_cast<float>(i + 1);
  }
  std::vector<float> wf(256 * 16), xf(256 * 6), sink(96), dws(8);
  for (size_t i = 0; i < dws.size(); ++i) dws[i] = 0.01f * static_cast<float>(i + 1);
  for (size_t i = 0; i < wf.size(); ++i) wf[i] = 0.001f * static_cast<float>(i % 97);
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = 0.002f * static_cast<float>(i % 89);
  constexpr int64_t kIters = 64;
  int64_t macs = 0;
  for (auto _ : state) {
    macs += mix == 0   ? run_fma(wf.data(), xf.data(), kIters, sink.data())
            : mix == 1 ? run_int<1>(wbytes.data(), x.data(), dws.data(), kIters, sink.data())
                       : run_int<2>(wbytes.data(), x.data(), dws.data(), kIters, sink.data());
    benchmark::DoNotOptimize(sink.data());
    benchmark::ClobberMemory();
  }
  state.counters["GMAC/s"] = benchmark::Counter(static_cast<double>(macs), benchmark::Counter::kIsRate,
                                                benchmark::Counter::kIs1000);
  state.SetLabel(mix == 0 ? "f32 FMA 1x6 tile" : mix == 1 ? "Q4_0 block mix" : "Q8_0 sign-trick block mix");
}

BENCHMARK(BM_Avx2MixCeiling)->Arg(0)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace pagellm::kernels
#endif

// Internal to src/kernels/cpu: the scalar chains of the two matmul arithmetics (kernel_traits.h),
// as templates with internal linkage, so that each file that includes this compiles its own copy
// with its own flags: dot_ref.cc (the oracle, plain x86-64) and dot_ref_avx2.cc (the same source
// with FMA, where std::fma is one instruction instead of a libm call). Same bits: an FMA rounds
// once either way.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtype.h"

namespace pagellm::kernels {
namespace {  // NOLINT: one copy per including file, compiled with that file's ISA flags

// Exact integer dot product of one weight block with one q8_0 activation block (Q4_0: q - 8).
int32_t block_isum(const BlockQ8_0& w, const BlockQ8_0& x) {
  int32_t isum = 0;
  for (int j = 0; j < kQK8_0; ++j) isum += static_cast<int32_t>(w.qs[j]) * x.qs[j];
  return isum;
}
int32_t block_isum(const BlockQ4_0& w, const BlockQ8_0& x) {
  int32_t isum = 0;
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    isum += ((w.qs[j] & 0x0F) - 8) * x.qs[j];
    isum += ((w.qs[j] >> 4) - 8) * x.qs[j + kQK4_0 / 2];
  }
  return isum;
}

template <typename Block>
float blocksum(const Block* w, const BlockQ8_0* x, int64_t nb) {
  float s = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const int32_t isum = block_isum(w[b], x[b]);
    s = std::fma(static_cast<float>(isum), fp16_to_fp32(w[b].d) * fp16_to_fp32(x[b].d), s);
  }
  return s;
}

template <typename Load>
float dot_seq(Load load, const float* x, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s = std::fma(load(i), x[i], s);
  return s;
}

}  // namespace
}  // namespace pagellm::kernels

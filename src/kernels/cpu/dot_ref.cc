// The scalar dot products (kernels_impl.h, namespace ref): the oracles of the kernel table
// (kernel_traits.h) and of attention, and the fallback on CPUs without AVX2. Plain loops.
#include <cmath>

#include "kernels/cpu/kernels_impl.h"

namespace pagellm::kernels::ref {
namespace {

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

// avx2::dot_f32's order (attention_avx2.cc): element i + 8a + l of each step of 32 into
// accumulator a, lane l; then steps of 8 into accumulator 0; the lanes of (a0 + a1) + (a2 + a3)
// summed as simd::hsum8 does; then the tail by FMA in element order.
template <typename Load>
float dot_lanes(Load load, const float* x, int64_t n) {
  float acc[4][8] = {};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int a = 0; a < 4; ++a)
      for (int l = 0; l < 8; ++l) acc[a][l] = std::fma(load(i + 8 * a + l), x[i + 8 * a + l], acc[a][l]);
  }
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[0][l] = std::fma(load(i + l), x[i + l], acc[0][l]);
  }
  float v[8], s4[4];
  for (int l = 0; l < 8; ++l) v[l] = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]);
  for (int l = 0; l < 4; ++l) s4[l] = v[l] + v[l + 4];
  float s = (s4[0] + s4[2]) + (s4[1] + s4[3]);
  for (; i < n; ++i) s = std::fma(load(i), x[i], s);
  return s;
}

}  // namespace

// The oracles that also serve matmul's rows after the last 16-row tile (kernel_traits.cc) are
// compiled twice, and the dynamic loader picks one per CPU (GCC/Clang function multiversioning,
// an ifunc): with FMA, std::fma is one vfmadd instead of a libm call, ~5x faster; the bits are the
// same, an FMA rounds once either way.
#if defined(__x86_64__) && defined(__GNUC__)
#define PAGELLM_FMA_CLONES __attribute__((target_clones("fma", "default")))
#else
#define PAGELLM_FMA_CLONES
#endif

float dot_f32(const float* w, const float* x, int64_t n) {
  return dot_lanes([&](int64_t i) { return w[i]; }, x, n);
}

float dot_f16(const uint16_t* w, const float* x, int64_t n) {
  return dot_lanes([&](int64_t i) { return fp16_to_fp32(w[i]); }, x, n);
}

PAGELLM_FMA_CLONES float dot_q8_0_q8_0_blocksum(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb) {
  return blocksum(w, x, nb);
}
PAGELLM_FMA_CLONES float dot_q4_0_q8_0_blocksum(const BlockQ4_0* w, const BlockQ8_0* x, int64_t nb) {
  return blocksum(w, x, nb);
}

PAGELLM_FMA_CLONES float dot_f32_seq(const float* w, int64_t w_stride, const float* x, int64_t n) {
  return dot_seq([&](int64_t i) { return w[i * w_stride]; }, x, n);
}
PAGELLM_FMA_CLONES float dot_f16_seq(const uint16_t* w, int64_t w_stride, const float* x, int64_t n) {
  return dot_seq([&](int64_t i) { return fp16_to_fp32(w[i * w_stride]); }, x, n);
}
PAGELLM_FMA_CLONES float dot_bf16_seq(const uint16_t* w, int64_t w_stride, const float* x, int64_t n) {
  return dot_seq([&](int64_t i) { return bf16_to_fp32(w[i * w_stride]); }, x, n);
}

}  // namespace pagellm::kernels::ref

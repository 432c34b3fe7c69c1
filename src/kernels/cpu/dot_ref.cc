// The scalar dot products (kernels_impl.h, namespace ref): the oracles of the kernel table
// (kernel_traits.h) and of attention, and the fallback on CPUs without AVX2. Plain loops.
#include <cmath>

#include "kernels/cpu/dot_chains.h"
#include "kernels/cpu/kernels_impl.h"
#include "kernels/cpu/quant_unpack.h"

namespace pagellm::kernels::ref {
namespace {

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

float dot_f32(const float* w, const float* x, int64_t n) {
  return dot_lanes([&](int64_t i) { return w[i]; }, x, n);
}

float dot_f16(const uint16_t* w, const float* x, int64_t n) {
  return dot_lanes([&](int64_t i) { return fp16_to_fp32(w[i]); }, x, n);
}

float dot_q8_0_q8_0_blocksum(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb) { return blocksum(w, x, nb); }
float dot_q4_0_q8_0_blocksum(const BlockQ4_0* w, const BlockQ8_0* x, int64_t nb) { return blocksum(w, x, nb); }

float dot_f32_seq(const float* w, int64_t w_stride, const float* x, int64_t n) {
  return dot_seq([&](int64_t i) { return w[i * w_stride]; }, x, n);
}
float dot_f16_seq(const uint16_t* w, int64_t w_stride, const float* x, int64_t n) {
  return dot_seq([&](int64_t i) { return fp16_to_fp32(w[i * w_stride]); }, x, n);
}
float dot_bf16_seq(const uint16_t* w, int64_t w_stride, const float* x, int64_t n) {
  return dot_seq([&](int64_t i) { return bf16_to_fp32(w[i * w_stride]); }, x, n);
}

template <GgmlType T>
float dot_unpacked(const void* w, const void* xa, int64_t cols) {
  using B = typename BlockOf<T>::type;
  return unpacked_dot(static_cast<const B*>(w), static_cast<const ActBlock<B>*>(xa), cols / QuantFormat<B>::kQK);
}
#define PAGELLM_INSTANTIATE(T) template float dot_unpacked<GgmlType::T>(const void*, const void*, int64_t);
PAGELLM_FOR_EACH_UNPACKED_TYPE(PAGELLM_INSTANTIATE)
#undef PAGELLM_INSTANTIATE

}  // namespace pagellm::kernels::ref

// The scalar chains of dot_ref.cc compiled with FMA (dot_chains.h): matmul's rows after the last
// 16-row tile, and its matrices of fewer than 16 rows, on CPUs with AVX2 (kernel_traits.h,
// IsaKernels::row_dot). ref::dot_*'s bits.
#include "kernels/cpu/dot_chains.h"
#include "kernels/cpu/kernels_impl.h"
#include "kernels/cpu/quant_unpack.h"

namespace pagellm::kernels::avx2 {

float dot_f32_seq(const float* w, const float* x, int64_t n) {
  return dot_seq([&](int64_t i) { return w[i]; }, x, n);
}
float dot_f16_seq(const uint16_t* w, const float* x, int64_t n) {
  return dot_seq([&](int64_t i) { return fp16_to_fp32(w[i]); }, x, n);
}
float dot_bf16_seq(const uint16_t* w, const float* x, int64_t n) {
  return dot_seq([&](int64_t i) { return bf16_to_fp32(w[i]); }, x, n);
}
float dot_q8_0_q8_0_blocksum(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb) { return blocksum(w, x, nb); }
float dot_q4_0_q8_0_blocksum(const BlockQ4_0* w, const BlockQ8_0* x, int64_t nb) { return blocksum(w, x, nb); }

template <GgmlType T>
float dot_unpacked(const void* w, const void* xa, int64_t cols) {
  using B = typename BlockOf<T>::type;
  return unpacked_dot(static_cast<const B*>(w), static_cast<const ActBlock<B>*>(xa), cols / QuantFormat<B>::kQK);
}
#define PAGELLM_INSTANTIATE(T) template float dot_unpacked<GgmlType::T>(const void*, const void*, int64_t);
PAGELLM_FOR_EACH_UNPACKED_TYPE(PAGELLM_INSTANTIATE)
#undef PAGELLM_INSTANTIATE

}  // namespace pagellm::kernels::avx2

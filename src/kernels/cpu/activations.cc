// silu_mul (SwiGLU gate) and softmax, following ggml's CPU math.
// Sources: ggml/src/ggml-cpu/vec.h ggml_silu_f32 (x / (1 + exp(-x)), there on ggml's own vector
// exp; here on ref::exp_f32, kernels_impl.h); ops.cpp soft_max_f32 and vec.cpp
// ggml_vec_soft_max_f32 (subtract the max, expf, sum in double, scale by (float)(1/sum)).
// Shazeer 2020 (GLU variants).
//
// O(n) per token; the fast versions share the reference arithmetic (bit-identical).
#include <cmath>
#include <limits>

#include "kernels/cpu/kernels_impl.h"
#include "kernels/cpu/ops.h"

namespace pagellm::kernels {

void silu_mul_ref(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = ref::silu_f32(gate[i]) * up[i];
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out, Isa isa) {
  if (isa >= Isa::kAvx2) {
    avx2::silu_mul(gate, up, n, out);
  } else {
    silu_mul_ref(gate, up, n, out);
  }
}

void softmax_ref(float* x, int64_t n) {
  if (n <= 0) return;
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) max = std::fmax(max, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += static_cast<double>(x[i]);
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void softmax(float* x, int64_t n) { softmax_ref(x, n); }

}  // namespace pagellm::kernels

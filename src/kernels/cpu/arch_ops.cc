// The ops that architectures beyond Llama 2 add (src/model/<arch>.cc): RoPE with per-pair
// frequency divisors (Llama 3.1 `rope_freqs`), NEOX-ordered RoPE (Qwen2/3, Gemma 3, Phi-3) and the
// GeGLU gate (Gemma 3). Sources, read for the formulas: ggml/src/ggml-cpu/ops.cpp
// ggml_rope_cache_init (theta / freq_factors[i]) and rotate_pairs (NEOX: element i pairs with
// i + n_dims / 2); Hendrycks & Gimpel 2016 (GELU, tanh form); Shazeer 2020 (GLU variants).
//
// O(n) per token, like norm_rope.cc: one scalar version, which is also the reference.
#include <cmath>
#include <string>

#include "core/error.h"
#include "kernels/cpu/ops.h"

namespace pagellm::kernels {

void rope_cos_sin_scaled(int64_t n_dims, int64_t pos, float freq_base, const float* freq_factors, float* cos_sin) {
  PAGELLM_CHECK(n_dims > 0 && n_dims % 2 == 0, "rope: n_dims " + std::to_string(n_dims));
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(n_dims));
  float theta = static_cast<float>(pos);  // pos * theta_scale^i by repeated multiplication, as rope_cos_sin
  for (int64_t i = 0; i < n_dims; i += 2) {
    const float t = freq_factors != nullptr ? theta / freq_factors[i / 2] : theta;
    cos_sin[i] = std::cos(t);
    cos_sin[i + 1] = std::sin(t);
    theta *= theta_scale;
  }
}

void rope_neox(float* x, int64_t num_heads, int64_t head_dim, int64_t n_dims, const float* cos_sin) {
  PAGELLM_CHECK(n_dims > 0 && n_dims % 2 == 0 && n_dims <= head_dim,
                "rope_neox: n_dims " + std::to_string(n_dims) + " head_dim " + std::to_string(head_dim));
  const int64_t half = n_dims / 2;
  for (int64_t h = 0; h < num_heads; ++h) {
    float* xh = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
      const float x0 = xh[i], x1 = xh[i + half];
      xh[i] = x0 * c - x1 * s;
      xh[i + half] = x0 * s + x1 * c;
    }
  }
}

float gelu_tanh(float x) {
  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), in double, rounded once.
  const double v = x;
  const double k = std::sqrt(2.0 / M_PI);
  return static_cast<float>(0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v))));
}

void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh(gate[i]) * up[i];
}

}  // namespace pagellm::kernels

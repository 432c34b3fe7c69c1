// rms_norm and rope, following ggml's CPU math so that logits match llama.cpp.
// Sources: ggml/src/ggml-cpu/ops.cpp ggml_compute_forward_rms_norm_f32 (sum of squares in
// double, mean and scale in float, y = x * scale, then * weight as the fused RMS_NORM+MUL does),
// ops.cpp ggml_rope_cache_init / rotate_pairs (theta_scale = powf(base, -2/n_dims), theta *=
// theta_scale per pair, cosf/sinf in float). Zhang & Sennrich 2019 (RMSNorm); Su et al. 2021 (RoPE).
//
// Both ops are O(n) per token and bandwidth-trivial next to matmul; the fast versions share the
// reference's arithmetic (bit-identical), rope computes its cos/sin table once per call.
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/ops.h"

namespace pagellm::kernels {
namespace {

float rms_scale(const float* x, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  return 1.0f / std::sqrt(mean + eps);
}

void check_rope(int64_t head_dim, int64_t n_dims) {
  PAGELLM_CHECK(n_dims > 0 && n_dims % 2 == 0 && n_dims <= head_dim,
                "rope: n_dims " + std::to_string(n_dims) + " head_dim " + std::to_string(head_dim));
}

}  // namespace

void rms_norm_ref(const float* x, const float* weight, int64_t n, float eps, float* out) {
  PAGELLM_CHECK(n > 0, "rms_norm: n " + std::to_string(n));
  const float scale = rms_scale(x, n, eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  rms_norm_ref(x, weight, n, eps, out);
}

void rms_norm_q8_0(const float* x, const float* weight, int64_t num_tokens, int64_t n, float eps, float* out,
                   BlockQ8_0* out_q8, Isa isa) {
  PAGELLM_CHECK(n % kQK8_0 == 0, "rms_norm_q8_0: n " + std::to_string(n));
  for (int64_t t = 0; t < num_tokens; ++t) {
    rms_norm(x + t * n, weight, n, eps, out + t * n);
    quantize_activations_q8_0(out + t * n, 1, n, out_q8 + t * (n / kQK8_0), isa);
  }
}

void rope_ref(float* x, int64_t num_heads, int64_t head_dim, int64_t n_dims, int64_t pos, float freq_base) {
  check_rope(head_dim, n_dims);
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(n_dims));
  for (int64_t h = 0; h < num_heads; ++h) {
    float* xh = x + h * head_dim;
    float theta = static_cast<float>(pos);
    for (int64_t i = 0; i < n_dims; i += 2) {
      const float c = std::cos(theta), s = std::sin(theta);
      const float x0 = xh[i], x1 = xh[i + 1];
      xh[i] = x0 * c - x1 * s;
      xh[i + 1] = x0 * s + x1 * c;
      theta *= theta_scale;
    }
  }
}

void rope_cos_sin(int64_t n_dims, int64_t pos, float freq_base, float* cos_sin) {
  check_rope(n_dims, n_dims);
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(n_dims));
  float theta = static_cast<float>(pos);
  for (int64_t i = 0; i < n_dims; i += 2) {
    cos_sin[i] = std::cos(theta);
    cos_sin[i + 1] = std::sin(theta);
    theta *= theta_scale;
  }
}

void rope(float* x, int64_t num_heads, int64_t head_dim, int64_t n_dims, const float* cos_sin) {
  check_rope(head_dim, n_dims);
  for (int64_t h = 0; h < num_heads; ++h) {
    float* xh = x + h * head_dim;
    for (int64_t i = 0; i < n_dims; i += 2) {
      const float c = cos_sin[i], s = cos_sin[i + 1];
      const float x0 = xh[i], x1 = xh[i + 1];
      xh[i] = x0 * c - x1 * s;
      xh[i + 1] = x0 * s + x1 * c;
    }
  }
}

}  // namespace pagellm::kernels

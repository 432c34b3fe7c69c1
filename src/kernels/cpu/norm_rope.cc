// rms_norm and rope, following ggml's CPU math so that logits match llama.cpp.
// Sources: ggml/src/ggml-cpu/ops.cpp ggml_compute_forward_rms_norm_f32 (sum of squares in
// double, mean and scale in float, y = x * scale, then * weight as the fused RMS_NORM+MUL does),
// ops.cpp ggml_rope_cache_init / rotate_pairs (theta_scale = powf(base, -2/n_dims), theta *=
// theta_scale per pair, cosf/sinf in float). Zhang & Sennrich 2019 (RMSNorm); Su et al. 2021 (RoPE).
//
// Both ops are O(n) per token and bandwidth-trivial next to matmul; the fast versions share the
// reference's arithmetic (bit-identical), rope computes its cos/sin table once per call.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/ops.h"

namespace pagellm::kernels {
namespace {

// sum: sum of x[i]^2 (each square in float) over i in [0, n), accumulated in double in order.
float scale_of_sum(double sum, int64_t n, float eps) {
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  return 1.0f / std::sqrt(mean + eps);
}

float rms_scale(const float* x, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  return scale_of_sum(sum, n, eps);
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

void rms_norm_rows(const float* x, const int64_t* rows, int64_t num_rows, const float* weight, int64_t n, float eps,
                   float* out, BlockQ8_0* out_q8, Isa isa) {
  PAGELLM_CHECK(n > 0 && (out_q8 == nullptr || n % kQK8_0 == 0), "rms_norm_rows: n " + std::to_string(n));
  constexpr int64_t kChains = 4;
  for (int64_t j0 = 0; j0 < num_rows; j0 += kChains) {
    const int64_t m = std::min(kChains, num_rows - j0);
    if (m < kChains) {
      for (int64_t j = j0; j < num_rows; ++j)
        rms_norm(x + (rows != nullptr ? rows[j] : j) * n, weight, n, eps, out + j * n);
    } else {
      const float* xr[kChains];
      for (int64_t c = 0; c < kChains; ++c) xr[c] = x + (rows != nullptr ? rows[j0 + c] : j0 + c) * n;
      double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;  // named: an array stays in memory
      for (int64_t i = 0; i < n; ++i) {
        s0 += static_cast<double>(xr[0][i] * xr[0][i]);
        s1 += static_cast<double>(xr[1][i] * xr[1][i]);
        s2 += static_cast<double>(xr[2][i] * xr[2][i]);
        s3 += static_cast<double>(xr[3][i] * xr[3][i]);
      }
      const double sum[kChains] = {s0, s1, s2, s3};
      for (int64_t c = 0; c < kChains; ++c) {
        float* o = out + (j0 + c) * n;
        const float scale = scale_of_sum(sum[c], n, eps);
        for (int64_t i = 0; i < n; ++i) o[i] = xr[c][i] * scale * weight[i];
      }
    }
    if (out_q8 != nullptr) quantize_activations_q8_0(out + j0 * n, m, n, out_q8 + j0 * (n / kQK8_0), isa);
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

// Reference matmul: plain loops, the oracle for matmul() and its fallback without AVX2.
// Float weights: one dot product per (token, row) accumulated in double.
// Quantized weights (q8_0, q4_0): the activation row is first quantized to q8_0 (as llama.cpp's
// CPU backend does: vec_dot_type of q4_0/q8_0 is q8_0), then per block an exact integer sum,
// scaled by d_w * d_x and accumulated in float (ggml_vec_dot_q*_0_q8_0, generic version).
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/kernels_impl.h"
#include "kernels/cpu/ops.h"

namespace pagellm::kernels {
namespace ref {
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
}  // namespace

float dot_f32(const float* w, const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(w[i]) * x[i];
  return static_cast<float>(s);
}

float dot_f16(const uint16_t* w, const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(fp16_to_fp32(w[i])) * x[i];
  return static_cast<float>(s);
}

float dot_bf16(const uint16_t* w, const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(bf16_to_fp32(w[i])) * x[i];
  return static_cast<float>(s);
}

float dot_q8_0_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb) {
  float s = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const int32_t isum = block_isum(w[b], x[b]);
    s += static_cast<float>(isum) * (fp16_to_fp32(w[b].d) * fp16_to_fp32(x[b].d));
  }
  return s;
}

namespace {
template <typename Load>
float dot_wide(Load load, const float* x, int64_t n) {
  float lane[16] = {};
  for (int64_t i = 0; i < n; ++i) lane[i % 16] = std::fma(load(i), x[i], lane[i % 16]);
  float s8[8];
  for (int l = 0; l < 8; ++l) s8[l] = lane[l] + lane[l + 8];
  // avx2::hsum: (lo4 + hi4), then (0 + 2, 1 + 3), then (0+2) + (1+3).
  float s4[4];
  for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
  const float a = s4[0] + s4[2], b = s4[1] + s4[3];
  return a + b;
}
}  // namespace

float dot_f32_wide(const float* w, const float* x, int64_t n) {
  return dot_wide([&](int64_t i) { return w[i]; }, x, n);
}
float dot_f16_wide(const uint16_t* w, const float* x, int64_t n) {
  return dot_wide([&](int64_t i) { return fp16_to_fp32(w[i]); }, x, n);
}
float dot_bf16_wide(const uint16_t* w, const float* x, int64_t n) {
  return dot_wide([&](int64_t i) { return bf16_to_fp32(w[i]); }, x, n);
}

float dot_q8_0_q8_0_blocksum(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb) {
  float s = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const int32_t isum = block_isum(w[b], x[b]);
    s = std::fma(static_cast<float>(isum), fp16_to_fp32(w[b].d) * fp16_to_fp32(x[b].d), s);
  }
  return s;
}

float dot_q4_0_q8_0_blocksum(const BlockQ4_0* w, const BlockQ8_0* x, int64_t nb) {
  float s = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const int32_t isum = block_isum(w[b], x[b]);
    s = std::fma(static_cast<float>(isum), fp16_to_fp32(w[b].d) * fp16_to_fp32(x[b].d), s);
  }
  return s;
}

float dot_q4_0_q8_0(const BlockQ4_0* w, const BlockQ8_0* x, int64_t nb) {
  float s = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const int32_t isum = block_isum(w[b], x[b]);
    s += static_cast<float>(isum) * (fp16_to_fp32(w[b].d) * fp16_to_fp32(x[b].d));
  }
  return s;
}

namespace {
template <typename Load>
float dot_seq(Load load, const float* x, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s = std::fma(load(i), x[i], s);
  return s;
}
}  // namespace

float dot_f32_seq(const float* w, int64_t w_stride, const float* x, int64_t n) {
  return dot_seq([&](int64_t i) { return w[i * w_stride]; }, x, n);
}
float dot_f16_seq(const uint16_t* w, int64_t w_stride, const float* x, int64_t n) {
  return dot_seq([&](int64_t i) { return fp16_to_fp32(w[i * w_stride]); }, x, n);
}
float dot_bf16_seq(const uint16_t* w, int64_t w_stride, const float* x, int64_t n) {
  return dot_seq([&](int64_t i) { return bf16_to_fp32(w[i * w_stride]); }, x, n);
}

}  // namespace ref

void matmul_ref(const WeightView& w, const float* x, int64_t num_tokens, float* y) {
  PAGELLM_CHECK(w.layout == WeightLayout::kGguf, "matmul_ref: weights must be in GGUF layout");
  const int64_t rows = w.rows, cols = w.cols;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t rb = w.row_bytes();
  if (w.type == GgmlType::Q8_0 || w.type == GgmlType::Q4_0) {
    const int64_t nb = cols / kQK8_0;
    std::vector<BlockQ8_0> xq(static_cast<size_t>(nb));
    for (int64_t t = 0; t < num_tokens; ++t) {
      quantize_row_q8_0_activations(x + t * cols, cols, xq.data());
      for (int64_t r = 0; r < rows; ++r) {
        const void* wr = base + r * rb;
        y[t * rows + r] = w.type == GgmlType::Q8_0
                              ? ref::dot_q8_0_q8_0(static_cast<const BlockQ8_0*>(wr), xq.data(), nb)
                              : ref::dot_q4_0_q8_0(static_cast<const BlockQ4_0*>(wr), xq.data(), nb);
      }
    }
    return;
  }
  std::vector<float> xr(static_cast<size_t>(cols));
  for (int64_t t = 0; t < num_tokens; ++t) {
    round_activations(w.type, x + t * cols, cols, xr.data());
    for (int64_t r = 0; r < rows; ++r) {
      const void* wr = base + r * rb;
      const float* xt = xr.data();
      float v = 0.0f;
      switch (w.type) {
        case GgmlType::F32: v = ref::dot_f32(static_cast<const float*>(wr), xt, cols); break;
        case GgmlType::F16: v = ref::dot_f16(static_cast<const uint16_t*>(wr), xt, cols); break;
        case GgmlType::BF16: v = ref::dot_bf16(static_cast<const uint16_t*>(wr), xt, cols); break;
        default: PAGELLM_CHECK(false, "matmul_ref: unsupported weight type " + type_name(w.type));
      }
      y[t * rows + r] = v;
    }
  }
}

}  // namespace pagellm::kernels

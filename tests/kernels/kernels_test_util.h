// Shared helpers for the kernel tests: a fixed-seed RNG, weight builders for every dtype, and
// float tolerances derived from summation error bounds.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"

namespace pagellm::kernels::testing {

constexpr float kEps = 1.0f / (1 << 23);  // float machine epsilon (2 u)

class Rng {
 public:
  explicit Rng(uint32_t seed) : gen_(seed) {}
  float uniform(float lo = -1.0f, float hi = 1.0f) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
  std::vector<float> vec(int64_t n, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = uniform(lo, hi);
    return v;
  }
  int64_t index(int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(gen_); }
  std::mt19937& gen() { return gen_; }

 private:
  std::mt19937 gen_;
};

// A weight matrix in `type` built from random floats (quantized types go through the reference
// quantizers), plus its exact dequantized f32 values.
struct TestWeights {
  GgmlType type;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  std::vector<float> dequant;  // [rows, cols]
  WeightView view() const { return WeightView{type, rows, cols, bytes.data()}; }
};

inline TestWeights make_weights(GgmlType type, int64_t rows, int64_t cols, Rng& rng) {
  TestWeights w{type, rows, cols, {}, {}};
  const std::vector<float> src = rng.vec(rows * cols);
  const int64_t rb = row_size_bytes(type, cols);
  w.bytes.resize(static_cast<size_t>(rows * rb));
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src.data() + r * cols;
    uint8_t* d = w.bytes.data() + r * rb;
    switch (type) {
      case GgmlType::F32: std::memcpy(d, s, static_cast<size_t>(cols) * 4); break;
      case GgmlType::F16:
        for (int64_t i = 0; i < cols; ++i) reinterpret_cast<uint16_t*>(d)[i] = fp32_to_fp16(s[i]);
        break;
      case GgmlType::BF16:
        for (int64_t i = 0; i < cols; ++i) reinterpret_cast<uint16_t*>(d)[i] = fp32_to_bf16(s[i]);
        break;
      case GgmlType::Q8_0: quantize_row_q8_0(s, cols, d); break;
      case GgmlType::Q4_0: quantize_row_q4_0(s, cols, d); break;
      default: break;
    }
  }
  w.dequant.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) dequantize_row(type, w.bytes.data() + r * rb, cols, w.dequant.data() + r * cols);
  return w;
}

inline bool is_quant(GgmlType t) { return t == GgmlType::Q8_0 || t == GgmlType::Q4_0; }

}  // namespace pagellm::kernels::testing

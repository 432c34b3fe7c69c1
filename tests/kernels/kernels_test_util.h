// Shared helpers for the kernel tests: a fixed-seed RNG, weight builders for every dtype, and
// float tolerances derived from summation error bounds.
#pragma once

#include <cmath>
#include <cstddef>
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

// Random blocks of a type without a quantizer here (Q4_1 .. IQ4_XS): random bytes, with every
// f16 factor set to a sane value (d in [0.002, 0.02], dmin in [0.001, 0.01], m in [-0.1, 0.1]),
// so that each quant, scale and min field takes every value of its range.
inline void random_blocks(GgmlType type, int64_t n, Rng& rng, uint8_t* out) {
  const TypeTraits& tt = type_traits(type);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int64_t i = 0; i < n / tt.block_size * tt.type_size; ++i) out[i] = static_cast<uint8_t>(byte(rng.gen()));
  int d = 0, second = -1;  // byte offsets of d and of m / dmin
  bool is_m = false;
  switch (type) {
    case GgmlType::Q4_1: second = 2, is_m = true; break;
    case GgmlType::Q5_1: second = 2, is_m = true; break;
    case GgmlType::Q2_K: d = offsetof(BlockQ2_K, d), second = offsetof(BlockQ2_K, dmin); break;
    case GgmlType::Q3_K: d = offsetof(BlockQ3_K, d); break;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: second = 2; break;
    case GgmlType::Q6_K: d = offsetof(BlockQ6_K, d); break;
    default: break;  // Q5_0, IQ4_NL, IQ4_XS: d first
  }
  for (int64_t b = 0; b < n / tt.block_size; ++b) {
    uint8_t* blk = out + b * tt.type_size;
    const uint16_t hd = fp32_to_fp16(rng.uniform(0.002f, 0.02f));
    std::memcpy(blk + d, &hd, 2);
    if (second >= 0) {
      const uint16_t h = fp32_to_fp16(is_m ? rng.uniform(-0.1f, 0.1f) : rng.uniform(0.001f, 0.01f));
      std::memcpy(blk + second, &h, 2);
    }
  }
}

inline bool is_float(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

// A weight matrix in `type` built from random floats (Q8_0 / Q4_0 go through the reference
// quantizers, the other quantized types are random_blocks), plus its exact dequantized values.
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
      default: random_blocks(type, cols, rng, d); break;
    }
  }
  w.dequant.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) dequantize_row(type, w.bytes.data() + r * rb, cols, w.dequant.data() + r * cols);
  return w;
}

inline bool is_quant(GgmlType t) { return !is_float(t); }

}  // namespace pagellm::kernels::testing

// Dequantization and reference quantization of ggml block formats.
// Source: ggml/src/ggml-common.h (block layouts), ggml/src/ggml-quants.c
// (quantize_row_q8_0_ref, quantize_row_q4_0_ref, dequantize_row_*): same formulas, own code.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/cpu/kernels_impl.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_unpack.h"

namespace pagellm::kernels {
namespace {

bool block_has_nan(const float* x, int n) {
  bool nan = false;
  for (int j = 0; j < n; ++j) nan |= std::isnan(x[j]);
  return nan;
}

template <GgmlType T>
void dequantize_unpacked(const void* row, int64_t cols, float* out) {
  using B = typename BlockOf<T>::type;
  constexpr int kQK = QuantFormat<B>::kQK;
  PAGELLM_CHECK(cols % kQK == 0, type_name(T) + " row of " + std::to_string(cols));
  const auto* b = static_cast<const B*>(row);
  for (int64_t i = 0; i < cols / kQK; ++i) unpacked_dequantize(b[i], out + i * kQK);
}

}  // namespace

void dequantize_row(GgmlType type, const void* row, int64_t cols, float* out) {
  switch (type) {
    case GgmlType::F32: std::memcpy(out, row, static_cast<size_t>(cols) * sizeof(float)); return;
    case GgmlType::F16: {
      const auto* h = static_cast<const uint16_t*>(row);
      for (int64_t i = 0; i < cols; ++i) out[i] = fp16_to_fp32(h[i]);
      return;
    }
    case GgmlType::BF16: {
      const auto* h = static_cast<const uint16_t*>(row);
      for (int64_t i = 0; i < cols; ++i) out[i] = bf16_to_fp32(h[i]);
      return;
    }
    case GgmlType::Q8_0: {
      PAGELLM_CHECK(cols % kQK8_0 == 0, "q8_0 row of " + std::to_string(cols));
      const auto* b = static_cast<const BlockQ8_0*>(row);
      for (int64_t i = 0; i < cols / kQK8_0; ++i) {
        const float d = fp16_to_fp32(b[i].d);
        for (int j = 0; j < kQK8_0; ++j) out[i * kQK8_0 + j] = d * b[i].qs[j];
      }
      return;
    }
    case GgmlType::Q4_0: {
      PAGELLM_CHECK(cols % kQK4_0 == 0, "q4_0 row of " + std::to_string(cols));
      const auto* b = static_cast<const BlockQ4_0*>(row);
      for (int64_t i = 0; i < cols / kQK4_0; ++i) {
        const float d = fp16_to_fp32(b[i].d);
        float* o = out + i * kQK4_0;
        for (int j = 0; j < kQK4_0 / 2; ++j) {
          o[j] = d * ((b[i].qs[j] & 0x0F) - 8);
          o[j + kQK4_0 / 2] = d * ((b[i].qs[j] >> 4) - 8);
        }
      }
      return;
    }
#define PAGELLM_CASE(T) \
  case GgmlType::T: return dequantize_unpacked<GgmlType::T>(row, cols, out);
      PAGELLM_FOR_EACH_UNPACKED_TYPE(PAGELLM_CASE)
#undef PAGELLM_CASE
    default: break;
  }
  PAGELLM_CHECK(false, "dequantize_row: unsupported type " + type_name(type));
}

void quantize_row_q8_0(const float* x, int64_t n, void* out) {
  PAGELLM_CHECK(n % kQK8_0 == 0, "q8_0 row of " + std::to_string(n));
  auto* y = static_cast<BlockQ8_0*>(out);
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float* xb = x + i * kQK8_0;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK8_0; ++j) y[i].qs[j] = static_cast<int8_t>(std::roundf(xb[j] * id));
  }
}

void round_activations(GgmlType type, const float* x, int64_t n, float* out) {
  if (type == GgmlType::F16) {
    for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
  } else if (type == GgmlType::BF16) {
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_fp32(fp32_to_bf16(x[i]));
  } else {
    std::copy(x, x + n, out);
  }
}

void quantize_row_q8_0_activations(const float* x, int64_t n, void* out) {
  PAGELLM_CHECK(n % kQK8_0 == 0, "q8_0 row of " + std::to_string(n));
  auto* y = static_cast<BlockQ8_0*>(out);
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float* xb = x + i * kQK8_0;
    if (block_has_nan(xb, kQK8_0)) {
      nan_block(y[i]);
      continue;
    }
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[i].d = fp32_to_fp16(amax / 127.0f);
    // Round half to even (the default FP rounding mode), as the vector round instruction does.
    for (int j = 0; j < kQK8_0; ++j) y[i].qs[j] = static_cast<int8_t>(std::nearbyint(xb[j] * id));
  }
}

void quantize_row_q8_K(const float* x, int64_t n, void* out) {
  PAGELLM_CHECK(n % kQK_K == 0, "q8_K row of " + std::to_string(n));
  auto* y = static_cast<BlockQ8_K*>(out);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* xb = x + i * kQK_K;
    if (block_has_nan(xb, kQK_K)) {
      nan_block(y[i]);
      continue;
    }
    float amax = 0.0f, vmax = 0.0f;  // the signed value of largest magnitude (first on ties)
    for (int j = 0; j < kQK_K; ++j) {
      if (std::fabs(xb[j]) > amax) {
        amax = std::fabs(xb[j]);
        vmax = xb[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.0f / vmax;
    for (int j = 0; j < kQK_K; ++j) {
      // Round half to even (ggml's nearest_int); the largest magnitude maps to -127. Clamped to
      // [-128, 127], NaN -> 127: only a block holding inf (iscale = -0) or one whose largest
      // magnitude is below ~4e-37 (iscale = -inf) gets here a product outside that range (a NaN
      // input has been turned away above).
      y[i].qs[j] = static_cast<int8_t>(std::max(-128.0f, std::min(127.0f, std::nearbyint(iscale * xb[j]))));
    }
    for (int s = 0; s < kQK_K / 16; ++s) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y[i].qs[16 * s + j];
      y[i].bsums[s] = static_cast<int16_t>(sum);
    }
    y[i].d = 1.0f / iscale;
  }
}

void quantize_row_q4_0(const float* x, int64_t n, void* out) {
  PAGELLM_CHECK(n % kQK4_0 == 0, "q4_0 row of " + std::to_string(n));
  auto* y = static_cast<BlockQ4_0*>(out);
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const float* xb = x + i * kQK4_0;
    // The signed value of largest magnitude (first one on ties) maps to -8.
    float amax = 0.0f;
    float vmax = 0.0f;
    for (int j = 0; j < kQK4_0; ++j) {
      if (std::fabs(xb[j]) > amax) {
        amax = std::fabs(xb[j]);
        vmax = xb[j];
      }
    }
    const float d = vmax / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      // Truncation toward zero of v + 8.5 == round half up of v + 8 for v + 8.5 >= 0; clamp to 15.
      const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(xb[j] * id + 8.5f)));
      const int hi = std::min(15, static_cast<int>(static_cast<int8_t>(xb[j + kQK4_0 / 2] * id + 8.5f)));
      y[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

}  // namespace pagellm::kernels

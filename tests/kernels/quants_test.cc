// Dequantization against the block formulas written out here (ggml-common.h), fp16/bf16
// conversions, and quantize -> dequantize error bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernels_avx512.h"
#include "kernels/cpu/kernels_impl.h"
#include "kernels_test_util.h"

namespace pagellm::kernels {
namespace {

using testing::Rng;

TEST(Quants, DequantQ8_0HandBuilt) {
  BlockQ8_0 b[2];
  b[0].d = 0x3C00;  // 1.0
  b[1].d = 0xB800;  // -0.5
  for (int j = 0; j < 32; ++j) {
    b[0].qs[j] = static_cast<int8_t>(j - 16);
    b[1].qs[j] = static_cast<int8_t>(j % 2 == 0 ? 127 : -128);
  }
  float out[64];
  dequantize_row(GgmlType::Q8_0, b, 64, out);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(out[j], static_cast<float>(j - 16)) << j;
    EXPECT_EQ(out[32 + j], j % 2 == 0 ? -63.5f : 64.0f) << j;
  }
}

TEST(Quants, DequantQ4_0HandBuilt) {
  // Element j is the low nibble of qs[j], element j + 16 the high nibble; value = d * (q - 8).
  BlockQ4_0 b;
  b.d = 0x4000;  // 2.0
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>((15 - j) << 4 | j);
  float out[32];
  dequantize_row(GgmlType::Q4_0, &b, 32, out);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 2.0f * (j - 8)) << j;
    EXPECT_EQ(out[16 + j], 2.0f * ((15 - j) - 8)) << j;
  }
}

TEST(Quants, DequantF16Bf16F32) {
  const uint16_t h[4] = {0x3C00, 0xC000, 0x0001, 0x7BFF};  // 1, -2, 2^-24, 65504
  float out[4];
  dequantize_row(GgmlType::F16, h, 4, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(out[3], 65504.0f);
  const uint16_t bf[3] = {0x3F80, 0xC040, 0x3E00};  // 1, -3, 0.125
  dequantize_row(GgmlType::BF16, bf, 3, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);
  EXPECT_EQ(out[2], 0.125f);
  const float f[3] = {1.5f, -0.0f, 3e38f};
  dequantize_row(GgmlType::F32, f, 3, out);
  EXPECT_EQ(std::memcmp(out, f, sizeof f), 0);
}

TEST(Quants, Fp16RoundTripEveryFiniteHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00) continue;  // inf / nan
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    ASSERT_EQ(fp32_to_fp16(f), h) << std::hex << h;
  }
}

TEST(Quants, Q8_0QuantizeKnownBlock) {
  // amax = 127 * 0.5 -> d = 0.5 exactly; x = 0.5 * k rounds to k; 0.25 (k = 0.5) rounds away from 0.
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = 0.5f * static_cast<float>(j * 8 - 127);
  x[31] = 63.5f;
  x[30] = 0.25f;
  x[29] = -0.25f;
  BlockQ8_0 b;
  quantize_row_q8_0(x, 32, &b);
  EXPECT_EQ(fp16_to_fp32(b.d), 0.5f);
  for (int j = 0; j < 29; ++j) EXPECT_EQ(b.qs[j], static_cast<int8_t>(j * 8 - 127)) << j;
  EXPECT_EQ(b.qs[29], -1);
  EXPECT_EQ(b.qs[30], 1);
  EXPECT_EQ(b.qs[31], 127);
}

TEST(Quants, Q4_0QuantizeMapsSignedMaxToMinus8) {
  float x[32] = {};
  x[3] = -4.0f;  // largest magnitude, negative: d = -4 / -8 = 0.5, x[3] -> q 0 (value -8 d)
  x[5] = 3.0f;   // 3 / 0.5 = 6 -> q 14
  x[20] = 1.2f;  // 2.4 + 8.5 = 10.9 -> q 10
  BlockQ4_0 b;
  quantize_row_q4_0(x, 32, &b);
  EXPECT_EQ(fp16_to_fp32(b.d), 0.5f);
  EXPECT_EQ(b.qs[3] & 0x0F, 0);
  EXPECT_EQ(b.qs[5] & 0x0F, 14);
  EXPECT_EQ(b.qs[4] >> 4, 10);
  EXPECT_EQ(b.qs[0] & 0x0F, 8);  // zeros -> 8
  // Positive max: +8 d would be q 16, clamped to 15.
  float y[32] = {};
  y[0] = 4.0f;
  quantize_row_q4_0(y, 32, &b);
  EXPECT_EQ(fp16_to_fp32(b.d), -0.5f);
  EXPECT_EQ(b.qs[0] & 0x0F, 0);
}

TEST(Quants, ZeroBlocks) {
  const float x[32] = {};
  BlockQ8_0 b8;
  BlockQ4_0 b4;
  quantize_row_q8_0(x, 32, &b8);
  quantize_row_q4_0(x, 32, &b4);
  float out[32];
  dequantize_row(GgmlType::Q8_0, &b8, 32, out);
  for (float v : out) EXPECT_EQ(v, 0.0f);
  dequantize_row(GgmlType::Q4_0, &b4, 32, out);
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

// Round to nearest: |x - deq| <= d / 2 per element, plus the f16 rounding of d (relative 2^-11)
// times the largest quant (127 d = amax for q8_0, 8 d = amax for q4_0). q8_0: d = amax / 127.
// q4_0: d = amax / 8 with the signed max at -8; values of the other sign above 7.5 d would round
// to +8 and are clamped to +7, so there the error is up to one step d.
TEST(Quants, QuantizeDequantizeErrorBound) {
  Rng rng(7);
  const int64_t n = 2080;
  const std::vector<float> x = rng.vec(n, -3.0f, 3.0f);
  std::vector<BlockQ8_0> q8(n / 32);
  std::vector<BlockQ4_0> q4(n / 32);
  quantize_row_q8_0(x.data(), n, q8.data());
  quantize_row_q4_0(x.data(), n, q4.data());
  std::vector<float> d8(n), d4(n);
  dequantize_row(GgmlType::Q8_0, q8.data(), n, d8.data());
  dequantize_row(GgmlType::Q4_0, q4.data(), n, d4.data());
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    for (int j = 0; j < 32; ++j) {
      const int64_t i = b * 32 + j;
      EXPECT_LE(std::fabs(x[i] - d8[i]), amax / 127 * 0.5f + amax * 0x1p-11f * 1.01f + amax * 1e-6f) << i;
      const bool clamped = std::fabs(x[i]) > amax * (7.5f / 8.0f);
      EXPECT_LE(std::fabs(x[i] - d4[i]), amax / 8 * (clamped ? 1.0f : 0.5f) + amax * 0x1p-11f * 1.01f + amax * 1e-6f)
          << i;
    }
  }
}

// The vectorised activation quantizer matmul uses (every ISA from AVX2 on) equals the scalar one bit for
// bit: random blocks of several ranges, an all-zero block, blocks whose scaled values land
// exactly on .5 (round half to even), and blocks holding a NaN (d = NaN, zero quants).
TEST(Quants, Q8_0ActivationsVectorEqualsScalar) {
  if (cpu_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2: the vectorised quantizer is never used";
  Rng rng(17);
  for (float range : {1e-3f, 1.0f, 300.0f}) {
    std::vector<float> x = rng.vec(32 * 37, -range, range);
    std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // block 2: zero
    // Block 3: amax 127/16, so id = 16 and x * id = j - 15.5 exactly: every value a tie.
    for (int j = 0; j < 31; ++j) x[96 + j] = (j - 15.5f) / 16.0f;
    x[96 + 31] = 127.0f / 16.0f;
    x[4 * 32 + 3] = NAN;    // block 4: a NaN in the first 8 lanes
    x[5 * 32 + 31] = -NAN;  // block 5: in the last
    x[6 * 32 + 17] = NAN;   // block 6: with an infinity before it
    x[6 * 32 + 2] = INFINITY;
    std::vector<BlockQ8_0> want(37), got(37);
    quantize_row_q8_0_activations(x.data(), static_cast<int64_t>(x.size()), want.data());
    for (int b : {4, 5, 6}) {
      EXPECT_TRUE(std::isnan(fp16_to_fp32(want[b].d))) << "block " << b;
      for (int j = 0; j < 32; ++j) ASSERT_EQ(want[b].qs[j], 0) << "block " << b;
    }
    EXPECT_FALSE(std::isnan(fp16_to_fp32(want[3].d)));
    for (Isa isa : usable_isas()) {
      quantize_activations_q8_0(x.data(), 1, static_cast<int64_t>(x.size()), got.data(), isa);
      for (int b = 0; b < 37; ++b) {
        ASSERT_EQ(want[b].d, got[b].d) << isa_name(isa) << " block " << b << " range " << range;
        ASSERT_EQ(std::memcmp(want[b].qs, got[b].qs, 32), 0) << isa_name(isa) << " block " << b << " range " << range;
      }
    }
  }
}

// The vectorised q8_K quantizer (K-quant activations, AVX2 and up) equals quantize_row_q8_K bit
// for bit: random super-blocks of several ranges, an all-zero one, one whose largest magnitude
// appears twice with both signs (the first wins), one of exact .5 ties, one holding a NaN (d =
// NaN, zero quants and bsums), one holding +inf (iscale = -0: the inf's product is NaN) and one
// whose largest magnitude is 1e-37 (iscale = -inf: products of +-inf and NaN).
TEST(Quants, Q8KActivationsVectorEqualsScalar) {
  if (cpu_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2: the vectorised quantizer is never used";
  Rng rng(19);
  constexpr int kBlocks = 7;
  for (float range : {1e-3f, 1.0f, 300.0f}) {
    std::vector<float> x = rng.vec(256 * kBlocks, -range, range);
    std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // block 1: zero
    x[512 + 40] = 2 * range;                            // block 2: +max first, then -max
    x[512 + 200] = -2 * range;
    // Block 3: vmax = -127/16, so iscale = 16 and iscale * x = j - 127.5 exactly: a tie for every
    // j in [1, 255).
    x[768] = 0.0f;
    for (int j = 1; j < 255; ++j) x[768 + j] = (j - 127.5f) / 16.0f;
    x[768 + 255] = -127.0f / 16.0f;
    x[1024 + 7] = NAN;       // block 4
    x[1280 + 9] = INFINITY;  // block 5
    for (int j = 0; j < 256; ++j) x[1536 + j] = j % 3 == 0 ? 0.0f : (j % 3 == 1 ? -1e-38f : 5e-38f);
    x[1536 + 100] = 1e-37f;  // block 6
    std::vector<BlockQ8_K> want(kBlocks), got(kBlocks);
    quantize_row_q8_K(x.data(), static_cast<int64_t>(x.size()), want.data());
    avx2::quantize_q8_K_activations(x.data(), static_cast<int64_t>(x.size()), got.data());
    for (int b = 0; b < kBlocks; ++b) {
      ASSERT_EQ(std::memcmp(&want[b].d, &got[b].d, 4), 0) << "block " << b << " range " << range;
      ASSERT_EQ(std::memcmp(want[b].qs, got[b].qs, 256), 0) << "block " << b << " range " << range;
      ASSERT_EQ(std::memcmp(want[b].bsums, got[b].bsums, 32), 0) << "block " << b << " range " << range;
    }
    EXPECT_EQ(want[2].qs[40], -127);
    EXPECT_EQ(want[3].qs[1], -126);  // 1 - 127.5 = -126.5: half to even
    EXPECT_EQ(want[3].qs[2], -126);  // -125.5
    EXPECT_TRUE(std::isnan(want[4].d));
    for (int j = 0; j < 256; ++j) ASSERT_EQ(want[4].qs[j], 0);
    for (int s = 0; s < 16; ++s) ASSERT_EQ(want[4].bsums[s], 0);
    EXPECT_EQ(want[5].qs[9], 127);  // -0 * inf = NaN
    EXPECT_EQ(want[6].qs[0], 127);  // -inf * 0 = NaN
    EXPECT_EQ(want[6].qs[100], -128);
  }
}

}  // namespace
}  // namespace pagellm::kernels

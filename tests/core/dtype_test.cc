#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace pagellm {
namespace {

TEST(Dtype, Fp16RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
      continue;
    }
    EXPECT_EQ(fp32_to_fp16(f), h) << h;
  }
}

TEST(Dtype, Fp16RoundsToNearestEven) {
  EXPECT_EQ(fp16_to_fp32(0x3c00), 1.0f);
  EXPECT_EQ(fp32_to_fp16(1.0f + 1.0f / 2048), 0x3c00);  // tie -> even (down)
  EXPECT_EQ(fp32_to_fp16(1.0f + 3.0f / 2048), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);            // overflow to inf
  EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // half of min subnormal: tie -> 0
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xc000);
}

TEST(Dtype, Bf16) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_fp32(0x3f80), 1.0f);
  EXPECT_EQ(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie to even
  EXPECT_EQ(fp32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
}

TEST(Dtype, TraitsAndRowSizes) {
  EXPECT_EQ(row_size_bytes(GgmlType::Q4_0, 64), 36);
  EXPECT_EQ(row_size_bytes(GgmlType::Q8_0, 64), 68);
  EXPECT_EQ(row_size_bytes(GgmlType::F16, 7), 14);
  EXPECT_EQ(type_traits(5u), nullptr);
  EXPECT_EQ(type_traits(1000u), nullptr);
  EXPECT_STREQ(type_traits(GgmlType::BF16).name, "bf16");
}

}  // namespace
}  // namespace pagellm

#include "core/dtype.h"

#include <array>
#include <cmath>

#include "core/error.h"

namespace pagellm {
namespace {

constexpr int kNumTypes = 40;

constexpr std::array<TypeTraits, kNumTypes> make_traits() {
  std::array<TypeTraits, kNumTypes> t{};
  for (auto& e : t) e = TypeTraits{nullptr, 0, 0, false};
  t[0] = {"f32", 1, 4, true};
  t[1] = {"f16", 1, 2, true};
  t[2] = {"q4_0", 32, 18, true};
  t[3] = {"q4_1", 32, 20, true};
  t[6] = {"q5_0", 32, 22, true};
  t[7] = {"q5_1", 32, 24, true};
  t[8] = {"q8_0", 32, 34, true};
  t[9] = {"q8_1", 32, 36, false};
  t[10] = {"q2_K", 256, 84, true};
  t[11] = {"q3_K", 256, 110, true};
  t[12] = {"q4_K", 256, 144, true};
  t[13] = {"q5_K", 256, 176, true};
  t[14] = {"q6_K", 256, 210, true};
  t[15] = {"q8_K", 256, 292, false};
  t[16] = {"iq2_xxs", 256, 66, false};
  t[17] = {"iq2_xs", 256, 74, false};
  t[18] = {"iq3_xxs", 256, 98, false};
  t[19] = {"iq1_s", 256, 50, false};
  t[20] = {"iq4_nl", 32, 18, true};
  t[21] = {"iq3_s", 256, 110, false};
  t[22] = {"iq2_s", 256, 82, false};
  t[23] = {"iq4_xs", 256, 136, true};
  t[24] = {"i8", 1, 1, false};
  t[25] = {"i16", 1, 2, false};
  t[26] = {"i32", 1, 4, false};
  t[27] = {"i64", 1, 8, false};
  t[28] = {"f64", 1, 8, false};
  t[29] = {"iq1_m", 256, 56, false};
  t[30] = {"bf16", 1, 2, true};
  t[34] = {"tq1_0", 256, 54, false};
  t[35] = {"tq2_0", 256, 66, false};
  t[39] = {"mxfp4", 32, 17, false};
  return t;
}

constexpr std::array<TypeTraits, kNumTypes> kTraits = make_traits();

}  // namespace

const TypeTraits* type_traits(uint32_t type_id) {
  if (type_id >= kNumTypes || kTraits[type_id].name == nullptr) return nullptr;
  return &kTraits[type_id];
}

const TypeTraits& type_traits(GgmlType type) {
  const TypeTraits* t = type_traits(static_cast<uint32_t>(type));
  PAGELLM_CHECK(t != nullptr, "unknown GgmlType " + std::to_string(static_cast<uint32_t>(type)));
  return *t;
}

std::string type_name(GgmlType type) { return type_traits(type).name; }

int64_t row_size_bytes(GgmlType type, int64_t n) {
  const TypeTraits& t = type_traits(type);
  PAGELLM_CHECK(n % t.block_size == 0, std::string(t.name) + " row of " + std::to_string(n));
  return n / t.block_size * t.type_size;
}

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: value = mant * 2^-24
      float f = std::ldexp(static_cast<float>(mant), -24);
      std::memcpy(&bits, &f, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

uint16_t fp32_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u);
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: overflow to inf
  if (abs < 0x38800000u) {                        // below 2^-14: subnormal half or zero
    // value / 2^-24, rounded to nearest even.
    float a;
    std::memcpy(&a, &abs, 4);
    float scaled = a * 16777216.0f;  // exact (power of two)
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  // normal: round mantissa from 23 to 10 bits, nearest even.
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

uint16_t fp32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace pagellm

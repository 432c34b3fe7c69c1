// Element types of tensors, with the ggml numbering used by GGUF files
// (ggml/include/ggml.h `enum ggml_type`; block layouts in ggml/src/ggml-common.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "core/quant_blocks.h"

namespace pagellm {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ4_NL = 20,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

struct TypeTraits {
  const char* name;    // ggml spelling: "f32", "q8_0", ...
  int64_t block_size;  // elements per block (1 for plain types)
  int64_t type_size;   // bytes per block
  bool supported;      // pagellm can compute with it
};

// Traits of a type id, or nullptr when the id is not a known ggml type.
const TypeTraits* type_traits(uint32_t type_id);
const TypeTraits& type_traits(GgmlType type);
std::string type_name(GgmlType type);

// Bytes of a row of n elements. Precondition: n % block_size == 0 (checked by callers that
// handle untrusted shapes; asserted here).
int64_t row_size_bytes(GgmlType type, int64_t n);

// Block formats (ggml-common.h). d is an IEEE half.
constexpr int kQK4_0 = 32;
constexpr int kQK8_0 = 32;
struct BlockQ4_0 {
  uint16_t d;              // scale (f16)
  uint8_t qs[kQK4_0 / 2];  // nibbles: element j in low nibble of qs[j], element j+16 in high nibble
};
struct BlockQ8_0 {
  uint16_t d;         // scale (f16)
  int8_t qs[kQK8_0];  // quants
};
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ8_0) == 34);

// IEEE 754 binary16 <-> binary32, round to nearest even; exact for every half value.
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
// bfloat16: the upper 16 bits of a float; conversion rounds to nearest even (NaN kept quiet).
inline float bf16_to_fp32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t fp32_to_bf16(float f);

}  // namespace pagellm

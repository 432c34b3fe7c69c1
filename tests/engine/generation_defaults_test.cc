// engine/generation_defaults: the model's general.sampling.* keys as SamplingParams defaults.
#include "engine/generation_defaults.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "format/gguf_writer.h"

namespace pagellm {
namespace {

std::unique_ptr<GgufFile> file_with(const std::vector<std::pair<std::string, GgufValue>>& kv,
                                    std::vector<uint8_t>& bytes) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("llama"));
  for (const auto& [k, v] : kv) w.set(k, v);
  bytes = w.to_bytes();
  return GgufFile::parse(std::span<const uint8_t>(bytes.data(), bytes.size()), "model.gguf");
}

TEST(GenerationDefaults, AbsentKeysKeepTheOpenAIDefaults) {
  std::vector<uint8_t> bytes;
  const SamplingParams s = generation_defaults(*file_with({}, bytes));
  const SamplingParams plain;
  EXPECT_EQ(s.temperature, plain.temperature);
  EXPECT_EQ(s.top_k, plain.top_k);
  EXPECT_EQ(s.top_p, plain.top_p);
  EXPECT_EQ(s.min_p, plain.min_p);
  EXPECT_EQ(s.repetition_penalty, plain.repetition_penalty);
}

TEST(GenerationDefaults, ReadsEveryKey) {
  std::vector<uint8_t> bytes;
  const SamplingParams s = generation_defaults(*file_with({{"general.sampling.temp", GgufValue::f32(0.6f)},
                                                           {"general.sampling.top_k", GgufValue::i32(20)},
                                                           {"general.sampling.top_p", GgufValue::f32(0.95f)},
                                                           {"general.sampling.min_p", GgufValue::f32(0.05f)},
                                                           {"general.sampling.penalty_repeat", GgufValue::f32(1.1f)}},
                                                          bytes));
  EXPECT_FLOAT_EQ(s.temperature, 0.6f);
  EXPECT_EQ(s.top_k, 20);
  EXPECT_FLOAT_EQ(s.top_p, 0.95f);
  EXPECT_FLOAT_EQ(s.min_p, 0.05f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.1f);
}

TEST(GenerationDefaults, OutOfRangeOrMistypedValuesNameTheKey) {
  const std::vector<std::pair<std::string, GgufValue>> bad = {
      {"general.sampling.temp", GgufValue::f32(-1.0f)},          {"general.sampling.top_p", GgufValue::f32(0.0f)},
      {"general.sampling.top_p", GgufValue::f32(1.5f)},          {"general.sampling.min_p", GgufValue::f32(2.0f)},
      {"general.sampling.penalty_repeat", GgufValue::f32(0.0f)}, {"general.sampling.top_k", GgufValue::i32(-2)},
      {"general.sampling.temp", GgufValue::str("hot")},
  };
  for (const auto& kv : bad) {
    std::vector<uint8_t> bytes;
    auto f = file_with({kv}, bytes);
    try {
      (void)generation_defaults(*f);
      ADD_FAILURE() << kv.first << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(kv.first), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("model.gguf"), std::string::npos) << e.what();
    }
  }
  // Values and bounds print short (%g), not FLT_MAX's 39 digits.
  std::vector<uint8_t> bytes;
  auto f = file_with({{"general.sampling.temp", GgufValue::f32(-1.0f)}}, bytes);
  try {
    (void)generation_defaults(*f);
    ADD_FAILURE() << "temp -1 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("general.sampling.temp = -1 is outside [0, 3.40282e+38]"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pagellm

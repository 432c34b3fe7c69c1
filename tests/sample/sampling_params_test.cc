#include "sample/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "sample/sampler.h"

namespace pagellm {
namespace {

constexpr int32_t kVocab = 100;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct BadCase {
  const char* name;
  std::function<void(SamplingParams&)> mutate;
  const char* field;         // must appear in the message
  const char* value;         // must appear in the message
  bool needs_vocab = false;  // only validate(vocab_size) can see it, not Sampler's constructor
};

TEST(SamplingParamsTest, DefaultsAndEdgeValuesAreValid) {
  EXPECT_NO_THROW(SamplingParams{}.validate(kVocab));
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = -1;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.repetition_penalty = kMinRepetitionPenalty;
  p.logit_bias = {{0, -100.0f}, {kVocab - 1, 100.0f}};
  p.logprobs = kVocab;
  EXPECT_NO_THROW(p.validate(kVocab));
  p.top_k = kVocab * 10;  // larger than vocab: keeps all, as vLLM
  p.logprobs = 0;
  EXPECT_NO_THROW(p.validate(kVocab));
}

TEST(SamplingParamsTest, BadValuesThrowNamingFieldAndValue) {
  const BadCase cases[] = {
      {"negative temperature", [](SamplingParams& p) { p.temperature = -0.5f; }, "temperature", "-0.5"},
      {"nan temperature", [](SamplingParams& p) { p.temperature = kNaN; }, "temperature", "nan"},
      {"inf temperature", [](SamplingParams& p) { p.temperature = kInf; }, "temperature", "inf"},
      {"top_k -2", [](SamplingParams& p) { p.top_k = -2; }, "top_k", "-2"},
      {"top_p 0", [](SamplingParams& p) { p.top_p = 0.0f; }, "top_p", "0"},
      {"top_p > 1", [](SamplingParams& p) { p.top_p = 1.5f; }, "top_p", "1.5"},
      {"top_p nan", [](SamplingParams& p) { p.top_p = kNaN; }, "top_p", "nan"},
      {"min_p < 0", [](SamplingParams& p) { p.min_p = -0.25f; }, "min_p", "-0.25"},
      {"min_p > 1", [](SamplingParams& p) { p.min_p = 1.25f; }, "min_p", "1.25"},
      {"repetition 0", [](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty", "0"},
      {"repetition < 0", [](SamplingParams& p) { p.repetition_penalty = -1.0f; }, "repetition_penalty", "-1"},
      {"repetition inf", [](SamplingParams& p) { p.repetition_penalty = kInf; }, "repetition_penalty", "inf"},
      // Tiny or huge penalties overflow a finite logit to +-inf (the 1e-37 gave HTTP 500).
      {"repetition 1e-37", [](SamplingParams& p) { p.repetition_penalty = 1e-37f; }, "repetition_penalty", "1e-37"},
      {"repetition < 0.01", [](SamplingParams& p) { p.repetition_penalty = 0.009f; }, "repetition_penalty", "0.009"},
      {"repetition > 100", [](SamplingParams& p) { p.repetition_penalty = 101.0f; }, "repetition_penalty", "101"},
      {"presence > 2", [](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty", "2.5"},
      {"presence nan", [](SamplingParams& p) { p.presence_penalty = kNaN; }, "presence_penalty", "nan"},
      {"frequency < -2", [](SamplingParams& p) { p.frequency_penalty = -3.0f; }, "frequency_penalty", "-3"},
      {"logprobs -2", [](SamplingParams& p) { p.logprobs = -2; }, "logprobs", "-2"},
      {"logprobs > vocab", [](SamplingParams& p) { p.logprobs = kVocab + 1; }, "logprobs", "101", true},
      {"bias id < 0",
       [](SamplingParams& p) {
         p.logit_bias = {{-1, 1.0f}};
       },
       "logit_bias", "-1"},
      {"bias id == vocab",
       [](SamplingParams& p) {
         p.logit_bias = {{kVocab, 1.0f}};
       },
       "logit_bias", "100", true},
      {"bias nan",
       [](SamplingParams& p) {
         p.logit_bias = {{3, kNaN}};
       },
       "logit_bias", "nan"},
      {"bias -inf",
       [](SamplingParams& p) {
         p.logit_bias = {{3, -kInf}};
       },
       "logit_bias", "inf"},
      {"bias duplicate id",
       [](SamplingParams& p) {
         p.logit_bias = {{7, 1.0f}, {2, 1.0f}, {7, 2.0f}};
       },
       "logit_bias", "7"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    SamplingParams p;
    c.mutate(p);
    try {
      p.validate(kVocab);
      ADD_FAILURE() << "no throw";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(c.field), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.value), std::string::npos) << msg;
    }
    // The Sampler refuses to be built from the same params when no vocabulary is needed to tell.
    if (!c.needs_vocab) {
      EXPECT_THROW(Sampler{p}, Error);
    }
  }
}

// The bounds of repetition_penalty with the smallest non-greedy temperature keep large finite
// logits finite: sampling still works (no SamplingError), every logprob finite.
TEST(SamplingParamsTest, ExtremePenaltyAndTemperatureInRangeKeepLogitsFinite) {
  std::vector<float> logits(kVocab);
  for (int32_t i = 0; i < kVocab; ++i) logits[i] = (i % 2 ? 1.0f : -1.0f) * 1e4f * static_cast<float>(i + 1);
  std::vector<int32_t> seen(kVocab);
  for (int32_t i = 0; i < kVocab; ++i) seen[i] = i;
  for (const float r : {kMinRepetitionPenalty, kMaxRepetitionPenalty}) {
    SCOPED_TRACE(r);
    SamplingParams p;
    p.repetition_penalty = r;
    p.temperature = kGreedyTemperatureEps;
    p.logit_bias = {{kVocab - 1, 100.0f}};
    p.logprobs = 5;
    p.seed = 1;
    ASSERT_NO_THROW(p.validate(kVocab));
    Sampler sampler(p);
    const SampleResult res = sampler.sample_with_logprobs(logits, seen, {});
    EXPECT_TRUE(std::isfinite(res.logprob));
    for (const TokenLogprob& t : res.top_logprobs) EXPECT_TRUE(std::isfinite(t.logprob));
  }
}

}  // namespace
}  // namespace pagellm

#include "sample/logits_processor.h"

#include <gtest/gtest.h>

#include <vector>

namespace pagellm {
namespace {

// All values below are exact in binary floating point, so EXPECT_EQ is safe.
TEST(LogitsProcessorTest, BiasThenRepetitionThenFrequencyThenPresence) {
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 0.0f};
  SamplingParams p;
  p.logit_bias = {{5, 1.5f}, {0, -0.5f}};
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  const std::vector<int32_t> prompt = {0, 1, 1};
  const std::vector<int32_t> output = {3, 3, 1, 4};
  PenaltyScratch scratch;
  apply_bias_and_penalties(logits, p, prompt, output, scratch);
  // token 0: bias 2-0.5=1.5; prompt only -> repetition 1.5/2 = 0.75; no frequency/presence.
  // token 1: prompt+output once: -1*2 = -2 (once, not per occurrence); -0.5*1 -0.25 = -2.75.
  // token 2: unseen, unbiased: 0.5.
  // token 3: output twice: 3/2 = 1.5; -0.5*2 - 0.25 = 0.25.
  // token 4: output once: -2*2 = -4; -0.5 - 0.25 = -4.75.
  // token 5: bias only: 1.5 (unseen tokens get no penalty).
  const std::vector<float> expected = {0.75f, -2.75f, 0.5f, 0.25f, -4.75f, 1.5f};
  EXPECT_EQ(logits, expected);
}

TEST(LogitsProcessorTest, ZeroLogitAndNegativePenalties) {
  std::vector<float> logits = {0.0f, 1.0f, -1.0f};
  SamplingParams p;
  p.repetition_penalty = 0.5f;  // < 1 encourages repetition
  p.presence_penalty = -1.0f;   // negative encourages too
  const std::vector<int32_t> output = {0, 1, 2};
  PenaltyScratch scratch;
  apply_bias_and_penalties(logits, p, {}, output, scratch);
  // 0 * 0.5 = 0 then +1; 1 / 0.5 = 2 then +1; -1 * 0.5 = -0.5 then +1.
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 3.0f, 0.5f}));
}

TEST(LogitsProcessorTest, FrequencyAndPresenceIgnorePromptTokens) {
  std::vector<float> logits = {1.0f, 1.0f};
  SamplingParams p;
  p.frequency_penalty = 1.0f;
  p.presence_penalty = 1.0f;
  const std::vector<int32_t> prompt = {0, 0, 0};
  const std::vector<int32_t> output = {1};
  PenaltyScratch scratch;
  apply_bias_and_penalties(logits, p, prompt, output, scratch);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -1.0f}));
}

TEST(LogitsProcessorTest, ScratchIsResetBetweenCalls) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 1.0f;
  PenaltyScratch scratch;
  std::vector<float> first = {4.0f, 4.0f, 4.0f, 4.0f};
  apply_bias_and_penalties(first, p, std::vector<int32_t>{0}, std::vector<int32_t>{1, 1}, scratch);
  EXPECT_EQ(first, (std::vector<float>{2.0f, 0.0f, 4.0f, 4.0f}));
  // A second call with a disjoint history must not see the first call's counts.
  std::vector<float> second = {4.0f, 4.0f, 4.0f, 4.0f};
  apply_bias_and_penalties(second, p, std::vector<int32_t>{3}, std::vector<int32_t>{2}, scratch);
  EXPECT_EQ(second, (std::vector<float>{4.0f, 4.0f, 1.0f, 2.0f}));
}

TEST(LogitsProcessorTest, NoOpParamsLeaveLogitsUntouched) {
  std::vector<float> logits = {0.3f, -7.0f, 2.0f};
  const std::vector<float> before = logits;
  PenaltyScratch scratch;
  apply_bias_and_penalties(logits, SamplingParams{}, std::vector<int32_t>{0, 1}, std::vector<int32_t>{2}, scratch);
  EXPECT_EQ(logits, before);
}

}  // namespace
}  // namespace pagellm

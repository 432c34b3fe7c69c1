// Sampler::sample_rows: k rows at once are exactly k single-row calls in sequence, each seeing the
// tokens of the rows before it (the multi-row sampling a speculative verify step needs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "sample/sampler.h"

namespace pagellm {
namespace {

constexpr int32_t kVocab = 64;

std::vector<float> random_rows(int64_t num_rows, std::mt19937_64& gen) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(num_rows * kVocab));
  for (float& l : logits) l = normal(gen);
  return logits;
}

SamplingParams with_penalties(float temperature) {
  SamplingParams p;
  p.seed = 1234;
  p.temperature = temperature;
  p.top_k = 40;
  p.top_p = 0.9f;
  p.min_p = 0.01f;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.8f;
  p.presence_penalty = 0.6f;
  p.logit_bias = {{3, 1.5f}, {9, -2.0f}};
  p.logprobs = 4;
  return p;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

void expect_identical(const SampleResult& a, const SampleResult& b, bool with_logprobs) {
  EXPECT_EQ(a.token_id, b.token_id);
  if (!with_logprobs) return;
  EXPECT_TRUE(same_bits(a.logprob, b.logprob)) << a.logprob << " vs " << b.logprob;
  EXPECT_EQ(a.rank, b.rank);
  ASSERT_EQ(a.top_logprobs.size(), b.top_logprobs.size());
  for (size_t j = 0; j < a.top_logprobs.size(); ++j) {
    EXPECT_EQ(a.top_logprobs[j].token_id, b.top_logprobs[j].token_id);
    EXPECT_TRUE(same_bits(a.top_logprobs[j].logprob, b.top_logprobs[j].logprob));
  }
}

// Many verify-sized calls in a row on one request: tokens, logprobs and the RNG stream agree
// with single-row calls, call after call.
void check_rows_equal_single_calls(const SamplingParams& params, bool with_logprobs) {
  Sampler rows(params), single(params);
  std::mt19937_64 gen(99);
  const std::vector<int32_t> prompt{3, 5, 5, 17, 40};
  std::vector<int32_t> out_rows{9, 3}, out_single{9, 3};
  int num_repeats = 0;  // rows whose token was already in the output: penalties mattered
  for (int call = 0; call < 200; ++call) {
    const int64_t k = 1 + call % 5;
    const std::vector<float> logits = random_rows(k, gen);
    const std::vector<SampleResult> got = rows.sample_rows(logits, k, prompt, out_rows, with_logprobs);
    ASSERT_EQ(static_cast<int64_t>(got.size()), k);
    for (int64_t i = 0; i < k; ++i) {
      const std::span<const float> row(logits.data() + i * kVocab, kVocab);
      const SampleResult want = with_logprobs ? single.sample_with_logprobs(row, prompt, out_single)
                                              : SampleResult{single.sample(row, prompt, out_single), 0.0f, 0, {}};
      expect_identical(got[i], want, with_logprobs);
      num_repeats += std::count(out_single.begin(), out_single.end(), want.token_id) > 0;
      out_single.push_back(want.token_id);
      out_rows.push_back(got[i].token_id);
    }
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(num_repeats, 0);
}

TEST(SampleRows, SeededRandomWithPenaltiesEqualsSingleCalls) {
  check_rows_equal_single_calls(with_penalties(0.9f), true);
  check_rows_equal_single_calls(with_penalties(0.9f), false);
}

TEST(SampleRows, GreedyWithPenaltiesEqualsSingleCalls) {
  check_rows_equal_single_calls(with_penalties(0.0f), true);
  check_rows_equal_single_calls(with_penalties(0.0f), false);
}

// Identical rows, greedy, presence penalty 2: each row must see the tokens of the rows before
// it, so the argmax moves on (3.0 -> 1.0 once seen, below the next candidate).
TEST(SampleRows, EachRowSeesTheTokensOfThePreviousRows) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.presence_penalty = 2.0f;
  Sampler s(p);
  std::vector<float> logits;
  for (int r = 0; r < 4; ++r) logits.insert(logits.end(), {3.0f, 2.5f, 2.0f, 1.5f});
  const std::vector<SampleResult> got = s.sample_rows(logits, 4, {}, {}, false);
  std::vector<int32_t> tokens;
  for (const SampleResult& r : got) tokens.push_back(r.token_id);
  EXPECT_EQ(tokens, (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST(SampleRowsDeathTest, RowsMustDivideTheLogits) {
  Sampler s(SamplingParams{});
  const std::vector<float> logits(10, 0.0f);
  EXPECT_DEATH(s.sample_rows(logits, 3, {}, {}, false), "is not num_rows=3 rows");
}

}  // namespace
}  // namespace pagellm

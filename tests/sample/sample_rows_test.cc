// Sampler::sample_rows: k rows at once are exactly k single-row calls in sequence, each seeing the
// tokens of the rows before it (the multi-row sampling a speculative verify step needs). With a
// draft (speculative verification of a deterministic draft, n-gram lookup) it must emit exactly
// what sampling without speculation emits, and its output distribution must be the target's.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
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

// A draft against which sampling with one seed stops at each possible position: the no-draft
// tokens, with position `wrong` replaced by another token (wrong == k: all correct).
TEST(SpecVerify, EmitsTheNoDraftTokensUpToAndIncludingTheFirstMismatch) {
  std::mt19937_64 gen(5);  // (random_rows: N(0, 2) logits, kVocab = 64)
  for (const bool greedy : {false, true}) {
    for (int trial = 0; trial < 200; ++trial) {
      SamplingParams p;
      p.seed = 100 + trial;
      p.temperature = greedy ? 0.0f : 0.8f;
      p.top_k = trial % 3 == 0 ? 0 : 20;
      p.top_p = trial % 2 == 0 ? 1.0f : 0.9f;
      p.repetition_penalty = 1.2f;
      p.presence_penalty = 0.3f;
      const int64_t k = 1 + trial % 5;
      const std::vector<float> logits = random_rows(k + 1, gen);
      const std::vector<int32_t> prompt{1, 2, 3}, output{4, 5};
      Sampler ref(p);
      const std::vector<SampleResult> all = ref.sample_rows(logits, k + 1, prompt, output, true);
      const auto wrong = static_cast<size_t>(gen() % static_cast<uint64_t>(k + 1));
      std::vector<int32_t> draft;
      for (size_t i = 0; i < static_cast<size_t>(k); ++i) draft.push_back(all[i].token_id);
      if (wrong < draft.size()) draft[wrong] = (draft[wrong] + 1) % kVocab;
      Sampler spec(p);
      const std::vector<SampleResult> got = spec.sample_rows(logits, k + 1, prompt, output, true, draft);
      ASSERT_EQ(got.size(), std::min(wrong, draft.size()) + 1) << "trial " << trial;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].token_id, all[i].token_id) << "trial " << trial << " row " << i;
        EXPECT_EQ(got[i].logprob, all[i].logprob);
      }
      // The RNG stream continues where single-token sampling would be.
      Sampler single(p);
      std::vector<int32_t> out = output;
      for (size_t i = 0; i < got.size(); ++i) {
        const std::span<const float> row(logits.data() + i * kVocab, kVocab);
        out.push_back(single.sample(row, prompt, out));
      }
      const std::vector<float> next = random_rows(1, gen);
      std::vector<int32_t> out_spec = output;
      for (const SampleResult& r : got) out_spec.push_back(r.token_id);
      EXPECT_EQ(spec.sample(next, prompt, out_spec), single.sample(next, prompt, out));
    }
  }
}

// Chi-square of counts against expected probabilities; 4 degrees of freedom below.
double chi_square(const std::array<int64_t, 5>& counts, const std::array<double, 5>& probs, int64_t n) {
  double x = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = probs[i] * static_cast<double>(n);
    x += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
  }
  return x;
}

// The first emitted token of a verify step with draft x, over many seeds, is distributed as p
// (the target's softmax), wherever the draft is. The critical value 18.47 is chi-square's
// 0.999 quantile at 4 degrees of freedom: a correct rule fails with probability 1e-3 per
// draft (the seeds are fixed, so the test itself is deterministic). A broken rule (the classic
// residual bug: on rejection, draw from p itself instead of p without x) fails the same test.
TEST(SpecVerify, FirstTokenIsDistributedAsTheTarget) {
  const std::array<float, 5> logit{1.2f, 0.3f, -0.5f, 0.9f, 0.0f};
  std::array<double, 5> p{};
  double z = 0;
  for (size_t i = 0; i < 5; ++i) z += std::exp(static_cast<double>(logit[i]));
  for (size_t i = 0; i < 5; ++i) p[i] = std::exp(static_cast<double>(logit[i])) / z;
  std::vector<float> rows(logit.begin(), logit.end());
  rows.insert(rows.end(), logit.begin(), logit.end());  // row 1 (bonus), same distribution
  constexpr int64_t kSamples = 20000;
  constexpr double kCritical = 18.47;
  for (int32_t x = 0; x < 5; ++x) {
    std::array<int64_t, 5> counts{}, broken{};
    for (int64_t seed = 0; seed < kSamples; ++seed) {
      SamplingParams sp;
      sp.seed = static_cast<uint64_t>(seed) * 7919 + static_cast<uint64_t>(x);
      Sampler s(sp);
      const std::vector<int32_t> draft{x};
      ++counts[static_cast<size_t>(s.sample_rows(rows, 2, {}, {}, false, draft)[0].token_id)];
      // Broken: accept x with probability p(x) (right), else draw from p (wrong: x again possible).
      std::mt19937_64 g(static_cast<uint64_t>(seed));
      std::uniform_real_distribution<double> u(0.0, 1.0);
      int32_t tok = x;
      if (u(g) >= p[static_cast<size_t>(x)]) {
        double t = u(g), c = 0;
        for (tok = 0; tok < 4; ++tok) {
          c += p[static_cast<size_t>(tok)];
          if (t < c) break;
        }
      }
      ++broken[static_cast<size_t>(tok)];
    }
    EXPECT_LT(chi_square(counts, p, kSamples), kCritical) << "draft " << x;
    EXPECT_GT(chi_square(broken, p, kSamples), kCritical) << "draft " << x;
  }
}

}  // namespace
}  // namespace pagellm

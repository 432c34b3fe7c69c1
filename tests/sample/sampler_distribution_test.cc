// Empirical distribution of Sampler draws vs. an independent slow oracle.
//
// Bound: with N draws, the count of a token with probability p is Binomial(N, p), so its
// frequency has standard deviation sigma = sqrt(p (1 - p) / N). We require every token's
// |frequency - p| <= 5 sigma + 1/N (the 1/N absorbs discreteness). For the rarest kept token
// here (p = 0.0017, N p = 34) the exact binomial probability of breaking this bound is 1.4e-6;
// for larger N p it tends to the normal 5.7e-7. With <= 8 tokens a correct sampler fails a
// case with probability < 1.2e-5 (union bound); the seeds are fixed, so the test is
// deterministic anyway. Tokens outside the truncated
// support must have count exactly 0. The power check below shows the bound is tight enough
// to reject a sampler that ignores the temperature.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "sample/sampler.h"

namespace pagellm {
namespace {

constexpr int kNumDraws = 20000;
const std::vector<float> kLogits = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f, 2.5f, 1.5f};
const std::vector<int32_t> kNoTokens;

// Slow oracle: full sort in double precision, the textbook definition of each step.
std::vector<double> reference_probs(const std::vector<float>& logits, const SamplingParams& p) {
  const size_t n = logits.size();
  std::vector<double> prob(n);
  double max = -INFINITY;
  for (size_t i = 0; i < n; ++i) max = std::max(max, static_cast<double>(logits[i]) / p.temperature);
  for (size_t i = 0; i < n; ++i) prob[i] = std::exp(static_cast<double>(logits[i]) / p.temperature - max);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prob[a] > prob[b]; });
  std::vector<bool> keep(n, true);
  if (p.top_k > 0) {
    for (size_t j = static_cast<size_t>(p.top_k); j < n; ++j) keep[order[j]] = false;
  }
  auto kept_mass = [&] {
    double s = 0.0;
    for (size_t i = 0; i < n; ++i) s += keep[i] ? prob[i] : 0.0;
    return s;
  };
  if (p.top_p < 1.0f) {
    const double total = kept_mass();
    double before = 0.0;
    for (const size_t i : order) {
      if (!keep[i]) continue;
      if (before >= p.top_p * total) keep[i] = false;
      before += prob[i];
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (prob[i] < p.min_p * 1.0) keep[i] = false;  // max prob is exactly 1 here
  }
  const double total = kept_mass();
  for (size_t i = 0; i < n; ++i) prob[i] = keep[i] ? prob[i] / total : 0.0;
  return prob;
}

std::vector<double> empirical(const SamplingParams& p) {
  Sampler s(p);
  std::vector<double> freq(kLogits.size(), 0.0);
  for (int i = 0; i < kNumDraws; ++i) freq[s.sample(kLogits, kNoTokens, kNoTokens)] += 1.0 / kNumDraws;
  return freq;
}

// Empty string if `freq` is consistent with `expected` under the bound in the file comment.
std::string mismatch(const std::vector<double>& freq, const std::vector<double>& expected) {
  for (size_t i = 0; i < freq.size(); ++i) {
    const double p = expected[i];
    if (p == 0.0) {
      if (freq[i] != 0.0) return "token " + std::to_string(i) + " outside the support was drawn";
      continue;
    }
    const double bound = 5.0 * std::sqrt(p * (1.0 - p) / kNumDraws) + 1.0 / kNumDraws;
    if (std::abs(freq[i] - p) > bound) {
      return "token " + std::to_string(i) + ": freq " + std::to_string(freq[i]) + " vs p " + std::to_string(p);
    }
  }
  return "";
}

struct Case {
  const char* name;
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  size_t expected_support;  // hand-checked size of the kept set (guards the oracle too)
};

TEST(SamplerDistributionTest, MatchesTruncatedSoftmax) {
  // Probabilities at T = 0.7 (descending): id4 .513, id6 .251, id1 .123, id7 .060, id0 .030, ...
  // At T = 1: id4 .403, id6 .244, id1 .148, id7 .090, id0 .055, ...
  const Case cases[] = {
      {"temperature only", 0.7f, 0, 1.0f, 0.0f, 8},
      {"temperature 1.6", 1.6f, -1, 1.0f, 0.0f, 8},
      {"top_k 3", 0.7f, 3, 1.0f, 0.0f, 3},
      {"top_p 0.8", 0.7f, 0, 0.8f, 0.0f, 3},  // mass before id7 = .887 >= .8 -> ids 4, 6, 1
      {"min_p 0.2", 0.7f, 0, 1.0f, 0.2f, 3},  // ratios to max: 1, .49, .24, .117 -> ids 4, 6, 1
      // top_k 5 keeps 4,6,1,7,0 (renormalised .429 .260 .158 .096 .058); top_p .9 drops id0
      // (mass before it .942); min_p .3 drops id7 (ratio .223) -> ids 4, 6, 1.
      {"top_k 5 + top_p 0.9 + min_p 0.3", 1.0f, 5, 0.9f, 0.3f, 3},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    SamplingParams p;
    p.seed = 31337;
    p.temperature = c.temperature;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    const auto expected = reference_probs(kLogits, p);
    const auto support =
        static_cast<size_t>(std::count_if(expected.begin(), expected.end(), [](double x) { return x > 0; }));
    EXPECT_EQ(support, c.expected_support);
    EXPECT_EQ(mismatch(empirical(p), expected), "");
  }
}

TEST(SamplerDistributionTest, BoundRejectsAWrongDistribution) {
  SamplingParams p;
  p.seed = 31337;
  p.temperature = 0.7f;
  SamplingParams wrong = p;
  wrong.temperature = 1.0f;  // what a sampler that forgot the temperature would produce
  EXPECT_NE(mismatch(empirical(p), reference_probs(kLogits, wrong)), "");
  SamplingParams top_k4 = p;
  top_k4.top_k = 4;
  SamplingParams top_k3 = p;
  top_k3.top_k = 3;  // off-by-one in top_k
  EXPECT_NE(mismatch(empirical(top_k4), reference_probs(kLogits, top_k3)), "");
}

}  // namespace
}  // namespace pagellm

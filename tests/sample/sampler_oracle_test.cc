// Differential test: Sampler (partial selection, logit histograms) against a slow oracle that
// fully sorts and applies the documented draw rule with the same uniform u per draw.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "sample/sampler.h"

namespace pagellm {
namespace {

const std::vector<int32_t> kNoTokens;

// The rule from sample/sampler.h, written the obvious way: full sort, then the truncation
// steps, leaving the kept tokens in descending order with their unnormalised probabilities.
struct Oracle {
  std::vector<int32_t> kept;
  std::vector<double> prob;  // [kept.size()]
  double total = 0.0;

  int32_t draw(double u) const {
    double cumulative = 0.0;
    for (size_t j = 0; j < kept.size(); ++j) {
      cumulative += prob[j];
      if (u * total < cumulative) return kept[j];
    }
    return kept.back();
  }
};

Oracle make_oracle(const std::vector<float>& raw, const SamplingParams& p) {
  const size_t n = raw.size();
  std::vector<float> l(n);
  for (size_t i = 0; i < n; ++i) l[i] = raw[i] / p.temperature;
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  const float max = l[order[0]];
  std::vector<int32_t> kept;
  for (const int32_t id : order) {
    if (l[id] > -INFINITY) kept.push_back(id);
  }
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < kept.size()) kept.resize(p.top_k);
  auto prob = [&](int32_t id) { return std::exp(l[id] - max); };
  if (p.top_p < 1.0f) {
    double total = 0.0;
    for (const int32_t id : kept) total += prob(id);
    double before = 0.0;
    size_t num = 0;
    while (num < kept.size() && before < p.top_p * total) before += prob(kept[num++]);
    kept.resize(num);
  }
  std::erase_if(kept, [&](int32_t id) { return prob(id) < p.min_p; });
  Oracle oracle;
  oracle.kept = kept;
  for (const int32_t id : kept) {
    oracle.prob.push_back(prob(id));
    oracle.total += prob(id);
  }
  return oracle;
}

struct Case {
  int32_t vocab;
  float scale;  // logits ~ N(0, scale^2)
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
};

TEST(SamplerOracleTest, SameDrawsAsFullSortReference) {
  const Case cases[] = {
      {1000, 3.0f, 1.0f, 0, 1.0f, 0.0f},       {1000, 3.0f, 0.3f, 0, 0.95f, 0.0f},
      {1000, 0.1f, 2.0f, 0, 0.5f, 0.0f},       {1000, 40.0f, 0.5f, 100, 1.0f, 0.0f},  // > 64 nats range
      {5000, 1.0f, 1.0f, 7, 0.9f, 0.01f},      {5000, 2.0f, 1.0f, 4000, 0.99f, 0.0f},
      {128 * 1024, 3.0f, 1.0f, 0, 1.0f, 0.0f}, {128 * 1024, 3.0f, 0.8f, 50, 0.9f, 0.05f},
      {128 * 1024, 3.0f, 1.0f, 0, 0.9f, 0.0f}, {128 * 1024, 0.5f, 1.0f, 0, 0.999f, 0.0f},
  };
  uint64_t seed = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "vocab " << c.vocab << " scale " << c.scale << " T " << c.temperature << " k "
                                      << c.top_k << " p " << c.top_p << " min_p " << c.min_p);
    std::mt19937_64 gen(++seed);
    std::normal_distribution<float> normal(0.0f, c.scale);
    std::vector<float> logits(c.vocab);
    for (float& l : logits) l = normal(gen);
    logits[c.vocab / 2] = logits[c.vocab / 3];  // an exact tie somewhere
    SamplingParams p;
    p.seed = 1000 + seed;
    p.temperature = c.temperature;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    const Oracle oracle = make_oracle(logits, p);
    Sampler sampler(p);
    Rng rng(p.seed);  // the sampler consumes exactly one uniform per non-greedy draw
    const int num_draws = c.vocab > 10000 ? 30 : 200;
    for (int i = 0; i < num_draws; ++i) {
      ASSERT_EQ(sampler.sample(logits, kNoTokens, kNoTokens), oracle.draw(rng.uniform())) << "draw " << i;
    }
  }
}

TEST(SamplerOracleTest, ManyTiesUseLowestIdFirst) {
  // Four tokens tie at the top: with u < 1/4 of the mass the lowest id must win, etc.
  std::vector<float> logits(16, -30.0f);
  for (const int32_t id : {9, 3, 12, 6}) logits[id] = 1.0f;
  SamplingParams p;
  p.seed = 4;
  const Oracle oracle = make_oracle(logits, p);
  EXPECT_EQ(std::vector<int32_t>(oracle.kept.begin(), oracle.kept.begin() + 4), (std::vector<int32_t>{3, 6, 9, 12}));
  Sampler sampler(p);
  Rng rng(4);
  for (int i = 0; i < 500; ++i) ASSERT_EQ(sampler.sample(logits, kNoTokens, kNoTokens), oracle.draw(rng.uniform()));
}

}  // namespace
}  // namespace pagellm

#include "sample/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace pagellm {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
const std::vector<int32_t> kNoTokens;

SamplingParams seeded(uint64_t seed, float temperature = 1.0f) {
  SamplingParams p;
  p.seed = seed;
  p.temperature = temperature;
  return p;
}

// Distinct logits drawn from N(0, scale^2) with a fixed generator.
std::vector<float> random_logits(int32_t vocab, uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);  // values only need to be distinct
  std::vector<float> logits(vocab);
  for (float& l : logits) l = normal(gen);
  return logits;
}

std::vector<int32_t> draw(Sampler& s, std::span<const float> logits, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.sample(logits, kNoTokens, kNoTokens));
  return out;
}

TEST(RngTest, UsesTheStandardMersenneTwisterSequence) {
  Rng rng(5489u);  // std::mt19937_64's default seed
  uint64_t x = 0;
  for (int i = 0; i < 10000; ++i) x = rng.next_u64();
  EXPECT_EQ(x, 9981545732273789042ull);  // value fixed by the C++ standard [rand.predef]
}

TEST(RngTest, UniformIsInHalfOpenUnitInterval) {
  Rng rng(7u);
  for (int i = 0; i < 100000; ++i) {
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

TEST(GreedyTest, PicksArgmaxLowestIdOnTies) {
  EXPECT_EQ(greedy_argmax(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}), 1);
  EXPECT_EQ(greedy_argmax(std::vector<float>{kNegInf, kNegInf, -5.0f}), 2);
  EXPECT_EQ(greedy_argmax(std::vector<float>{std::nanf(""), 0.5f, 0.25f}), 1);
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
  for (const float t : {0.0f, 1e-6f}) {  // below vLLM's 1e-5 epsilon is greedy too
    Sampler s(seeded(1, t));
    for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(logits, kNoTokens, kNoTokens), 1);
  }
}

TEST(GreedyTest, TemperatureZeroIgnoresTruncationAndSeed) {
  const auto logits = random_logits(1000, 3);
  const int32_t argmax = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  SamplingParams p;  // unseeded: greedy must not depend on the RNG
  p.temperature = 0.0f;
  p.top_k = 2;
  p.top_p = 0.01f;
  p.min_p = 0.9f;
  Sampler s(p);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(logits, kNoTokens, kNoTokens), argmax);
}

TEST(GreedyTest, PenaltiesChangeTheArgmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 1.5f};
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;  // token 1: 2 -> 1, so token 2 (1.5) wins
  Sampler s(p);
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{1}, kNoTokens), 2);
  EXPECT_EQ(s.sample(logits, kNoTokens, kNoTokens), 1);  // no history: no penalty
}

TEST(SeedTest, SameSeedSameSequence) {
  const auto logits = random_logits(500, 11, 1.0f);
  Sampler a(seeded(1234));
  Sampler b(seeded(1234));
  EXPECT_EQ(draw(a, logits, 300), draw(b, logits, 300));
}

TEST(SeedTest, DifferentSeedsDiffer) {
  const std::vector<float> logits(100, 0.0f);  // uniform over 100 tokens
  Sampler a(seeded(1));
  Sampler b(seeded(2));
  const auto xa = draw(a, logits, 200);
  const auto xb = draw(b, logits, 200);
  int mismatches = 0;
  for (size_t i = 0; i < xa.size(); ++i) mismatches += xa[i] != xb[i];
  EXPECT_GT(mismatches, 150);  // independent: ~198 expected, sd ~1.4
}

TEST(SeedTest, UnseededSamplersDiffer) {
  const std::vector<float> logits(1000, 0.0f);
  Sampler a(SamplingParams{});
  Sampler b(SamplingParams{});
  EXPECT_NE(draw(a, logits, 20), draw(b, logits, 20));  // equal with probability 1e-60
}

TEST(SeedTest, InterleavedRequestsDoNotAffectEachOther) {
  const auto logits = random_logits(300, 5, 1.0f);
  SamplingParams truncating = seeded(42);
  truncating.top_k = 50;
  truncating.top_p = 0.9f;
  Sampler alone(truncating);
  const auto expected = draw(alone, logits, 100);

  Sampler a(truncating);
  Sampler b(truncating);
  Sampler other(seeded(7, 0.5f));
  std::vector<int32_t> got_a, got_b;
  for (int i = 0; i < 100; ++i) {
    got_a.push_back(a.sample(logits, kNoTokens, kNoTokens));
    other.sample(logits, kNoTokens, kNoTokens);
    other.sample(logits, kNoTokens, kNoTokens);
    got_b.push_back(b.sample(logits, kNoTokens, kNoTokens));
  }
  EXPECT_EQ(got_a, expected);
  EXPECT_EQ(got_b, expected);
}

// Regression pin: these exact draws must not change silently (they are what a user who fixed
// seed=2024 gets). They were reproduced independently by a from-scratch Python mt19937_64 plus
// the documented draw rule (u = (x >> 11) * 2^-53; first token in (logit desc, id asc) order
// whose cumulative exp(logit / T - max) exceeds u * total). Re-pin only deliberately.
TEST(SeedTest, PinnedDrawsForSeed2024) {
  const std::vector<float> logits = {0.1f, 1.2f, -0.3f, 0.8f, 2.0f, -1.0f, 0.5f, 1.7f};
  Sampler s(seeded(2024, 0.8f));
  EXPECT_EQ(draw(s, logits, 12), (std::vector<int32_t>{7, 3, 4, 4, 4, 4, 0, 7, 4, 7, 7, 7}));
}

TEST(TruncationTest, TopKOneTopPTinyMinPOneEqualGreedy) {
  for (uint64_t trial = 0; trial < 20; ++trial) {
    const int32_t vocab = trial < 18 ? 257 : 128 * 1024;
    const auto logits = random_logits(vocab, 100 + trial);
    const int32_t argmax = greedy_argmax(logits);
    SamplingParams k1 = seeded(trial, 1.5f);
    k1.top_k = 1;
    SamplingParams p_tiny = seeded(trial, 1.5f);
    p_tiny.top_p = 1e-6f;
    SamplingParams min_p1 = seeded(trial, 1.5f);
    min_p1.min_p = 1.0f;
    for (const SamplingParams& p : {k1, p_tiny, min_p1}) {
      Sampler s(p);
      for (int i = 0; i < 5; ++i) ASSERT_EQ(s.sample(logits, kNoTokens, kNoTokens), argmax) << "trial " << trial;
    }
  }
}

TEST(TruncationTest, LargeVocabTopKStaysInTopK) {
  constexpr int32_t kVocab = 128 * 1024;
  const auto logits = random_logits(kVocab, 9, 2.0f);
  std::vector<int32_t> order(kVocab);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + 40, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const std::vector<int32_t> top40(order.begin(), order.begin() + 40);
  SamplingParams p = seeded(3, 1.3f);
  p.top_k = 40;
  Sampler s(p);
  for (int i = 0; i < 200; ++i) {
    const int32_t t = s.sample(logits, kNoTokens, kNoTokens);
    ASSERT_NE(std::find(top40.begin(), top40.end(), t), top40.end()) << t;
  }
}

TEST(TruncationTest, NegativeInfinityNeverDrawn) {
  std::vector<float> logits(64, kNegInf);
  logits[10] = -50.0f;
  logits[40] = -51.0f;
  Sampler s(seeded(1, 2.0f));
  for (const int32_t t : draw(s, logits, 2000)) ASSERT_TRUE(t == 10 || t == 40) << t;
}

TEST(LogitBiasTest, MinusHundredNeverDrawnPlusHundredAlwaysDrawn) {
  const std::vector<float> flat(10, 0.0f);
  SamplingParams ban = seeded(5);
  ban.logit_bias = {{3, -100.0f}};
  Sampler banned(ban);
  std::vector<int> counts(10, 0);
  for (const int32_t t : draw(banned, flat, 5000)) ++counts[t];
  EXPECT_EQ(counts[3], 0);
  for (int t = 0; t < 10; ++t) {
    if (t != 3) {
      EXPECT_GT(counts[t], 400) << t;  // ~555 each
    }
  }

  SamplingParams force = seeded(6, 1.5f);
  force.logit_bias = {{7, 100.0f}};
  Sampler forced(force);
  for (const int32_t t : draw(forced, random_logits(10, 1, 5.0f), 2000)) ASSERT_EQ(t, 7);
}

TEST(SamplerTest, CallerLogitsAreNotModified) {
  auto logits = random_logits(100, 2);
  const auto before = logits;
  SamplingParams p = seeded(1, 0.7f);
  p.top_k = 10;
  p.repetition_penalty = 1.3f;
  p.logit_bias = {{5, 3.0f}};
  Sampler s(p);
  s.sample(logits, std::vector<int32_t>{1, 2, 5}, std::vector<int32_t>{5, 6});
  EXPECT_EQ(logits, before);
}

// ---- logprobs ----

std::vector<double> log_softmax(std::span<const float> logits) {
  double max = -INFINITY;
  for (const float l : logits) max = std::max<double>(max, l);
  double sum = 0.0;
  for (const float l : logits) sum += std::exp(l - max);
  std::vector<double> out;
  for (const float l : logits) out.push_back(l - max - std::log(sum));
  return out;
}

TEST(LogprobsTest, TopLogprobsSortedTiesByIdAndConsistent) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 3.0f, -4.0f};
  const auto ref = log_softmax(logits);
  SamplingParams p = seeded(9, 0.9f);
  p.logprobs = 4;
  Sampler s(p);
  for (int i = 0; i < 50; ++i) {
    const SampleResult r = s.sample_with_logprobs(logits, kNoTokens, kNoTokens);
    ASSERT_EQ(r.top_logprobs.size(), 4u);
    const std::vector<int32_t> ids = {r.top_logprobs[0].token_id, r.top_logprobs[1].token_id,
                                      r.top_logprobs[2].token_id, r.top_logprobs[3].token_id};
    EXPECT_EQ(ids, (std::vector<int32_t>{5, 1, 3, 4}));  // 2.0 tie: id 1 before id 3
    double mass = 0.0;
    for (size_t j = 0; j < r.top_logprobs.size(); ++j) {
      EXPECT_NEAR(r.top_logprobs[j].logprob, ref[r.top_logprobs[j].token_id], 1e-5);
      if (j > 0) {
        EXPECT_GE(r.top_logprobs[j - 1].logprob, r.top_logprobs[j].logprob);
      }
      mass += std::exp(r.top_logprobs[j].logprob);
    }
    EXPECT_LE(mass, 1.0 + 1e-6);
    EXPECT_GT(mass, 0.9);  // these four hold ~97% of the mass
    EXPECT_NEAR(r.logprob, ref[r.token_id], 1e-5);
    const auto expected_rank =
        std::count_if(logits.begin(), logits.end(), [&](float l) { return l >= logits[r.token_id]; });
    EXPECT_EQ(r.rank, expected_rank);
  }
}

TEST(LogprobsTest, FullVocabLogprobsSumToOne) {
  const auto logits = random_logits(1000, 4);
  SamplingParams p = seeded(1);
  p.logprobs = 1000;
  Sampler s(p);
  const SampleResult r = s.sample_with_logprobs(logits, kNoTokens, kNoTokens);
  double mass = 0.0;
  for (const auto& t : r.top_logprobs) mass += std::exp(t.logprob);
  EXPECT_NEAR(mass, 1.0, 1e-4);
}

TEST(LogprobsTest, GreedyChosenIsRankOneAndFirst) {
  const auto logits = random_logits(5000, 8);
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 3;
  Sampler s(p);
  const SampleResult r = s.sample_with_logprobs(logits, kNoTokens, kNoTokens);
  EXPECT_EQ(r.token_id, greedy_argmax(logits));
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.top_logprobs[0].token_id, r.token_id);
  EXPECT_EQ(r.top_logprobs[0].logprob, r.logprob);
}

TEST(LogprobsTest, RawLogprobsIgnoreBiasAndPenalties) {
  // vLLM v1 default "raw_logprobs": the chosen token's logprob is the model's own.
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f};
  const auto ref = log_softmax(logits);
  SamplingParams p = seeded(1);
  p.logit_bias = {{1, 100.0f}};
  p.repetition_penalty = 1.5f;
  p.logprobs = 0;
  Sampler s(p);
  const SampleResult r = s.sample_with_logprobs(logits, std::vector<int32_t>{2}, kNoTokens);
  EXPECT_EQ(r.token_id, 1);
  EXPECT_NEAR(r.logprob, ref[1], 1e-6);
  EXPECT_EQ(r.rank, 3);
  EXPECT_TRUE(r.top_logprobs.empty());
}

TEST(LogprobsTest, SameDrawsAsSample) {
  const auto logits = random_logits(200, 6, 1.0f);
  SamplingParams p = seeded(77, 1.2f);
  p.top_p = 0.95f;
  p.logprobs = 5;
  Sampler plain(p);
  Sampler with_logprobs(p);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(plain.sample(logits, kNoTokens, kNoTokens),
              with_logprobs.sample_with_logprobs(logits, kNoTokens, kNoTokens).token_id);
  }
}

// Logits that leave nothing to draw (a model with NaN or huge weights) are the request's error,
// not an abort: SamplingError, and the sampler still works on the next, finite, logits.
TEST(SamplerTest, NonFiniteLogitsThrowSamplingErrorAndTheSamplerStaysUsable) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> all_nan(50, nan), all_neg_inf(50, kNegInf);
  std::vector<float> pos_inf = random_logits(50, 3);
  pos_inf[7] = inf;
  const std::vector<float> fine = random_logits(50, 4);
  for (float temperature : {0.0f, 0.7f}) {
    SCOPED_TRACE(temperature);
    Sampler s(seeded(11, temperature));
    EXPECT_THROW(s.sample(all_nan, kNoTokens, kNoTokens), SamplingError);
    EXPECT_THROW(s.sample(all_neg_inf, kNoTokens, kNoTokens), SamplingError);
    EXPECT_THROW(s.sample_with_logprobs(all_nan, kNoTokens, kNoTokens), SamplingError);
    if (temperature > 0) {
      EXPECT_THROW(s.sample(pos_inf, kNoTokens, kNoTokens), SamplingError);  // no distribution
    } else {
      EXPECT_EQ(s.sample(pos_inf, kNoTokens, kNoTokens), 7);  // the argmax is still defined
      EXPECT_THROW(s.sample_with_logprobs(pos_inf, kNoTokens, kNoTokens), SamplingError);
    }
    // The failed calls drew nothing: the next draws equal a fresh sampler's.
    Sampler fresh(seeded(11, temperature));
    EXPECT_EQ(draw(s, fine, 20), draw(fresh, fine, 20));
  }
  // Some NaN logits among finite ones: logprobs over the finite ones (NaN counts as -inf), the
  // NaN tokens last in top_logprobs.
  {
    std::vector<float> part = fine;
    for (size_t i = 0; i < part.size(); i += 7) part[i] = nan;
    std::vector<float> neg = fine;
    for (size_t i = 0; i < neg.size(); i += 7) neg[i] = kNegInf;
    SamplingParams p = seeded(2, 0.0f);
    p.logprobs = 50;
    Sampler a(p), b(p);
    const SampleResult ra = a.sample_with_logprobs(part, kNoTokens, kNoTokens);
    const SampleResult rb = b.sample_with_logprobs(neg, kNoTokens, kNoTokens);
    EXPECT_EQ(ra.token_id, rb.token_id);
    EXPECT_TRUE(std::isfinite(ra.logprob));
    EXPECT_EQ(ra.logprob, rb.logprob);
    ASSERT_EQ(ra.top_logprobs.size(), rb.top_logprobs.size());
    for (size_t j = 0; j < ra.top_logprobs.size(); ++j) {
      EXPECT_EQ(ra.top_logprobs[j].token_id, rb.top_logprobs[j].token_id) << j;
      EXPECT_EQ(ra.top_logprobs[j].logprob, rb.top_logprobs[j].logprob) << j;
    }
    EXPECT_EQ(ra.top_logprobs.back().logprob, kNegInf);
  }
  // Some NaNs among finite logits are skipped, as before.
  std::vector<float> some_nan = fine;
  some_nan[0] = some_nan[9] = nan;
  Sampler g(seeded(1, 0.0f));
  EXPECT_NE(g.sample(some_nan, kNoTokens, kNoTokens), 0);
  Sampler r(seeded(1, 1.0f));
  for (int32_t t : draw(r, some_nan, 200)) {
    EXPECT_NE(t, 0);
    EXPECT_NE(t, 9);
  }
}

}  // namespace
}  // namespace pagellm

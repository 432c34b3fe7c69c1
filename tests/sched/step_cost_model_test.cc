// StepCostModel's online fit against steps made from known coefficients.
#include "sched/step_cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace pagellm {
namespace {

double truth(const StepFeatures& f, double c0, double c1, double c2) {
  return c0 + c1 * static_cast<double>(f.num_tokens) + c2 * static_cast<double>(f.num_attn_pairs) / 1024;
}

// A mix of decode batches and prefill chunks, as a server sees them.
StepFeatures random_step(std::mt19937& rng) {
  StepFeatures f;
  const int decodes = static_cast<int>(rng() % 17);
  for (int i = 0; i < decodes; ++i) f += StepFeatures::chunk(static_cast<int64_t>(rng() % 900), 1);
  if (rng() % 2 == 0 || decodes == 0) f += StepFeatures::chunk(static_cast<int64_t>(rng() % 300), 1 + rng() % 256);
  return f;
}

TEST(StepCostModel, RecoversTheCoefficientsOfNoiselessSteps) {
  StepCostModel m;
  std::mt19937 rng(3);
  for (int i = 0; i < 200; ++i) {
    const StepFeatures f = random_step(rng);
    m.observe(f, truth(f, 0.05, 0.002, 0.0005));
  }
  EXPECT_NEAR(m.c_step(), 0.05, 1e-6);
  EXPECT_NEAR(m.c_token(), 0.002, 1e-8);
  EXPECT_NEAR(m.c_attn(), 0.0005, 1e-8);
  EXPECT_LT(m.mean_relative_error(), 1e-3);
  EXPECT_EQ(m.num_observed(), 200);
}

// True attention cost 0 and noise: the unconstrained fit may go negative; this one stays >= 0,
// and still predicts within the noise.
TEST(StepCostModel, CoefficientsStayNonNegative) {
  StepCostModel m;
  std::mt19937 rng(4);
  std::normal_distribution<double> noise(0, 0.02);
  double worst = 0;
  for (int i = 0; i < 400; ++i) {
    const StepFeatures f = random_step(rng);
    const double t = truth(f, 0.01, 0.001, 0);
    m.observe(f, std::max(1e-4, t * (1 + noise(rng))));
    EXPECT_GE(m.c_step(), 0);
    EXPECT_GE(m.c_token(), 0);
    EXPECT_GE(m.c_attn(), 0);
    if (i > 100) worst = std::max(worst, std::abs(m.predict(f) - t) / t);
  }
  EXPECT_LT(worst, 0.1);
}

// The machine changes (another tenant, a slower clock): the forgetting factor follows it.
TEST(StepCostModel, FollowsAChangeOfSpeed) {
  StepCostModel m;
  std::mt19937 rng(5);
  for (int i = 0; i < 200; ++i) {
    const StepFeatures f = random_step(rng);
    m.observe(f, truth(f, 0.05, 0.002, 0.0005));
  }
  for (int i = 0; i < 400; ++i) {
    const StepFeatures f = random_step(rng);
    m.observe(f, truth(f, 0.1, 0.004, 0.001));  // twice as slow
  }
  const StepFeatures probe = StepFeatures::chunk(100, 128);
  EXPECT_NEAR(m.predict(probe) / truth(probe, 0.1, 0.004, 0.001), 1.0, 0.01);
}

// One step seen: the fit reproduces it, each term taking a third of its time, so a larger chunk
// is predicted to cost more.
TEST(StepCostModel, OneStepIsReproducedAndScalesWithTokens) {
  StepCostModel m;
  EXPECT_FALSE(m.ready());
  EXPECT_EQ(m.predict(StepFeatures::chunk(0, 10)), 0);
  const StepFeatures f = StepFeatures::chunk(0, 64);
  m.observe(f, 0.5);
  ASSERT_TRUE(m.ready());
  EXPECT_NEAR(m.predict(f), 0.5, 1e-6);
  EXPECT_NEAR(m.c_step(), 0.5 / 3, 1e-6);
  EXPECT_NEAR(m.c_token() * 64, 0.5 / 3, 1e-6);
  EXPECT_GT(m.predict(StepFeatures::chunk(0, 128)), 1.0);
}

TEST(StepCostModel, IgnoresEmptyAndNonFiniteSteps) {
  StepCostModel m;
  m.observe(StepFeatures{}, 1.0);
  m.observe(StepFeatures::chunk(0, 4), std::nan(""));
  m.observe(StepFeatures::chunk(0, 4), -1);
  m.observe(StepFeatures::chunk(0, 4), INFINITY);
  EXPECT_EQ(m.num_observed(), 0);
  EXPECT_FALSE(m.ready());
  StepCostModel f = StepCostModel::fixed(1, 2, 3);
  f.observe(StepFeatures::chunk(0, 4), 100);
  EXPECT_EQ(f.c_token(), 2);
  EXPECT_TRUE(f.ready());
}

TEST(StepBudgetSeconds, FixedAutoAndNone) {
  const StepCostModel m = StepCostModel::fixed(0.01, 0.002, 0);
  const StepFeatures four{4, 40};
  EXPECT_EQ(step_budget_seconds(m, 0.25, kAutoStepFactor, 4, four), 0.25);
  EXPECT_DOUBLE_EQ(step_budget_seconds(m, -1, kAutoStepFactor, 4, four), kAutoStepFactor * (0.01 + 4 * 0.002));
  EXPECT_DOUBLE_EQ(step_budget_seconds(m, -1, 1.5, 4, four), 1.5 * (0.01 + 4 * 0.002));  // --auto-step-factor
  EXPECT_EQ(step_budget_seconds(m, -1, kAutoStepFactor, 0, StepFeatures{}), 0);          // no decode to protect
  EXPECT_EQ(step_budget_seconds(m, 0, kAutoStepFactor, 4, four), 0);
  EXPECT_EQ(step_budget_seconds(StepCostModel{}, 0.25, kAutoStepFactor, 4, four), 0);  // nothing measured yet
}

// Admission's estimate: steps of the chunk the scheduler would grant, each costing the decodes
// plus the chunk. A step costs 16 + 1 per token (units of 1/1024 s).
TEST(PredictPrefillSeconds, StepsOfTheGrantedChunk) {
  const double u = 1.0 / 1024;
  const StepCostModel m = StepCostModel::fixed(16 * u, u, 0);
  // No budget: chunks of 64 - 4 decodes = 60 tokens; 130 tokens take 3 steps of 16 + 4 + 60.
  EXPECT_DOUBLE_EQ(predict_prefill_seconds(m, 0, kAutoStepFactor, 64, 4, 130, 4), 3 * 80 * u);
  // A 56-unit budget: chunks of 56 - 16 - 4 = 36; 100 tokens take 3 steps of 56.
  EXPECT_DOUBLE_EQ(predict_prefill_seconds(m, 56 * u, kAutoStepFactor, 512, 4, 100, 4), 3 * 56 * u);
  // Decodes over the budget: the minimum chunk, 8 tokens a step: 4 steps of 16 + 30 + 8.
  EXPECT_DOUBLE_EQ(predict_prefill_seconds(m, 20 * u, kAutoStepFactor, 512, 8, 32, 30), 4 * 54 * u);
  // A queue shorter than a chunk: one step of the decodes and those tokens.
  EXPECT_DOUBLE_EQ(predict_prefill_seconds(m, 0, kAutoStepFactor, 512, 4, 10, 2), 28 * u);
  EXPECT_EQ(predict_prefill_seconds(m, 0, kAutoStepFactor, 512, 4, 0, 2), 0);
  EXPECT_EQ(predict_prefill_seconds(StepCostModel{}, 0, kAutoStepFactor, 512, 4, 100, 2), 0);  // nothing measured
  // Auto, factor 3: 2 decodes take 18 units, budget 3 x 18 = 54: chunks of 36; 72 tokens, 2 steps of 54.
  EXPECT_DOUBLE_EQ(predict_prefill_seconds(m, -1, 3.0, 512, 4, 72, 2), 2 * 54 * u);
  // Factor 2: budget 36, chunks of 18; 72 tokens, 4 steps of 36.
  EXPECT_DOUBLE_EQ(predict_prefill_seconds(m, -1, 2.0, 512, 4, 72, 2), 4 * 36 * u);
  // A model that prices only attention (a fit from decode steps alone can be one) still prices a
  // queue: each chunk at least its own causal pairs (the model's attention unit is 1024 pairs),
  // 60 x 61 / 2 for 130 tokens in chunks of 60, 10 x 11 / 2 for 10 tokens in one chunk.
  const StepCostModel attn_only = StepCostModel::fixed(0, 0, 1024 * u);
  EXPECT_DOUBLE_EQ(predict_prefill_seconds(attn_only, 0, kAutoStepFactor, 64, 4, 130, 4), 3 * 1830 * u);
  EXPECT_DOUBLE_EQ(predict_prefill_seconds(attn_only, 0, kAutoStepFactor, 512, 4, 10, 2), 55 * u);
}

}  // namespace
}  // namespace pagellm

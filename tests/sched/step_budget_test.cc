// The step-time budget on a fixed cost model: exact chunk sizes for given budgets, decodes
// reserved before any prefill, a long prompt spread over steps, and no starvation of prefill.
#include <gtest/gtest.h>

#include <cmath>

#include "sched/scheduler.h"

namespace pagellm {
namespace {

std::unique_ptr<Request> make(const std::string& id, int n_prompt, double arrival) {
  auto r = std::make_unique<Request>();
  r->request_id = id;
  r->arrival_time = arrival;
  r->prompt_token_ids.assign(n_prompt, 7);
  r->max_tokens = 1000;
  return r;
}

void finish_step(Scheduler& s, const SchedulerOutput& out) {
  std::vector<Request*> sampled;
  for (const auto& g : out.scheduled) {
    if (g.num_logits_rows > 0) sampled.push_back(g.request);
  }
  s.on_step_done(out);
  for (Request* r : sampled) r->output_token_ids.push_back(1);
}

using Grants = std::vector<std::pair<std::string, int64_t>>;
Grants grants(const SchedulerOutput& out) {
  Grants g;
  for (const auto& s : out.scheduled) g.emplace_back(s.request->request_id, s.num_scheduled_tokens);
  return g;
}

// Times in units of 1/1024 s (exact in binary): a step costs 16 units plus 1 per token.
constexpr double kUnit = 1.0 / 1024;

SchedulerLimits limits(double max_step_units, int64_t tokens = 512, int64_t min_chunk = 4) {
  return SchedulerLimits{8, tokens, max_step_units * kUnit, min_chunk};
}

TEST(StepBudget, ChunksFillTheTimeLeftAfterTheDecodes) {
  KvCacheManager kv(1000, 4);
  Scheduler s(limits(56), kv);
  s.set_cost_model(StepCostModel::fixed(16 * kUnit, kUnit, 0));
  s.add_request(make("a", 100, 1));
  // 16 + m <= 56: chunks of 40, 40, then the last 20.
  auto o = s.schedule();
  EXPECT_EQ(grants(o), (Grants{{"a", 40}}));
  EXPECT_DOUBLE_EQ(o.predicted_seconds, 56 * kUnit);
  finish_step(s, o);
  o = s.schedule();
  EXPECT_EQ(grants(o), (Grants{{"a", 40}}));
  finish_step(s, o);
  s.add_request(make("b", 100, 2));
  o = s.schedule();
  EXPECT_EQ(grants(o), (Grants{{"a", 20}, {"b", 20}}));  // b takes the time a's chunk left
  finish_step(s, o);
  o = s.schedule();
  // a decodes: its token is reserved first, then b gets 56 - 16 - 1 = 39.
  EXPECT_EQ(grants(o), (Grants{{"a", 1}, {"b", 39}}));
  EXPECT_DOUBLE_EQ(o.predicted_seconds, 56 * kUnit);
}

// Without a budget (0) or before the model has seen a step, only the token budget counts.
TEST(StepBudget, NoBudgetOrNoMeasurementLeavesTheTokenBudget) {
  KvCacheManager kv(1000, 4);
  Scheduler off(limits(0, 64), kv);
  off.set_cost_model(StepCostModel::fixed(16 * kUnit, kUnit, 0));
  off.add_request(make("a", 100, 1));
  EXPECT_EQ(grants(off.schedule()), (Grants{{"a", 64}}));
  KvCacheManager kv2(1000, 4);
  Scheduler learning(limits(56, 64), kv2);  // a learning model that has observed nothing
  learning.add_request(make("a", 100, 1));
  EXPECT_FALSE(learning.cost_model().ready());
  EXPECT_EQ(grants(learning.schedule()), (Grants{{"a", 64}}));
}

// Decodes run every step while a long prompt is spread over several steps, each within budget.
TEST(StepBudget, LongPromptIsSpreadAndDecodesNeverStall) {
  KvCacheManager kv(1000, 4);
  Scheduler s(limits(56), kv);
  s.set_cost_model(StepCostModel::fixed(16 * kUnit, kUnit, 0));
  for (int i = 0; i < 4; ++i) s.add_request(make("d" + std::to_string(i), 3, i));
  finish_step(s, s.schedule());  // the 4 short prompts: 12 tokens, one step
  s.add_request(make("long", 200, 10));
  int steps = 0;
  while (s.find("long")->output_token_ids.empty()) {
    const auto o = s.schedule();
    const Grants g = grants(o);
    ASSERT_EQ(g.size(), 5u);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(g[i], std::make_pair("d" + std::to_string(i), int64_t{1}));
    EXPECT_LE(o.predicted_seconds, 56 * kUnit);
    EXPECT_EQ(g[4].second, std::min<int64_t>(36, 200 - 36 * steps));  // 56 - 16 - 4 decodes
    finish_step(s, o);
    ++steps;
  }
  EXPECT_EQ(steps, 6);  // ceil(200 / 36)
}

// Decodes alone over the budget: the first prefill chunk still gets min_prefill_chunk tokens
// every step (no starvation), and the prompt after it gets nothing that step.
TEST(StepBudget, PrefillProgressesWhenDecodesFillTheBudget) {
  KvCacheManager kv(1000, 4);
  Scheduler s(limits(20, 512, 4), kv);
  s.set_cost_model(StepCostModel::fixed(16 * kUnit, kUnit, 0));
  for (int i = 0; i < 5; ++i) s.add_request(make("d" + std::to_string(i), 1, i));
  auto o = s.schedule();  // 16 + 1 per prompt token: 4 one-token prompts fit, the fifth does not
  EXPECT_EQ(grants(o), (Grants{{"d0", 1}, {"d1", 1}, {"d2", 1}, {"d3", 1}}));
  finish_step(s, o);
  o = s.schedule();  // 4 decodes fill the budget; d4 is the step's first prefill: its minimum chunk
  EXPECT_EQ(grants(o), (Grants{{"d0", 1}, {"d1", 1}, {"d2", 1}, {"d3", 1}, {"d4", 1}}));
  finish_step(s, o);
  s.add_request(make("p", 10, 20));
  s.add_request(make("q", 10, 21));
  for (const int64_t want : {4, 4, 2}) {
    o = s.schedule();
    Grants g = grants(o);
    ASSERT_FALSE(g.empty());
    EXPECT_GT(o.predicted_seconds, 20 * kUnit);  // the decodes alone are over it
    // Every running decode, then p's minimum chunk; q waits behind p (FCFS).
    EXPECT_EQ(g.back(), std::make_pair(std::string("p"), want));
    for (const auto& [id, n] : g) EXPECT_NE(id, "q");
    finish_step(s, o);
  }
}

// The attention term: chunks shrink as the prompt's position grows. Budget 100 s at 1 s per 1024
// (query, key) pairs: n (n + 1) / 2 <= 102400 from position 0, n p + n (n + 1) / 2 after.
TEST(StepBudget, AttentionCostShrinksLaterChunks) {
  KvCacheManager kv(1000, 4);
  Scheduler s(SchedulerLimits{8, 512, 100.0, 4}, kv);
  s.set_cost_model(StepCostModel::fixed(0, 0, 1.0));
  s.add_request(make("a", 2000, 1));
  auto largest = [](int64_t p) {  // closed form: the root of n^2 + (2p + 1) n - 204800 = 0
    const double b = 2.0 * static_cast<double>(p) + 1;
    return static_cast<int64_t>(std::floor((-b + std::sqrt(b * b + 4 * 204800.0)) / 2));
  };
  EXPECT_EQ(largest(0), 452);
  EXPECT_EQ(largest(452), 187);
  int64_t p = 0;
  for (int step = 0; step < 4; ++step) {
    const auto o = s.schedule();
    ASSERT_EQ(o.scheduled.size(), 1u);
    EXPECT_EQ(o.scheduled[0].num_scheduled_tokens, largest(p)) << "from position " << p;
    EXPECT_LE(o.features.num_attn_pairs, 102400);
    p += o.scheduled[0].num_scheduled_tokens;
    finish_step(s, o);
  }
}

// The automatic budget (max_step_seconds < 0): auto_step_factor x the decodes' own step while
// decodes run, no time limit while none does. a decodes: 16 + 4 = 20 units alone; b, the prompt
// beside it, gets (factor x 20 - 20) / 4 tokens.
TEST(StepBudget, AutoBudgetFollowsTheDecodes) {
  for (const auto& [factor, b_tokens] : {std::pair{3.0, int64_t{10}}, std::pair{2.0, int64_t{5}}}) {
    KvCacheManager kv(1000, 4);
    SchedulerLimits limits{8, 512, -1, 4};
    limits.auto_step_factor = factor;
    Scheduler s(limits, kv);
    s.set_cost_model(StepCostModel::fixed(16 * kUnit, 4 * kUnit, 0));
    s.add_request(make("a", 300, 1));
    auto o = s.schedule();
    EXPECT_EQ(grants(o), (Grants{{"a", 300}}));  // nothing decoding: the token budget alone
    EXPECT_EQ(s.last_step_budget_seconds(), 0);
    finish_step(s, o);
    s.add_request(make("b", 300, 2));
    o = s.schedule();
    EXPECT_EQ(grants(o), (Grants{{"a", 1}, {"b", b_tokens}})) << factor;
    EXPECT_DOUBLE_EQ(s.last_step_budget_seconds(), factor * 20 * kUnit);
  }
}

// A prompt with a better priority runs ahead of a decode in the running order: the decode's
// token is reserved off the token budget, so the prompt's chunks cannot crowd it out (with or
// without a time budget).
TEST(StepBudget, BetterPriorityPrefillDoesNotCrowdOutADecode) {
  KvCacheManager kv(1000, 4);
  Scheduler s(SchedulerLimits{8, 8}, kv);
  s.add_request(make("d", 3, 1));
  finish_step(s, s.schedule());
  auto p = make("p", 100, 2);
  p->priority = -1;
  s.add_request(std::move(p));
  auto o = s.schedule();
  EXPECT_EQ(grants(o), (Grants{{"d", 1}, {"p", 7}}));
  finish_step(s, o);
  for (int step = 0; step < 3; ++step) {
    o = s.schedule();
    EXPECT_EQ(grants(o), (Grants{{"p", 7}, {"d", 1}})) << step;  // p first (priority), d still decodes
    finish_step(s, o);
  }
}

// The step's features are what its grants compute.
TEST(StepBudget, StepFeaturesCountTokensAndAttentionPairs) {
  EXPECT_EQ(StepFeatures::chunk(0, 4).num_attn_pairs, 1 + 2 + 3 + 4);
  EXPECT_EQ(StepFeatures::chunk(10, 1).num_attn_pairs, 11);  // a decode at position 10 reads 11 keys
  KvCacheManager kv(1000, 4);
  Scheduler s(SchedulerLimits{8, 512}, kv);
  s.add_request(make("a", 5, 1));
  s.add_request(make("b", 3, 2));
  const auto o = s.schedule();
  EXPECT_EQ(o.features.num_tokens, 8);
  EXPECT_EQ(o.features.num_attn_pairs, 15 + 6);
}

}  // namespace
}  // namespace pagellm

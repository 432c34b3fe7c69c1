// Multi-token steps (issue 13 item 4): speculative tails are not hashed into the prefix cache
// until accepted, rejected tokens are rolled back, and logits rows per scheduled sequence.
#include <gtest/gtest.h>

#include <numeric>

#include "sched/scheduler.h"

namespace pagellm {
namespace {

std::unique_ptr<Request> make(const std::string& id, std::vector<int32_t> prompt, double arrival) {
  auto r = std::make_unique<Request>();
  r->request_id = id;
  r->arrival_time = arrival;
  r->prompt_token_ids = std::move(prompt);
  r->max_tokens = 100;
  r->prefix_root_hash = KvCacheManager::root_hash("");
  return r;
}

std::vector<int32_t> iota_tokens(int n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), 10);
  return t;
}

// A verify step computes 1 + 3 tokens of which 3 are proposals (Request::spec_token_ids): only
// blocks of final tokens are hashed. Two proposals are rejected and rolled back; the next step
// hashes the accepted one.
TEST(SchedulerSpec, SpeculativeTailIsHashedOnlyOnceAccepted) {
  KvCacheManager kv(100, 4, true);
  Scheduler s({8, 100}, kv);
  const uint64_t root = KvCacheManager::root_hash("");
  s.add_request(make("a", iota_tokens(6), 1));
  SchedulerOutput o1 = s.schedule();
  s.on_step_done(o1);
  Request& a = *s.find("a");
  EXPECT_EQ(kv.num_hashed_blocks("a"), 1);
  // Position 6: the sampled token; 7, 8, 9: proposals.
  a.output_token_ids = {50};
  a.spec_token_ids = {51, 52, 53};
  SchedulerOutput o2 = s.schedule();
  ASSERT_EQ(o2.scheduled.size(), 1u);
  ASSERT_EQ(o2.scheduled[0].num_scheduled_tokens, 4);
  EXPECT_EQ(o2.scheduled[0].num_spec_tokens, 3);
  EXPECT_EQ(o2.scheduled[0].num_logits_rows, 4);
  s.on_step_done(o2);
  EXPECT_EQ(a.num_computed_tokens, 10);
  EXPECT_EQ(kv.num_hashed_blocks("a"), 1);  // block 1 = positions 4..7; 7 is still a proposal
  EXPECT_EQ(kv.find_cached_prefix(a.all_token_ids(), root).num_tokens, 4);
  // The verifier accepts 51, rejects 52 and 53, and samples 60 at position 8.
  s.roll_back(a, 2);
  a.spec_token_ids.clear();
  a.output_token_ids = {50, 51, 60};
  EXPECT_EQ(a.num_computed_tokens, 8);
  EXPECT_EQ(kv.block_table("a").size(), 2u);  // the block of positions 8..11 is released
  EXPECT_EQ(kv.pool().num_free_blocks(), 98);
  SchedulerOutput o3 = s.schedule();
  ASSERT_EQ(o3.scheduled.size(), 1u);
  EXPECT_EQ(o3.scheduled[0].num_scheduled_tokens, 1);
  s.on_step_done(o3);
  EXPECT_EQ(kv.num_hashed_blocks("a"), 2);  // positions 0..7 are final now
  // A new request with the accepted prefix hits both full blocks.
  const std::vector<int32_t> probe = a.all_token_ids();
  EXPECT_EQ(kv.find_cached_prefix(probe, root).blocks,
            (std::vector<int32_t>{kv.block_table("a")[0], kv.block_table("a")[1]}));
  s.finish_request("a", RequestStatus::kFinishedStopped);
  EXPECT_EQ(kv.pool().num_free_blocks(), 100);
}

TEST(SchedulerSpec, WithoutSpeculativeTokensHashingIsUnchanged) {
  KvCacheManager kv(100, 4, true);
  Scheduler s({8, 100}, kv);
  s.add_request(make("a", iota_tokens(6), 1));
  s.on_step_done(s.schedule());
  s.find("a")->output_token_ids = {50, 51, 52, 53};
  s.on_step_done(s.schedule());  // 10 computed tokens, all final
  EXPECT_EQ(kv.num_hashed_blocks("a"), 2);
}

// Draft tokens ride on a decode out of what the token budget leaves after every decode's own
// token; they never push a decode out, and a prefill chunk gets what they leave.
TEST(SchedulerSpec, DraftTokensTakeOnlyWhatTheTokenBudgetLeaves) {
  KvCacheManager kv(100, 4, false);
  Scheduler s({8, 6}, kv);
  s.add_request(make("a", iota_tokens(3), 1));
  s.add_request(make("b", iota_tokens(3), 2));
  s.on_step_done(s.schedule());
  for (const char* id : {"a", "b"}) s.find(id)->output_token_ids = {50};
  s.find("a")->spec_token_ids = {1, 2, 3, 4, 5, 6, 7};
  s.add_request(make("c", iota_tokens(20), 3));
  const SchedulerOutput o = s.schedule();
  ASSERT_EQ(o.scheduled.size(), 2u);  // nothing is left for c's prefill
  EXPECT_EQ(s.num_waiting(), 1);
  EXPECT_EQ(o.scheduled[0].num_scheduled_tokens, 5);  // 1 + 4 drafts: 6 - b's decode token
  EXPECT_EQ(o.scheduled[0].num_spec_tokens, 4);
  EXPECT_EQ(o.scheduled[0].num_logits_rows, 5);
  EXPECT_EQ(o.scheduled[1].num_scheduled_tokens, 1);
  EXPECT_EQ(o.scheduled[1].num_logits_rows, 1);
  EXPECT_EQ(o.num_scheduled_tokens, 6);
  EXPECT_EQ(o.features.num_tokens, 6);
}

// With a time budget the drafts get what the predicted time leaves: never forced.
TEST(SchedulerSpec, DraftTokensFitTheStepTimeBudget) {
  KvCacheManager kv(100, 4, false);
  Scheduler s({8, 100, 0.010, 1}, kv);
  s.set_cost_model(StepCostModel::fixed(0.004, 0.001, 0));  // 4 ms + 1 ms per token
  s.add_request(make("a", iota_tokens(3), 1));
  s.on_step_done(s.schedule());
  Request& a = *s.find("a");
  a.output_token_ids = {50};
  a.spec_token_ids = std::vector<int32_t>(10, 7);
  const SchedulerOutput o = s.schedule();
  ASSERT_EQ(o.scheduled.size(), 1u);
  EXPECT_EQ(o.scheduled[0].num_spec_tokens, 5);  // 4 + 1 + 5 = 10 ms
  EXPECT_LE(o.predicted_seconds, 0.010 + 1e-12);
}

}  // namespace
}  // namespace pagellm

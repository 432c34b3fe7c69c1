// Exact scheduler behaviour on tiny pools: grants, chunked prefill, FCFS and priority order,
// preemption by recompute, and block accounting.
#include "sched/scheduler.h"

#include <gtest/gtest.h>

namespace pagellm {
namespace {

std::unique_ptr<Request> make(const std::string& id, int n_prompt, double arrival, int32_t priority = 0) {
  auto r = std::make_unique<Request>();
  r->request_id = id;
  r->arrival_time = arrival;
  r->priority = priority;
  r->prompt_token_ids.assign(n_prompt, 7);
  r->max_tokens = 100;
  return r;
}

// Simulates the engine: after a step, every request whose chunk reached its end gets one token.
void finish_step(Scheduler& s, const SchedulerOutput& out) {
  std::vector<Request*> sampled;
  for (const auto& g : out.scheduled) {
    if (g.num_logits_rows > 0) sampled.push_back(g.request);
  }
  s.on_step_done(out);
  for (Request* r : sampled) r->output_token_ids.push_back(1);
}

std::vector<std::pair<std::string, int64_t>> grants(const SchedulerOutput& out) {
  std::vector<std::pair<std::string, int64_t>> g;
  for (const auto& s : out.scheduled) g.emplace_back(s.request->request_id, s.num_scheduled_tokens);
  return g;
}

using Grants = std::vector<std::pair<std::string, int64_t>>;

TEST(Scheduler, ChunkedPrefillUnderTokenBudgetThenDecodesFirst) {
  KvCacheManager kv(100, 4);
  Scheduler s({8, 10}, kv);
  s.add_request(make("a", 7, 1));
  s.add_request(make("b", 6, 2));
  auto o1 = s.schedule();
  EXPECT_EQ(grants(o1), (Grants{{"a", 7}, {"b", 3}}));  // b gets the rest of the budget
  EXPECT_EQ(o1.scheduled[0].num_logits_rows, 1);
  EXPECT_EQ(o1.scheduled[1].num_logits_rows, 0);
  finish_step(s, o1);
  auto o2 = s.schedule();
  EXPECT_EQ(grants(o2), (Grants{{"a", 1}, {"b", 3}}));  // a decodes, b finishes its prompt
  finish_step(s, o2);
  auto o3 = s.schedule();
  EXPECT_EQ(grants(o3), (Grants{{"a", 1}, {"b", 1}}));
  EXPECT_EQ(kv.block_table("a").size(), 3u);  // 9 tokens in blocks of 4
  EXPECT_EQ(kv.block_table("b").size(), 2u);  // 7 tokens
}

TEST(Scheduler, MaxNumSeqsCapsRunning) {
  KvCacheManager kv(100, 4);
  Scheduler s({2, 100}, kv);
  for (int i = 0; i < 3; ++i) s.add_request(make("r" + std::to_string(i), 3, i));
  auto o = s.schedule();
  EXPECT_EQ(grants(o), (Grants{{"r0", 3}, {"r1", 3}}));
  EXPECT_EQ(s.waiting_ids(), std::vector<std::string>{"r2"});
  finish_step(s, o);
  s.finish_request("r0", RequestStatus::kFinishedStopped);
  EXPECT_EQ(grants(s.schedule()), (Grants{{"r1", 1}, {"r2", 3}}));
}

TEST(Scheduler, ForkSeatsCountAgainstMaxNumSeqs) {
  KvCacheManager kv(100, 4);
  Scheduler s({3, 100}, kv);
  s.add_request(make("a", 3, 1));
  auto lead = make("lead", 3, 2);
  lead->num_fork_seats = 2;  // an n = 3 leader: needs 3 seats
  s.add_request(std::move(lead));
  s.add_request(make("b", 3, 3));
  auto o1 = s.schedule();
  EXPECT_EQ(grants(o1), (Grants{{"a", 3}}));  // lead does not fit beside a; b does not overtake
  EXPECT_EQ(s.num_seats_taken(), 1);
  finish_step(s, o1);
  s.finish_request("a", RequestStatus::kFinishedStopped);
  auto o2 = s.schedule();
  EXPECT_EQ(grants(o2), (Grants{{"lead", 3}}));  // its 2 reserved seats keep b out
  EXPECT_EQ(s.num_running(), 1);
  EXPECT_EQ(s.num_seats_taken(), 3);
  EXPECT_EQ(s.waiting_ids(), std::vector<std::string>{"b"});
}

TEST(Scheduler, PriorityOrderThenFcfs) {
  KvCacheManager kv(100, 4);
  Scheduler s({8, 100}, kv);
  s.add_request(make("late-urgent", 2, 5, -1));
  s.add_request(make("early", 2, 1, 0));
  s.add_request(make("mid", 2, 3, 0));
  s.add_request(make("lazy", 2, 0, 3));
  EXPECT_EQ(s.waiting_ids(), (std::vector<std::string>{"late-urgent", "early", "mid", "lazy"}));
  auto o = s.schedule();
  EXPECT_EQ(grants(o), (Grants{{"late-urgent", 2}, {"early", 2}, {"mid", 2}, {"lazy", 2}}));
}

// The prefill backlog as admission sees it: every running prompt's tokens left (running chunks
// come before any admission), the waiting ones by priority; decodes count nowhere. Checked
// against what the scheduler then does: a new priority -1 request goes before the priority 0
// and 3 backlog, but after the running chunk.
TEST(Scheduler, PrefillBacklogIsRunningThenWaitingByPriority) {
  KvCacheManager kv(100, 4);
  Scheduler s({8, 10}, kv);
  s.add_request(make("dec", 2, 0));
  finish_step(s, s.schedule());  // dec decodes from now on
  s.add_request(make("run", 30, 1));
  finish_step(s, s.schedule());  // run: 9 of 30 computed (dec took 1 token)
  s.add_request(make("w0", 5, 2, 0));
  s.add_request(make("w3", 7, 3, 3));
  const PrefillBacklog b = s.prefill_backlog();
  EXPECT_EQ(b.running, 21);
  EXPECT_EQ(b.waiting_by_priority, (std::map<int32_t, int64_t>{{0, 5}, {3, 7}}));
  EXPECT_EQ(b.ahead_of(-1), 21);
  EXPECT_EQ(b.ahead_of(0), 26);
  EXPECT_EQ(b.ahead_of(2), 26);
  EXPECT_EQ(b.ahead_of(3), 33);
  EXPECT_EQ(b.total(), 33);
  EXPECT_EQ(s.num_prefill_tokens_left(), 33);
  s.add_request(make("urgent", 3, 4, -1));
  EXPECT_EQ(s.waiting_ids(), (std::vector<std::string>{"urgent", "w0", "w3"}));
  EXPECT_EQ(grants(s.schedule()), (Grants{{"dec", 1}, {"run", 9}}));  // the running chunk first
}

TEST(Scheduler, WaitingRequestDoesNotOvertakeOrPreempt) {
  KvCacheManager kv(3, 4);
  Scheduler s({8, 100}, kv);
  s.add_request(make("a", 8, 1));    // 2 blocks
  s.add_request(make("big", 8, 2));  // needs 2, only 1 left
  s.add_request(make("small", 2, 3));
  auto o = s.schedule();
  EXPECT_EQ(grants(o), (Grants{{"a", 8}}));  // FCFS: small does not jump ahead of big
  EXPECT_EQ(s.waiting_ids(), (std::vector<std::string>{"big", "small"}));
  EXPECT_EQ(kv.pool().num_free_blocks(), 1);
}

// Pool of 4 blocks of 4 tokens: a (7 tokens) and b (8 tokens) fill it; when a needs a third block,
// the latest running request (b) is preempted, its blocks freed, and it returns to the waiting
// queue ahead of later arrivals; it resumes by recompute of prompt + generated tokens.
TEST(Scheduler, PreemptsLatestByRecomputeAndResumes) {
  KvCacheManager kv(4, 4);
  Scheduler s({8, 100}, kv);
  s.add_request(make("a", 7, 1));
  s.add_request(make("b", 7, 2));
  auto o1 = s.schedule();
  EXPECT_EQ(grants(o1), (Grants{{"a", 7}, {"b", 7}}));
  finish_step(s, o1);      // a, b: 8 tokens each, 7 computed
  auto o2 = s.schedule();  // both decode token 8: fits (2 blocks each)
  EXPECT_EQ(grants(o2), (Grants{{"a", 1}, {"b", 1}}));
  finish_step(s, o2);  // 9 tokens each: a needs a 3rd block, none free
  s.add_request(make("c", 1, 3));
  auto o3 = s.schedule();
  EXPECT_EQ(o3.preempted, std::vector<std::string>{"b"});
  EXPECT_EQ(grants(o3), (Grants{{"a", 1}}));  // no admission in a step that preempted
  EXPECT_EQ(s.waiting_ids(), (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(s.num_preemptions(), 1);
  Request* b = s.find("b");
  EXPECT_EQ(b->num_computed_tokens, 0);
  EXPECT_EQ(b->num_tokens(), 9);  // prompt 7 + 2 generated, all to be recomputed
  EXPECT_TRUE(kv.block_table("b").empty());
  EXPECT_EQ(kv.block_table("a"), (std::vector<int32_t>{0, 1, 3}));  // b released its tail block 3 first
  finish_step(s, o3);
  s.finish_request("a", RequestStatus::kFinishedLength);
  auto o4 = s.schedule();
  EXPECT_EQ(grants(o4), (Grants{{"b", 9}, {"c", 1}}));
  EXPECT_EQ(o4.scheduled[0].num_logits_rows, 1);
}

TEST(Scheduler, PreemptsItselfWhenItIsTheWorst) {
  KvCacheManager kv(2, 4);
  Scheduler s({8, 100}, kv);
  s.add_request(make("a", 4, 1));
  s.add_request(make("b", 3, 2));
  auto o1 = s.schedule();
  finish_step(s, o1);  // a: 5 tokens (needs 2 blocks), b: 4 tokens
  auto o2 = s.schedule();
  // a needs a second block: b (the worst) is preempted; then a fits.
  EXPECT_EQ(o2.preempted, std::vector<std::string>{"b"});
  EXPECT_EQ(grants(o2), (Grants{{"a", 1}}));
  finish_step(s, o2);
  for (int i = 0; i < 3; ++i) finish_step(s, s.schedule());  // a grows to 9 tokens: 3 blocks > pool
  EXPECT_EQ(kv.block_table("a").size(), 2u);
  auto o3 = s.schedule();
  EXPECT_EQ(o3.preempted, std::vector<std::string>{"a"});  // alone and still too big
  EXPECT_TRUE(o3.scheduled.empty());
  EXPECT_EQ(kv.pool().num_free_blocks(), 2);
}

TEST(Scheduler, FinishFreesBlocksAtOnce) {
  KvCacheManager kv(4, 4);
  Scheduler s({8, 100}, kv);
  s.add_request(make("a", 9, 1));
  finish_step(s, s.schedule());
  EXPECT_EQ(kv.pool().num_free_blocks(), 1);
  auto r = s.finish_request("a", RequestStatus::kFinishedAborted);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->status, RequestStatus::kFinishedAborted);
  EXPECT_EQ(kv.pool().num_free_blocks(), 4);
  EXPECT_FALSE(s.has_work());
  EXPECT_EQ(s.finish_request("a", RequestStatus::kFinishedAborted), nullptr);
}

}  // namespace
}  // namespace pagellm

namespace pagellm {
namespace {

std::unique_ptr<Request> make_tokens(const std::string& id, std::vector<int32_t> prompt, double arrival) {
  auto r = make(id, 1, arrival);
  r->prompt_token_ids = std::move(prompt);
  r->prefix_root_hash = KvCacheManager::root_hash("");
  return r;
}

std::vector<int32_t> iota_tokens(int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 10 + i;
  return t;
}

// Two identical prompts admitted in the same step: the second must not hit blocks the first has
// not computed yet; a third admitted a step later hits them.
TEST(SchedulerPrefix, NoHitsOnBlocksFilledInTheSameStep) {
  KvCacheManager kv(100, 4, true);
  Scheduler s({8, 100}, kv);
  s.add_request(make_tokens("a", iota_tokens(10), 1));
  s.add_request(make_tokens("b", iota_tokens(10), 2));
  auto o1 = s.schedule();
  EXPECT_EQ(grants(o1), (Grants{{"a", 10}, {"b", 10}}));
  EXPECT_EQ(s.find("b")->num_cached_tokens, 0);
  finish_step(s, o1);
  EXPECT_EQ(s.prefix_cache_hits(), 0);
  s.add_request(make_tokens("c", iota_tokens(10), 3));
  auto o2 = s.schedule();
  EXPECT_EQ(grants(o2), (Grants{{"a", 1}, {"b", 1}, {"c", 2}}));  // c computes only 10 - 8
  EXPECT_EQ(s.find("c")->num_cached_tokens, 8);
  EXPECT_EQ(kv.block_table("c")[0], kv.block_table("a")[0]);
  EXPECT_EQ(kv.block_table("c")[1], kv.block_table("a")[1]);
  EXPECT_EQ(kv.pool().ref_cnt(kv.block_table("a")[0]), 2);  // a and c; b's duplicates stay uncached
  EXPECT_EQ(s.prefix_cache_queries(), 30);
  EXPECT_EQ(s.prefix_cache_hits(), 8);
}

// A preempted request comes back through the prefix cache: its own freed blocks are hits.
TEST(SchedulerPrefix, PreemptedRequestResumesFromTheCache) {
  KvCacheManager kv(5, 4, true);
  Scheduler s({8, 100}, kv);
  s.add_request(make_tokens("a", iota_tokens(8), 1));
  s.add_request(make_tokens("b", iota_tokens(11), 2));
  finish_step(s, s.schedule());  // a: 9 tokens (3 blocks needed next), b: 12 tokens (3 blocks)
  auto o = s.schedule();         // a needs a 3rd block: b is preempted
  EXPECT_EQ(o.preempted, std::vector<std::string>{"b"});
  finish_step(s, o);
  s.finish_request("a", RequestStatus::kFinishedStopped);
  auto o2 = s.schedule();
  ASSERT_EQ(o2.scheduled.size(), 1u);
  EXPECT_EQ(o2.scheduled[0].request->request_id, "b");
  EXPECT_EQ(o2.scheduled[0].num_scheduled_tokens, 12 - 8);  // 2 of b's own blocks were cached
  EXPECT_EQ(s.find("b")->num_cached_tokens, 0);             // reported for the first admission only
}

}  // namespace
}  // namespace pagellm

// Randomised stress of the engine's KV accounting: thousands of add / step / abort operations with
// shared prefixes, n > 1 groups, prefix caching and a pool small enough to preempt. After every
// step: each block's ref_cnt equals the number of block tables holding it, no block is both free
// and held, free + held = all; when idle every block is free.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "engine/engine_core.h"
#include "test_util.h"

namespace pagellm {
namespace {

void check_invariants(EngineCore& core, int step) {
  KvCacheManager& kv = core.llm().kv_manager();
  const BlockPool& pool = kv.pool();
  std::vector<int> holders(static_cast<size_t>(pool.num_blocks()), 0);
  std::vector<std::string> ids = core.scheduler().running_ids();
  for (const std::string& w : core.scheduler().waiting_ids()) ids.push_back(w);
  int64_t tables = 0;
  for (const std::string& id : ids) {
    const auto& t = kv.block_table(id);
    tables += !t.empty();
    for (int32_t b : t) ++holders[b];
  }
  ASSERT_EQ(tables, kv.num_requests()) << "a block table outlived its request, step " << step;
  int held = 0;
  for (int32_t b = 0; b < pool.num_blocks(); ++b) {
    ASSERT_EQ(holders[b], pool.ref_cnt(b)) << "block " << b << " at step " << step;
    held += holders[b] > 0;
  }
  for (int32_t b : pool.free_queue()) ASSERT_EQ(holders[b], 0) << "block " << b << " free and held";
  ASSERT_EQ(held + pool.num_free_blocks(), pool.num_blocks());
}

// speculative: n-gram drafts on every decode (fixed k = 3), so verify steps roll back rejected
// tokens between the adds, aborts and preemptions.
void run_stress(bool speculative) {
  EngineConfig c;
  c.model_path = test::source_dir() + "/models/stories260K-f32.gguf";
  c.num_threads = 1;
  c.block_size = 4;
  c.speculative_ngram = speculative;
  c.speculative_adaptive = false;
  c.num_speculative_tokens = 3;
  LLM probe(c);
  c.kv_cache_bytes = probe.kv_cache().shape().bytes_per_token() * 4 * 32;  // 32 blocks of 4 tokens
  LLM llm(c);
  EngineCore core(llm, {6, 24});
  std::mt19937 rng(2024);
  std::vector<std::vector<int32_t>> families;
  for (int f = 0; f < 3; ++f) {
    std::vector<int32_t> p{1};
    for (int i = 0; i < 16; ++i) p.push_back(3 + static_cast<int32_t>(rng() % 500));
    families.push_back(p);
  }
  std::set<std::string> live;
  int next_id = 0, preemptions_seen = 0;
  for (int step = 0; step < 2500; ++step) {
    const unsigned op = rng() % 10;
    if (op < 3 && live.size() < 12) {
      std::vector<int32_t> prompt = families[rng() % families.size()];
      prompt.resize(1 + rng() % prompt.size());
      for (unsigned k = rng() % 6; k > 0; --k) prompt.push_back(3 + static_cast<int32_t>(rng() % 500));
      const int n = 1 + static_cast<int>(rng() % 3);
      const std::string group = "g" + std::to_string(next_id);
      for (int j = 0; j < n; ++j) {
        EngineRequest r;
        r.request_id = "r" + std::to_string(next_id++);
        r.prompt_token_ids = prompt;
        r.sampling.temperature = 1.0f;
        r.sampling.seed = rng();
        r.max_tokens = 1 + static_cast<int32_t>(rng() % 24);
        r.ignore_eos = true;
        if (n > 1) {
          r.parallel_group = group;
          r.parallel_group_size = n;
        }
        core.add_request(r);
        live.insert(r.request_id);
      }
    } else if (op < 4 && !live.empty()) {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      core.abort_request(*it);
      live.erase(it);
    } else {
      for (const EngineCoreOutput& o : core.step()) {
        if (o.finished) live.erase(o.request_id);
      }
    }
    check_invariants(core, step);
    if (::testing::Test::HasFatalFailure()) return;
    preemptions_seen = static_cast<int>(core.scheduler().num_preemptions());
  }
  while (core.has_work()) {
    for (const EngineCoreOutput& o : core.step()) {
      if (o.finished) live.erase(o.request_id);
    }
    check_invariants(core, -1);
  }
  EXPECT_TRUE(live.empty());
  EXPECT_GT(preemptions_seen, 0);
  EXPECT_GT(core.scheduler().prefix_cache_hits(), 0);
  EXPECT_EQ(llm.kv_manager().pool().num_free_blocks(), llm.kv_cache().num_blocks());
  EXPECT_EQ(llm.kv_manager().num_requests(), 0);
  if (speculative) {
    const SpecDecodeCounters& spec = core.counters().spec;
    EXPECT_GT(spec.num_accepted_tokens, 0);
    EXPECT_LT(spec.num_accepted_tokens, spec.num_draft_tokens);  // rejections were rolled back
  }
}

TEST(KvStress, RandomAddStepAbortWithSharingAndPreemption) { run_stress(false); }

TEST(KvStress, RandomAddStepAbortWithSpeculativeRollback) { run_stress(true); }

}  // namespace
}  // namespace pagellm

// n > 1: the prompt is computed once, the choices share its blocks and diverge by copy-on-write
// of the last partial block; each choice equals the same request run alone.
#include <gtest/gtest.h>

#include <map>

#include "engine/engine_core.h"
#include "engine/text_engine.h"
#include "test_util.h"

namespace pagellm {
namespace {

std::unique_ptr<LLM> load() {
  EngineConfig c;
  c.model_path = test::source_dir() + "/models/stories260K-f32.gguf";
  c.num_threads = 2;
  c.enable_prefix_caching = false;  // sharing must come from the fork, not the cache
  return std::make_unique<LLM>(c);
}

EngineRequest choice(const std::string& id, const std::vector<int32_t>& prompt, uint64_t seed) {
  EngineRequest r;
  r.request_id = id;
  r.prompt_token_ids = prompt;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = seed;
  r.max_tokens = 20;
  r.ignore_eos = true;
  r.need_cumulative_logprob = true;
  return r;
}

struct Out {
  std::vector<int32_t> ids;
  std::string text;
  double cumulative_logprob = 0;
  int32_t cached = 0;
};

std::map<std::string, Out> run(test::TextEngine& core, int32_t* peak_used_blocks = nullptr) {
  std::map<std::string, Out> res;
  while (core.has_work()) {
    for (const RequestOutput& o : core.step()) {
      Out& r = res[o.request_id];
      r.ids.insert(r.ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      r.text += o.delta_text;
      if (o.finished) {
        r.cumulative_logprob = o.cumulative_logprob;
        r.cached = o.num_cached_tokens;
      }
    }
    if (peak_used_blocks) {
      const BlockPool& p = core.llm().kv_manager().pool();
      *peak_used_blocks = std::max(*peak_used_blocks, p.num_blocks() - p.num_free_blocks());
    }
  }
  return res;
}

TEST(ParallelSampling, ForkedChoicesEqualSeparateRunsAndShareThePrompt) {
  std::vector<int32_t> prompt{1};
  for (int i = 0; i < 40; ++i) prompt.push_back(3 + (i * 53) % 500);  // 41 tokens: 2 full blocks + 9
  auto llm = load();
  std::map<std::string, Out> alone;
  {
    test::TextEngine core(*llm, {8, 512});
    for (int i = 0; i < 4; ++i) core.add_request(choice("a" + std::to_string(i), prompt, 100 + i));
    alone = run(core);
  }
  test::TextEngine core(*llm, {8, 512});
  for (int i = 0; i < 4; ++i) {
    EngineRequest r = choice("g" + std::to_string(i), prompt, 100 + i);
    r.parallel_group = "cmpl-1";
    r.parallel_group_size = 4;
    core.add_request(r);
  }
  int32_t peak = 0;
  const auto grouped = run(core, &peak);
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    const Out& g = grouped.at("g" + std::to_string(i));
    const Out& a = alone.at("a" + std::to_string(i));
    EXPECT_EQ(g.ids, a.ids);
    EXPECT_EQ(g.text, a.text);
    EXPECT_EQ(g.cumulative_logprob, a.cumulative_logprob);
    EXPECT_LT(g.cumulative_logprob, 0.0);
    EXPECT_EQ(g.cached, i == 0 ? 0 : 41);
  }
  // The prompt was computed once: 41 positions in steps that did not sample, but the last one
  // (prompt_tokens counts computed tokens that yielded no new token; decode steps count 0).
  EXPECT_EQ(core.counters().prompt_tokens, 41 - 1);
  // Memory: 4 separate choices would hold 4 x ceil(60/16) = 16 blocks at the end; shared: the 2
  // full prompt blocks once + per choice its copied partial block and its next block.
  EXPECT_LE(peak, 2 + 4 * 2);
  EXPECT_EQ(llm->kv_manager().pool().num_free_blocks(), llm->kv_cache().num_blocks());
}

TEST(ParallelSampling, AbortingTheLeaderBeforeItsFirstTokenPromotesAMember) {
  auto llm = load();
  test::TextEngine core(*llm, {8, 8});  // prompt of 30 tokens takes 4 steps of 8
  std::vector<int32_t> prompt(30, 7);
  prompt[0] = 1;
  for (int i = 0; i < 3; ++i) {
    EngineRequest r = choice("m" + std::to_string(i), prompt, 7 + i);
    r.parallel_group = "grp";
    r.parallel_group_size = 3;
    core.add_request(r);
  }
  core.step();
  auto out = core.abort_request("m0");
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->finish_reason, "abort");
  const auto res = run(core);
  EXPECT_EQ(res.at("m1").ids.size(), 20u);
  EXPECT_EQ(res.at("m2").ids.size(), 20u);
  EXPECT_EQ(res.count("m0"), 0u);
  EXPECT_EQ(llm->kv_manager().pool().num_free_blocks(), llm->kv_cache().num_blocks());
}

// --max-num-seqs holds for n > 1: a group's leader is admitted only with a seat for every member
// that forks from it (at most max_num_seqs - 1); members beyond that stay a group with a new
// leader. Each request, grouped or not, gives the tokens it gives alone (greedy).
TEST(ParallelSampling, GroupsStayWithinMaxNumSeqs) {
  auto llm = load();
  std::vector<int32_t> prompt{1};
  for (int i = 0; i < 20; ++i) prompt.push_back(3 + (i * 37) % 400);
  auto greedy = [&](const std::string& id, const std::vector<int32_t>& p) {
    EngineRequest r = choice(id, p, 1);
    r.sampling.temperature = 0.0f;
    r.max_tokens = 12;
    return r;
  };
  std::vector<int32_t> other = prompt;
  other[3] = 9;
  std::map<std::string, Out> alone;
  {
    test::TextEngine core(*llm, {8, 512});
    core.add_request(greedy("solo-group", prompt));
    core.add_request(greedy("solo-other", other));
    alone = run(core);
  }
  for (int32_t cap : {1, 2, 3}) {
    SCOPED_TRACE(cap);
    test::TextEngine core(*llm, {cap, 512});
    core.add_request(greedy("x0", other));
    for (int i = 0; i < 4; ++i) {
      EngineRequest r = greedy("g" + std::to_string(i), prompt);
      r.parallel_group = "cmpl-cap";
      r.parallel_group_size = 4;
      core.add_request(r);
    }
    core.add_request(greedy("x1", other));
    std::map<std::string, Out> res;
    int64_t peak_running = 0;
    while (core.has_work()) {
      for (const RequestOutput& o : core.step()) {
        Out& r = res[o.request_id];
        r.ids.insert(r.ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        if (o.finished) r.cached = o.num_cached_tokens;
      }
      peak_running = std::max(peak_running, core.scheduler().num_running());
      ASSERT_LE(core.scheduler().num_running(), cap);
    }
    EXPECT_EQ(peak_running, cap);
    ASSERT_EQ(res.size(), 6u);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(res.at("g" + std::to_string(i)).ids, alone.at("solo-group").ids) << i;
    EXPECT_EQ(res.at("x0").ids, alone.at("solo-other").ids);
    EXPECT_EQ(res.at("x1").ids, alone.at("solo-other").ids);
    // Leaders of each sub-group of at most `cap` compute the prompt; the others share it.
    int shared = 0;
    for (int i = 0; i < 4; ++i) shared += res.at("g" + std::to_string(i)).cached == 21 ? 1 : 0;
    EXPECT_EQ(shared, 4 - (4 + cap - 1) / cap);
    EXPECT_EQ(llm->kv_manager().pool().num_free_blocks(), llm->kv_cache().num_blocks());
  }
}

}  // namespace
}  // namespace pagellm

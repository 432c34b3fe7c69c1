// The step-time budget end to end on stories260K: the learned cost model sizes the chunks, the
// outputs are the tokens each request gets alone (chunking never changes the bits), and every
// step is measured.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/engine_core.h"
#include "test_util.h"

namespace pagellm {
namespace {

std::unique_ptr<LLM> load() {
  EngineConfig c;
  c.model_path = test::source_dir() + "/models/stories260K-f32.gguf";
  c.num_threads = 2;
  return std::make_unique<LLM>(c);
}

EngineRequest greedy(const std::string& id, std::vector<int32_t> prompt, int32_t max_tokens) {
  EngineRequest r;
  r.request_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

std::map<std::string, std::vector<int32_t>> run_all(EngineCore& core) {
  std::map<std::string, std::vector<int32_t>> out;
  for (int guard = 0; core.has_work() && guard < 100000; ++guard) {
    for (const EngineCoreOutput& o : core.step()) {
      auto& ids = out[o.request_id];
      ids.insert(ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
  }
  return out;
}

TEST(StepBudgetEngine, TinyBudgetSpreadsPromptsAndKeepsTheTokens) {
  std::mt19937 rng(9);
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p{1};
    const int n = 20 + static_cast<int>(rng() % 60);
    while (static_cast<int>(p.size()) < n) p.push_back(3 + static_cast<int32_t>(rng() % 509));
    reqs.push_back(greedy("r" + std::to_string(i), p, 12));
  }
  std::map<std::string, std::vector<int32_t>> alone;
  {
    auto solo = load();
    EngineCore core(*solo, SchedulerLimits{1, 512});
    for (const auto& r : reqs) {
      core.add_request(r);
      alone.merge(run_all(core));
    }
  }
  // A budget no step can meet: after the first (measured) step, each step's first prefill chunk
  // is its minimum, 8 tokens, and later prompts wait.
  auto llm = load();  // its own prefix cache: every prompt token is computed
  EngineCore core(*llm, SchedulerLimits{8, 512, 1e-9, 8});
  core.add_request(greedy("warm-up", {1, 5, 6}, 2));  // step 1 is not fitted (page-in), step 2 is
  core.step();
  core.step();
  ASSERT_TRUE(core.scheduler().cost_model().ready());
  for (const auto& r : reqs) core.add_request(r);
  int64_t steps = 0, prompt_tokens = 0;
  for (const auto& r : reqs) prompt_tokens += static_cast<int64_t>(r.prompt_token_ids.size());
  const auto batched = run_all(core);
  steps = core.counters().num_steps;
  for (const auto& r : reqs) EXPECT_EQ(batched.at(r.request_id), alone.at(r.request_id)) << r.request_id;
  EXPECT_GE(steps, 1 + prompt_tokens / 8) << "prompts were meant to go 8 tokens a step";
  EXPECT_EQ(core.scheduler().cost_model().num_observed(), steps - 1);
  EXPECT_GT(core.step_seconds_total(), 0);
  // The fit may put the time on any term (non-negative least squares); a step must cost something.
  EXPECT_GT(core.scheduler().cost_model().predict(StepFeatures::chunk(0, 8)), 0);
}

}  // namespace
}  // namespace pagellm

// Gemma 3's sliding-window layers through the whole engine: the window's KV blocks go back to the
// pool as they leave it (kv/kv_cache_layout.h), and the tokens stay those of a cache that keeps
// every block (the model harness: one full table per group, nothing released; its outputs are
// checked against llama.cpp's in golden_archs_test.cc).
//
// File: ../shared/testdata/archs/gemma3-s14-f32.gguf, 2 layers: layer 0 local (window 16),
// layer 1 global. The 4 golden prompts (5, 1, 61 and 24 tokens) with 64 greedy tokens each run
// at once in blocks of 4 tokens, prefill chunks of 16. Holding every block they would need 2 x 89
// = 178 blocks at the end; the pool has 130, which only the released window blocks make enough
// (so no preemption may happen), and the window group of each request never holds more than
// ceil((15 + 16) / 4) + 1 = 9 blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "model/golden_check.h"
#include "test_util.h"

namespace pagellm {
namespace {

constexpr int kSteps = 64;

std::vector<std::vector<int32_t>> golden_prompts() {
  std::ifstream f(test::testdata("archs/golden.json"));
  const nlohmann::json g = nlohmann::json::parse(f);
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : g["prompts"]) prompts.push_back(p["prompt_token_ids"].get<std::vector<int32_t>>());
  return prompts;
}

TEST(SlidingWindowEngine, ReleasedWindowBlocksLeaveTheTokensUnchanged) {
  const std::string path = test::testdata("archs/gemma3-s14-f32.gguf");
  const std::vector<std::vector<int32_t>> prompts = golden_prompts();
  ASSERT_EQ(prompts.size(), 4u);
  std::vector<std::vector<int32_t>> expected;
  {
    auto file = GgufFile::open(path);
    ThreadPool pool(1);
    LlamaModel model(*file, &pool);
    for (const auto& p : prompts) expected.push_back(test::run_greedy(model, p, kSteps, 512).ids);
  }

  EngineConfig c;
  c.model_path = path;
  c.num_threads = 1;
  c.block_size = 4;
  c.kv_cache_blocks = 130;
  c.max_num_batched_tokens = 16;
  LLM llm(c);
  KvCacheManager& kv = llm.kv_manager();
  ASSERT_EQ(kv.num_groups(), 2);
  ASSERT_EQ(kv.group_sliding_window(), (std::vector<int64_t>{0, 16}));
  EngineCore core(llm);
  for (int round = 0; round < 2; ++round) {  // the second round meets the first one's prefix cache
    SCOPED_TRACE("round " + std::to_string(round));
    std::map<std::string, std::vector<int32_t>> got;
    for (size_t i = 0; i < prompts.size(); ++i) {
      EngineRequest r;
      r.request_id = "r" + std::to_string(round) + "-" + std::to_string(i);
      r.prompt_token_ids = prompts[i];
      r.sampling.temperature = 0.0f;
      r.max_tokens = kSteps;
      r.ignore_eos = true;
      core.add_request(r);
    }
    int64_t max_window_blocks = 0, released_entries = 0;
    while (core.has_work()) {
      for (const EngineCoreOutput& o : core.step()) {
        auto& ids = got[o.request_id];
        ids.insert(ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      }
      for (const std::string& id : core.scheduler().running_ids()) {
        const std::vector<int32_t>& t = kv.block_table(id, 1);
        const auto held = static_cast<int64_t>(std::count_if(t.begin(), t.end(), [](int32_t b) { return b >= 0; }));
        max_window_blocks = std::max(max_window_blocks, held);
        released_entries += static_cast<int64_t>(t.size()) - held;
      }
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(got["r" + std::to_string(round) + "-" + std::to_string(i)], expected[i]) << "prompt " << i;
    }
    EXPECT_LE(max_window_blocks, 9);
    EXPECT_GT(released_entries, 0);
    EXPECT_EQ(kv.pool().num_free_blocks(), kv.pool().num_blocks());
  }
  EXPECT_EQ(core.scheduler().num_preemptions(), 0);
}

// The pool needed for one whole-context request is planned with the groups: the default KV
// cache holds max_position_embeddings tokens in the full group plus a window's worth in the
// local one, and EngineCore admits prompts up to that length.
TEST(SlidingWindowEngine, PlansThePoolPerGroup) {
  EngineConfig c;
  c.model_path = test::testdata("archs/gemma3-s14-f32.gguf");
  c.num_threads = 1;
  c.block_size = 16;
  c.max_num_batched_tokens = 64;
  LLM llm(c);
  // 32768 tokens: 2048 blocks of 16 in the full group, ceil((15 + 64) / 16) + 1 = 6 local.
  EXPECT_EQ(llm.kv_manager().pool().num_blocks(), 2048 + 6);
  EXPECT_EQ(llm.kv_cache().layout().num_lanes, 1);
}

}  // namespace
}  // namespace pagellm

// Cold and warm are the same: with the prefix cache on, greedy outputs and logits (compared
// through the full log-softmax of the top tokens, bit for bit) equal the cache off, for prompts
// that hit 0, some and all of their blocks.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "engine/engine_core.h"
#include "test_util.h"

namespace pagellm {
namespace {

struct Out {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;  // chosen + top-8 per step
  int32_t cached = 0;
};

std::unique_ptr<LLM> load(bool prefix_caching) {
  EngineConfig c;
  c.model_path = test::source_dir() + "/models/stories260K-f32.gguf";
  c.num_threads = 2;
  c.enable_prefix_caching = prefix_caching;
  return std::make_unique<LLM>(c);
}

Out run_one(EngineCore& core, const std::string& id, const std::vector<int32_t>& prompt) {
  EngineRequest r;
  r.request_id = id;
  r.prompt_token_ids = prompt;
  r.sampling.temperature = 0;
  r.sampling.logprobs = 8;
  r.max_tokens = 12;
  r.ignore_eos = true;
  core.add_request(r);
  Out out;
  while (core.has_work()) {
    for (const EngineCoreOutput& o : core.step()) {
      out.ids.insert(out.ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      for (const SampleResult& s : o.new_logprobs) {
        out.logprobs.push_back(s.logprob);
        for (const TokenLogprob& t : s.top_logprobs) out.logprobs.push_back(t.logprob);
      }
      if (o.finished) out.cached = o.num_cached_tokens;
    }
  }
  return out;
}

TEST(PrefixCacheEngine, WarmEqualsColdBitForBit) {
  std::vector<int32_t> base{1};
  for (int i = 0; i < 70; ++i) base.push_back(3 + (i * 37) % 500);
  // Prompts: the full base (fills 4 blocks + 6), a shorter one inside it (hits 2 blocks), the base
  // extended (hits all 4 full blocks), exactly 64 tokens (fully cached: one token recomputed), and
  // an unrelated one (hits nothing).
  std::vector<std::vector<int32_t>> prompts;
  prompts.push_back(base);
  prompts.emplace_back(base.begin(), base.begin() + 40);
  auto ext = base;
  ext.insert(ext.end(), {5, 6, 7, 8, 9});
  prompts.push_back(ext);
  prompts.emplace_back(base.begin(), base.begin() + 64);
  std::vector<int32_t> other{1, 400, 401, 402};
  prompts.push_back(other);

  auto cold_llm = load(false);
  auto warm_llm = load(true);
  EngineCore cold(*cold_llm, {8, 512});
  EngineCore warm(*warm_llm, {8, 512});
  const std::vector<int32_t> expect_cached{0, 32, 64, 48, 0};
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    const Out c = run_one(cold, "c" + std::to_string(i), prompts[i]);
    const Out w = run_one(warm, "w" + std::to_string(i), prompts[i]);
    EXPECT_EQ(c.ids, w.ids);
    ASSERT_EQ(c.logprobs.size(), w.logprobs.size());
    EXPECT_EQ(0, std::memcmp(c.logprobs.data(), w.logprobs.data(), c.logprobs.size() * sizeof(float)));
    EXPECT_EQ(c.cached, 0);
    EXPECT_EQ(w.cached, expect_cached[i]);
  }
  // The fully cached 64-token prompt: 3 of its 4 full blocks hit, the 4th is recomputed because
  // at least one token must be computed for logits.
  EXPECT_EQ(warm_llm->kv_manager().pool().num_free_blocks(), warm_llm->kv_cache().num_blocks());
  EXPECT_GT(warm_llm->kv_manager().pool().num_cached_blocks(), 0);
  EXPECT_EQ(warm.scheduler().prefix_cache_hits(), 32 + 64 + 48);
}

}  // namespace
}  // namespace pagellm

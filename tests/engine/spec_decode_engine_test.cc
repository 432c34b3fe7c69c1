// Speculative decoding in the engine (n-gram, self-speculation, draft model): every output is the one without
// speculation, alone and in batches, greedy and seeded sampling (tokens and logprobs bit for
// bit), with prefix caching, preemption and n > 1; and drafts are really proposed, accepted and
// rejected along the way (the counters say so).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <variant>

#include "engine/engine_core.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "test_util.h"

namespace pagellm {
namespace {

// self_layers > 0: self-speculation with that many layers instead of n-gram lookup.
std::unique_ptr<LLM> load(bool speculative, int64_t kv_blocks = 0, int32_t k = 4, int32_t self_layers = 0) {
  EngineConfig c;
  c.model_path = test::source_dir() + "/models/stories260K-f32.gguf";
  c.num_threads = 2;
  c.block_size = 8;
  c.speculative_ngram = speculative && self_layers == 0;
  c.speculative_self_layers = speculative ? self_layers : 0;
  c.speculative_adaptive = false;  // fixed k: every proposal is verified
  c.num_speculative_tokens = k;
  if (kv_blocks > 0) {
    LLM probe(c);
    c.kv_cache_bytes = probe.kv_cache().shape().bytes_per_token() * c.block_size * kv_blocks;
  }
  return std::make_unique<LLM>(c);
}

// A draft model (--speculative-model) for stories260K, fixed k.
std::unique_ptr<LLM> load_with_draft(const std::string& draft, int64_t kv_blocks = 0, int32_t k = 4) {
  EngineConfig c;
  c.model_path = test::source_dir() + "/models/stories260K-f32.gguf";
  c.speculative_model = draft;
  c.num_threads = 2;
  c.block_size = 8;
  c.speculative_adaptive = false;
  c.num_speculative_tokens = k;
  c.kv_cache_blocks = kv_blocks;
  return std::make_unique<LLM>(c);
}

struct Result {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  std::string finish_reason;
  int32_t num_accepted_draft_tokens = 0;
};

std::map<std::string, Result> run_all(EngineCore& core) {
  std::map<std::string, Result> res;
  for (int guard = 0; core.has_work() && guard < 100000; ++guard) {
    for (const EngineCoreOutput& o : core.step()) {
      Result& r = res[o.request_id];
      r.ids.insert(r.ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      for (const SampleResult& s : o.new_logprobs) r.logprobs.push_back(s.logprob);
      if (o.finished) {
        r.finish_reason = o.finish_reason;
        r.num_accepted_draft_tokens = o.num_accepted_draft_tokens;
      }
    }
    // Between steps a draft model's K/V never run ahead of the target's (rollbacks lower both).
    for (const Request* r : core.scheduler().running_requests()) {
      EXPECT_LE(r->num_draft_computed_tokens, r->num_computed_tokens) << r->request_id;
    }
  }
  return res;
}

// Prompts that stories260K continues with repeats (drafts accepted) and random ones (rejected).
std::vector<EngineRequest> requests(bool sampled, int count = 8) {
  std::mt19937 rng(11);
  std::vector<EngineRequest> out;
  for (int i = 0; i < count; ++i) {
    EngineRequest r;
    r.request_id = "r" + std::to_string(i);
    r.prompt_token_ids = {1};
    const int n = 2 + static_cast<int>(rng() % 30);
    for (int j = 0; j < n; ++j) r.prompt_token_ids.push_back(3 + static_cast<int32_t>(rng() % (i % 2 ? 509 : 40)));
    r.max_tokens = 20 + static_cast<int32_t>(rng() % 60);
    r.ignore_eos = i % 3 == 0;
    if (sampled) {
      r.sampling.temperature = 0.7f + 0.1f * static_cast<float>(i % 4);
      r.sampling.top_p = i % 2 ? 0.9f : 1.0f;
      r.sampling.top_k = i % 3 ? 40 : 0;
      r.sampling.repetition_penalty = i % 4 == 1 ? 1.1f : 1.0f;
      r.sampling.seed = 1000 + static_cast<uint64_t>(i);
      r.sampling.logprobs = 0;
    } else {
      r.sampling.temperature = 0;
    }
    out.push_back(r);
  }
  return out;
}

void expect_same(const std::map<std::string, Result>& got, const std::map<std::string, Result>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [id, w] : want) {
    const Result& g = got.at(id);
    EXPECT_EQ(g.ids, w.ids) << id;
    EXPECT_EQ(g.finish_reason, w.finish_reason) << id;
    ASSERT_EQ(g.logprobs.size(), w.logprobs.size()) << id;
    for (size_t j = 0; j < w.logprobs.size(); ++j) {
      EXPECT_EQ(std::memcmp(&g.logprobs[j], &w.logprobs[j], sizeof(float)), 0) << id << " token " << j;
    }
  }
}

// The drafts were proposed, some accepted, some rejected: the test above them is not vacuous.
void expect_speculated(const EngineCore& core) {
  const SpecDecodeCounters& c = core.counters().spec;
  EXPECT_GT(c.num_drafts, 0);
  EXPECT_GT(c.num_accepted_tokens, 0);
  EXPECT_LT(c.num_accepted_tokens, c.num_draft_tokens);
  EXPECT_EQ(c.num_accepted_tokens_per_pos[0] >= c.num_accepted_tokens_per_pos[1], true);
}

std::map<std::string, Result> run(LLM& llm, const std::vector<EngineRequest>& reqs, bool one_by_one,
                                  EngineCore** keep = nullptr, SchedulerLimits limits = {8, 256}) {
  static std::unique_ptr<EngineCore> last;
  last = std::make_unique<EngineCore>(llm, limits);
  std::map<std::string, Result> all;
  if (one_by_one) {
    for (const EngineRequest& r : reqs) {
      last->add_request(r);
      for (auto& [id, res] : run_all(*last)) all[id] = res;
    }
  } else {
    for (const EngineRequest& r : reqs) last->add_request(r);
    all = run_all(*last);
  }
  if (keep != nullptr) *keep = last.get();
  return all;
}

TEST(SpecDecodeEngine, GreedyOutputIsUnchangedAloneAndBatched) {
  auto plain = load(false), spec = load(true);
  const auto reqs = requests(false);
  const auto want = run(*plain, reqs, true);
  EngineCore* core = nullptr;
  expect_same(run(*spec, reqs, true, &core), want);
  expect_speculated(*core);
  expect_same(run(*spec, reqs, false, &core), want);
  expect_speculated(*core);
  int64_t accepted = 0;
  for (const auto& [id, r] : run(*spec, reqs, false, &core)) accepted += r.num_accepted_draft_tokens;
  EXPECT_EQ(accepted, core->counters().spec.num_accepted_tokens);  // no stop cut an accepted draft here
}

TEST(SpecDecodeEngine, SeededSamplingTokensAndLogprobsAreUnchanged) {
  auto plain = load(false), spec = load(true);
  const auto reqs = requests(true);
  const auto want = run(*plain, reqs, false);
  EngineCore* core = nullptr;
  expect_same(run(*spec, reqs, false, &core), want);
  expect_speculated(*core);
}

TEST(SpecDecodeEngine, PerRequestOffAndKBoundsAreHonoured) {
  auto spec = load(true, 0, 6);
  auto reqs = requests(false);
  for (EngineRequest& r : reqs) r.num_speculative_tokens = 0;
  EngineCore* core = nullptr;
  const auto off = run(*spec, reqs, false, &core);
  EXPECT_EQ(core->counters().spec.num_drafts, 0);
  for (EngineRequest& r : reqs) r.num_speculative_tokens = 2;
  expect_same(run(*spec, reqs, false, &core), off);
  expect_speculated(*core);
  EXPECT_EQ(core->counters().spec.num_accepted_tokens_per_pos[2], 0);  // k <= 2
  // A request may lower the engine's k, never raise it.
  auto spec2 = load(true, 0, 2);
  for (EngineRequest& r : reqs) r.num_speculative_tokens = 6;
  expect_same(run(*spec2, reqs, false, &core), off);
  expect_speculated(*core);
  EXPECT_LE(core->counters().spec.num_draft_tokens, 2 * core->counters().spec.num_drafts);
  EXPECT_EQ(core->counters().spec.num_accepted_tokens_per_pos[2], 0);
  reqs[0].num_speculative_tokens = 17;
  EngineCore bad(*spec);
  EXPECT_THROW(bad.add_request(reqs[0]), Error);
}

// A pool of 40 blocks of 8 tokens for 8 requests of up to ~110 tokens: preemption and
// recompute; prompts share prefixes (prefix cache hits) and pairs are n = 2 groups.
TEST(SpecDecodeEngine, PreemptionPrefixCachingAndParallelSamplingKeepTheOutput) {
  auto plain = load(false), spec = load(true, 40);
  auto reqs = requests(true);
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (i % 2 == 1) {
      reqs[i].prompt_token_ids = reqs[i - 1].prompt_token_ids;
      reqs[i].parallel_group = "g" + std::to_string(i - 1);
      reqs[i].parallel_group_size = 2;
      reqs[i - 1].parallel_group = reqs[i].parallel_group;
      reqs[i - 1].parallel_group_size = 2;
      reqs[i].max_tokens = reqs[i - 1].max_tokens;
    }
    if (i >= 4) {  // a shared 17-token prefix with request 0
      std::vector<int32_t> p(reqs[0].prompt_token_ids.begin(),
                             reqs[0].prompt_token_ids.begin() + std::min<size_t>(17, reqs[0].prompt_token_ids.size()));
      p.insert(p.end(), reqs[i].prompt_token_ids.begin() + 1, reqs[i].prompt_token_ids.end());
      reqs[i].prompt_token_ids = p;
    }
  }
  for (size_t i = 4; i < reqs.size(); i += 2) reqs[i + 1].prompt_token_ids = reqs[i].prompt_token_ids;
  const auto want = run(*plain, reqs, false);
  EngineCore* core = nullptr;
  expect_same(run(*spec, reqs, false, &core), want);
  expect_speculated(*core);
  EXPECT_GT(core->scheduler().num_preemptions(), 0);
  EXPECT_GT(core->scheduler().prefix_cache_hits(), 0);
  const BlockPool& pool = spec->kv_manager().pool();
  EXPECT_EQ(pool.num_free_blocks(), pool.num_blocks());
  for (int32_t b = 0; b < pool.num_blocks(); ++b) EXPECT_EQ(pool.ref_cnt(b), 0);
}

// Self-speculation (the first L of stories260K's 5 layers draft, greedy): the same outputs,
// greedy and seeded, alone and batched, with preemption; the drafts are really verified.
TEST(SpecDecodeEngine, SelfSpeculationKeepsEveryOutput) {
  auto plain = load(false, 40);
  for (const int32_t layers : {1, 3}) {
    SCOPED_TRACE("layers " + std::to_string(layers));
    auto spec = load(true, 40, 3, layers);
    for (const bool sampled : {false, true}) {
      const auto reqs = requests(sampled);
      const auto want = run(*plain, reqs, false);
      EngineCore* core = nullptr;
      expect_same(run(*spec, reqs, false, &core), want);
      expect_speculated(*core);
      EXPECT_EQ(core->counters().spec.num_accepted_tokens_per_pos[3], 0);  // k = 3
      expect_same(run(*spec, reqs, true, &core), run(*plain, reqs, true));
    }
  }
  auto bad = load(true, 0, 4, 5);  // as many layers as the model: no draft
  EXPECT_THROW(EngineCore{*bad}, Error);
}

// The preemption / prefix-caching / n = 2 mix of the test above, with its block pool.
std::vector<EngineRequest> mixed_requests() {
  auto reqs = requests(true);
  for (size_t i = 1; i < reqs.size(); i += 2) {
    reqs[i].prompt_token_ids = reqs[i - 1].prompt_token_ids;
    reqs[i].max_tokens = reqs[i - 1].max_tokens;
    reqs[i].parallel_group = reqs[i - 1].parallel_group = "g" + std::to_string(i - 1);
    reqs[i].parallel_group_size = reqs[i - 1].parallel_group_size = 2;
  }
  for (size_t i = 2; i < reqs.size(); ++i) {  // a shared 9-token prefix with request 0
    std::vector<int32_t> p(reqs[0].prompt_token_ids.begin(),
                           reqs[0].prompt_token_ids.begin() + std::min<size_t>(9, reqs[0].prompt_token_ids.size()));
    p.insert(p.end(), reqs[i].prompt_token_ids.begin() + 1, reqs[i].prompt_token_ids.end());
    reqs[i].prompt_token_ids = p;
  }
  return reqs;
}

void expect_idle_pool(LLM& llm) {
  const BlockPool& pool = llm.kv_manager().pool();
  EXPECT_EQ(pool.num_free_blocks(), pool.num_blocks());
  for (int32_t b = 0; b < pool.num_blocks(); ++b) EXPECT_EQ(pool.ref_cnt(b), 0);
}

// The draft is stories260K itself: with greedy requests every draft must be accepted, which
// holds only if the draft's K/V (its own storage under the target's block tables) are right at
// every position, after catch-ups, rollbacks, preemptions, prefix hits and forks.
TEST(SpecDecodeEngine, DraftModelThatIsTheTargetHasEveryDraftAccepted) {
  auto plain = load(false, 40);
  auto spec = load_with_draft(test::source_dir() + "/models/stories260K-f32.gguf", 40, 3);
  auto reqs = mixed_requests();
  for (EngineRequest& r : reqs) {
    r.sampling = SamplingParams{};
    r.sampling.temperature = 0;
  }
  EngineCore* core = nullptr;
  expect_same(run(*spec, reqs, false, &core), run(*plain, reqs, false));
  const SpecDecodeCounters& c = core->counters().spec;
  EXPECT_GT(c.num_drafts, 20);
  EXPECT_EQ(c.num_accepted_tokens, c.num_draft_tokens);
  EXPECT_GT(core->scheduler().num_preemptions(), 0);
  EXPECT_GT(core->scheduler().prefix_cache_hits(), 0);
  expect_idle_pool(*spec);
  // A 12-token budget: prompts arrive in chunks, and the draft catches up over several steps
  // before it drafts (a draft it made before catching up would be rejected here).
  // A fresh engine, so its runners' largest batches are this run's: the draft's first pass of a
  // step, every request's catch-up together, stays within the budget as the target's step does
  // (8 requests catching up whole prompts at once would take far more).
  spec = load_with_draft(test::source_dir() + "/models/stories260K-f32.gguf", 40, 3);
  expect_same(run(*spec, reqs, false, &core, SchedulerLimits{8, 12}), run(*plain, reqs, false));
  EXPECT_GT(core->counters().spec.num_drafts, 20);
  EXPECT_EQ(core->counters().spec.num_accepted_tokens, core->counters().spec.num_draft_tokens);
  EXPECT_GT(spec->draft_runner()->max_batch_tokens(), 1);
  EXPECT_LE(spec->draft_runner()->max_batch_tokens(), 12);
  EXPECT_LE(spec->runner().max_batch_tokens(), 12);
  expect_idle_pool(*spec);
}

// The draft is stories260K in Q4_0 (the "same model, cheaper quantization" setup): greedy and
// seeded outputs are unchanged, alone and batched, with preemption, prefix hits and n = 2.
TEST(SpecDecodeEngine, QuantizedDraftModelKeepsEveryOutput) {
  auto plain = load(false, 40);
  auto spec = load_with_draft(test::testdata("stories260K/stories260K-q4_0.gguf"), 40);
  ASSERT_NE(spec->draft_runner(), nullptr);
  EXPECT_EQ(spec->draft_runner()->num_blocks(), spec->runner().num_blocks());
  for (const bool sampled : {false, true}) {
    SCOPED_TRACE(sampled ? "sampled" : "greedy");
    const auto reqs = requests(sampled);
    EngineCore* core = nullptr;
    expect_same(run(*spec, reqs, false, &core), run(*plain, reqs, false));
    expect_speculated(*core);
    expect_same(run(*spec, reqs, true, &core), run(*plain, reqs, true));
  }
  const auto reqs = mixed_requests();
  EngineCore* core = nullptr;
  expect_same(run(*spec, reqs, false, &core), run(*plain, reqs, false));
  expect_speculated(*core);
  EXPECT_GT(core->scheduler().num_preemptions(), 0);
  expect_idle_pool(*spec);
  // A 12-token budget: the draft catches a prompt up over several steps and prefills arrive in
  // chunks.
  const auto greedy = requests(false);
  expect_same(run(*spec, greedy, false, &core, SchedulerLimits{8, 12}), run(*plain, greedy, false));
  expect_speculated(*core);
  expect_idle_pool(*spec);
}

// The bundled model with token 100's type (a byte token, <0x61>) set to `type`, or its BOS id
// key set outside the vocabulary, written to `path`.
void write_edited_draft(const std::string& path, int32_t type, bool bad_bos) {
  const auto src = GgufFile::open(test::source_dir() + "/models/stories260K-f32.gguf");
  GgufWriter w;
  for (const auto& [key, value] : src->metadata()) {
    if (key == "general.alignment") continue;
    if (key == "tokenizer.ggml.token_type") {
      GgufValue v = value;
      std::get<GgufArray>(v.v).items[100] = GgufValue::i32(type);
      w.set(key, v);
    } else if (key == "tokenizer.ggml.bos_token_id" && bad_bos) {
      w.set(key, GgufValue::u32(70000));
    } else {
      w.set(key, value);
    }
  }
  for (const GgufTensorInfo& t : src->tensors()) {
    w.add_tensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.size_bytes));
  }
  w.write(path);
}

// A draft whose tokenizer differs at one token is refused naming it, with what the draft's loader
// read past (the cause here); a draft's load warnings are the LLM's, marked as the draft's.
TEST(SpecDecodeEngine, DraftVocabularyErrorsNameTheToken) {
  const std::string path = ::testing::TempDir() + "/spec-draft-" + std::to_string(::getpid()) + ".gguf";
  write_edited_draft(path, 7, false);
  try {
    load_with_draft(path);
    ADD_FAILURE() << "a draft whose token 100 decodes differently loaded";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("its vocabulary differs from the model's at token 100 (text '<0x61>' gives '', the "
                        "model's '<0x61>' gives 'a')"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("; the draft's tokenizer.ggml.token_type: 1 of 512 entries are outside"), std::string::npos)
        << what;
  }
  write_edited_draft(path, 6, true);  // token 100 as it was; BOS key outside the vocabulary
  const std::unique_ptr<LLM> llm = load_with_draft(path);
  ASSERT_EQ(llm->load_warnings().size(), 1u);
  EXPECT_EQ(llm->load_warnings()[0].rfind("--speculative-model: tokenizer.ggml.bos_token_id = 70000 is outside", 0), 0u)
      << llm->load_warnings()[0];
  std::filesystem::remove(path);
}

TEST(SpecDecodeEngine, DraftModelIsCheckedAtLoad) {
  // A different vocabulary (TinyStories-656K has 2048 tokens).
  EXPECT_THROW(load_with_draft(test::testdata("tinystories-656k/TinyStories-656K-f32.gguf")), Error);
  try {
    load_with_draft("/nonexistent/draft.gguf");
    ADD_FAILURE() << "a missing draft loaded";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--speculative-model '/nonexistent/draft.gguf': ", 0), 0u) << e.what();
  }
  // Sliding-window layers (Gemma 3) cannot share the target's block tables.
  EngineConfig g;
  g.model_path = test::testdata("archs/gemma3-s14-f32.gguf");
  g.speculative_model = g.model_path;
  EXPECT_THROW(LLM{g}, Error);
  EngineConfig both;
  both.model_path = test::source_dir() + "/models/stories260K-f32.gguf";
  both.speculative_model = both.model_path;
  both.speculative_ngram = true;
  EXPECT_THROW(both.validate(), Error);
  // The pool's bytes buy blocks of both models' K/V.
  EngineConfig one = both;
  one.speculative_ngram = false;
  one.speculative_model.clear();
  one.kv_cache_bytes = 1 << 20;
  EngineConfig two = one;
  two.speculative_model = two.model_path;
  LLM a(one), b(two);
  EXPECT_EQ(b.runner().num_blocks(), a.runner().num_blocks() / 2);
}

}  // namespace
}  // namespace pagellm

// EngineCore end to end on the bundled stories260K model: continuous batching with preemption
// gives each request exactly what it gets alone; stop conditions; abort frees blocks at once.
#include "engine/engine_core.h"
#include "engine/text_engine.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>

#include "core/error.h"
#include "nan_model.h"
#include "test_util.h"

namespace pagellm {
namespace {

std::unique_ptr<LLM> load(int64_t kv_blocks, int32_t block_size = 16) {
  EngineConfig c;
  c.model_path = test::source_dir() + "/models/stories260K-f32.gguf";
  c.num_threads = 2;
  c.block_size = block_size;
  auto probe = std::make_unique<LLM>(c);
  if (kv_blocks <= 0) return probe;
  c.kv_cache_bytes = probe->kv_cache().shape().bytes_per_token() * block_size * kv_blocks;
  return std::make_unique<LLM>(c);
}

struct Result {
  std::vector<int32_t> ids;
  std::string text;
  std::string finish_reason;
  int deltas = 0;
};

// Runs the engine until idle; collects outputs per request.
std::map<std::string, Result> run_all(test::TextEngine& core) {
  std::map<std::string, Result> res;
  for (int guard = 0; core.has_work() && guard < 100000; ++guard) {
    for (const RequestOutput& o : core.step()) {
      Result& r = res[o.request_id];
      r.ids.insert(r.ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      r.text += o.delta_text;
      ++r.deltas;
      if (o.finished) r.finish_reason = o.finish_reason;
    }
  }
  return res;
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

std::vector<int32_t> random_prompt(std::mt19937& rng, int n) {
  std::vector<int32_t> p{1};
  while (static_cast<int>(p.size()) < n) p.push_back(3 + static_cast<int32_t>(rng() % 509));
  return p;
}

// 24 requests with mixed prompt lengths against a pool of 12 blocks x 16 tokens (each request
// alone needs up to 5 blocks): the engine must preempt; every output equals the request run alone.
TEST(EngineCore, ContinuousBatchingWithPreemptionMatchesAlone) {
  std::mt19937 rng(5);
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < 24; ++i) {
    EngineRequest r = greedy("r" + std::to_string(i), random_prompt(rng, 1 + static_cast<int>(rng() % 40)), 30);
    if (i % 3 == 1) {  // seeded sampling too: same seed, same output, whatever else runs
      r.sampling.temperature = 0.9f;
      r.sampling.top_p = 0.9f;
      r.sampling.seed = 1000 + i;
    }
    reqs.push_back(r);
  }
  std::map<std::string, Result> alone;
  {
    auto llm = load(0);
    test::TextEngine core(*llm, {1, 512});
    for (const auto& r : reqs) {
      core.add_request(r);
      alone.merge(run_all(core));
    }
  }
  auto llm = load(12);
  test::TextEngine core(*llm, {16, 64});
  for (const auto& r : reqs) core.add_request(r);
  const auto batched = run_all(core);
  EXPECT_GT(core.scheduler().num_preemptions(), 0) << "the pool was meant to force preemption";
  for (const auto& r : reqs) {
    SCOPED_TRACE(r.request_id);
    EXPECT_EQ(batched.at(r.request_id).ids, alone.at(r.request_id).ids);
    EXPECT_EQ(batched.at(r.request_id).text, alone.at(r.request_id).text);
    EXPECT_EQ(batched.at(r.request_id).finish_reason, "length");
    EXPECT_EQ(batched.at(r.request_id).ids.size(), 30u);
  }
  EXPECT_EQ(llm->kv_manager().pool().num_free_blocks(), 12);
}

TEST(EngineCore, GreedyMatchesLlmGenerate) {
  auto llm = load(0);
  const std::vector<int32_t> prompt = llm->tokenizer().encode("Once upon a time", true, false);
  GenerateOptions g;
  g.max_tokens = 40;
  g.ignore_eos = true;
  g.sampling.temperature = 0;
  const GenerateResult want = llm->generate(prompt, g);
  test::TextEngine core(*llm, {4, 7});  // chunks of 7 prompt tokens at most
  core.add_request(greedy("x", prompt, 40));
  const auto got = run_all(core);
  EXPECT_EQ(got.at("x").ids, want.token_ids);
  EXPECT_EQ(got.at("x").text, want.text);
}

TEST(EngineCore, StopStringsAndStopTokens) {
  auto llm = load(0);
  const std::vector<int32_t> prompt = llm->tokenizer().encode("Once upon a time", true, false);
  // Greedy text: ", there was a little girl named Lily. She loved to play outside in the park. ..."
  test::TextEngine core(*llm, {4, 512});
  EngineRequest a = greedy("a", prompt, 60);
  a.stop = {"Lily."};
  EngineRequest b = greedy("b", prompt, 60);
  b.stop = {"irl na"};  // spans tokens, ends inside one
  EngineRequest c = greedy("c", prompt, 60);
  c.stop_token_ids = {llm->tokenizer().encode("park", false, false).back()};
  core.add_request(a);
  core.add_request(b);
  core.add_request(c);
  const auto res = run_all(core);
  EXPECT_EQ(res.at("a").text, ", there was a little girl named ");
  EXPECT_EQ(res.at("a").finish_reason, "stop");
  EXPECT_EQ(res.at("b").text, ", there was a little g");
  EXPECT_EQ(res.at("b").finish_reason, "stop");
  EXPECT_EQ(res.at("c").finish_reason, "stop");
  EXPECT_EQ(res.at("c").text.find("park"), std::string::npos);
  EXPECT_NE(res.at("c").text.find("in the"), std::string::npos);
  EXPECT_EQ(llm->kv_manager().pool().num_free_blocks(), llm->kv_cache().num_blocks());
}

// The output processor finds the stop string and ends the request in the core within the step
// that sampled its last token: no further step computes it, its blocks are free at once, and its
// counts are the tokens sampled up to that one.
TEST(EngineCore, StopStringEndsTheRequestWithinTheStep) {
  auto llm = load(0);
  const std::vector<int32_t> prompt = llm->tokenizer().encode("Once upon a time", true, false);
  test::TextEngine core(*llm, {4, 512});  // the whole prompt in the first step
  EngineRequest a = greedy("a", prompt, 60);
  a.stop = {"Lily."};
  core.add_request(a);
  std::vector<int32_t> ids;
  std::optional<RequestOutput> last;
  while (core.has_work() && !last) {
    for (const RequestOutput& o : core.step()) {
      ids.insert(ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (o.finished) last = o;
    }
  }
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->finish_reason, "stop");
  EXPECT_EQ(last->stop_reason, std::optional<std::string>("Lily."));
  EXPECT_EQ(last->num_generated_tokens, static_cast<int32_t>(ids.size()));
  EXPECT_LT(ids.size(), 60u);
  EXPECT_EQ(core.counters().num_steps, static_cast<int64_t>(ids.size()));  // one token per step
  EXPECT_FALSE(core.has_work());
  EXPECT_EQ(core.scheduler().num_running(), 0);
  EXPECT_EQ(llm->kv_manager().pool().num_free_blocks(), llm->kv_cache().num_blocks());
  EXPECT_EQ(core.processor().num_requests(), 0u);
}

TEST(EngineCore, AbortFreesBlocksAtOnce) {
  auto llm = load(0);
  test::TextEngine core(*llm, {4, 512});
  std::mt19937 rng(1);
  core.add_request(greedy("a", random_prompt(rng, 40), 100));
  core.add_request(greedy("b", random_prompt(rng, 20), 100));
  for (int i = 0; i < 5; ++i) core.step();
  const int32_t total = llm->kv_cache().num_blocks();
  EXPECT_LT(llm->kv_manager().pool().num_free_blocks(), total);
  auto out = core.abort_request("a");
  ASSERT_TRUE(out.has_value());
  EXPECT_TRUE(out->finished);
  EXPECT_EQ(out->finish_reason, "abort");
  EXPECT_EQ(out->num_generated_tokens, 5);
  core.abort_request("b");
  EXPECT_FALSE(core.abort_request("b").has_value());
  EXPECT_EQ(llm->kv_manager().pool().num_free_blocks(), total);
  EXPECT_FALSE(core.has_work());
}

// A model whose logits are all NaN (output.weight NaN): each request ends with finish_reason
// "error" and a message, greedy or sampled, with or without logprobs; its blocks are freed and
// the engine runs on to idle (it used to abort the process in the sampler).
TEST(EngineCore, NonFiniteLogitsFailTheRequestNotTheEngine) {
  EngineConfig c;
  c.model_path = test::write_nan_logits_model(::testing::TempDir() + "/nan_logits.gguf");
  c.num_threads = 2;
  LLM llm(c);
  test::TextEngine core(llm, {4, 512});
  std::mt19937 rng(3);
  EngineRequest g = greedy("greedy", random_prompt(rng, 30), 10);
  EngineRequest t = greedy("sampled", random_prompt(rng, 20), 10);
  t.sampling.temperature = 1.0f;
  t.sampling.seed = 5;
  EngineRequest l = greedy("logprobs", random_prompt(rng, 10), 10);
  l.sampling.logprobs = 2;
  core.add_request(g);
  core.add_request(t);
  core.add_request(l);
  std::map<std::string, std::string> errors, reasons;
  for (int guard = 0; core.has_work() && guard < 1000; ++guard) {
    for (const RequestOutput& o : core.step()) {
      EXPECT_TRUE(o.new_token_ids.empty()) << o.request_id;
      if (o.finished) {
        reasons[o.request_id] = o.finish_reason;
        errors[o.request_id] = o.error;
      }
    }
  }
  EXPECT_FALSE(core.has_work());
  for (const char* id : {"greedy", "sampled", "logprobs"}) {
    EXPECT_EQ(reasons[id], "error") << id;
    EXPECT_NE(errors[id].find("not finite"), std::string::npos) << id << ": " << errors[id];
  }
  EXPECT_EQ(llm.kv_manager().pool().num_free_blocks(), llm.kv_cache().num_blocks());
}

// A NaN in the hidden state of a quantized model (output_norm.weight NaN in llama.cpp's random
// files) reaches the logits through the activation quantizers (nan_block) of every quantized
// type of the output matrix: the request fails as above. These files used to generate token 0
// with every logit 0.
TEST(EngineCore, NanHiddenStateOfAQuantizedModelFailsTheRequest) {
  for (const char* file : {"llama-kq-s7-q4_k-pure.gguf", "llama-kq-s7-q2_k-pure.gguf", "llama-kq-s7-q4_1.gguf",
                           "llama-kq-s7-iq4_xs.gguf", "llama-kq-s7-q8_0.gguf"}) {
    SCOPED_TRACE(file);
    EngineConfig c;
    c.model_path = test::write_nan_tensor_model(test::testdata(std::string("kquant/") + file), "output_norm.weight",
                                                ::testing::TempDir() + "/nan_hidden.gguf");
    c.num_threads = 2;
    LLM llm(c);
    test::TextEngine core(llm, {4, 512});
    std::mt19937 rng(4);
    core.add_request(greedy("g", random_prompt(rng, 12), 4));
    std::string reason, error;
    for (int guard = 0; core.has_work() && guard < 100; ++guard) {
      for (const RequestOutput& o : core.step()) {
        EXPECT_TRUE(o.new_token_ids.empty());
        if (o.finished) {
          reason = o.finish_reason;
          error = o.error;
        }
      }
    }
    EXPECT_EQ(reason, "error");
    EXPECT_NE(error.find("not finite"), std::string::npos) << error;
  }
}

TEST(EngineCore, RejectsBadRequests) {
  auto llm = load(4);  // 64 tokens of KV
  test::TextEngine core(*llm, {4, 512});
  EXPECT_THROW(core.add_request(greedy("e", {}, 5)), Error);
  EXPECT_THROW(core.add_request(greedy("v", {1, 600}, 5)), Error);
  EXPECT_THROW(core.add_request(greedy("long", std::vector<int32_t>(64, 5), 5)), Error);  // no room for 1 token
  EngineRequest bad = greedy("t", {1, 2}, 5);
  bad.sampling.temperature = -1;
  EXPECT_THROW(core.add_request(bad), Error);
  core.add_request(greedy("ok", std::vector<int32_t>(60, 5), 100));  // capped at the pool: 4 tokens
  const auto res = run_all(core);
  EXPECT_EQ(res.at("ok").ids.size(), 4u);
  EXPECT_EQ(res.at("ok").finish_reason, "length");
}

// Text held back at the end of a request (a proper prefix of a stop string, or the first bytes of
// a UTF-8 character) is released when the request ends by max_tokens, EOS or a stop token id:
// in the streamed deltas (their concatenation) and in the final output. The tokens are forced
// with logit_bias: `first` wins step 1 (+100), then a repetition penalty of 100 (the largest
// allowed) brings it to ~1 and `second` (+50) wins step 2. Neither is in the prompt.
EngineRequest forced(const std::string& id, int32_t first, int32_t second, int32_t max_tokens) {
  EngineRequest r = greedy(id, {1, 403, 407}, max_tokens);
  r.sampling.logit_bias = {{first, 100.0f}, {second, 50.0f}};
  r.sampling.repetition_penalty = 100.0f;
  return r;
}

struct Finished {
  Result streamed;          // every delta concatenated
  std::string final_delta;  // the delta of the finished output
  std::optional<std::string> stop_reason;
};

std::map<std::string, Finished> run_collect(test::TextEngine& core) {
  std::map<std::string, Finished> res;
  for (int guard = 0; core.has_work() && guard < 100000; ++guard) {
    for (const RequestOutput& o : core.step()) {
      Finished& f = res[o.request_id];
      f.streamed.ids.insert(f.streamed.ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      f.streamed.text += o.delta_text;
      ++f.streamed.deltas;
      if (o.finished) {
        f.streamed.finish_reason = o.finish_reason;
        f.final_delta = o.delta_text;
        f.stop_reason = o.stop_reason;
      }
    }
  }
  return res;
}

TEST(EngineCore, HeldBackTextIsReleasedWhenTheRequestEnds) {
  auto llm = load(0);
  const Tokenizer& tk = llm->tokenizer();
  const std::optional<int32_t> word = tk.find_token(
      "\xE2\x96\x81"
      "happy");  // "▁happy"
  const std::optional<int32_t> b_e2 = tk.find_token("<0xE2>");
  const std::optional<int32_t> b_82 = tk.find_token("<0x82>");
  const std::optional<int32_t> other = tk.find_token(
      "\xE2\x96\x81"
      "day");  // "▁day"
  ASSERT_TRUE(word && b_e2 && b_82 && other);
  const int32_t eos = tk.eos_id();
  ASSERT_TRUE(tk.is_eog(eos));
  const std::string piece = tk.token_to_piece(*word);
  ASSERT_EQ(piece, " happy");
  const std::string stop = piece + " never";  // " happy" is a proper prefix of it

  test::TextEngine core(*llm, {8, 512});
  // Stop-string prefix, then max_tokens.
  EngineRequest len = forced("stop-prefix/length", *word, *other, 1);
  len.stop = {stop};
  // Stop-string prefix, then EOS (not returned as text).
  EngineRequest eos_req = forced("stop-prefix/eos", *word, eos, 5);
  eos_req.ignore_eos = false;
  eos_req.stop = {stop};
  // Stop-string prefix, then a stop token id.
  EngineRequest sid = forced("stop-prefix/stop-id", *word, *other, 5);
  sid.stop = {stop};
  sid.stop_token_ids = {*other};
  // The first byte of the 3-byte "\xE2\x82\xAC" (euro sign), then EOS.
  EngineRequest u_eos = forced("utf8/eos", *b_e2, eos, 5);
  u_eos.ignore_eos = false;
  // Two of its three bytes, then max_tokens.
  EngineRequest u_len = forced("utf8/length", *b_e2, *b_82, 2);
  // One byte, then a stop token id.
  EngineRequest u_sid = forced("utf8/stop-id", *b_e2, *other, 5);
  u_sid.stop_token_ids = {*other};
  for (const EngineRequest* r : {&len, &eos_req, &sid, &u_eos, &u_len, &u_sid}) core.add_request(*r);
  const auto res = run_collect(core);

  struct Want {
    std::string id, text, finish_reason;
    size_t tokens;
  };
  const std::vector<Want> wants = {
      {"stop-prefix/length", piece, "length", 1}, {"stop-prefix/eos", piece, "stop", 2},
      {"stop-prefix/stop-id", piece, "stop", 2},  {"utf8/eos", "\xE2", "stop", 2},
      {"utf8/length", "\xE2\x82", "length", 2},   {"utf8/stop-id", "\xE2", "stop", 2},
  };
  for (const Want& w : wants) {
    SCOPED_TRACE(w.id);
    ASSERT_EQ(res.count(w.id), 1u);
    const Finished& f = res.at(w.id);
    EXPECT_EQ(f.streamed.ids.size(), w.tokens);
    EXPECT_EQ(f.streamed.finish_reason, w.finish_reason);
    EXPECT_EQ(f.streamed.text, w.text);  // the concatenation of the deltas
    EXPECT_EQ(f.final_delta, w.text);    // all of it was held back until the final output
  }
  EXPECT_EQ(res.at("stop-prefix/stop-id").stop_reason, std::to_string(*other));
  EXPECT_FALSE(res.at("stop-prefix/eos").stop_reason.has_value());
  EXPECT_EQ(llm->kv_manager().pool().num_free_blocks(), llm->kv_cache().num_blocks());
}

}  // namespace
}  // namespace pagellm

// InProcessEngineClient: the model facts a frontend needs, and requests through the EngineClient
// interface only (text, a stop string and the usage counts of a stop-string finish).
#include "engine/in_process_client.h"

#include <gtest/gtest.h>

#include <future>
#include <mutex>

#include "test_util.h"

namespace pagellm {
namespace {

TEST(InProcessEngineClient, ModelFactsAndAStopStringThroughTheInterface) {
  EngineConfig c;
  c.model_path = test::source_dir() + "/models/stories260K-f32.gguf";
  c.num_threads = 1;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 512;
  c.max_waiting = 16;
  auto llm = std::make_unique<LLM>(c);
  const int32_t vocab = llm->tokenizer().vocab_size();
  const int64_t ctx = llm->model().config().max_position_embeddings;
  const int64_t pool = int64_t{llm->kv_cache().num_blocks()} * llm->kv_cache().block_size();
  const std::vector<int32_t> prompt = llm->tokenizer().encode("Once upon a time", true, false);
  InProcessEngineClient client(std::move(llm));
  EngineClient& engine = client;

  const ModelFacts& facts = engine.model_facts();
  EXPECT_EQ(facts.vocab_size, vocab);
  EXPECT_EQ(facts.max_model_len, std::min(ctx, pool));
  EXPECT_FALSE(facts.model_name.empty());
  EXPECT_EQ(facts.chat_template, "");  // stories260K has none

  // Greedy text: ", there was a little girl named Lily. She loved ..." (EngineCore tests).
  EngineRequest r;
  r.request_id = "a";
  r.prompt_token_ids = prompt;
  r.sampling.temperature = 0;
  r.max_tokens = 60;
  r.stop = {"Lily."};
  std::mutex mu;
  std::string text;
  int32_t tokens = 0;
  std::promise<RequestOutput> last;
  engine.add_request(r, [&](const RequestOutput& o) {
    std::lock_guard<std::mutex> lock(mu);
    text += o.delta_text;
    tokens += static_cast<int32_t>(o.new_token_ids.size());
    if (o.finished) last.set_value(o);
  });
  const RequestOutput fin = last.get_future().get();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(text, ", there was a little girl named ");
  EXPECT_EQ(fin.finish_reason, "stop");
  EXPECT_EQ(fin.stop_reason, std::optional<std::string>("Lily."));
  EXPECT_EQ(fin.num_generated_tokens, tokens);
  EXPECT_EQ(fin.num_prompt_tokens, static_cast<int32_t>(prompt.size()));
}

}  // namespace
}  // namespace pagellm

// A loaded model ready to generate: the GGUF mapping, the tokenizer, the model runner (weights,
// paged KV storage, worker threads) and the KV cache manager (block tables, prefix cache) of that
// storage. `generate` runs one request through the same flat-batch forward pass that the batching
// engine uses (prefill in chunks, then one decode token per step).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_config.h"
#include "engine/engine_types.h"
#include "engine/model_runner.h"
#include "format/gguf.h"
#include "kv/kv_cache.h"
#include "kv/kv_cache_manager.h"
#include "model/llama.h"
#include "sample/sampling_params.h"
#include "tokenizer/tokenizer.h"

namespace pagellm {

struct GenerateOptions {
  int32_t max_tokens = 128;  // new tokens; clamped to the context length
  bool ignore_eos = false;
  SamplingParams sampling;
};

struct GenerateTimings {
  int64_t prompt_tokens = 0;
  double prompt_seconds = 0;              // prefill, up to the first token's logits
  int64_t decode_tokens = 0;              // tokens after the first (decode_steps of them, plus accepted drafts)
  int64_t decode_steps = 0;               // forward passes after the first token
  int64_t num_accepted_draft_tokens = 0;  // speculative decoding: of decode_tokens, drafts accepted
  double decode_seconds = 0;
  SpecDecodeCounters spec;  // speculative decoding: this generation's verify steps
  double prompt_tokens_per_s() const { return prompt_seconds > 0 ? prompt_tokens / prompt_seconds : 0; }
  double decode_tokens_per_s() const { return decode_seconds > 0 ? decode_tokens / decode_seconds : 0; }
};

struct GenerateResult {
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> token_ids;
  std::string text;           // concatenated pieces of token_ids
  std::string finish_reason;  // "stop" (EOS) or "length"
  GenerateTimings timings;
};

// A model file's weights and tokenizer as LLM loads them, checked against each other.
struct LoadedModel {
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
  // tokenizer.chat_template (Jinja source); "" when absent, or when not a string (then ignored,
  // with a warning: chat requests get the fallback template, the rest of the API works).
  std::string chat_template;
  // What loading read past, one sentence each: the tokenizer's load_warnings(), then the chat
  // template's.
  std::vector<std::string> warnings;
};
// Loads `file`, opened from `path` (the name its errors give). isa: the kernels' ISA;
// kernels::Isa::kScalar binds every weight in place, nothing repacked or copied (how
// `pagellm info` checks that a file would run). pool: repacks on its threads (may be null).
// Throws pagellm::Error naming the file and the tensor, key or config.json field at fault, or
// the tokenizer's and the embeddings' disagreeing vocabulary sizes.
LoadedModel load_model_and_tokenizer(const GgufFile& file, const std::string& path, ThreadPool* pool,
                                     kernels::Isa isa = kernels::default_isa());

class LLM;
// "" when `llm`'s KV pool holds the model's whole context; else one line saying that requests are
// limited to max_model_len() tokens and how to change it (serve logs it; generate and bench print
// it to stderr).
std::string kv_cache_limit_warning(const LLM& llm);

class LLM {
 public:
  // Validates `config`, loads the model (and the draft model of --speculative-model, which must
  // have the same vocabulary and only full-attention layers, as must the target) and sizes the
  // KV pool (plan_kv_cache). Throws pagellm::Error for a bad file or configuration.
  explicit LLM(const EngineConfig& config);

  const EngineConfig& config() const { return config_; }
  // Longest prompt + generation of one request, tokens: the model's context, or what the KV pool
  // holds for one request when that is less (a --kv-cache-memory budget, or the default's 1 GiB
  // cap), counting every KV cache group's blocks (max_tokens_per_request). As EngineCore admits.
  int64_t max_model_len() const;
  // What loading read past (LoadedModel::warnings): the model's, then the draft tokenizer's, each
  // of those prefixed "--speculative-model: ". Commands print or log them.
  const std::vector<std::string>& load_warnings() const { return load_warnings_; }
  const std::string& chat_template() const { return chat_template_; }  // LoadedModel::chat_template
  const GgufFile& file() const { return *file_; }
  const LlamaModel& model() const { return runner_->model(); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const KvCache& kv_cache() const { return runner_->kv_cache(); }
  ModelRunner& runner() { return *runner_; }
  // The draft model's runner (--speculative-model; nullptr without one): the draft's weights and
  // its KV storage of the same num_blocks and block_size, indexed by the target's block tables.
  ModelRunner* draft_runner() { return draft_runner_.get(); }
  KvCacheManager& kv_manager() { return *kv_manager_; }
  ThreadPool& pool() { return *runner_->pool(); }

  // Generates up to options.max_tokens tokens after prompt_token_ids. on_text receives text
  // deltas as they become complete UTF-8. Throws pagellm::Error when the prompt is empty, holds
  // out-of-vocabulary ids, does not fit the context, or the KV cache is too small for it.
  GenerateResult generate(const std::vector<int32_t>& prompt_token_ids, const GenerateOptions& options,
                          const std::function<void(std::string_view)>& on_text = nullptr);

 private:
  // Opens config_.speculative_model on `pool` and checks it against the target (vocabulary,
  // attention layout); throws pagellm::Error naming the flag.
  void load_draft(const LlamaModel& target, ThreadPool* pool);

  EngineConfig config_;
  std::unique_ptr<GgufFile> file_;  // before runner_: the weights are read from its mapping
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::string> load_warnings_;
  std::string chat_template_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<KvCacheManager> kv_manager_;
  std::unique_ptr<GgufFile> draft_file_;  // --speculative-model, before the model built on it
  std::unique_ptr<LlamaModel> draft_model_;
  std::unique_ptr<ModelRunner> draft_runner_;  // borrows draft_model_ and runner_'s pool
};

}  // namespace pagellm

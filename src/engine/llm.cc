#include "engine/llm.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "engine/model_runner.h"
#include "engine/utf8_stream.h"
#include "sample/sampler.h"

namespace pagellm {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

LLM::LLM(const EngineConfig& config) : config_(config) {
  if (config_.block_size <= 0 || config_.block_size > 1024) {
    throw Error("block_size must be in [1, 1024], got " + std::to_string(config_.block_size));
  }
  if (config_.max_num_batched_tokens <= 0) throw Error("max_num_batched_tokens must be positive");
  auto pool = std::make_unique<ThreadPool>(config_.num_threads > 0 ? config_.num_threads
                                                                    : ThreadPool::default_num_threads());
  file_ = GgufFile::open(config_.model_path);
  auto model = std::make_unique<LlamaModel>(*file_, pool.get());
  try {
    tokenizer_ = Tokenizer::from_gguf(*file_);
  } catch (const Error& e) {
    throw Error("model '" + config_.model_path + "': " + e.what());
  }
  if (tokenizer_->vocab_size() != model->config().vocab_size) {
    throw Error("model '" + config_.model_path + "': tokenizer has " + std::to_string(tokenizer_->vocab_size()) +
                " tokens but token_embd has " + std::to_string(model->config().vocab_size) + " rows");
  }
  const KvCacheShape shape = model->kv_shape(config_.kv_dtype);
  int32_t num_blocks;
  if (config_.kv_cache_bytes > 0) {
    num_blocks = KvCache::blocks_for_bytes(shape, config_.block_size, config_.kv_cache_bytes);
    if (num_blocks == 0) {
      throw Error("--kv-cache-memory " + std::to_string(config_.kv_cache_bytes) + " bytes holds no block of " +
                  std::to_string(shape.bytes_per_token() * config_.block_size) + " bytes");
    }
  } else {
    num_blocks = static_cast<int32_t>((model->config().max_position_embeddings + config_.block_size - 1) /
                                      config_.block_size);
  }
  runner_ = std::make_unique<ModelRunner>(std::move(pool), std::move(model),
                                          KvCacheGeometry{num_blocks, config_.block_size, config_.kv_dtype});
  kv_manager_ = std::make_unique<KvCacheManager>(num_blocks, config_.block_size, config_.enable_prefix_caching);
}

GenerateResult LLM::generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                             const std::function<void(std::string_view)>& on_text) {
  const LlamaConfig& mc = runner_->model_config();
  if (prompt.empty()) throw Error("the prompt has no tokens");
  for (int32_t id : prompt) {
    if (id < 0 || id >= mc.vocab_size) throw Error("prompt token id " + std::to_string(id) + " is outside the vocabulary");
  }
  const auto n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt >= mc.max_position_embeddings) {
    throw Error("the prompt has " + std::to_string(n_prompt) + " tokens; the context length is " +
                std::to_string(mc.max_position_embeddings));
  }
  opt.sampling.validate(static_cast<int32_t>(mc.vocab_size));
  const int64_t max_new = std::min<int64_t>(std::max(opt.max_tokens, 0), mc.max_position_embeddings - n_prompt);

  GenerateResult res;
  res.prompt_token_ids = prompt;
  res.finish_reason = "length";
  res.timings.prompt_tokens = n_prompt;
  if (max_new == 0) return res;

  const std::string rid = "generate";
  struct Release {
    KvCacheManager& m;
    const std::string& id;
    ~Release() { m.free(id); }
  } release{*kv_manager_, rid};

  Sampler sampler(opt.sampling);
  Utf8Stream utf8;
  std::vector<int32_t> all = prompt;  // prompt + generated
  std::vector<float> logits;
  const auto vocab = static_cast<size_t>(mc.vocab_size);

  // Prefill in chunks of max_num_batched_tokens; logits only for the last prompt token.
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t start = 0; start < n_prompt; start += config_.max_num_batched_tokens) {
    const int64_t len = std::min(config_.max_num_batched_tokens, n_prompt - start);
    if (!kv_manager_->allocate_slots(rid, start + len)) {
      throw Error("the KV cache (" + std::to_string(runner_->num_blocks()) + " blocks of " +
                  std::to_string(config_.block_size) + " tokens) cannot hold the prompt");
    }
    ScheduledSeq s{&kv_manager_->block_table(rid), std::span<const int32_t>(all).subspan(start, len), start,
                   start + len == n_prompt ? 1 : 0};
    logits = runner_->execute(std::span<const ScheduledSeq>(&s, 1)).logits;
  }
  res.timings.prompt_seconds = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < max_new; ++i) {
    const std::span<const int32_t> out_ids(all.data() + n_prompt, all.size() - n_prompt);
    const int32_t tok = sampler.sample(std::span<const float>(logits.data(), vocab), prompt, out_ids);
    all.push_back(tok);
    res.token_ids.push_back(tok);
    const bool eos = !opt.ignore_eos && tokenizer_->is_eog(tok);
    if (!eos) {
      const std::string piece = tokenizer_->token_to_piece(tok);
      res.text += piece;
      const std::string delta = utf8.push(piece);
      if (on_text && !delta.empty()) on_text(delta);
    }
    if (eos) {
      res.finish_reason = "stop";
      break;
    }
    if (i + 1 == max_new) break;
    const int64_t pos = static_cast<int64_t>(all.size()) - 1;
    if (!kv_manager_->allocate_slots(rid, pos + 1)) {
      throw Error("the KV cache ran out of blocks after " + std::to_string(res.token_ids.size()) + " tokens");
    }
    ScheduledSeq s{&kv_manager_->block_table(rid), std::span<const int32_t>(all).subspan(pos, 1), pos, 1};
    logits = runner_->execute(std::span<const ScheduledSeq>(&s, 1)).logits;
    ++res.timings.decode_tokens;
  }
  res.timings.decode_seconds = seconds_since(t0);
  const std::string tail = utf8.flush();
  if (on_text && !tail.empty()) on_text(tail);
  return res;
}

}  // namespace pagellm

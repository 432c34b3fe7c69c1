// The one configuration of an engine: every setting that the CLI commands (serve, generate, bench)
// take from the command line, with its default and its check in this one place. Built once per
// command and passed down; SchedulerLimits and the KV cache's geometry are views derived from it.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "model/llama_config.h"
#include "sched/scheduler.h"

namespace pagellm {

struct EngineConfig {
  std::string model_path;
  int num_threads = 0;                // --threads; 0: ThreadPool::default_num_threads()
  int32_t block_size = 16;            // --block-size: tokens per KV block, a power of two in [1, 256]
  GgmlType kv_dtype = GgmlType::F32;  // --kv-dtype: F32 or F16
  // KV pool size (--kv-cache-memory): at most one of the two is > 0; both 0: the default of
  // plan_kv_cache (kv_cache_default_contexts full contexts).
  int64_t kv_cache_bytes = 0;
  int64_t kv_cache_blocks = 0;
  int32_t kv_cache_default_contexts = 1;  // serve: 16; else 1 (either capped at kMaxDefaultKvCacheBytes)
  int64_t max_num_batched_tokens = 512;   // --max-num-batched-tokens: tokens per step (prefill chunk)
  int32_t max_num_seqs = 64;              // --max-num-seqs: requests running at once
  int32_t max_waiting = 1024;             // --max-waiting: waiting-queue bound (serve: 429 beyond)
  bool enable_prefix_caching = true;      // --no-prefix-caching turns it off (kv/kv_cache_manager.h)
  // --max-step-ms: step-time budget (sched/scheduler.h), milliseconds; 0: none, the token
  // budget alone sizes prefill chunks; kAutoMaxStepMs: automatic (sched/step_cost_model.h:
  // step_budget_seconds; serve's default). --target-itl-ms T sets it to 0.9 T.
  static constexpr double kAutoMaxStepMs = -1;
  double max_step_ms = 0;
  // --auto-step-factor F: with max_step_ms auto, a step may take F x the predicted time of its
  // decodes alone (sched/step_cost_model.h, kAutoStepFactor); in (1, 100].
  double auto_step_factor = kAutoStepFactor;
  // --max-queue-delay-s: a request whose predicted time to first token (the prompt tokens queued
  // ahead of it and its own, at the step cost model's speed) exceeds it gets QueueFull (HTTP
  // 429) at once instead of waiting; 0: off.
  double max_queue_delay_s = 0;
  // Speculative decoding (engine/engine_core.h, spec/): --speculative-ngram turns on the n-gram
  // proposer (prompt lookup over the request's own tokens, spec/ngram_proposer.h) with
  // --ngram-min / --ngram-max; --num-speculative-tokens bounds the draft tokens per request and
  // step (a request may lower it, or turn speculation off). With speculative_adaptive (the
  // default; --no-speculative-adaptive fixes k) each step's k is the one that maximises the
  // batch's predicted tokens per second, from the request's measured acceptance and the step cost
  // model, so it falls to 0 when speculation would lose.
  bool speculative_ngram = false;
  // --speculative-self-layers L: self-speculation instead (the draft is the target's first L
  // decoder layers, its final norm and LM head, greedy; LayerSkip / Draft & Verify), sharing
  // the target's KV cache for those layers; L in [1, num_hidden_layers - 1], checked at load.
  int32_t speculative_self_layers = 0;
  // --speculative-model DRAFT: a draft model (a GGUF file or Hugging Face directory with the same
  // vocabulary, e.g. the target in a cheaper quantization) proposes greedy drafts from its own
  // paged KV storage, indexed by the target's block tables (same blocks, same slots; LLM owns it).
  std::string speculative_model;
  int32_t ngram_min = 1;
  int32_t ngram_max = 4;
  int32_t num_speculative_tokens = 4;  // in [1, kMaxSpeculativeTokens]
  bool speculative_adaptive = true;
  static constexpr int32_t kMaxSpeculativeTokens = 16;

  // A proposer is configured (n-gram, self-speculation or a draft model).
  bool speculative() const { return speculative_ngram || speculative_self_layers > 0 || !speculative_model.empty(); }

  // Throws pagellm::Error naming the flag and the value of the first setting out of range.
  void validate() const;
  // The scheduler's view of this configuration.
  // The step's first prefill chunk gets at least one KV block of tokens.
  SchedulerLimits scheduler_limits() const {
    return SchedulerLimits{max_num_seqs, max_num_batched_tokens, max_step_ms / 1000.0, block_size, auto_step_factor};
  }
};

// "f32" -> F32, "f16" -> F16; throws pagellm::Error naming --kv-dtype for anything else.
GgmlType parse_kv_dtype(const std::string& text);

// The default KV pool stops growing at 1 GiB: serve's 16 contexts, and the one context of
// generate / bench when it is that large (Llama 3.1 8B's 131072 tokens take 32 GiB in f32).
constexpr int64_t kMaxDefaultKvCacheBytes = int64_t{1} << 30;

// The KV blocks of `model` with `config`'s settings (config validated first):
//   kv_cache_blocks > 0: that many;  kv_cache_bytes > 0: as many whole blocks as fit;
//   else: kv_cache_default_contexts full contexts (ceil(context / block_size) blocks each), at
//   most kMaxDefaultKvCacheBytes of blocks (then requests are limited to the pool's tokens).
// Throws pagellm::Error when the budget holds no block or more than INT32_MAX blocks.
// With a draft model (--speculative-model), every block also holds the draft's K/V: a byte budget
// buys blocks of both models' bytes, `draft` adding its kv_bytes_per_token.
int32_t plan_kv_cache(const EngineConfig& config, const LlamaConfig& model, const LlamaConfig* draft = nullptr);

// What the engine allocates beside the KV pool once it runs, bytes (an upper estimate, for the
// memory check before the pool is filled): per token of a step (max_num_batched_tokens), the
// model's activation buffers (LlamaModel::forward) and the matmul workspace (the activations
// converted: ~2 floats per input column); the logits of every running request (speculation:
// num_speculative_tokens + 1 rows each); the block bookkeeping (BlockPool, KvCacheManager: < 64
// bytes a block); 32 MiB for thread stacks and the allocator. With a draft model
// (--speculative-model), its own activation buffers per token and one logits row per request.
int64_t runner_buffer_bytes(const EngineConfig& config, const LlamaConfig& model, int64_t num_blocks,
                            const LlamaConfig* draft = nullptr);

// Bytes of one slot of a KV block (one token's K and V in each storage lane: every layer, or a
// group's worth of layers when KV cache groups split them, kv/kv_cache_layout.h), with `dtype`
// elements.
int64_t kv_bytes_per_token(const LlamaConfig& model, GgmlType dtype);

}  // namespace pagellm

#include "engine/engine_config.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "kv/kv_cache_layout.h"

namespace pagellm {
namespace {

[[noreturn]] void bad(const std::string& flag, const std::string& want, int64_t got) {
  throw Error(flag + " must be " + want + ", got " + std::to_string(got));
}

}  // namespace

void EngineConfig::validate() const {
  if (num_threads < 0 || num_threads > 4096) bad("--threads", "in [0, 4096]", num_threads);
  // A power of two keeps p / block_size and p % block_size shifts and masks; 256 tokens is the
  // largest block vLLM offers and wastes at most 255 slots per request.
  if (block_size < 1 || block_size > 256 || (block_size & (block_size - 1)) != 0) {
    bad("--block-size", "a power of two in [1, 256]", block_size);
  }
  if (kv_dtype != GgmlType::F32 && kv_dtype != GgmlType::F16) {
    throw Error("--kv-dtype must be f32 or f16, got " + type_name(kv_dtype));
  }
  if (kv_cache_bytes < 0) bad("--kv-cache-memory", ">= 1 byte", kv_cache_bytes);
  if (kv_cache_blocks < 0) bad("--kv-cache-memory", ">= 1 block", kv_cache_blocks);
  if (kv_cache_bytes > 0 && kv_cache_blocks > 0) throw Error("--kv-cache-memory: give bytes or blocks, not both");
  if (kv_cache_default_contexts < 1) bad("kv_cache_default_contexts", ">= 1", kv_cache_default_contexts);
  if (max_num_batched_tokens < 1) bad("--max-num-batched-tokens", ">= 1", max_num_batched_tokens);
  if (max_num_seqs < 1) bad("--max-num-seqs", ">= 1", max_num_seqs);
  if (max_waiting < 1) bad("--max-waiting", ">= 1", max_waiting);
  if (!(max_step_ms == kAutoMaxStepMs || (max_step_ms >= 0 && max_step_ms <= 3.6e6))) {  // NaN fails too
    throw Error("--max-step-ms must be auto or in [0, 3600000] milliseconds, got " + std::to_string(max_step_ms));
  }
  if (!(auto_step_factor > 1 && auto_step_factor <= 100)) {
    throw Error("--auto-step-factor must be in (1, 100], got " + std::to_string(auto_step_factor));
  }
  if (!(max_queue_delay_s >= 0 && max_queue_delay_s <= 86400)) {
    throw Error("--max-queue-delay-s must be in [0, 86400] seconds, got " + std::to_string(max_queue_delay_s));
  }
  if (num_speculative_tokens < 1 || num_speculative_tokens > kMaxSpeculativeTokens) {
    throw Error("--num-speculative-tokens must be in [1, " + std::to_string(kMaxSpeculativeTokens) + "], got " +
                std::to_string(num_speculative_tokens));
  }
  if (speculative_self_layers < 0) {
    throw Error("--speculative-self-layers must be >= 1 (0: off), got " + std::to_string(speculative_self_layers));
  }
  if (static_cast<int>(speculative_ngram) + static_cast<int>(speculative_self_layers > 0) +
          static_cast<int>(!speculative_model.empty()) >
      1) {
    throw Error(
        "--speculative-ngram, --speculative-self-layers and --speculative-model are three proposers: choose one");
  }
  if (ngram_min < 1 || ngram_max < ngram_min || ngram_max > 64) {
    throw Error("--ngram-min must be >= 1 and --ngram-max in [--ngram-min, 64], got " + std::to_string(ngram_min) +
                " and " + std::to_string(ngram_max));
  }
}

GgmlType parse_kv_dtype(const std::string& text) {
  if (text == "f32") return GgmlType::F32;
  if (text == "f16") return GgmlType::F16;
  throw Error("--kv-dtype must be f32 or f16, got '" + text + "'");
}

int64_t kv_bytes_per_token(const LlamaConfig& model, GgmlType dtype) {
  return kv_cache_shape(model, dtype).bytes_per_token();
}

int32_t plan_kv_cache(const EngineConfig& c, const LlamaConfig& model, const LlamaConfig* draft) {
  c.validate();
  const int64_t block_bytes =
      (kv_bytes_per_token(model, c.kv_dtype) + (draft != nullptr ? kv_bytes_per_token(*draft, c.kv_dtype) : 0)) *
      c.block_size;
  // Blocks one full-length request holds (more than its tokens / block_size when KV cache groups
  // split the layers; fewer per token once sliding-window groups release blocks).
  const KvCacheLayout layout = kv_cache_shape(model, c.kv_dtype).layout();
  const int64_t context_blocks = max_blocks_per_request(layout.group_sliding_window, c.block_size,
                                                        model.max_position_embeddings, c.max_num_batched_tokens);
  int64_t blocks;
  if (c.kv_cache_blocks > 0) {
    blocks = c.kv_cache_blocks;
  } else if (c.kv_cache_bytes > 0) {
    blocks = c.kv_cache_bytes / block_bytes;
    if (blocks == 0) {
      throw Error("--kv-cache-memory " + std::to_string(c.kv_cache_bytes) + " bytes holds no block of " +
                  std::to_string(block_bytes) + " bytes");
    }
  } else {
    blocks = std::min(c.kv_cache_default_contexts * context_blocks, kMaxDefaultKvCacheBytes / block_bytes);
    if (blocks == 0) {
      throw Error("one KV block of this model (" + std::to_string(block_bytes) +
                  " bytes) is more than the default KV cache of 1 GiB; size it with --kv-cache-memory");
    }
  }
  if (blocks > std::numeric_limits<int32_t>::max()) {
    throw Error("--kv-cache-memory: " + std::to_string(blocks) + " blocks is more than the " +
                std::to_string(std::numeric_limits<int32_t>::max()) + " a KV cache can index");
  }
  return static_cast<int32_t>(blocks);
}

namespace {
// f32 activation and workspace values per token of a step of `c` (see runner_buffer_bytes).
int64_t activation_floats_per_token(const LlamaConfig& c) {
  const int64_t q_dim = c.num_attention_heads * c.head_dim, kv_dim = c.num_key_value_heads * c.head_dim;
  return 3 * c.hidden_size + 2 * q_dim + 4 * kv_dim + 4 * c.intermediate_size + 2 * c.rope_dim +
         2 * std::max(c.hidden_size, c.intermediate_size);
}
}  // namespace

int64_t runner_buffer_bytes(const EngineConfig& e, const LlamaConfig& model, int64_t num_blocks,
                            const LlamaConfig* draft) {
  int64_t per_token = activation_floats_per_token(model);
  int64_t logits = int64_t{e.max_num_seqs} * (e.speculative() ? e.num_speculative_tokens + 1 : 1) * model.vocab_size;
  if (draft != nullptr) {
    per_token += activation_floats_per_token(*draft);
    logits += int64_t{e.max_num_seqs} * draft->vocab_size;
  }
  return 4 * (e.max_num_batched_tokens * per_token + logits) + 64 * num_blocks + (int64_t{32} << 20);
}

}  // namespace pagellm

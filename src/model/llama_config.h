// Hyper-parameters of a Llama-family model, read from GGUF metadata (`<arch>.*` keys, see the
// GGUF spec's "LLM" section). Names follow Hugging Face's LlamaConfig.
#pragma once

#include <cstdint>
#include <string>

#include "format/gguf.h"

namespace pagellm {

struct LlamaConfig {
  std::string architecture;             // general.architecture ("llama")
  int64_t vocab_size = 0;               // rows of token_embd.weight
  int64_t hidden_size = 0;              // llama.embedding_length
  int64_t intermediate_size = 0;        // llama.feed_forward_length
  int64_t num_hidden_layers = 0;        // llama.block_count
  int64_t num_attention_heads = 0;      // llama.attention.head_count
  int64_t num_key_value_heads = 0;      // llama.attention.head_count_kv (default: head_count)
  int64_t head_dim = 0;                 // hidden_size / num_attention_heads (or attention.key_length)
  int64_t rope_dim = 0;                 // llama.rope.dimension_count (default: head_dim)
  float rope_theta = 10000.0f;          // llama.rope.freq_base
  float rms_norm_eps = 1e-5f;           // llama.attention.layer_norm_rms_epsilon
  int64_t max_position_embeddings = 0;  // llama.context_length, tokens
  bool tie_word_embeddings = false;     // output.weight absent -> token_embd.weight is reused

  // Reads and validates the config. Throws pagellm::Error naming the file and key.
  static LlamaConfig from_gguf(const GgufFile& f);
};

}  // namespace pagellm

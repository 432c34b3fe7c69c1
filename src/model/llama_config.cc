#include "model/llama_config.h"

#include "core/error.h"

namespace pagellm {
namespace {

int64_t positive(const GgufFile& f, const std::string& key, uint64_t v, uint64_t max) {
  if (v == 0 || v > max) {
    throw Error("model '" + f.path() + "': " + key + " = " + std::to_string(v) + " is out of range [1, " +
                std::to_string(max) + "]");
  }
  return static_cast<int64_t>(v);
}

}  // namespace

LlamaConfig LlamaConfig::from_gguf(const GgufFile& f) {
  LlamaConfig c;
  c.architecture = f.get_string("general.architecture");
  if (c.architecture != "llama") {
    throw Error("model '" + f.path() + "': architecture '" + c.architecture + "' is not supported (supported: llama)");
  }
  const std::string a = c.architecture + ".";
  auto get = [&](const std::string& key, uint64_t max) { return positive(f, a + key, f.get_u64(a + key), max); };
  c.hidden_size = get("embedding_length", 1 << 16);
  c.intermediate_size = get("feed_forward_length", 1 << 18);
  c.num_hidden_layers = get("block_count", 1024);
  c.num_attention_heads = get("attention.head_count", 1024);
  c.num_key_value_heads =
      f.find(a + "attention.head_count_kv") ? get("attention.head_count_kv", 1024) : c.num_attention_heads;
  c.max_position_embeddings = get("context_length", uint64_t{1} << 24);
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    throw Error("model '" + f.path() + "': head_count " + std::to_string(c.num_attention_heads) +
                " is not a multiple of head_count_kv " + std::to_string(c.num_key_value_heads));
  }
  if (f.find(a + "attention.key_length")) {
    c.head_dim = get("attention.key_length", 4096);
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      throw Error("model '" + f.path() + "': embedding_length is not a multiple of head_count");
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (f.find(a + "attention.value_length") && get("attention.value_length", 4096) != c.head_dim) {
    throw Error("model '" + f.path() + "': attention.value_length != key_length is not supported");
  }
  c.rope_dim = f.find(a + "rope.dimension_count") ? get("rope.dimension_count", 4096) : c.head_dim;
  if (c.rope_dim > c.head_dim || c.rope_dim % 2 != 0) {
    throw Error("model '" + f.path() + "': rope.dimension_count = " + std::to_string(c.rope_dim) +
                " must be even and <= head_dim " + std::to_string(c.head_dim));
  }
  c.rope_theta = f.get_f32(a + "rope.freq_base", 10000.0f);
  c.rms_norm_eps = f.get_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  if (!(c.rope_theta > 0.0f) || !(c.rms_norm_eps > 0.0f)) {
    throw Error("model '" + f.path() + "': rope.freq_base and layer_norm_rms_epsilon must be positive");
  }
  if (f.find(a + "rope.scaling.type") && f.get_string(a + "rope.scaling.type") != "none") {
    throw Error("model '" + f.path() + "': rope scaling '" + f.get_string(a + "rope.scaling.type") +
                "' is not supported yet");
  }
  if (f.find_tensor("rope_freqs.weight")) {
    throw Error("model '" + f.path() + "': rope_freqs.weight (Llama 3.1 RoPE scaling) is not supported yet");
  }
  const GgufTensorInfo& emb = f.tensor("token_embd.weight");
  if (emb.ne.size() != 2 || emb.ne[0] != c.hidden_size) {
    throw Error("model '" + f.path() + "': tensor 'token_embd.weight' must be [" + std::to_string(c.hidden_size) +
                ", vocab]");
  }
  c.vocab_size = emb.ne[1];
  c.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;
  return c;
}

}  // namespace pagellm

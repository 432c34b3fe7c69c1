// The keys every architecture shares (`<arch>.embedding_length`, ...), then the architecture's own
// (architectures.h). Also the `llama` architecture itself: Touvron et al. 2023 ("LLaMA"; Llama 2),
// and Llama 3.1/3.2's RoPE scaling (Meta's `rope_type: llama3`, Hugging Face
// `_compute_llama3_parameters`), which convert_hf_to_gguf.py bakes into `rope_freqs.weight`.
#include "model/llama_config.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/architectures.h"

namespace pagellm {
namespace {

int64_t positive(const GgufFile& f, const std::string& key, uint64_t v, uint64_t max) {
  if (v == 0 || v > max) {
    throw Error("model '" + f.path() + "': " + key + " = " + std::to_string(v) + " is out of range [1, " +
                std::to_string(max) + "]");
  }
  return static_cast<int64_t>(v);
}

std::string supported_list() {
  std::string s;
  for (const Architecture& a : architectures()) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

}  // namespace

int64_t arch_u64(const GgufFile& f, const LlamaConfig& c, const std::string& key, uint64_t max) {
  const std::string k = c.architecture + "." + key;
  return positive(f, k, f.get_u64(k), max);
}

int64_t arch_u64(const GgufFile& f, const LlamaConfig& c, const std::string& key, uint64_t max, int64_t fallback) {
  return f.find(c.architecture + "." + key) ? arch_u64(f, c, key, max) : fallback;
}

float arch_f32(const GgufFile& f, const LlamaConfig& c, const std::string& key, std::optional<float> fallback) {
  const std::string k = c.architecture + "." + key;
  const float v = f.get_f32(k, fallback);
  if (!(v > 0.0f) || !std::isfinite(v)) {
    throw Error("model '" + f.path() + "': " + k + " = " + std::to_string(v) + " must be positive");
  }
  return v;
}

void refuse_key(const GgufFile& f, const LlamaConfig& c, const std::string& key, const std::string& what) {
  const std::string k = c.architecture + "." + key;
  if (f.find(k)) throw Error("model '" + f.path() + "': " + k + " (" + what + ") is not supported yet");
}

// Llama: the common keys are all it has. rope_freqs.weight, when present, is Llama 3.1's RoPE
// scaling: pair i's angle is divided by rope_freqs[i] (the converter writes no rope.scaling keys
// for it; llama.cpp src/models/llama.cpp passes it to ggml_rope_ext as freq_factors).
void configure_llama(const GgufFile& f, LlamaConfig& c) {
  c.rope_type = RopeType::kNorm;
  c.rope_freqs = f.find_tensor("rope_freqs.weight") != nullptr;
}

LlamaConfig LlamaConfig::from_gguf(const GgufFile& f) {
  LlamaConfig c;
  c.architecture = f.get_string("general.architecture");
  const auto all = architectures();
  const auto arch =
      std::find_if(all.begin(), all.end(), [&](const Architecture& a) { return a.name == c.architecture; });
  if (arch == all.end()) {
    throw Error("model '" + f.path() + "': architecture '" + c.architecture +
                "' is not supported (supported: " + supported_list() + ")");
  }
  const std::string a = c.architecture + ".";
  auto get = [&](const std::string& key, uint64_t max) { return arch_u64(f, c, key, max); };
  c.hidden_size = get("embedding_length", 1 << 16);
  c.intermediate_size = get("feed_forward_length", 1 << 18);
  c.num_hidden_layers = get("block_count", 1024);
  for (const GgufTensorInfo& t : f.tensors()) {  // a lowered block_count would drop layers silently
    int64_t layer = -1;
    if (std::sscanf(t.name.c_str(), "blk.%" SCNd64 ".", &layer) == 1 && layer >= c.num_hidden_layers) {
      throw Error("model '" + f.path() + "': tensor '" + t.name + "' is of layer " + std::to_string(layer) + ", but " +
                  a + "block_count = " + std::to_string(c.num_hidden_layers));
    }
  }
  c.num_attention_heads = get("attention.head_count", 1024);
  c.num_key_value_heads = arch_u64(f, c, "attention.head_count_kv", 1024, c.num_attention_heads);
  c.max_position_embeddings = get("context_length", uint64_t{1} << 24);
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    throw Error("model '" + f.path() + "': head_count " + std::to_string(c.num_attention_heads) +
                " is not a multiple of head_count_kv " + std::to_string(c.num_key_value_heads));
  }
  if (f.find(a + "attention.key_length")) {
    c.head_dim = get("attention.key_length", 4096);
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      throw Error("model '" + f.path() + "': " + a + "embedding_length " + std::to_string(c.hidden_size) +
                  " is not a multiple of " + a + "attention.head_count " + std::to_string(c.num_attention_heads) +
                  " (and " + a + "attention.key_length, the head size, is absent)");
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (f.find(a + "attention.value_length")) {
    const int64_t value_length = get("attention.value_length", 4096);
    if (value_length != c.head_dim) {
      throw Error("model '" + f.path() + "': " + a + "attention.value_length = " + std::to_string(value_length) +
                  " differs from the head size " + std::to_string(c.head_dim) + " (" +
                  (f.find(a + "attention.key_length") ? a + "attention.key_length"
                                                      : a + "embedding_length / " + a + "attention.head_count, " + a +
                                                            "attention.key_length being absent") +
                  "): not supported");
    }
  }
  c.rope_dim = arch_u64(f, c, "rope.dimension_count", 4096, c.head_dim);
  if (c.rope_dim > c.head_dim || c.rope_dim % 2 != 0) {
    throw Error("model '" + f.path() + "': " + a + "rope.dimension_count = " + std::to_string(c.rope_dim) +
                " must be even and <= head_dim " + std::to_string(c.head_dim));
  }
  c.rope_theta = arch_f32(f, c, "rope.freq_base", 10000.0f);
  // Required, as llama.cpp requires it: a default would be silently wrong for the 1e-6 models.
  c.rms_norm_eps = arch_f32(f, c, "attention.layer_norm_rms_epsilon", std::nullopt);
  if (f.find(a + "rope.scaling.type") && f.get_string(a + "rope.scaling.type") != "none") {
    throw Error("model '" + f.path() + "': " + a + "rope.scaling.type '" + f.get_string(a + "rope.scaling.type") +
                "' is not supported yet");
  }
  arch->configure(f, c);
  if (f.find_tensor("rope_freqs.weight") && !c.rope_freqs) {
    throw Error("model '" + f.path() + "': rope_freqs.weight is not supported for architecture " + c.architecture);
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

KvCacheShape kv_cache_shape(const LlamaConfig& c, GgmlType dtype) {
  std::vector<int64_t> windows;
  if (c.sliding_window > 0) {
    for (int64_t il = 0; il < c.num_hidden_layers; ++il) windows.push_back(c.is_sliding(il) ? c.sliding_window : 0);
  }
  return KvCacheShape{static_cast<int32_t>(c.num_hidden_layers), static_cast<int32_t>(c.num_key_value_heads),
                      static_cast<int32_t>(c.head_dim), dtype, std::move(windows)};
}

}  // namespace pagellm

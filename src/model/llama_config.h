// Hyper-parameters of a Llama-family model, read from GGUF metadata (`<arch>.*` keys, see the
// GGUF spec's "LLM" section). Names follow Hugging Face's LlamaConfig. The architectures that
// share Llama's decoder (src/model/llama.cc) differ only in the options below; each one's file
// (src/model/<arch>.cc, listed in src/model/architectures.h) reads its keys and sets them.
#pragma once

#include <cstdint>
#include <string>

#include "format/gguf.h"
#include "kv/kv_cache.h"

namespace pagellm {

// Which elements RoPE rotates together: NORM (2i, 2i+1), as ggml's llama; NEOX (i, i + n/2), as
// Hugging Face's rotate_half (Qwen, Gemma, Phi-3).
enum class RopeType : uint8_t { kNorm, kNeox };
// The gate activation of the gated MLP: silu (SwiGLU) or gelu_tanh (GeGLU).
enum class HiddenAct : uint8_t { kSilu, kGeluTanh };

struct LlamaConfig {
  std::string architecture;             // general.architecture ("llama", "qwen2", ...)
  int64_t vocab_size = 0;               // rows of token_embd.weight
  int64_t hidden_size = 0;              // <arch>.embedding_length
  int64_t intermediate_size = 0;        // <arch>.feed_forward_length
  int64_t num_hidden_layers = 0;        // <arch>.block_count
  int64_t num_attention_heads = 0;      // <arch>.attention.head_count
  int64_t num_key_value_heads = 0;      // <arch>.attention.head_count_kv (default: head_count)
  int64_t head_dim = 0;                 // hidden_size / num_attention_heads (or attention.key_length)
  int64_t rope_dim = 0;                 // <arch>.rope.dimension_count (default: head_dim)
  float rope_theta = 10000.0f;          // <arch>.rope.freq_base
  float rms_norm_eps = 1e-5f;           // <arch>.attention.layer_norm_rms_epsilon
  int64_t max_position_embeddings = 0;  // <arch>.context_length, tokens
  bool tie_word_embeddings = false;     // output.weight absent -> token_embd.weight is reused

  // ---- the options of each architecture (set by its configure function) -------------------
  RopeType rope_type = RopeType::kNorm;
  bool rope_freqs = false;      // llama 3.1+: rope_freqs.weight [rope_dim/2] divides pair i's angle
  bool attention_bias = false;  // qwen2: attn_q/k/v.bias
  bool qk_norm = false;         // qwen3, gemma3: attn_q_norm / attn_k_norm, RMSNorm per head before RoPE
  bool post_norms = false;      // gemma3: post_attention_norm, post_ffw_norm before each residual add
  bool fused_qkv = false;       // phi3: attn_qkv = [q; k; v] rows
  bool fused_gate_up = false;   // phi3: ffn_up = [gate; up] rows, no ffn_gate
  HiddenAct hidden_act = HiddenAct::kSilu;
  float embedding_scale = 1.0f;        // gemma3: sqrt(hidden_size), multiplies the looked-up embedding
  bool scale_q = false;                // q *= 1/sqrt(head_dim) before attention, whose scale is then 1 (gemma3, phi3)
  int64_t sliding_window = 0;          // gemma3: <arch>.attention.sliding_window, keys (0: none)
  int64_t sliding_window_pattern = 0;  // layer il is local iff il % pattern < pattern - 1 (when sliding_window > 0)
  float rope_theta_swa = 0.0f;         // gemma3: <arch>.rope.freq_base_swa, the local layers' RoPE base

  // Whether layer il attends through the sliding window (with rope_theta_swa).
  bool is_sliding(int64_t il) const {
    return sliding_window > 0 && il % sliding_window_pattern < sliding_window_pattern - 1;
  }
  // Reads and validates the config. Throws pagellm::Error naming the file and key.
  static LlamaConfig from_gguf(const GgufFile& f);
};

// Shape of the KV cache for a model config, with the given element type (F32 or F16): the
// per-layer sliding windows give gemma3's local layers their own KV cache groups
// (kv/kv_cache_layout.h); other models get one group.
KvCacheShape kv_cache_shape(const LlamaConfig& config, GgmlType dtype);

}  // namespace pagellm

// Gemma 3 (Gemma Team 2025, "Gemma 3 Technical Report", arXiv:2503.19786; Hugging Face
// Gemma3TextConfig / modeling_gemma3.py; llama.cpp src/models/gemma3.cpp read for the GGUF graph).
// Llama's decoder with:
//   x = embed(tokens) * sqrt(hidden)
//   per layer: h = Wq·rms(x) ...; q_h, k_h = rms(q_h) * attn_q_norm, rms(k_h) * attn_k_norm (per
//              head), NEOX RoPE; q *= 1/sqrt(head_dim) (attention.key_length) before attention
//              x += rms(Wo·attn) * post_attention_norm
//              x += rms(Wdown·(gelu_tanh(Wgate·rms(x)) * Wup·rms(x))) * post_ffw_norm   (GeGLU)
//   logits = token_embd · rms(x) (tied)
// Local and global layers: layer il is local iff il % sliding_window_pattern < pattern - 1 (5 local
// : 1 global in the released models). A local layer's query at position i sees keys j with
// 0 <= i - j < sliding_window, and rotates with rope.freq_base_swa (10000) instead of
// rope.freq_base (1e6). GGUF norm weights already hold Gemma's (1 + w), so they are plain
// multipliers.
// Keys: attention.sliding_window (required), attention.sliding_window_pattern (default 6, as
// llama.cpp: real Gemma 3 files do not carry it), rope.freq_base_swa (default 10000).
// Not implemented (refused, naming the key): final / attention logit soft-capping (Gemma 2's).
// Gemma 3 27B scales q by 1/sqrt(hidden / heads) (its query_pre_attn_scalar), not 1/sqrt(head_dim);
// no GGUF key says so (llama.cpp decides by model size), so that model would be computed wrong.
#include <cmath>

#include "model/architectures.h"

namespace pagellm {

void configure_gemma3(const GgufFile& f, LlamaConfig& c) {
  c.rope_type = RopeType::kNeox;
  c.qk_norm = true;
  c.post_norms = true;
  c.hidden_act = HiddenAct::kGeluTanh;
  c.embedding_scale = std::sqrt(static_cast<float>(c.hidden_size));
  c.scale_q = true;
  c.sliding_window = arch_u64(f, c, "attention.sliding_window", uint64_t{1} << 24);
  c.sliding_window_pattern = arch_u64(f, c, "attention.sliding_window_pattern", 1024, 6);
  c.rope_theta_swa = arch_f32(f, c, "rope.freq_base_swa", 10000.0f);
  refuse_key(f, c, "final_logit_softcapping", "logit soft-capping");
  refuse_key(f, c, "attn_logit_softcapping", "attention soft-capping");
}

}  // namespace pagellm

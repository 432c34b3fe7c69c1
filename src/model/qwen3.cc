// Qwen3 (Qwen Team 2025, "Qwen3 Technical Report", arXiv:2505.09388; Hugging Face Qwen3Config /
// modeling_qwen3.py; llama.cpp src/models/qwen3.cpp read for the GGUF graph): Llama's decoder
// with NEOX-ordered RoPE, no q/k/v bias, and an RMSNorm over each head of q and k before RoPE:
//   q_h = rope(rms(q_h) * attn_q_norm), k_h = rope(rms(k_h) * attn_k_norm)   ([head_dim] weights)
// head_dim (attention.key_length, 128 in the released models) need not be hidden / heads, so
// attn_q is [hidden, heads * head_dim] and attn_output its transpose.
#include "model/architectures.h"

namespace pagellm {

void configure_qwen3(const GgufFile& /*f*/, LlamaConfig& c) {
  c.rope_type = RopeType::kNeox;
  c.qk_norm = true;
}

}  // namespace pagellm

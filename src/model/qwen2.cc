// Qwen2 / Qwen2.5 (Yang et al. 2024, "Qwen2 Technical Report", arXiv:2407.10671; Hugging Face
// Qwen2Config / modeling_qwen2.py; llama.cpp src/models/qwen2.cpp read for the GGUF graph):
// Llama's decoder with a bias on the q, k and v projections (none on attn_output) and NEOX-ordered
// RoPE (rotate_half):
//   q = Wq·rms(x) + bq, k = Wk·rms(x) + bk, v = Wv·rms(x) + bv   (blk.N.attn_{q,k,v}.bias)
// Keys: the common ones (rope.freq_base is typically 1e6). Sliding-window keys of Qwen2's config
// (use_sliding_window) are off in every released model and not converted.
#include "model/architectures.h"

namespace pagellm {

void configure_qwen2(const GgufFile& /*f*/, LlamaConfig& c) {
  c.rope_type = RopeType::kNeox;
  c.attention_bias = true;
}

}  // namespace pagellm

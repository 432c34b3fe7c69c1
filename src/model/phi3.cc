// Phi-3 (Abdin et al. 2024, "Phi-3 Technical Report", arXiv:2404.14219; Hugging Face Phi3Config /
// modeling_phi3.py; llama.cpp src/models/phi3.cpp read for the GGUF graph): Llama's decoder with
// fused projections and NEOX-ordered RoPE:
//   qkv = Wqkv·rms(x)          attn_qkv [hidden, q_dim + 2 kv_dim]: rows q, then k, then v
//   q *= 1/sqrt(head_dim) before attention (whose own scale is then 1)
//   gu = Wup·rms(x)            ffn_up [hidden, 2 ffn]: rows gate, then up; x += Wdown·(silu(gate) * up)
// Not implemented (refused, naming the key or tensor): LongRoPE (rope_factors_long/short of the
// 128k-context models). phi3.attention.sliding_window (2047 in Phi-3-mini's config) is ignored,
// as llama.cpp does (its Phi-3 graph runs every layer with full attention).
#include "core/error.h"
#include "model/architectures.h"

namespace pagellm {

void configure_phi3(const GgufFile& f, LlamaConfig& c) {
  c.rope_type = RopeType::kNeox;
  c.fused_qkv = true;
  c.fused_gate_up = true;
  c.scale_q = true;
  for (const char* t : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    if (f.find_tensor(t)) {
      throw Error("model '" + f.path() + "': tensor '" + t + "' (Phi-3 LongRoPE) is not supported yet");
    }
  }
  refuse_key(f, c, "rope.scaling.attn_factor", "LongRoPE attention factor");
}

}  // namespace pagellm

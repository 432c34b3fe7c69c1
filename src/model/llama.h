// The decoder-only transformer of the Llama family (Touvron et al. 2023, "LLaMA"; GQA: Ainslie et
// al. 2023), shared by every architecture of src/model/architectures.h:
//   x = embed(tokens) [* embedding_scale]
//   per layer: x += [post_norm ·] Wo · attn(rope([qk_norm] Wq·rms(x) [+ bq]), rope(... k ...), Wv·rms(x) [+ bv])
//                                                     (causal, paged KV; sliding window on local layers)
//              x += [post_norm ·] Wdown · (act(Wgate·rms(x)) * Wup·rms(x))   (SwiGLU / GeGLU)
//   logits = Wout · rms(x)
// The bracketed parts and the RoPE pairing are LlamaConfig's per-architecture options; fused
// q/k/v and gate/up matrices (phi3) are split after their matmul. Weights are used in place from
// the memory-mapped GGUF file (ggml names: token_embd, blk.N.attn_q, ..., output_norm, output).
// Reference: llama.cpp src/models/llama.cpp; llama2.c run.c.
#pragma once

#include <initializer_list>
#include <memory>
#include <vector>

#include "core/huge_pages.h"
#include "core/thread_pool.h"
#include "format/gguf.h"
#include "kernels/cpu/ops.h"
#include "kv/kv_cache.h"
#include "model/forward_batch.h"
#include "model/llama_config.h"

namespace pagellm {

class LlamaModel {
 public:
  // Binds the weights of `file` (which must outlive the model). Throws pagellm::Error naming the
  // tensor for a missing tensor, a wrong shape or an unsupported dtype. isa: the kernels every
  // op of this model runs on, chosen once here (throws when the CPU lacks it); any value gives
  // the same bits (docs/design.md, "Kernel table"). Matmul weights are repacked into model-owned
  // memory when kernels::repack_pays (isa >= kAvx2, >= 16 rows; same bytes) and their pages of
  // the mapping are dropped, so the resident size stays about the file's.
  LlamaModel(const GgufFile& file, ThreadPool* pool, kernels::Isa isa = kernels::default_isa());

  const LlamaConfig& config() const { return config_; }
  // Shape of the KV cache this model needs, with the given element type (F32 or F16).
  KvCacheShape kv_shape(GgmlType dtype) const;
  // Bytes of all weights.
  int64_t weight_bytes() const { return weight_bytes_; }
  // Weight bytes one decode step reads (bytes per generated token): every weight, except that an
  // untied token_embd table contributes only the one row looked up (it is not streamed).
  int64_t decode_bytes_per_token() const {
    if (token_embd_.data == output_.data) return weight_bytes_;
    return weight_bytes_ - token_embd_.rows * token_embd_.row_bytes() + token_embd_.row_bytes();
  }

  // One forward pass over a flat batch (see ForwardBatch). Writes every token's K/V into
  // kv_cache at its layer group's slot_mapping, then attends through that group's block_tables.
  //   workspace: the kernels' scratch (the caller's, one per model; ModelRunner owns it).
  //   logits: [batch.logits_indices.size(), vocab_size] f32, resized.
  // Preconditions (checked): token ids in [0, vocab), positions < max_position_embeddings, slots
  // inside the cache. The caller guarantees earlier positions of each sequence are already cached.
  void forward(const ForwardBatch& batch, KvCache& kv_cache, kernels::Workspace& workspace, std::vector<float>& logits);

 private:
  struct Layer {
    const float* attn_norm;                    // [hidden]
    kernels::WeightView wq, wk, wv, wo;        // wq .. wv unused when fused_qkv
    kernels::WeightView w_qkv;                 // fused_qkv: [q_dim + 2 kv_dim, hidden]
    const float* bq = nullptr;                 // attention_bias: [q_dim]
    const float* bk = nullptr;                 // [kv_dim]
    const float* bv = nullptr;                 // [kv_dim]
    const float* q_norm = nullptr;             // qk_norm: [head_dim]
    const float* k_norm = nullptr;             // [head_dim]
    const float* post_attn_norm = nullptr;     // post_norms: [hidden]
    const float* ffn_norm;                     // [hidden]
    kernels::WeightView w_gate, w_up, w_down;  // w_gate unused when fused_gate_up
    kernels::WeightView w_gate_up;             // fused_gate_up: [2 ffn, hidden]
    const float* post_ffn_norm = nullptr;      // post_norms: [hidden]
  };
  // for_matmul: the tensor is read only by kernels::matmul (so it may be repacked).
  kernels::WeightView bind(const GgufFile& f, const std::string& name, int64_t rows, int64_t cols,
                           bool for_matmul = true);
  // An f32 vector of n elements (norm weights, biases, rope_freqs); n = 0: hidden_size.
  const float* bind_norm(const GgufFile& f, const std::string& name, int64_t n = 0);
  void bind_layer(const GgufFile& f, int64_t i);
  void check_batch(const ForwardBatch& batch, const KvCache& kv_cache) const;
  // Attention, output projection and residual of one layer. keep (ascending token indices, or
  // nullptr for all): every token's K/V is written, but queries and everything after only for
  // these rows, as rows 0 .. size - 1 (of q_, attn_, x_).
  void attention_block(const Layer& l, int32_t layer, const ForwardBatch& batch, KvCache& kv_cache,
                       kernels::Workspace& ws, const std::vector<int64_t>* keep = nullptr);
  void mlp_block(const Layer& l, int64_t num_tokens, kernels::Workspace& ws);
  // x_ += out_ rows, after the post norm when there is one (post_norms).
  void residual_add(const float* post_norm, int64_t num_tokens);
  // xn_ = rms_norm(rows of x_) for the matrices in `ws`; when one of them is Q8_0 / Q4_0, also
  // xq_ = those rows quantized to q8_0 in the same pass (kernels::rms_norm_rows), shared by
  // them. Returns xq_.data(), or nullptr when none is quantized. rows: num_rows row indices of
  // x_ (nullptr: rows 0 .. num_rows - 1).
  const BlockQ8_0* norm_for(std::initializer_list<const kernels::WeightView*> ws, const float* weight,
                            const int64_t* rows, int64_t num_rows);
  // fn(t0, t1) over [0, num_tokens): split across pool_ for a long batch (prefill), else on the
  // caller. For the per-token work between matmuls (norms, rope, the gate, residuals): each token
  // is computed alone, so the split changes no bits.
  void for_tokens(int64_t num_tokens, const std::function<void(int64_t, int64_t)>& fn);

  LlamaConfig config_;
  ThreadPool* pool_;
  kernels::Isa isa_;
  kernels::WeightView token_embd_;  // [vocab, hidden]
  kernels::WeightView output_;      // [vocab, hidden]
  const float* output_norm_ = nullptr;
  std::vector<Layer> layers_;
  int64_t weight_bytes_ = 0;
  std::vector<HugePageBuffer> repacked_;  // storage of repacked weights (huge pages: core/huge_pages.h)

  // Scratch, resized per call: [num_tokens, *] f32.
  const float* rope_freqs_ = nullptr;  // rope_freqs: [rope_dim / 2]
  std::vector<float> x_, xn_, q_, k_, v_, attn_, gate_, up_, out_;
  std::vector<float> fused_;  // fused_qkv / fused_gate_up: the fused matmul's output, then split
  // [num_tokens, rope_dim]: kernels::rope_cos_sin_scaled per position, with rope_theta (global
  // layers) and rope_theta_swa (local layers, when the model has any).
  std::vector<float> rope_cos_sin_, rope_cos_sin_swa_;
  std::vector<BlockQ8_0> xq_;  // [num_tokens, hidden / 32]: xn_ quantized (norm_for)
};

}  // namespace pagellm

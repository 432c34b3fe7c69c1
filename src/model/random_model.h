// Random-weight Llama GGUF files with the exact tensor shapes and hyper-parameters of named real
// models, for benchmarks and tests that need a model of a given size but not a trained one.
//
// The file is what llama.cpp's converter would write for the real model (same tensor names, ggml
// shapes and `llama.*` keys), with weights drawn from a seeded generator instead of a checkpoint
// and the tokenizer (`tokenizer.*` keys, copied verbatim) taken from a vocab GGUF of our choice.
// Consequently the vocab size is the vocab file's token count, not the real model's: a
// "llama-3.2-1b" written with ggml-vocab-llama-spm.gguf has 32000 embedding rows, not 128256.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace pagellm {

// Hyper-parameters of a named shape (Hugging Face LlamaConfig meanings).
struct ModelShape {
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t context_length = 0;  // tokens; what the file records as llama.context_length
  float rope_theta = 10000.0f;
  float rms_norm_eps = 1e-5f;
  bool tie_word_embeddings = false;  // no output.weight: the LM head reuses token_embd.weight

  int64_t head_dim() const { return hidden_size / num_heads; }
};

// Named shapes, from each model's published config:
//   stories15M / stories42M / stories110M  karpathy/llama2.c TinyStories models (tied embeddings)
//   tinyllama-1.1b                         TinyLlama/TinyLlama-1.1B-Chat-v1.0
//   llama-3.2-1b                           meta-llama/Llama-3.2-1B; context capped at 8192 (real:
//                                          131072) and its llama3 RoPE scaling is not written
//   llama-2-7b                             meta-llama/Llama-2-7b-hf
//   tiny-gqa   2 layers, hidden 64, 4 heads, 2 KV heads, ffn 96: for fast tests
//   tiny-odd   1 layer, hidden 64, 4 heads, 4 KV heads, ffn 80: ffn_down rows of 80 elements
//              exercise the F16 fallback of quantized dtypes
std::optional<ModelShape> model_shape(const std::string& name);
std::vector<std::string> known_model_shapes();

// Parameters (elements of all tensors, norms included) of `shape` with `vocab_size` tokens.
// tinyllama-1.1b with 32000 tokens: 1,100,048,384 (llama.cpp reports the same).
int64_t count_parameters(const ModelShape& shape, int64_t vocab_size);

struct RandomModelSpec {
  std::string shape;               // a name from known_model_shapes()
  GgmlType dtype = GgmlType::F16;  // type of the 2-D weights: F32, F16, BF16, Q8_0 or Q4_0
  uint64_t seed = 0;
  std::string vocab_path;      // GGUF whose tokenizer.* keys are copied (vocab size = its tokens)
  int64_t num_layers = 0;      // 0: the shape's
  int64_t context_length = 0;  // 0: the shape's
};

// Writes a GGUF v3 file at `path` (through `path`.tmp, renamed when complete).
//
// Tensors, in ggml order ne = [cols, rows]: token_embd [hidden, vocab]; per layer blk.N.attn_norm
// [hidden] f32, attn_q [hidden, heads*head_dim], attn_k / attn_v [hidden, kv_heads*head_dim],
// attn_output [heads*head_dim, hidden], ffn_norm [hidden] f32, ffn_gate / ffn_up [hidden, ffn],
// ffn_down [ffn, hidden]; output_norm [hidden] f32; output [hidden, vocab] unless tied.
//
// Values, uniform on [-a, a), chosen so activations stay O(1) through any depth:
//   matrices    a = sqrt(3 / fan_in) (variance 1 / cols); attn_output and ffn_down, which add into
//               the residual stream, are further scaled by 1 / sqrt(2 * num_layers)
//   token_embd  a = sqrt(3 / hidden) (rows of norm ~1; tied logits then have variance ~1)
//   norms       1 + uniform(-0.1, 0.1), always F32
// Each row is generated from (seed, tensor name, row index) alone, so the bytes depend on nothing
// else (not on the thread count, nor on the number of layers for the tensors both files have).
//
// A quantized dtype whose block size does not divide a tensor's row length stores that tensor as
// F16 instead, as llama-quantize does. general.file_type records the requested dtype.
//
// Memory: tensors are generated in chunks of rows and streamed to disk; peak use is the header
// (mostly the copied vocab) plus a few tens of MiB, whatever the model size.
//
// Throws pagellm::Error for an unknown shape (the message lists the known ones), an unsupported
// dtype, an unreadable vocab file or one without tokenizer.ggml.tokens, a bad override, or a
// file that cannot be written.
void write_random_model(const RandomModelSpec& spec, const std::string& path);

}  // namespace pagellm

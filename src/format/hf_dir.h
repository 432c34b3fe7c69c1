// Hugging Face model directories (what `huggingface-cli download` leaves): config.json,
// model.safetensors or model-0000N-of-0000M.safetensors + model.safetensors.index.json,
// tokenizer.json, tokenizer_config.json, generation_config.json (optional).
//
// open_hf_directory presents the directory as the GGUF file that llama.cpp's
// convert_hf_to_gguf.py would make of it: the same metadata keys (general.*, <arch>.*,
// tokenizer.ggml.*, tokenizer.chat_template, general.sampling.*) and tensor names and shapes, so
// that every consumer of a GgufFile (the model, the tokenizer, `pagellm info`) runs on it
// unchanged. Weights are used in place from the memory-mapped safetensors files; only what the
// conversion changes is copied: Llama's q/k rows (permuted from Hugging Face's rotate-half order
// to GGUF's interleaved one), 1-D tensors (norms, biases: to F32) and rope_freqs (computed).
//
// Architectures: LlamaForCausalLM (and MistralForCausalLM without a sliding window) -> llama,
// Qwen2ForCausalLM -> qwen2, Qwen3ForCausalLM -> qwen3. Weights: F32, F16, BF16.
// Tokenizers: tokenizer.json's BPE model, either SentencePiece-style (normalizer Replace " " ->
// "▁", optional Prepend "▁", or a Metaspace pre-tokenizer; byte fallback) or byte-level
// (ByteLevel pre-tokenizer with the GPT-2, Llama 3, Qwen2 or SmolLM split).
//
// Every error is a pagellm::Error naming the file and the field (or tensor) that is wrong.
#pragma once

#include <memory>
#include <string>

#include "format/gguf.h"

namespace pagellm {

// Throws pagellm::Error: a missing or malformed file, a missing or invalid field, an
// unsupported architecture, dtype or tokenizer, a tensor of the wrong shape.
std::unique_ptr<GgufFile> open_hf_directory(const std::string& dir);

// For an error raised by a consumer of open_hf_directory's GGUF view (the model's loader): the
// Hugging Face names of the GGUF keys and tensors that `message` mentions, as a sentence to append
// ("" when it mentions none): "<arch>.block_count" is config.json's "num_hidden_layers",
// 'blk.1.ffn_up.weight' is 'model.layers.1.mlp.up_proj.weight' of the safetensors files.
std::string hf_names_in(const std::string& message);

// A GGUF file, or a Hugging Face directory when `path` is a directory. Throws pagellm::Error.
std::unique_ptr<GgufFile> open_model_file(const std::string& path);

}  // namespace pagellm

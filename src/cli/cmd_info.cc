#include <cstdio>
#include <iterator>
#include <memory>
#include <string>
#include <variant>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/engine_config.h"
#include "engine/generation_defaults.h"
#include "engine/llm.h"
#include "format/hf_dir.h"
#include "kv/kv_cache_layout.h"
#include "model/llama_config.h"

namespace pagellm::cli {
namespace {

std::string value_to_string(const GgufValue& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return std::to_string(*u);
  if (const auto* i = std::get_if<int64_t>(&v.v)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v.v)) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.9g", *d);
    return buf;
  }
  if (const auto* b = std::get_if<bool>(&v.v)) return *b ? "true" : "false";
  if (const auto* s = std::get_if<std::string>(&v.v)) {
    std::string out = "\"";
    for (char c : s->size() > 80 ? s->substr(0, 80) : *s) out += (c == '\n') ? std::string("\\n") : std::string(1, c);
    return out + (s->size() > 80 ? "\"... (" + std::to_string(s->size()) + " bytes)" : "\"");
  }
  const auto& a = std::get<GgufArray>(v.v);
  std::string out = std::string("[") + gguf_type_name(a.elem_type) + " x " + std::to_string(a.items.size()) + "]";
  if (!a.items.empty()) {
    out += " {";
    for (size_t i = 0; i < a.items.size() && i < 4; ++i) out += (i ? ", " : "") + value_to_string(a.items[i]);
    out += a.items.size() > 4 ? ", ...}" : "}";
  }
  return out;
}

// general.file_type: what most of the file's tensors are (llama.cpp's llama_ftype, which the GGUF
// specification, ggml docs/gguf.md, refers to). Values the format has retired print bare.
std::string file_type_name(uint64_t v) {
  static constexpr const char* kNames[] = {
      "ALL_F32",       "MOSTLY_F16",     "MOSTLY_Q4_0",   "MOSTLY_Q4_1",   nullptr,         nullptr,
      nullptr,         "MOSTLY_Q8_0",    "MOSTLY_Q5_0",   "MOSTLY_Q5_1",   "MOSTLY_Q2_K",   "MOSTLY_Q3_K_S",
      "MOSTLY_Q3_K_M", "MOSTLY_Q3_K_L",  "MOSTLY_Q4_K_S", "MOSTLY_Q4_K_M", "MOSTLY_Q5_K_S", "MOSTLY_Q5_K_M",
      "MOSTLY_Q6_K",   "MOSTLY_IQ2_XXS", "MOSTLY_IQ2_XS", "MOSTLY_Q2_K_S", "MOSTLY_IQ3_XS", "MOSTLY_IQ3_XXS",
      "MOSTLY_IQ1_S",  "MOSTLY_IQ4_NL",  "MOSTLY_IQ3_S",  "MOSTLY_IQ3_M",  "MOSTLY_IQ2_S",  "MOSTLY_IQ2_M",
      "MOSTLY_IQ4_XS", "MOSTLY_IQ1_M",   "MOSTLY_BF16",   nullptr,         nullptr,         nullptr,
      "MOSTLY_TQ1_0",  "MOSTLY_TQ2_0"};
  const std::string n = std::to_string(v);
  if (v < std::size(kNames) && kNames[v] != nullptr) return n + " (" + kNames[v] + ")";
  return v == 1024 ? n + " (GUESSED)" : n;
}

int run_info(const std::string& path) {
  auto f = open_model_file(path);
  if (f->version() == 0) {
    std::printf("directory: %s\nHugging Face directory, shown as its GGUF conversion\n\n", path.c_str());
  } else {
    std::printf("file: %s\nGGUF version: %u, %llu bytes, alignment %llu, data at offset %llu\n\n", path.c_str(),
                f->version(), static_cast<unsigned long long>(f->file_size()),
                static_cast<unsigned long long>(f->alignment()), static_cast<unsigned long long>(f->data_offset()));
  }
  std::printf("metadata (%zu keys):\n", f->metadata().size());
  for (const auto& [key, value] : f->metadata()) {
    std::string shown = value_to_string(value);
    if (key == "general.file_type") {
      if (const auto* u = std::get_if<uint64_t>(&value.v)) shown = file_type_name(*u);
    }
    std::printf("  %-45s %-8s %s\n", key.c_str(), gguf_type_name(value.type), shown.c_str());
  }
  std::printf("\ntensors (%zu):\n", f->tensors().size());
  int64_t params = 0;
  uint64_t bytes = 0;
  for (const GgufTensorInfo& t : f->tensors()) {
    std::string shape;
    for (int64_t d : t.ne) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    std::printf("  %-32s %-6s [%s] %llu bytes\n", t.name.c_str(), type_name(t.type).c_str(), shape.c_str(),
                static_cast<unsigned long long>(t.size_bytes));
    params += t.num_elements();
    bytes += t.size_bytes;
  }
  std::printf("\nparameters: %lld\ntensor bytes: %llu (%.2f MiB)\n", static_cast<long long>(params),
              static_cast<unsigned long long>(bytes), bytes / 1048576.0);
  // Loaded as generate and serve load it, but in place (nothing repacked or copied): the exit
  // status says whether they would run the file, and the error names the key or tensor at fault.
  LoadedModel loaded;
  try {
    loaded = load_model_and_tokenizer(*f, path, nullptr, kernels::Isa::kScalar);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (pagellm generate and serve refuse this file)");
  }
  {
    const LlamaConfig& c = loaded.model->config();
    const Tokenizer& tok = *loaded.tokenizer;
    const int64_t f32 = kv_bytes_per_token(c, GgmlType::F32);
    const int64_t f16 = kv_bytes_per_token(c, GgmlType::F16);
    EngineConfig generate_defaults;  // generate / bench: one context
    EngineConfig serve_defaults = generate_defaults;
    serve_defaults.kv_cache_default_contexts = 16;
    std::printf(
        "model: %s, hidden_size %lld, layers %lld, heads %lld, kv_heads %lld, head_dim %lld, ffn %lld, vocab %lld, "
        "context %lld tokens\n",
        c.architecture.c_str(), static_cast<long long>(c.hidden_size), static_cast<long long>(c.num_hidden_layers),
        static_cast<long long>(c.num_attention_heads), static_cast<long long>(c.num_key_value_heads),
        static_cast<long long>(c.head_dim), static_cast<long long>(c.intermediate_size),
        static_cast<long long>(c.vocab_size), static_cast<long long>(c.max_position_embeddings));
    const KvCacheLayout layout = kv_cache_shape(c, GgmlType::F32).layout();
    const int64_t context_blocks =
        max_blocks_per_request(layout.group_sliding_window, generate_defaults.block_size, c.max_position_embeddings,
                               generate_defaults.max_num_batched_tokens);
    if (layout.num_groups() > 1) {
      std::printf("KV cache groups: %d of %d layers each (full attention and sliding window %lld)\n",
                  layout.num_groups(), layout.num_lanes, static_cast<long long>(c.sliding_window));
    }
    std::printf("KV bytes per block slot: %lld (f32), %lld (f16); full context: %.2f MiB (f32)\n",
                static_cast<long long>(f32), static_cast<long long>(f16),
                static_cast<double>(f32 * context_blocks * generate_defaults.block_size) / 1048576.0);
    std::printf("default KV pool (f32, %d-token blocks): generate/bench %d blocks, serve %d blocks\n",
                generate_defaults.block_size, plan_kv_cache(generate_defaults, c), plan_kv_cache(serve_defaults, c));
    std::printf("tokenizer: %d tokens, bos id %d, eos id %d (-1: none)\n", tok.vocab_size(), tok.bos_id(),
                tok.eos_id());
  }
  for (const std::string& w : loaded.warnings) std::printf("warning: %s\n", one_line(w).c_str());
  try {  // serve's sampling defaults (general.sampling.*); generate does not read them
    (void)generation_defaults(*f);
  } catch (const Error& e) {
    std::printf("warning: %s (serve refuses this with --generation-config auto, its default; vllm ignores it)\n",
                one_line(e.what()).c_str());
  }
  std::printf("runs: yes (every tensor bound, the tokenizer loaded)\n");
  return 0;
}

}  // namespace

Handler add_info(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  app.add_option("model", *path, "GGUF file or Hugging Face directory")->required();
  return [path] { return run_info(*path); };
}

}  // namespace pagellm::cli

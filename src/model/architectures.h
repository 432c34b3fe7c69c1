// The architectures pagellm runs, one file each (src/model/<arch>.cc), all on the decoder of
// src/model/llama.cc. An architecture's configure function reads its own `<arch>.*` keys (after
// LlamaConfig::from_gguf has read the common ones) and sets the options of LlamaConfig; it throws
// pagellm::Error naming the file and key for a missing or invalid one.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "format/gguf.h"
#include "model/llama_config.h"

namespace pagellm {

struct Architecture {
  std::string_view name;  // general.architecture
  void (*configure)(const GgufFile& f, LlamaConfig& c);
};

void configure_llama(const GgufFile& f, LlamaConfig& c);   // llama_config.cc
void configure_qwen2(const GgufFile& f, LlamaConfig& c);   // qwen2.cc
void configure_qwen3(const GgufFile& f, LlamaConfig& c);   // qwen3.cc
void configure_gemma3(const GgufFile& f, LlamaConfig& c);  // gemma3.cc
void configure_phi3(const GgufFile& f, LlamaConfig& c);    // phi3.cc

inline std::span<const Architecture> architectures() {
  static constexpr Architecture kAll[] = {{"llama", configure_llama},
                                          {"qwen2", configure_qwen2},
                                          {"qwen3", configure_qwen3},
                                          {"gemma3", configure_gemma3},
                                          {"phi3", configure_phi3}};
  return kAll;
}

// Helpers of the configure functions: an optional `<arch>.key` as u64 in [1, max] / as a
// positive f32, else `fallback`; a required one throws naming the key when absent.
int64_t arch_u64(const GgufFile& f, const LlamaConfig& c, const std::string& key, uint64_t max, int64_t fallback);
int64_t arch_u64(const GgufFile& f, const LlamaConfig& c, const std::string& key, uint64_t max);
// fallback nullopt: the key is required.
float arch_f32(const GgufFile& f, const LlamaConfig& c, const std::string& key, std::optional<float> fallback);
// Throws naming the key when `<arch>.key` is present: a feature this architecture's file does not
// implement (what = what it is).
void refuse_key(const GgufFile& f, const LlamaConfig& c, const std::string& key, const std::string& what);

}  // namespace pagellm

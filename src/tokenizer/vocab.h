// Token table shared by the SPM and BPE tokenizers: id <-> text, scores, attributes.
//
// Token types follow llama.cpp's llama_token_type (gguf `tokenizer.ggml.token_type`):
// 0 undefined, 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
// They become attribute bits (llama_token_attr) so that load-time fix-ups can add flags
// (e.g. an end-of-generation token that was typed normal becomes control, as llama.cpp does).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace pagellm {

enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Bit flags; values as llama.cpp's llama_token_attr.
namespace token_attr {
inline constexpr uint32_t kUndefined = 0;
inline constexpr uint32_t kUnknown = 1u << 0;
inline constexpr uint32_t kUnused = 1u << 1;
inline constexpr uint32_t kNormal = 1u << 2;
inline constexpr uint32_t kControl = 1u << 3;
inline constexpr uint32_t kUserDefined = 1u << 4;
inline constexpr uint32_t kByte = 1u << 5;
inline constexpr uint32_t kLstrip = 1u << 7;  // eat whitespace left of the token when parsing specials
inline constexpr uint32_t kRstrip = 1u << 8;  // eat whitespace right of the token when parsing specials
}  // namespace token_attr

uint32_t token_type_to_attr(int64_t type);

class Vocab {
 public:
  // `scores` may be empty (all 0); `attrs` has one entry per token. Empty texts are replaced by
  // "[EMPTY_<id>]" and a repeated text maps to its last id, as in llama.cpp.
  Vocab(std::vector<std::string> texts, std::vector<float> scores, std::vector<uint32_t> attrs);
  Vocab(const Vocab&) = delete;  // ids_ views into texts_
  Vocab& operator=(const Vocab&) = delete;

  int32_t size() const { return static_cast<int32_t>(texts_.size()); }
  bool valid(int32_t id) const { return id >= 0 && id < size(); }
  const std::string& text(int32_t id) const { return texts_[id]; }
  float score(int32_t id) const { return scores_.empty() ? 0.0f : scores_[id]; }
  uint32_t attr(int32_t id) const { return attrs_[id]; }
  void add_attr(int32_t id, uint32_t bits) { attrs_[id] |= bits; }
  void clear_attr(int32_t id, uint32_t bits) { attrs_[id] &= ~bits; }
  bool has_attr(int32_t id, uint32_t bits) const { return (attrs_[id] & bits) != 0; }

  // -1 when `text` is not a token.
  int32_t find(std::string_view text) const {
    auto it = ids_.find(text);
    return it == ids_.end() ? -1 : it->second;
  }

 private:
  std::vector<std::string> texts_;
  std::vector<float> scores_;
  std::vector<uint32_t> attrs_;
  std::unordered_map<std::string_view, int32_t> ids_;  // views into texts_, never resized
};

}  // namespace pagellm

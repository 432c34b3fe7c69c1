#include "tokenizer/vocab.h"

#include <utility>

#include "core/error.h"

namespace pagellm {

uint32_t token_type_to_attr(int64_t type) {
  switch (type) {
    case static_cast<int64_t>(TokenType::kNormal): return token_attr::kNormal;
    case static_cast<int64_t>(TokenType::kUnknown): return token_attr::kUnknown;
    case static_cast<int64_t>(TokenType::kControl): return token_attr::kControl;
    case static_cast<int64_t>(TokenType::kUserDefined): return token_attr::kUserDefined;
    case static_cast<int64_t>(TokenType::kUnused): return token_attr::kUnused;
    case static_cast<int64_t>(TokenType::kByte): return token_attr::kByte;
    default: return token_attr::kUndefined;  // 0 and out-of-range values, as llama.cpp
  }
}

Vocab::Vocab(std::vector<std::string> texts, std::vector<float> scores, std::vector<uint32_t> attrs)
    : texts_(std::move(texts)), scores_(std::move(scores)), attrs_(std::move(attrs)) {
  PAGELLM_CHECK(attrs_.size() == texts_.size(), "one attribute per token");
  PAGELLM_CHECK(scores_.empty() || scores_.size() >= texts_.size(), "one score per token");
  ids_.reserve(texts_.size());
  for (size_t i = 0; i < texts_.size(); ++i) {
    if (texts_[i].empty()) texts_[i] = "[EMPTY_" + std::to_string(i) + "]";
  }
  for (size_t i = 0; i < texts_.size(); ++i)
    ids_.insert_or_assign(std::string_view(texts_[i]), static_cast<int32_t>(i));
}

}  // namespace pagellm

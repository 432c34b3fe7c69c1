#include "engine/detokenizer.h"

#include <algorithm>

#include "engine/utf8_stream.h"

namespace pagellm {

IncrementalDetokenizer::Delta IncrementalDetokenizer::push(std::string_view piece) {
  Delta d;
  if (stopped_) return d;
  const size_t old_len = text_.size();
  text_.append(piece);
  // 1. A stop string that ends in the new bytes. Search from the earliest start that could
  //    overlap them; take the earliest match.
  size_t cut = std::string::npos;
  for (const std::string& s : stop_) {
    if (s.empty()) continue;
    const size_t from = old_len >= s.size() - 1 ? old_len - (s.size() - 1) : 0;
    const size_t p = text_.find(s, std::max(from, released_));
    if (p != std::string::npos && (cut == std::string::npos || p < cut)) {
      cut = p;
      d.stop_hit = s;
    }
  }
  if (d.stop_hit) {
    text_.resize(cut);
    stopped_ = true;
    d.text = text_.substr(released_);
    released_ = text_.size();
    return d;
  }
  // 2. Hold back the longest suffix that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& s : stop_) {
    for (size_t k = std::min(s.size() - (s.empty() ? 0 : 1), text_.size() - released_); k > hold; --k) {
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  // 3. Never end inside a UTF-8 character.
  const size_t end = utf8_complete_prefix(std::string_view(text_).substr(0, text_.size() - hold));
  if (end > released_) {
    d.text = text_.substr(released_, end - released_);
    released_ = end;
  }
  return d;
}

std::string IncrementalDetokenizer::flush() {
  std::string rest = text_.substr(released_);
  released_ = text_.size();
  return rest;
}

}  // namespace pagellm

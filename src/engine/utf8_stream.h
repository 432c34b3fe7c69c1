// Incremental detokenization helper: accumulates token pieces (raw bytes) and releases only text
// that does not end inside a multi-byte UTF-8 character (RFC 3629).
#pragma once

#include <string>
#include <string_view>

namespace pagellm {

class Utf8Stream {
 public:
  // Appends bytes; returns the newly complete text (possibly empty).
  std::string push(std::string_view bytes);
  // Returns whatever is pending, complete or not (end of stream).
  std::string flush();

 private:
  std::string pending_;
};

// Length of the longest prefix of s that does not end inside a UTF-8 sequence. Invalid bytes count
// as complete (they are passed through rather than held forever).
size_t utf8_complete_prefix(std::string_view s);

}  // namespace pagellm

// Incremental detokenization with stop strings, per request.
//
// Text is the concatenation of the generated tokens' pieces (raw bytes). Each step releases only
// text that (a) does not end inside a UTF-8 character and (b) cannot be the start of a stop
// string; a stop string, once matched, is never released and ends the request. So the
// concatenation of all deltas equals the final text, and no stop string is ever emitted, even one
// that spans tokens or ends inside a token.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagellm {

class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(std::vector<std::string> stop) : stop_(std::move(stop)) {}

  struct Delta {
    std::string text;                     // newly releasable text
    std::optional<std::string> stop_hit;  // the stop string that matched (text cut before it)
  };
  // Appends one token's piece.
  Delta push(std::string_view piece);
  // End of the request (not by a stop string): everything held back is released.
  std::string flush();
  // All text released so far plus what is held back (the final text when finished).
  const std::string& text() const { return text_; }

 private:
  std::vector<std::string> stop_;
  std::string text_;     // all text, stop string removed once matched
  size_t released_ = 0;  // bytes of text_ already returned
  bool stopped_ = false;
};

}  // namespace pagellm

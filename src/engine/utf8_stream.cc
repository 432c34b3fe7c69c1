#include "engine/utf8_stream.h"

namespace pagellm {

size_t utf8_complete_prefix(std::string_view s) {
  // Look back at most 3 bytes for the lead byte of the last sequence.
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t len = 1;
    if ((c & 0xE0) == 0xC0)
      len = 2;
    else if ((c & 0xF0) == 0xE0)
      len = 3;
    else if ((c & 0xF8) == 0xF0)
      len = 4;
    return back < len ? n - back : n;
  }
  return n;
}

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  const size_t k = utf8_complete_prefix(pending_);
  std::string out = pending_.substr(0, k);
  pending_.erase(0, k);
  return out;
}

std::string Utf8Stream::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace pagellm

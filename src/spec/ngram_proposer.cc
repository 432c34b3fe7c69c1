#include "spec/ngram_proposer.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace pagellm {

std::vector<int32_t> propose_ngram(std::span<const int32_t> token_ids, const NgramParams& params, int32_t k) {
  if (params.ngram_min < 1 || params.ngram_max < params.ngram_min) {
    throw Error("ngram_min must be >= 1 and ngram_max >= ngram_min (got " + std::to_string(params.ngram_min) + ", " +
                std::to_string(params.ngram_max) + ")");
  }
  const auto len = static_cast<int64_t>(token_ids.size());
  if (k <= 0) return {};
  for (int64_t n = std::min<int64_t>(params.ngram_max, len - 1); n >= params.ngram_min; --n) {
    const std::span<const int32_t> suffix = token_ids.subspan(static_cast<size_t>(len - n));
    // Latest start s < len - n with token_ids[s, s + n) == suffix.
    for (int64_t s = len - n - 1; s >= 0; --s) {
      if (!std::equal(suffix.begin(), suffix.end(), token_ids.begin() + s)) continue;
      const int64_t from = s + n;
      const int64_t to = std::min<int64_t>(from + k, len);
      return {token_ids.begin() + from, token_ids.begin() + to};
    }
  }
  return {};
}

}  // namespace pagellm

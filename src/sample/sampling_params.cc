#include "sample/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "core/error.h"

namespace pagellm {
namespace {

template <typename T>
[[noreturn]] void fail(const char* field, T value, const char* requirement) {
  std::ostringstream os;
  os << "SamplingParams." << field << " " << requirement << ", got " << value;
  throw Error(os.str());
}

}  // namespace

void SamplingParams::validate(int32_t vocab_size) const {
  PAGELLM_CHECK(vocab_size > 0, "vocab_size=" + std::to_string(vocab_size));
  if (!std::isfinite(temperature) || temperature < 0.0f) fail("temperature", temperature, "must be finite and >= 0");
  if (top_k < -1) fail("top_k", top_k, "must be -1, 0 (off) or positive");
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("top_p", top_p, "must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail("min_p", min_p, "must be in [0, 1]");
  if (!(repetition_penalty >= kMinRepetitionPenalty && repetition_penalty <= kMaxRepetitionPenalty)) {
    fail("repetition_penalty", repetition_penalty, "must be in [0.01, 100]");
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    fail("presence_penalty", presence_penalty, "must be in [-2, 2]");
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    fail("frequency_penalty", frequency_penalty, "must be in [-2, 2]");
  }
  if (logprobs < -1 || logprobs > vocab_size) {
    fail("logprobs", logprobs, ("must be -1 (none) or in [0, " + std::to_string(vocab_size) + "]").c_str());
  }
  std::vector<int32_t> ids;
  ids.reserve(logit_bias.size());
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size) {
      fail("logit_bias token id", id, ("must be in [0, " + std::to_string(vocab_size) + ")").c_str());
    }
    if (!std::isfinite(bias)) fail("logit_bias value", bias, "must be finite");
    ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  const auto dup = std::adjacent_find(ids.begin(), ids.end());
  if (dup != ids.end()) fail("logit_bias token id", *dup, "must appear once");
}

}  // namespace pagellm

#include "engine/generation_defaults.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "core/error.h"

namespace pagellm {
namespace {

// The key's value as a float, or `dflt` when absent; throws naming the key when outside [lo, hi]
// (`open_lo`: lo itself excluded).
float number(const GgufFile& f, const std::string& key, float dflt, float lo, float hi, bool open_lo = false) {
  if (f.find(key) == nullptr) return dflt;
  const float x = f.get_f32(key);
  if (!std::isfinite(x) || x < lo || (open_lo && x == lo) || x > hi) {
    throw Error("'" + f.path() + "': " + key + " = " + std::to_string(x) + " is outside " + (open_lo ? "(" : "[") +
                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return x;
}

}  // namespace

SamplingParams generation_defaults(const GgufFile& file) {
  SamplingParams s;
  s.temperature = number(file, "general.sampling.temp", s.temperature, 0.0f, std::numeric_limits<float>::max());
  s.top_p = number(file, "general.sampling.top_p", s.top_p, 0.0f, 1.0f, /*open_lo=*/true);
  s.min_p = number(file, "general.sampling.min_p", s.min_p, 0.0f, 1.0f);
  s.repetition_penalty = number(file, "general.sampling.penalty_repeat", s.repetition_penalty, kMinRepetitionPenalty,
                                kMaxRepetitionPenalty);
  if (file.find("general.sampling.top_k") != nullptr) {
    const int64_t k = file.get_i64("general.sampling.top_k");
    if (k < -1 || k > INT32_MAX) {
      throw Error("'" + file.path() + "': general.sampling.top_k = " + std::to_string(k) + " is outside [-1, 2^31)");
    }
    s.top_k = static_cast<int32_t>(k);
  }
  return s;
}

}  // namespace pagellm

#include "engine/generation_defaults.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
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
    char range[96];  // %g: "[0, 3.40282e+38]", not 39 digits of FLT_MAX
    std::snprintf(range, sizeof range, "%s%g, %g]", open_lo ? "(" : "[", static_cast<double>(lo),
                  static_cast<double>(hi));
    char value[32];
    std::snprintf(value, sizeof value, "%g", static_cast<double>(x));
    throw Error("'" + f.path() + "': " + key + " = " + value + " is outside " + range);
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

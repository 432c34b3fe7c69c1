// Per-request sampling parameters, with vLLM / OpenAI semantics.
//
// Reference: vLLM `vllm/sampling_params.py` (field names, ranges, "0 or -1 disables top_k",
// temperature below 1e-5 means greedy) and the OpenAI Chat Completions API (presence /
// frequency penalty in [-2, 2], logit_bias). The order in which the fields act on the logits
// is documented in sample/sampler.h.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace pagellm {

// Temperatures below this are treated as 0 (greedy), as vLLM's _SAMPLING_EPS.
inline constexpr float kGreedyTemperatureEps = 1e-5f;

// repetition_penalty range. The penalty divides a positive logit by r and multiplies a negative
// one by r, so it scales a logit by up to max(r, 1/r); temperature (>= kGreedyTemperatureEps
// when not greedy) then divides it by up to 1e5. With r in [0.01, 100] a logit grows at most
// 1e7-fold, so any logit below ~3e31 in magnitude stays finite (model logits and the +-100 of
// logit_bias are many orders smaller). vLLM only requires r > 0, but r = 1e-37 turns a logit of
// 10 into +inf, and every token then being +inf or seen-and-infinite is a "model's output is not
// finite" failure the client caused. Typical values are 1.0-1.5.
inline constexpr float kMinRepetitionPenalty = 0.01f;
inline constexpr float kMaxRepetitionPenalty = 100.0f;

struct SamplingParams {
  // Logits are divided by this before softmax. 0 (or < kGreedyTemperatureEps): greedy argmax.
  float temperature = 1.0f;
  // Keep only the top_k most probable tokens; 0 or -1: off. Values >= vocab_size keep all.
  int32_t top_k = 0;
  // Nucleus: keep the smallest set of most probable tokens whose mass >= top_p. (0, 1]; 1: off.
  float top_p = 1.0f;
  // Keep tokens with prob >= min_p * (max prob). [0, 1]; 0: off.
  float min_p = 0.0f;
  // CTRL-style penalty on tokens seen in prompt or output. [kMinRepetitionPenalty,
  // kMaxRepetitionPenalty]; 1: off.
  float repetition_penalty = 1.0f;
  // OpenAI: logit -= presence_penalty * (count > 0), counted over output tokens. [-2, 2].
  float presence_penalty = 0.0f;
  // OpenAI: logit -= frequency_penalty * count, counted over output tokens. [-2, 2].
  float frequency_penalty = 0.0f;
  // (token id, bias) pairs added to the raw logits; ids unique and in [0, vocab_size).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Per-request RNG seed; unset: seeded from std::random_device.
  std::optional<uint64_t> seed;
  // -1: no top logprobs; k >= 0: return the k most probable tokens' logprobs (k <= vocab_size).
  int32_t logprobs = -1;

  // Throws pagellm::Error naming the field and the value when a field is out of range for a
  // model with `vocab_size` tokens. Precondition: vocab_size > 0.
  void validate(int32_t vocab_size) const;

  bool is_greedy() const { return temperature < kGreedyTemperatureEps; }
};

}  // namespace pagellm

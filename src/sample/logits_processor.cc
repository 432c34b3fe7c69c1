#include "sample/logits_processor.h"

#include <string>

#include "core/error.h"

namespace pagellm {

std::span<const int32_t> PenaltyScratch::count(int32_t vocab_size, std::span<const int32_t> prompt_token_ids,
                                               std::span<const int32_t> output_token_ids) {
  if (counts_.size() != static_cast<size_t>(vocab_size)) counts_.assign(vocab_size, 0);
  PAGELLM_CHECK(seen_.empty(), "PenaltyScratch::count called twice without reset()");
  for (const int32_t id : output_token_ids) {
    PAGELLM_CHECK(id >= 0 && id < vocab_size, "output token id " + std::to_string(id));
    if (counts_[id]++ == 0) seen_.push_back(id);
  }
  for (const int32_t id : prompt_token_ids) {
    PAGELLM_CHECK(id >= 0 && id < vocab_size, "prompt token id " + std::to_string(id));
    if (counts_[id] == 0) {
      counts_[id] = kPromptOnly;
      seen_.push_back(id);
    }
  }
  return seen_;
}

void PenaltyScratch::reset() {
  for (const int32_t id : seen_) counts_[id] = 0;
  seen_.clear();
}

void apply_bias_and_penalties(std::span<float> logits, const SamplingParams& params,
                              std::span<const int32_t> prompt_token_ids, std::span<const int32_t> output_token_ids,
                              PenaltyScratch& scratch) {
  const auto vocab_size = static_cast<int32_t>(logits.size());
  for (const auto& [id, bias] : params.logit_bias) {
    PAGELLM_CHECK(id >= 0 && id < vocab_size, "logit_bias id " + std::to_string(id) + " not validated");
    logits[id] += bias;
  }
  const float r = params.repetition_penalty;
  const float f = params.frequency_penalty;
  const float p = params.presence_penalty;
  if (r == 1.0f && f == 0.0f && p == 0.0f) return;
  // Repetition uses prompt tokens; frequency/presence do not, so skip the prompt walk if r == 1.
  const auto seen =
      scratch.count(vocab_size, r != 1.0f ? prompt_token_ids : std::span<const int32_t>{}, output_token_ids);
  for (const int32_t id : seen) {
    float& logit = logits[id];
    if (r != 1.0f) logit = logit > 0.0f ? logit / r : logit * r;
    const int32_t count = scratch.count_of(id);
    if (count > 0) {  // two steps, as vLLM: frequency first, then presence
      logit -= f * static_cast<float>(count);
      logit -= p;
    }
  }
  scratch.reset();
}

}  // namespace pagellm

// The argmax-changing logit edits: logit_bias, then penalties. Exposed on its own so tests can
// check hand-computed logits; Sampler calls it on its private copy of the logits.
//
// Penalty definitions (applied in this order, as vLLM v1 `apply_all_penalties`):
//  1. repetition_penalty r, on every distinct token seen in prompt or output (CTRL, Keskar et
//     al. 2019, arXiv:1909.05858; Hugging Face RepetitionPenaltyLogitsProcessor):
//       logit > 0 ? logit / r : logit * r
//  2. frequency_penalty f and 3. presence_penalty p, on output tokens only (OpenAI API docs):
//       logit -= f * count + p * (count > 0)
// Cost: O(len(prompt) + len(output) + len(logit_bias)), never O(vocab) per seen token.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sample/sampling_params.h"

namespace pagellm {

// Reusable scratch for counting seen tokens: a dense [vocab_size] count array, allocated on
// first use and reset after each call by walking only the touched ids.
class PenaltyScratch {
 public:
  // counts()[id]: occurrences in output; kPromptOnly if seen only in the prompt; 0 if unseen.
  static constexpr int32_t kPromptOnly = -1;

  // Fills counts for prompt+output; returns the distinct ids seen (in first-seen order).
  std::span<const int32_t> count(int32_t vocab_size, std::span<const int32_t> prompt_token_ids,
                                 std::span<const int32_t> output_token_ids);
  int32_t count_of(int32_t token_id) const { return counts_[token_id]; }
  // Zeroes the counts touched by the last count() call.
  void reset();

 private:
  std::vector<int32_t> counts_;  // [vocab_size]
  std::vector<int32_t> seen_;    // [num distinct seen]
};

// Adds params.logit_bias, then applies the penalties above, in place.
// logits: [vocab_size]. Preconditions (PAGELLM_CHECK): params validated for this vocab_size;
// every prompt / output token id in [0, vocab_size).
void apply_bias_and_penalties(std::span<float> logits, const SamplingParams& params,
                              std::span<const int32_t> prompt_token_ids, std::span<const int32_t> output_token_ids,
                              PenaltyScratch& scratch);

}  // namespace pagellm

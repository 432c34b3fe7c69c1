// N-gram (prompt lookup) proposer for speculative decoding: the draft tokens are the ones that
// followed an earlier occurrence of the sequence's last n tokens, in its own prompt and output
// (Saxena 2023, "Prompt Lookup Decoding"; vLLM's `ngram` method). Nothing to run, no state: a
// copy-heavy request (edit, summarise, code) repeats spans of its prompt, and the target model
// verifies them in one forward pass.
//
// Rule: for n = ngram_max down to ngram_min, the last n tokens are looked up among the earlier
// positions (the match must start before len - n, so the suffix never matches itself); the most
// recent occurrence of the longest n that matches wins, and the proposal is the up to k tokens
// that follow it (fewer when the sequence ends first). No match: no proposal.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pagellm {

struct NgramParams {
  int32_t ngram_min = 1;  // shortest suffix looked up, tokens, >= 1
  int32_t ngram_max = 4;  // longest, >= ngram_min
};

// token_ids: prompt + output, in order. Returns <= k draft tokens (k >= 0). Throws
// pagellm::Error for ngram_min < 1 or ngram_max < ngram_min.
std::vector<int32_t> propose_ngram(std::span<const int32_t> token_ids, const NgramParams& params, int32_t k);

}  // namespace pagellm

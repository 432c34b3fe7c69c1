// Per-request token sampler with vLLM semantics.
//
// Order of application on a private copy of the logits ([vocab_size], caller's untouched):
//   1. logit_bias                        (added to the raw logits)
//   2. penalties                         repetition, then frequency, then presence
//                                        (sample/logits_processor.h has the formulas)
//   3. temperature < 1e-5: greedy argmax, lowest id on ties; top_k/top_p/min_p and the RNG are
//      not used. Otherwise logits /= temperature.
//   4. top_k    keep the k best tokens (k = 0 or -1: off).
//   5. top_p    nucleus (Holtzman et al. 2019, arXiv:1904.09751): over the top_k survivors,
//               renormalised, keep the smallest prefix of the descending order whose mass
//               >= top_p; always at least one token. Same rule as vLLM `apply_top_k_top_p`.
//   6. min_p    keep tokens with prob >= min_p * max_prob (Nguyen et al. 2024, arXiv:2407.01082).
//               The max token always survives 4-5, so this ratio is unaffected by them.
//   7. renormalise, draw.
// Steps 4-6 follow vLLM V0 / Hugging Face order (vLLM v1 applies min_p before top_k/top_p).
//
// "Descending order" everywhere is the strict total order (logit desc, token id asc).
// A draw takes exactly one u = Rng::uniform() in [0, 1) and returns the first token in that
// order whose cumulative unnormalised mass exceeds u * total, so the result depends only on
// this request's seed and logits, never on other requests. Only the needed prefix of the order
// is sorted: a histogram of logits (1/16-nat bins) locates where the cumulative mass crosses
// the target, then that prefix is partitioned out and sorted. A peaked 128k-vocab
// distribution thus costs O(vocab + m log m) for the m tokens above the crossing; a flat one
// (m ~ vocab) degrades to a full sort. Sums run in a fixed order (token id order, or the
// sorted order), so results do not depend on the standard library's nth_element.
//
// Logprobs follow vLLM v1's default `logprobs_mode="raw_logprobs"`: log_softmax of the logits
// exactly as the model produced them, before logit_bias, penalties, temperature and truncation
// (vllm/v1/sample/sampler.py, step 1). A request with logit_bias therefore sees the model's own
// belief about the chosen token, not the biased one.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/error.h"
#include "sample/logits_processor.h"
#include "sample/rng.h"
#include "sample/sampling_params.h"

namespace pagellm {

struct TokenLogprob {
  int32_t token_id;
  float logprob;  // natural log
};

struct SampleResult {
  int32_t token_id;
  float logprob;  // raw logprob of token_id, natural log
  // vLLM rank: number of tokens whose raw logit is >= the chosen one's (1 = the argmax).
  int32_t rank;
  // [params.logprobs] best raw logprobs, descending, ties by lower id; empty if logprobs == -1.
  std::vector<TokenLogprob> top_logprobs;
};

// Index of the largest logit, lowest id on ties; NaNs are skipped. Precondition: non-empty.
int32_t greedy_argmax(std::span<const float> logits);

// The logits leave no token to draw: every one is NaN or -inf (after logit_bias and penalties),
// or one is +inf where a distribution is needed (random sampling, logprobs). Not an invariant
// of ours: a model file with NaN / huge weights produces such logits. The engine fails that
// request and goes on.
class SamplingError : public Error {
 public:
  using Error::Error;
};

class Sampler {
 public:
  // Seeds the request's RNG from params.seed. Throws pagellm::Error for values that are out of
  // range whatever the vocabulary; the vocab-dependent checks (logit_bias ids, logprobs) are
  // params.validate(vocab_size)'s, which the request boundary must call first.
  explicit Sampler(SamplingParams params);

  // logits: [vocab_size], not modified; vocab_size is logits.size() and must not change
  // between calls. Token ids: each in [0, vocab_size). Buffers are allocated on the first call.
  // Throws SamplingError (see above); the sampler stays usable.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> prompt_token_ids,
                 std::span<const int32_t> output_token_ids);

  // sample() plus raw logprobs (see the file comment). Consumes the same RNG draws as sample().
  // Throws SamplingError, also when the raw logits' max is +inf or NaN-only.
  SampleResult sample_with_logprobs(std::span<const float> logits, std::span<const int32_t> prompt_token_ids,
                                    std::span<const int32_t> output_token_ids);

  // Samples consecutive rows of one sequence, as a verify step needs (speculative decoding):
  // logits: [num_rows, vocab_size] f32 row-major, vocab_size = logits.size() / num_rows, not
  // modified. Row i is sampled as sample() / sample_with_logprobs() would be with the tokens of
  // rows [0, i) appended to output_token_ids (penalties see them), so the results and the RNG
  // draws are exactly those of num_rows single-row calls in sequence. Returns num_rows results;
  // logprob, rank and top_logprobs are filled only with with_logprobs (otherwise 0, 0, empty).
  // Throws SamplingError when a row leaves nothing to sample (rows before it have consumed
  // their draws, as the single calls would have). Precondition: num_rows > 0 divides
  // logits.size().
  //
  // With a draft (draft.size() == num_rows - 1: the proposed tokens whose positions rows
  // 0..num_rows-2 predict, after the last real token), sampling stops after the first row i
  // whose token differs from draft[i]: the result is draft[0, m) as sampled, then row m's token
  // (the correction, or row num_rows-1's bonus token when every draft matched). This is the
  // rejection rule of Leviathan et al. 2023 (arXiv:2211.17192) / Chen et al. 2023
  // (arXiv:2302.01318) for a deterministic draft, q = one-hot(draft[i]): the draft is accepted
  // with probability p(draft[i]) = min(1, p/q), and on rejection the token drawn is distributed
  // as p without draft[i], renormalised = norm(max(0, p - q)). Each emitted token consumes the
  // one draw it would without speculation, so a seeded request gets the same tokens either way.
  std::vector<SampleResult> sample_rows(std::span<const float> logits, int64_t num_rows,
                                        std::span<const int32_t> prompt_token_ids,
                                        std::span<const int32_t> output_token_ids, bool with_logprobs,
                                        std::span<const int32_t> draft = {});

  const SamplingParams& params() const { return params_; }

 private:
  int32_t sample_random();
  // Grows the sorted prefix of ids_ (by whole logit bins) until, by a histogram estimate, the
  // tokens added hold more than `mass` of unnormalised probability, or the tail is exhausted.
  // Precondition: num_sorted_ < ids_.size().
  void extend_sorted_prefix(double mass);
  int bin_of(int32_t id) const;  // logit bin of a candidate, 0 = within 1/16 nat of the max
  void select_top_k(size_t k);   // keeps the k best of ids_, in token id order
  bool better(int32_t a, int32_t b) const { return logits_[a] > logits_[b] || (logits_[a] == logits_[b] && a < b); }

  SamplingParams params_;
  int32_t vocab_size_ = 0;  // set by the first call
  Rng rng_;
  PenaltyScratch scratch_;
  std::vector<float> logits_;         // [vocab_size] processed copy
  std::vector<float> probs_;          // [vocab_size] unnormalised exp(logit - max), valid for ids_
  std::vector<int32_t> ids_;          // [<= vocab_size] surviving candidates
  size_t num_sorted_ = 0;             // ids_[0, num_sorted_) is in descending order and beats the rest
  float max_logit_ = 0.0f;            // max of logits_ after temperature
  std::vector<double> bin_mass_;      // [kNumBins] scratch for extend_sorted_prefix
  std::vector<size_t> bin_count_;     // [kNumBins] scratch for select_top_k
  std::vector<int32_t> rows_output_;  // sample_rows: output tokens plus the rows sampled so far
};

}  // namespace pagellm

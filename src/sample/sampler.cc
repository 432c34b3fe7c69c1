#include "sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"

namespace pagellm {
namespace {

// Logit histogram used to guess how long a sorted prefix must be (see extend_sorted_prefix).
constexpr int kNumBins = 1024;
constexpr float kBinsPerNat = 16.0f;  // bin width 1/16 nat: covers 64 nats below the max

}  // namespace

int32_t greedy_argmax(std::span<const float> logits) {
  PAGELLM_CHECK(!logits.empty());
  int32_t best = 0;
  float best_logit = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > best_logit) {  // strict: the first (lowest) id wins ties; NaN never wins
      best_logit = logits[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

Sampler::Sampler(SamplingParams params) : params_(std::move(params)), rng_(params_.seed) {
  params_.validate(std::numeric_limits<int32_t>::max());  // the vocab-independent checks
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> prompt_token_ids,
                        std::span<const int32_t> output_token_ids) {
  if (vocab_size_ == 0) {
    PAGELLM_CHECK(!logits.empty() && logits.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()));
    vocab_size_ = static_cast<int32_t>(logits.size());
    logits_.resize(logits.size());
  }
  PAGELLM_CHECK(logits.size() == static_cast<size_t>(vocab_size_),
                "logits.size()=" + std::to_string(logits.size()) + " vocab_size=" + std::to_string(vocab_size_));
  std::copy(logits.begin(), logits.end(), logits_.begin());
  apply_bias_and_penalties(logits_, params_, prompt_token_ids, output_token_ids, scratch_);
  if (params_.is_greedy()) {
    const int32_t best = greedy_argmax(logits_);
    if (!(logits_[best] > -std::numeric_limits<float>::infinity())) {
      throw SamplingError("no token can be chosen: every logit is NaN or -inf (the model's output is not finite)");
    }
    return best;
  }
  return sample_random();
}

int Sampler::bin_of(int32_t id) const {
  // Non-increasing in the logit, so {bin <= b} is always a prefix of the descending order.
  const float distance = (max_logit_ - logits_[id]) * kBinsPerNat;
  return distance < static_cast<float>(kNumBins - 1) ? static_cast<int>(distance) : kNumBins - 1;
}

void Sampler::extend_sorted_prefix(double mass) {
  const auto first = ids_.begin() + static_cast<ptrdiff_t>(num_sorted_);
  // 1. Mass per logit bin over the unsorted tail; find the bin where it passes `mass`.
  bin_mass_.assign(kNumBins, 0.0);
  for (auto it = first; it != ids_.end(); ++it) bin_mass_[bin_of(*it)] += probs_[*it];
  int last_bin = 0;
  for (double cumulative = 0.0; last_bin < kNumBins - 1; ++last_bin) {
    cumulative += bin_mass_[last_bin];
    if (cumulative > mass) break;
  }
  // One bin of slack absorbs rounding between these sums and the caller's sequential sum; if
  // even that falls short, the caller calls again and the next bins are sorted.
  last_bin = std::min(last_bin + 1, kNumBins - 1);
  // 2. Move that prefix of the order to the front of the tail and sort it.
  auto cmp = [this](int32_t a, int32_t b) { return better(a, b); };
  auto mid = std::partition(first, ids_.end(), [&](int32_t id) { return bin_of(id) <= last_bin; });
  if (mid == first) mid = ids_.end();  // cannot happen with a non-empty tail; be safe
  std::sort(first, mid, cmp);
  num_sorted_ = static_cast<size_t>(mid - ids_.begin());
}

void Sampler::select_top_k(size_t k) {
  // Count tokens per logit bin to find a prefix of the order holding >= k tokens, so that the
  // exact selection runs on that prefix only.
  bin_count_.assign(kNumBins, 0);
  for (const int32_t id : ids_) ++bin_count_[bin_of(id)];
  int last_bin = 0;
  for (size_t count = 0; last_bin < kNumBins - 1; ++last_bin) {
    count += bin_count_[last_bin];
    if (count >= k) break;
  }
  const auto mid = std::partition(ids_.begin(), ids_.end(), [&](int32_t id) { return bin_of(id) <= last_bin; });
  auto cmp = [this](int32_t a, int32_t b) { return better(a, b); };
  std::nth_element(ids_.begin(), ids_.begin() + static_cast<ptrdiff_t>(k - 1), mid, cmp);
  ids_.resize(k);
  std::sort(ids_.begin(), ids_.end());
}

int32_t Sampler::sample_random() {
  const float temperature = params_.temperature;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // Temperature; candidates are the tokens with a finite logit (-inf and NaN never drawn).
  float max_logit = kNegInf;
  ids_.clear();
  probs_.resize(vocab_size_);
  for (int32_t i = 0; i < vocab_size_; ++i) {
    const float l = logits_[i] / temperature;
    logits_[i] = l;
    if (l > kNegInf) {
      ids_.push_back(i);
      max_logit = std::max(max_logit, l);
    }
  }
  if (!std::isfinite(max_logit)) {
    throw SamplingError("no token can be sampled: the largest logit after temperature is " + std::to_string(max_logit) +
                        " (logits all NaN or -inf, or one +inf: the model's output is not finite)");
  }
  max_logit_ = max_logit;
  num_sorted_ = 0;

  // top_k: select the k best, then restore token id order so that sums below are canonical.
  const size_t k = params_.top_k > 0 ? static_cast<size_t>(params_.top_k) : ids_.size();
  if (k < ids_.size()) select_top_k(k);

  double total = 0.0;
  for (const int32_t id : ids_) {
    probs_[id] = std::exp(logits_[id] - max_logit);  // max token: exactly 1
    total += probs_[id];
  }

  // top_p: keep token j iff the mass strictly before it (descending order) is < top_p * total.
  if (params_.top_p < 1.0f) {
    const double threshold = static_cast<double>(params_.top_p) * total;
    double mass_before = 0.0;
    size_t num_kept = 0;
    while (num_kept < ids_.size() && mass_before < threshold) {
      if (num_kept == num_sorted_) extend_sorted_prefix(threshold - mass_before);
      mass_before += probs_[ids_[num_kept]];
      ++num_kept;
    }
    ids_.resize(num_kept);
    num_sorted_ = std::min(num_sorted_, num_kept);
  }

  // min_p: relative to the max token, whose unnormalised prob is exactly 1. Order preserved.
  if (params_.min_p > 0.0f) {
    const float threshold = params_.min_p;
    const auto keep = [&](int32_t id) { return probs_[id] >= threshold; };
    // Survivors of the sorted prefix are a prefix of it (the filter is monotone in the order),
    // and erase_if is stable, so they stay sorted and ahead of the rest.
    num_sorted_ =
        static_cast<size_t>(std::count_if(ids_.begin(), ids_.begin() + static_cast<ptrdiff_t>(num_sorted_), keep));
    std::erase_if(ids_, [&](int32_t id) { return !keep(id); });
  }

  // Renormalise (canonical order: ids_ is in token id order or fully sorted) and draw.
  total = 0.0;
  for (const int32_t id : ids_) total += probs_[id];
  const double target = rng_.uniform() * total;
  double cumulative = 0.0;
  for (size_t j = 0; j < ids_.size(); ++j) {
    if (j == num_sorted_) extend_sorted_prefix(target - cumulative);
    cumulative += probs_[ids_[j]];
    if (target < cumulative) return ids_[j];
  }
  // Rounding left target >= the summed mass: take the last token with non-zero mass.
  for (size_t j = ids_.size(); j-- > 0;) {
    if (probs_[ids_[j]] > 0.0f) return ids_[j];
  }
  return ids_.front();
}

SampleResult Sampler::sample_with_logprobs(std::span<const float> logits, std::span<const int32_t> prompt_token_ids,
                                           std::span<const int32_t> output_token_ids) {
  SampleResult result{};
  result.token_id = sample(logits, prompt_token_ids, output_token_ids);

  // Raw logprobs: log_softmax of the caller's logits (untouched by sample()). A NaN logit (a
  // corrupt row of the model) counts as -inf: probability 0, logprob -inf, last in the order.
  const auto key = [](float l) { return std::isnan(l) ? -std::numeric_limits<float>::infinity() : l; };
  const float max_logit = logits[greedy_argmax(logits)];
  if (!std::isfinite(max_logit)) {
    throw SamplingError("logprobs cannot be computed: the largest logit is " + std::to_string(max_logit) +
                        " (the model's output is not finite)");
  }
  double sum = 0.0;
  for (const float l : logits) sum += std::exp(static_cast<double>(key(l)) - max_logit);
  const float log_normalizer = max_logit + static_cast<float>(std::log(sum));
  const float chosen_logit = logits[result.token_id];
  result.logprob = chosen_logit - log_normalizer;
  result.rank =
      static_cast<int32_t>(std::count_if(logits.begin(), logits.end(), [&](float l) { return l >= chosen_logit; }));

  if (params_.logprobs > 0) {
    PAGELLM_CHECK(params_.logprobs <= vocab_size_, "logprobs=" + std::to_string(params_.logprobs) + " not validated");
    const auto n = static_cast<size_t>(params_.logprobs);
    ids_.resize(vocab_size_);
    for (int32_t i = 0; i < vocab_size_; ++i) ids_[i] = i;
    auto raw_better = [&](int32_t a, int32_t b) {
      return key(logits[a]) > key(logits[b]) || (key(logits[a]) == key(logits[b]) && a < b);
    };
    std::partial_sort(ids_.begin(), ids_.begin() + static_cast<ptrdiff_t>(n), ids_.end(), raw_better);
    result.top_logprobs.reserve(n);
    for (size_t j = 0; j < n; ++j) result.top_logprobs.push_back({ids_[j], key(logits[ids_[j]]) - log_normalizer});
  }
  return result;
}

std::vector<SampleResult> Sampler::sample_rows(std::span<const float> logits, int64_t num_rows,
                                               std::span<const int32_t> prompt_token_ids,
                                               std::span<const int32_t> output_token_ids, bool with_logprobs,
                                               std::span<const int32_t> draft) {
  PAGELLM_CHECK(
      num_rows > 0 && logits.size() % static_cast<size_t>(num_rows) == 0,
      "logits.size()=" + std::to_string(logits.size()) + " is not num_rows=" + std::to_string(num_rows) + " rows");
  PAGELLM_CHECK(draft.empty() || static_cast<int64_t>(draft.size()) == num_rows - 1,
                "a draft of " + std::to_string(draft.size()) + " tokens for " + std::to_string(num_rows) + " rows");
  const size_t vocab = logits.size() / static_cast<size_t>(num_rows);
  std::vector<SampleResult> results;
  results.reserve(static_cast<size_t>(num_rows));
  rows_output_.assign(output_token_ids.begin(), output_token_ids.end());
  for (int64_t i = 0; i < num_rows; ++i) {
    const std::span<const float> row = logits.subspan(static_cast<size_t>(i) * vocab, vocab);
    if (with_logprobs) {
      results.push_back(sample_with_logprobs(row, prompt_token_ids, rows_output_));
    } else {
      results.push_back(SampleResult{sample(row, prompt_token_ids, rows_output_), 0.0f, 0, {}});
    }
    const int32_t tok = results.back().token_id;
    if (!draft.empty() && (i == num_rows - 1 || tok != draft[static_cast<size_t>(i)])) break;
    rows_output_.push_back(tok);
  }
  return results;
}

}  // namespace pagellm

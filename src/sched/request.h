// A request as the scheduler sees it: tokens, how many of them have K/V in the cache, and a state.
//
// Tokens, not phases (vLLM v1): each step the scheduler grants a request
// num_scheduled_tokens <= num_tokens() - num_computed_tokens. A fresh prompt, a prefill chunk, a
// decode token and the recompute of a preempted request are all that same rule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pagellm {

enum class RequestStatus {
  kWaiting,          // in the waiting queue, never run or preempted (then num_computed_tokens = 0)
  kRunning,          // holds KV blocks; in the running list
  kFinishedStopped,  // EOS, a stop token or a stop string
  kFinishedLength,   // max_tokens or the context length
  kFinishedAborted,  // client abort or shutdown
  kFinishedError,    // the request failed (no token could be sampled: RequestOutput::error)
};

// "stop" | "length" | "abort" | "error" | "" (not finished)
const char* finish_reason(RequestStatus s);
bool is_finished(RequestStatus s);

struct Request {
  std::string request_id;
  int32_t priority = 0;     // lower runs first
  double arrival_time = 0;  // seconds; FCFS among equal priorities
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> output_token_ids;
  int64_t num_computed_tokens = 0;  // tokens whose K/V are in the cache
  // A draft model's num_computed_tokens (speculative decoding, --speculative-model): positions
  // [0, n) of the request's blocks hold the draft's K/V for its final tokens. It lags behind
  // num_computed_tokens while the draft does not run; roll_back and preemption lower it with them.
  int64_t num_draft_computed_tokens = 0;
  int32_t max_tokens = 0;  // new tokens allowed (already capped to the context)
  RequestStatus status = RequestStatus::kWaiting;
  int32_t num_preemptions = 0;
  uint64_t prefix_root_hash = 0;  // KvCacheManager::root_hash(cache_salt)
  int64_t num_cached_tokens = 0;  // prompt tokens served from the prefix cache at first admission
  // n > 1 leader not yet forked: members that will fork from it at its first token. Each holds a
  // running slot from the leader's admission on, so the forks never exceed max_num_seqs.
  int32_t num_fork_seats = 0;
  // Draft tokens proposed for the positions after num_tokens() (speculative decoding): the
  // scheduler grants them with the decode token and the step's logits verify them; they are
  // never part of output_token_ids until accepted. Set by EngineCore before schedule(), cleared
  // by it after the step and by Scheduler::preempt.
  std::vector<int32_t> spec_token_ids;

  int64_t num_prompt_tokens() const { return static_cast<int64_t>(prompt_token_ids.size()); }
  int64_t num_tokens() const { return num_prompt_tokens() + static_cast<int64_t>(output_token_ids.size()); }
  // Token at position i of prompt + output + spec_token_ids.
  int32_t token_at(int64_t i) const {
    if (i < num_prompt_tokens()) return prompt_token_ids[i];
    i -= num_prompt_tokens();
    const auto n_out = static_cast<int64_t>(output_token_ids.size());
    return i < n_out ? output_token_ids[i] : spec_token_ids[i - n_out];
  }
  std::vector<int32_t> all_token_ids() const {
    std::vector<int32_t> t = prompt_token_ids;
    t.insert(t.end(), output_token_ids.begin(), output_token_ids.end());
    return t;
  }
};

}  // namespace pagellm

// Requests into the engine and outputs out of it. The engine core speaks tokens (EngineCoreOutput);
// the output processor (engine/output_processor.h) turns them into text (RequestOutput). The HTTP
// server and the CLI speak to the engine only through these types and EngineClient
// (engine/engine_client.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "sample/sampler.h"
#include "sample/sampling_params.h"

namespace pagellm {

// One sequence to generate. (n > 1 is fanned out by the caller into n requests.)
struct EngineRequest {
  std::string request_id;                 // unique among live requests
  std::vector<int32_t> prompt_token_ids;  // non-empty, ids < vocab_size
  SamplingParams sampling;                // validated by the caller (SamplingParams::validate)
  int32_t max_tokens = 16;                // new tokens, >= 1; also capped by the context length
  std::vector<std::string> stop;          // stop strings: never returned in text (applied by the
                                          // output processor; the core ignores them)
  std::vector<int32_t> stop_token_ids;    // finish with "stop" when sampled (token not in text)
  bool ignore_eos = false;
  int32_t priority = 0;    // lower value runs first; ties FCFS (vLLM convention)
  std::string cache_salt;  // prefix-cache namespace: only equal salts share blocks
  // Parallel sampling (n > 1): the n requests of one prompt carry the same group id and size.
  // The first to arrive computes the prompt; the others fork its KV blocks at its first token
  // and sample their own first token from the same logits (copy-on-write of the last partial
  // block afterwards). Their prompts must be equal.
  std::string parallel_group;
  int32_t parallel_group_size = 1;
  bool need_cumulative_logprob = false;  // compute RequestOutput::cumulative_logprob (best_of)
  // Draft tokens per step for this request when the engine has a proposer
  // (EngineConfig::speculative_ngram / speculative_self_layers): -1 the engine's
  // num_speculative_tokens, 0 off, else at most EngineConfig::kMaxSpeculativeTokens (values above
  // the engine's num_speculative_tokens are lowered to it).
  int32_t num_speculative_tokens = -1;
  double arrival_time = 0;  // seconds, steady clock (engine sets it if 0)
};

// Speculative decoding totals (vLLM's spec_decode metrics).
struct SpecDecodeCounters {
  int64_t num_drafts = 0;           // verify steps of a request with >= 1 draft token
  int64_t num_draft_tokens = 0;     // draft tokens verified
  int64_t num_accepted_tokens = 0;  // of which accepted
  // [EngineConfig::kMaxSpeculativeTokens, engine/engine_config.h] drafts accepted at draft position i (0-based)
  std::vector<int64_t> num_accepted_tokens_per_pos;
};

// Timestamps of one request, seconds on the steady clock (0 = not yet).
struct RequestTimes {
  double arrival = 0;
  double first_scheduled = 0;  // left the waiting queue the first time
  double first_token = 0;
  double last_token = 0;
  double finished = 0;
  double prefill_seconds = 0;  // first_scheduled -> first token
};

// What the engine core emits for one request: what is new since its previous output, in tokens.
// Token-level stops (EOS, stop_token_ids, max_tokens) are decided here; stop strings are not.
struct EngineCoreOutput {
  std::string request_id;
  std::vector<int32_t> new_token_ids;      // sampled this step
  std::vector<SampleResult> new_logprobs;  // one per new token when sampling.logprobs >= 0
  bool finished = false;
  std::string finish_reason;               // "stop" | "length" | "abort" | "error" when finished;
                                           // a core "stop" with new tokens: the last one is EOS
                                           // or a stop token id (never text)
  std::string error;                       // finish_reason "error": what failed
  std::optional<std::string> stop_reason;  // the stop string or token id text that matched
  int32_t num_prompt_tokens = 0;
  int32_t num_generated_tokens = 0;       // total so far
  int32_t num_cached_tokens = 0;          // prompt tokens served from the prefix cache or a fork
  double cumulative_logprob = 0;          // sum of the sampled tokens' logprobs (raw logits)
  int32_t num_accepted_draft_tokens = 0;  // of num_generated_tokens, draft tokens accepted (speculation)
  RequestTimes times;
};

// What a client receives: the core's output plus its text (OutputProcessor::process).
struct RequestOutput : EngineCoreOutput {
  std::string delta_text;  // complete UTF-8, stop strings withheld/removed
                           // (new_token_ids may hold more than delta_text)
};

// Snapshot of engine gauges and counters for /metrics (read from any thread).
struct EngineStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  int64_t num_blocks = 0;
  int64_t num_free_blocks = 0;
  double kv_cache_usage = 0;  // fraction of blocks held, [0, 1]
  int64_t block_size = 0;
  int64_t num_preemptions = 0;    // total since start
  int64_t prompt_tokens = 0;      // total prompt tokens computed (recomputes included)
  int64_t generation_tokens = 0;  // total tokens sampled
  int64_t num_steps = 0;
  int64_t prefix_cache_queries = 0;  // tokens looked up in the prefix cache (at admission)
  int64_t prefix_cache_hits = 0;     // of which found cached
  int64_t num_cached_blocks = 0;     // blocks registered in the prefix cache now
  // The step-time budget (sched/step_cost_model.h): the budget (0: none), the fitted
  // coefficients, the model's mean relative error, the last step's measured and predicted time
  // and the sum of all steps' times, seconds.
  double step_budget_seconds = 0;  // the budget the last step was sized by (0: none)
  double step_cost_c_step = 0, step_cost_c_token = 0, step_cost_c_attn = 0;
  double step_cost_mean_relative_error = 0;
  double last_step_seconds = 0, last_step_predicted_seconds = 0, step_seconds_total = 0;
  bool step_cost_ready = false;         // the model has seen a step
  int64_t num_prefill_tokens_left = 0;  // Scheduler::num_prefill_tokens_left
  int64_t num_running_decodes = 0;      // Scheduler::num_running_decodes
  // Speculative decoding (EngineCore's SpecDecodeCounters), totals since start.
  int64_t spec_decode_num_drafts = 0;
  int64_t spec_decode_num_draft_tokens = 0;
  int64_t spec_decode_num_accepted_tokens = 0;
  std::vector<int64_t> spec_decode_num_accepted_tokens_per_pos;  // [num_speculative_tokens]
};

// add_request(s) beyond the waiting queue's bound (HTTP 429).
class QueueFull : public Error {
 public:
  using Error::Error;
};

}  // namespace pagellm

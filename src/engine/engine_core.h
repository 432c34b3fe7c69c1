// The synchronous engine, the only loop that drives the model: one step = propose drafts ->
// schedule -> ModelRunner::copy_blocks + execute (flat batch, forward, logits rows) -> sample
// (or verify the drafts) -> update (append tokens, token-level stop checks: EOS,
// stop_token_ids, max_tokens; roll back rejected drafts' KV; free finished requests' blocks in
// the same step).
//
// Speculative decoding (Leviathan et al. 2023, arXiv:2211.17192; Chen et al. 2023,
// arXiv:2302.01318) with one proposer: n-gram lookup (spec/ngram_proposer.h), self-speculation
// (the target's first L layers) or a draft model (LLM::draft_runner: its own KV storage under
// the target's block tables, Request::num_draft_computed_tokens of it valid). Before
// schedule(), each running decode of a request that speculates gets up to k draft tokens
// (Request::spec_token_ids; placeholders that draft_self / draft_with_model fill after
// schedule()); the scheduler grants them with its decode token, the forward
// computes their K/V and 1 + k logits rows, Sampler::sample_rows with the draft accepts the
// longest prefix the target itself samples plus one token of its own, and
// Scheduler::roll_back drops the rejected positions' K/V. Every emitted token is the one
// sampling without speculation emits (for a seeded request too), so outputs do not change.
// Adaptive k: the k of each request maximises (B + g(k)) / (T + dT(k) + k c T + U), the step's
// predicted tokens per second, with B the running decodes, T their step's predicted time, dT(k)
// the cost model's extra time for k more tokens, c the draft pass's cost ratio, U a lagging
// draft model's catch-up and g(k) = a + a^2 + ... + a^k the expected accepted tokens at the
// request's measured acceptance a (its own evidence after two pseudo-counts of the engine-wide
// acceptance); k = 0 when nothing beats not speculating. It speaks tokens only: text and stop
// strings are the output processor's (engine/output_processor.h), which ends a request through
// stop_request().
// Single-threaded; AsyncEngine runs it on the engine thread, LLM::generate and `bench latency`
// drive it directly.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine_types.h"
#include "engine/llm.h"
#include "engine/model_runner.h"
#include "sample/sampler.h"
#include "sched/scheduler.h"
#include "spec/ngram_proposer.h"

namespace pagellm {

struct EngineCounters {
  int64_t num_steps = 0;
  int64_t prompt_tokens = 0;      // tokens computed that were not sampled (prefill and recompute)
  int64_t generation_tokens = 0;  // tokens sampled (accepted drafts included)
  SpecDecodeCounters spec;
};

class EngineCore {
 public:
  // Steps requests on llm's runner and KV manager under llm.config().scheduler_limits().
  explicit EngineCore(LLM& llm);
  // The same under other limits (tests; a bench that must run B sequences at once).
  EngineCore(LLM& llm, const SchedulerLimits& limits);

  // Validates and queues a request. Throws pagellm::Error (empty prompt, out-of-vocabulary id,
  // duplicate id, prompt that cannot fit the context or the whole KV pool, bad sampling params).
  void add_request(const EngineRequest& request);
  // Finishes a live request with "abort" and frees its blocks now; returns its final output
  // (nullopt for an unknown id).
  std::optional<EngineCoreOutput> abort_request(const std::string& request_id);
  // Finishes a live request with "stop" and stop_reason = `stop_reason` (a stop string the output
  // processor found in its text) and frees its blocks now, so no further step computes it; returns
  // its final output (no new tokens; counts include every token sampled so far), nullopt for an
  // unknown id.
  std::optional<EngineCoreOutput> stop_request(const std::string& request_id, const std::string& stop_reason);
  // One step. Returns an output for every request that got a token or finished.
  std::vector<EngineCoreOutput> step();

  bool has_work() const { return scheduler_.has_work(); }
  // Requests not yet running: the scheduler's waiting queue plus the n > 1 members waiting to
  // fork their group's leader (they hold a waiting slot each, as in vLLM's queue).
  int64_t num_waiting() const;
  const Scheduler& scheduler() const { return scheduler_; }
  const EngineCounters& counters() const { return counters_; }
  // Wall time of the last step (after schedule(): forward, sampling, stop-token checks) and the cost model's prediction
  // for it, and the sum over all steps, seconds.
  double last_step_seconds() const { return last_step_seconds_; }
  double last_step_predicted_seconds() const { return last_step_predicted_seconds_; }
  double step_seconds_total() const { return step_seconds_total_; }
  LLM& llm() { return llm_; }

 private:
  struct State {  // per live request, beside the scheduler's Request
    EngineRequest params;
    std::unique_ptr<Sampler> sampler;
    RequestTimes times;
    double cumulative_logprob = 0;
    int32_t max_spec_tokens = 0;  // this request's k bound (0: no speculation)
    // Acceptance evidence, decayed per decode step: drafts accepted, and verify steps that
    // rejected one (a = (accepted + 2 prior) / (accepted + rejections + 2), prior the engine's).
    double spec_accepted = 0, spec_rejections = 0;
    bool draft_catch_up = false;  // draft model: this step only catches the draft's K/V up
    int32_t num_accepted_draft_tokens = 0;
  };
  struct Group {  // n > 1: members waiting to fork the leader's blocks
    std::string leader;
    std::vector<std::unique_ptr<Request>> pending;
  };
  void postprocess(Request& r, const float* logits, double now, EngineCoreOutput& out);
  // Appends a sampled token (logprob result when requested) and applies the token-level stops;
  // returns true when the request finished (out is then its final output).
  bool append_token(Request& r, const SampleResult& res, bool with_logprob, double now, EngineCoreOutput& out);
  // Sets spec_token_ids of every running decode that speculates (before schedule()).
  void propose_drafts();
  // The draft length for r this step (adaptive or fixed), given the decodes' step.
  int32_t draft_length(const Request& r, const State& st, const StepFeatures& decodes, int64_t num_decodes) const;
  // Self-speculation, after schedule(): fills the granted drafts of every request with the
  // greedy tokens of the first self_layers_ layers, one batched early-exit pass per position.
  void draft_self(const SchedulerOutput& so);
  // Draft model (--speculative-model), after schedule() and the block copies: catches every
  // request granted drafts (or left to catch up by propose_drafts) up to its decode token in the
  // draft's KV storage (Request::num_draft_computed_tokens), then fills the drafts with the
  // draft's greedy tokens, one batched pass per position.
  void draft_with_model(const SchedulerOutput& so);
  // A verify step's rows for r: accepted drafts plus one token appended, rejected K/V rolled back.
  void verify(Request& r, const ScheduledRequest& s, std::span<const float> logits, double now, EngineCoreOutput& out);
  // Forks the pending members of r's group from r (whose prompt was just computed) and samples
  // their first tokens from the same logits row.
  void fork_group(Request& leader, const float* logits, double now, std::vector<EngineCoreOutput>& outputs);
  std::unique_ptr<Request> take_pending(const std::string& id);
  // Sets the group leader's num_fork_seats to min(pending, max_num_seqs - 1) while it waits; once
  // it runs, only lowers it (its seats were taken at admission).
  void reserve_fork_seats(Group& g);
  // The first pending member of `group` becomes its leader and joins the waiting queue.
  void promote_member(const std::string& group);
  EngineCoreOutput finish(const std::string& id, RequestStatus status, EngineCoreOutput out, double now);

  LLM& llm_;                    // the tokenizer (EOS ids, postprocess)
  ModelRunner& runner_;         // the only way to the model and the KV storage
  KvCacheManager& kv_manager_;  // block tables; the scheduler allocates, forks use it
  Scheduler scheduler_;
  std::unordered_map<std::string, State> states_;
  std::unordered_map<std::string, Group> groups_;          // by parallel_group, until forked
  std::unordered_map<std::string, std::string> group_of_;  // request id -> group (unforked members)
  EngineCounters counters_;
  int64_t max_total_tokens_;             // min(context length, whole KV pool in tokens)
  bool speculative_ = false;             // a proposer is configured (n-gram or self-speculation)
  int32_t self_layers_ = 0;              // self-speculation: the draft's decoder layers (0: none)
  ModelRunner* draft_runner_ = nullptr;  // --speculative-model's runner (LLM owns it), or nullptr
  int64_t draft_max_positions_ = 0;      // the draft model's context (0: no draft model)
  // One draft pass / one target step: self L / num_layers; a draft model its decode weight bytes
  // / the target's; n-gram 0.
  double draft_cost_ratio_ = 0;
  NgramParams ngram_;
  int32_t num_speculative_tokens_ = 0;  // the engine's k bound
  bool speculative_adaptive_ = true;
  // Engine-wide acceptance evidence, decayed per step: the prior of each request's acceptance.
  double spec_accepted_all_ = 0, spec_rejections_all_ = 0;
  double last_step_seconds_ = 0, last_step_predicted_seconds_ = 0, step_seconds_total_ = 0;
};

}  // namespace pagellm

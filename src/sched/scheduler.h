// Continuous-batching scheduler (Yu et al. 2022, "Orca"; Kwon et al. 2023, "vLLM"): every step
// it grants tokens to requests under a token budget and a sequence cap, allocating KV blocks as it
// goes, and preempts by recompute when the block pool runs out.
//
// One step, in order:
//   1. running requests, best first (priority, then arrival): each gets
//      min(num_tokens - num_computed_tokens, budget_left) tokens (1 for a decode, a chunk for an
//      unfinished prefill). When its blocks cannot be allocated, the worst running request is
//      preempted (blocks freed, num_computed_tokens = 0, back to the waiting queue) and the
//      allocation retried; if the worst one is the request itself, it is preempted.
//   2. if nothing was preempted: waiting requests, best first, while budget and max_num_seqs
//      allow (a request takes 1 + num_fork_seats slots; running requests hold theirs the same
//      way, so running + reserved fork seats <= max_num_seqs at all times): each first takes the longest chain of
//      prefix-cached full blocks (at least one token is always left to compute), then gets a prefill chunk of
//      min(remaining, budget_left) tokens (chunked prefill). A waiting request never preempts; if its blocks do not
//      fit, admission stops (FCFS: no overtaking of the head of the queue).
// With a step-time budget (max_step_seconds > 0 fixed, < 0 automatic: step_budget_seconds in
// sched/step_cost_model.h; Sarathi-Serve's stall-free batching, Agrawal et al. 2024), prefill
// chunks are also sized so that the step's predicted time (StepCostModel,
// sched/step_cost_model.h, fitted from the measured steps) stays within it: every running
// decode's time is reserved first, then chunks take what time is left, in the order above. The
// first prefill chunk of a step always gets min(remaining, min_prefill_chunk) tokens even when
// no time is left, so prefill makes progress every step (the step's first prompt, running or at
// the head of the queue, needs at most ceil(P / min_prefill_chunk) steps for P tokens, unless a
// preemption, the KV pool or max_num_seqs stops admission that step). With or without a time
// budget, every running decode's token is taken off the token budget before any prefill chunk,
// so a prefill ahead of a decode in the running order (a better priority) cannot crowd it out.
// The scheduler decides and allocates; the engine runs the forward pass and then calls
// on_step_done() to advance num_computed_tokens, and observe_step() with the step's time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "sched/request.h"
#include "sched/step_cost_model.h"

namespace pagellm {

// A view of EngineConfig (engine/engine_config.h: scheduler_limits()), where the defaults and
// checks live; the initialisers here only serve tests that build limits directly.
struct SchedulerLimits {
  int32_t max_num_seqs = 0;                   // requests running at once
  int64_t max_num_batched_tokens = 0;         // tokens per step
  double max_step_seconds = 0;                // step-time budget, seconds; 0: none (tokens only); < 0: auto
  int64_t min_prefill_chunk = 1;              // tokens the step's first prefill chunk always gets
  double auto_step_factor = kAutoStepFactor;  // auto: this x the decodes' predicted time
};

struct ScheduledRequest {
  Request* request = nullptr;
  int64_t num_scheduled_tokens = 0;  // positions [num_computed_tokens, +num_scheduled_tokens)
  // The last num_spec_tokens of the grant are proposed (draft) tokens that this step's logits
  // verify; their blocks are not hashed into the prefix cache until they are accepted. A decode
  // gets min(Request::spec_token_ids, what the token and time budgets leave) of them.
  // <= num_scheduled_tokens - 1.
  int64_t num_spec_tokens = 0;
  // Logits rows this sequence gets from the forward pass, for its last num_logits_rows positions:
  // 0 for a prefill chunk that does not reach num_tokens(), 1 for a step that samples one token,
  // 1 + num_spec_tokens for a verify step. Set by Scheduler::schedule() (before
  // num_computed_tokens advances); rows of the step's sequences are consecutive, in order.
  int32_t num_logits_rows = 0;
};

struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;                  // in running order
  std::vector<std::string> preempted;                       // preempted during this schedule()
  std::vector<std::pair<int32_t, int32_t>> blocks_to_copy;  // (src, dst): copy-on-write, before the forward
  int64_t num_scheduled_tokens = 0;
  StepFeatures features;         // of the whole step (StepCostModel's inputs)
  double predicted_seconds = 0;  // the cost model's time for it (0 before any step is measured)
};

// Prompt tokens still to compute (requests with more than one token left), split as schedule()
// serves them: running requests get their chunks before any waiting request is admitted, and
// waiting requests are admitted best priority first (ties: arrival), so what a new request of
// priority p waits behind is the running backlog plus the waiting backlog of priorities <= p.
struct PrefillBacklog {
  int64_t running = 0;
  std::map<int32_t, int64_t> waiting_by_priority;  // priority -> tokens
  // Tokens scheduled before the prefill of a request of `priority` that arrives now.
  int64_t ahead_of(int32_t priority) const;
  int64_t total() const;
};

class Scheduler {
 public:
  Scheduler(const SchedulerLimits& limits, KvCacheManager& kv);

  // Takes ownership; the request must be kWaiting with num_computed_tokens 0 and an id not live.
  void add_request(std::unique_ptr<Request> request);
  // Takes ownership of a request forked from a running one (n > 1): already running, its block
  // table already shared through KvCacheManager::fork, num_computed_tokens set. It takes one of
  // the fork seats its leader held (the caller drops the leader's num_fork_seats first).
  void add_running(std::unique_ptr<Request> request);
  SchedulerOutput schedule();
  // Advances num_computed_tokens of every scheduled request by its grant, and caches the blocks
  // whose tokens are final: [0, num_computed_tokens - num_spec_tokens).
  void on_step_done(const SchedulerOutput& out);
  // Speculative rollback, after on_step_done: the last num_rejected computed tokens were
  // rejected by verification. num_computed_tokens -= num_rejected and the request's block table
  // is truncated to it (KvCacheManager::truncate). The caller drops the rejected tokens from
  // output_token_ids. Precondition: 0 <= num_rejected <= num_computed_tokens.
  void roll_back(Request& r, int64_t num_rejected);
  // Feeds the measured wall time of the step `out` describes (after schedule() to the outputs, seconds) to
  // the cost model.
  void observe_step(const SchedulerOutput& out, double seconds) { cost_model_.observe(out.features, seconds); }
  // Replaces the cost model (StepCostModel::fixed in tests).
  void set_cost_model(const StepCostModel& m) { cost_model_ = m; }
  const StepCostModel& cost_model() const { return cost_model_; }
  // The time budget the last schedule() sized its chunks by (0: none), seconds.
  double last_step_budget_seconds() const { return last_step_budget_seconds_; }
  // Marks a live request finished with `status`, frees its blocks now and returns it (nullptr
  // for an unknown id).
  std::unique_ptr<Request> finish_request(const std::string& request_id, RequestStatus status);

  Request* find(const std::string& request_id);
  // The running requests, best first (EngineCore sets their spec_token_ids before schedule()).
  const std::vector<Request*>& running_requests() const { return running_; }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  // Running requests plus the fork seats their unforked n > 1 leaders hold.
  int64_t num_seats_taken() const;
  const SchedulerLimits& limits() const { return limits_; }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  // Tokens still to compute before the next sample of every running or waiting request that is
  // not decoding (more than one token left), and the running requests that are (one left).
  int64_t num_prefill_tokens_left() const { return prefill_backlog().total(); }
  // The same tokens, by what is scheduled before what (admission by priority).
  PrefillBacklog prefill_backlog() const;
  int64_t num_running_decodes() const;
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  int64_t num_preemptions() const { return num_preemptions_; }
  // Prefix-cache lookups at admission, in tokens: looked up, and found cached.
  int64_t prefix_cache_queries() const { return prefix_cache_queries_; }
  int64_t prefix_cache_hits() const { return prefix_cache_hits_; }
  // Running ids in order, then waiting ids in order (tests).
  std::vector<std::string> running_ids() const;
  std::vector<std::string> waiting_ids() const;

 private:
  // What is left of this step: tokens, and with a time budget the features already spent
  // (every running decode's, reserved up front, plus the chunks granted).
  struct Budget {
    int64_t tokens = 0;         // for prefill chunks
    int64_t decode_tokens = 0;  // reserved for the running decodes, one each
    bool timed = false;
    double seconds = 0;  // the time budget when timed
    StepFeatures used;
    bool prefill_granted = false;
  };
  static bool better(const Request* a, const Request* b);
  void insert_waiting(Request* r);
  void preempt(Request* r);
  // The largest m <= n tokens from position `start` whose step still fits the time budget (n
  // when untimed).
  int64_t largest_fitting(int64_t start, int64_t n, const Budget& b) const;
  // Tokens to grant a chunk of `remaining` tokens from position `start` (not yet charged).
  int64_t prefill_chunk(int64_t start, int64_t remaining, const Budget& b) const;
  bool schedule_running(SchedulerOutput& out, Budget& budget);
  void schedule_waiting(SchedulerOutput& out, Budget& budget);

  SchedulerLimits limits_;
  KvCacheManager& kv_;
  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;  // every live request
  std::vector<Request*> running_;                                       // sorted best first
  std::vector<Request*> waiting_;                                       // sorted best first
  int64_t num_preemptions_ = 0;
  int64_t prefix_cache_queries_ = 0;
  int64_t prefix_cache_hits_ = 0;
  StepCostModel cost_model_;
  double last_step_budget_seconds_ = 0;
};

}  // namespace pagellm

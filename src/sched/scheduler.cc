#include "sched/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace pagellm {

const char* finish_reason(RequestStatus s) {
  switch (s) {
    case RequestStatus::kFinishedStopped: return "stop";
    case RequestStatus::kFinishedLength: return "length";
    case RequestStatus::kFinishedAborted: return "abort";
    case RequestStatus::kFinishedError: return "error";
    case RequestStatus::kWaiting:
    case RequestStatus::kRunning: return "";
  }
  return "";
}

bool is_finished(RequestStatus s) { return *finish_reason(s) != '\0'; }

Scheduler::Scheduler(const SchedulerLimits& limits, KvCacheManager& kv) : limits_(limits), kv_(kv) {
  PAGELLM_CHECK(limits.max_num_seqs > 0 && limits.max_num_batched_tokens > 0, "scheduler limits must be positive");
}

bool Scheduler::better(const Request* a, const Request* b) {
  if (a->priority != b->priority) return a->priority < b->priority;
  if (a->arrival_time != b->arrival_time) return a->arrival_time < b->arrival_time;
  return a->request_id < b->request_id;
}

void Scheduler::insert_waiting(Request* r) {
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), r, better), r);
}

void Scheduler::add_request(std::unique_ptr<Request> request) {
  PAGELLM_CHECK(request->status == RequestStatus::kWaiting && request->num_computed_tokens == 0,
                "new request must be waiting and uncomputed");
  PAGELLM_CHECK(!request->prompt_token_ids.empty(), "empty prompt");
  PAGELLM_CHECK(requests_.count(request->request_id) == 0, "duplicate request id " + request->request_id);
  Request* r = request.get();
  requests_[r->request_id] = std::move(request);
  insert_waiting(r);
}

void Scheduler::add_running(std::unique_ptr<Request> request) {
  PAGELLM_CHECK(requests_.count(request->request_id) == 0, "duplicate request id " + request->request_id);
  PAGELLM_CHECK(num_seats_taken() < limits_.max_num_seqs, "fork beyond max_num_seqs");
  Request* r = request.get();
  r->status = RequestStatus::kRunning;
  requests_[r->request_id] = std::move(request);
  running_.insert(std::upper_bound(running_.begin(), running_.end(), r, better), r);
}

int64_t Scheduler::num_seats_taken() const {
  int64_t n = 0;
  for (const Request* r : running_) n += 1 + r->num_fork_seats;
  return n;
}

int64_t PrefillBacklog::ahead_of(int32_t priority) const {
  int64_t n = running;
  for (auto it = waiting_by_priority.begin(); it != waiting_by_priority.end() && it->first <= priority; ++it) {
    n += it->second;
  }
  return n;
}

int64_t PrefillBacklog::total() const {
  int64_t n = running;
  for (const auto& [priority, tokens] : waiting_by_priority) n += tokens;
  return n;
}

PrefillBacklog Scheduler::prefill_backlog() const {
  PrefillBacklog b;
  for (const Request* r : running_) {
    const int64_t left = r->num_tokens() - r->num_computed_tokens;
    if (left > 1) b.running += left;
  }
  for (const Request* r : waiting_) {
    const int64_t left = r->num_tokens() - r->num_computed_tokens;
    if (left > 1) b.waiting_by_priority[r->priority] += left;
  }
  return b;
}

int64_t Scheduler::num_running_decodes() const {
  return std::count_if(running_.begin(), running_.end(),
                       [](const Request* r) { return r->num_tokens() - r->num_computed_tokens == 1; });
}

Request* Scheduler::find(const std::string& request_id) {
  auto it = requests_.find(request_id);
  return it == requests_.end() ? nullptr : it->second.get();
}

void Scheduler::preempt(Request* r) {
  kv_.free(r->request_id);
  r->num_computed_tokens = 0;
  r->num_draft_computed_tokens = 0;
  r->spec_token_ids.clear();
  r->status = RequestStatus::kWaiting;
  ++r->num_preemptions;
  ++num_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), r));
  insert_waiting(r);
}

int64_t Scheduler::largest_fitting(int64_t start, int64_t n, const Budget& b) const {
  if (!b.timed || n <= 0) return n;
  // The largest m <= n whose step fits the time (the prediction grows with m).
  auto fits = [&](int64_t m) {
    StepFeatures f = b.used;
    f += StepFeatures::chunk(start, m);
    return cost_model_.predict(f) <= b.seconds;
  };
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

int64_t Scheduler::prefill_chunk(int64_t start, int64_t remaining, const Budget& b) const {
  const int64_t n = std::min(remaining, b.tokens);
  int64_t m = largest_fitting(start, n, b);
  if (b.timed && n > 0 && !b.prefill_granted)
    m = std::max(m, std::min(n, std::max<int64_t>(1, limits_.min_prefill_chunk)));
  return m;
}

// Step 1. Returns false when a preemption happened (then no waiting request is admitted).
bool Scheduler::schedule_running(SchedulerOutput& out, Budget& budget) {
  bool preempted_any = false;
  for (size_t i = 0; i < running_.size() && (budget.tokens > 0 || budget.decode_tokens > 0); ++i) {
    Request* r = running_[i];
    const int64_t remaining = r->num_tokens() - r->num_computed_tokens;
    // A decode takes one of the tokens reserved for decodes (and its time was reserved), so a
    // prefill ahead of it in the running order cannot use them up; a chunk gets what fits.
    // Draft tokens ride on a decode out of the prefill token budget and time, never forced.
    const bool decode = remaining == 1;
    if (decode ? budget.decode_tokens <= 0 : budget.tokens <= 0) continue;
    const int64_t num_spec =
        decode ? largest_fitting(r->num_computed_tokens + 1,
                                 std::min(static_cast<int64_t>(r->spec_token_ids.size()), budget.tokens), budget)
               : 0;
    const int64_t n = decode ? 1 + num_spec : prefill_chunk(r->num_computed_tokens, remaining, budget);
    if (n <= 0) continue;
    kv_.release_out_of_window(r->request_id, r->num_computed_tokens);  // before it asks for more
    bool self_preempted = false;
    while (!kv_.allocate_slots_cow(r->request_id, r->num_computed_tokens, r->num_computed_tokens + n,
                                   out.blocks_to_copy)) {
      Request* victim = running_.back();
      out.preempted.push_back(victim->request_id);
      preempted_any = true;
      preempt(victim);
      if (victim == r) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    out.scheduled.push_back(ScheduledRequest{r, n, num_spec});
    if (decode) {
      --budget.decode_tokens;
      budget.tokens -= num_spec;
      if (num_spec > 0) budget.used += StepFeatures::chunk(r->num_computed_tokens + 1, num_spec);
    } else {
      budget.tokens -= n;
      budget.used += StepFeatures::chunk(r->num_computed_tokens, n);
      budget.prefill_granted = true;
    }
  }
  return !preempted_any;
}

// Step 2: admit waiting requests in order, prefix-cache hits first, then prefill chunks. A
// request takes 1 + num_fork_seats slots (an n > 1 leader reserves its members' slots), so the
// forks at its first token stay within max_num_seqs; num_fork_seats <= max_num_seqs - 1, so an
// idle scheduler always admits the head.
void Scheduler::schedule_waiting(SchedulerOutput& out, Budget& budget) {
  int64_t seats = num_seats_taken();
  while (!waiting_.empty() && budget.tokens > 0) {
    Request* r = waiting_.front();
    if (seats + 1 + r->num_fork_seats > limits_.max_num_seqs) break;
    PrefixHit hit;
    if (r->num_computed_tokens == 0 && kv_.prefix_caching()) {
      hit = kv_.find_cached_prefix(r->all_token_ids(), r->prefix_root_hash);
    }
    const int64_t start = r->num_computed_tokens + hit.num_tokens;
    const int64_t n = prefill_chunk(start, r->num_tokens() - start, budget);
    if (n <= 0) break;  // no time left this step: FCFS, nobody overtakes the head
    if (!kv_.allocate_slots(r->request_id, start + n, hit.blocks.empty() ? nullptr : &hit)) break;
    if (r->num_computed_tokens == 0 && kv_.prefix_caching()) {
      prefix_cache_queries_ += r->num_tokens();
      prefix_cache_hits_ += hit.num_tokens;
      if (r->num_preemptions == 0) r->num_cached_tokens = hit.num_tokens;
    }
    r->num_computed_tokens = start;
    waiting_.erase(waiting_.begin());
    r->status = RequestStatus::kRunning;
    running_.insert(std::upper_bound(running_.begin(), running_.end(), r, better), r);
    seats += 1 + r->num_fork_seats;
    out.scheduled.push_back(ScheduledRequest{r, n});
    budget.tokens -= n;
    budget.used += StepFeatures::chunk(start, n);
    budget.prefill_granted = true;
  }
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  Budget budget;
  budget.tokens = limits_.max_num_batched_tokens;
  int64_t num_decodes = 0;
  for (const Request* r : running_) {
    if (r->num_tokens() - r->num_computed_tokens == 1) {
      budget.used += StepFeatures::chunk(r->num_computed_tokens, 1);
      ++num_decodes;
    }
  }
  // Decodes first, always: their tokens come off the token budget before any prefill chunk.
  budget.decode_tokens = std::min(num_decodes, budget.tokens);
  budget.tokens -= budget.decode_tokens;
  budget.seconds =
      step_budget_seconds(cost_model_, limits_.max_step_seconds, limits_.auto_step_factor, num_decodes, budget.used);
  budget.timed = budget.seconds > 0;
  last_step_budget_seconds_ = budget.seconds;
  if (schedule_running(out, budget)) schedule_waiting(out, budget);
  // A request preempted after being granted tokens earlier in this step cannot happen: victims
  // are taken from the back, behind every request already granted.
  for (ScheduledRequest& s : out.scheduled) {
    out.num_scheduled_tokens += s.num_scheduled_tokens;
    const Request& r = *s.request;
    const bool reaches_end = r.num_computed_tokens + s.num_scheduled_tokens - s.num_spec_tokens == r.num_tokens();
    s.num_logits_rows = reaches_end ? static_cast<int32_t>(1 + s.num_spec_tokens) : 0;
    out.features += StepFeatures::chunk(r.num_computed_tokens, s.num_scheduled_tokens);
  }
  out.predicted_seconds = cost_model_.predict(out.features);
  return out;
}

void Scheduler::on_step_done(const SchedulerOutput& out) {
  for (const ScheduledRequest& s : out.scheduled) {
    Request* r = s.request;
    r->num_computed_tokens += s.num_scheduled_tokens;
    PAGELLM_CHECK(r->num_computed_tokens <= r->num_tokens() + s.num_spec_tokens, "computed past the tokens");
    // Blocks whose tokens are final become prefix-cache entries: K/V computed (never before the
    // forward) and no speculative token left to verify (a rejected one would be rolled back).
    PAGELLM_CHECK(s.num_spec_tokens >= 0 && s.num_spec_tokens < s.num_scheduled_tokens,
                  "speculative tail of the grant");
    const int64_t num_final = r->num_computed_tokens - s.num_spec_tokens;
    if (kv_.prefix_caching() && num_final / kv_.block_size() > kv_.num_hashed_blocks(r->request_id)) {
      kv_.cache_computed_blocks(r->request_id, r->all_token_ids(), num_final, r->prefix_root_hash);
    }
  }
}

void Scheduler::roll_back(Request& r, int64_t num_rejected) {
  PAGELLM_CHECK(num_rejected >= 0 && num_rejected <= r.num_computed_tokens, "rolling back more than was computed");
  r.num_computed_tokens -= num_rejected;
  r.num_draft_computed_tokens = std::min(r.num_draft_computed_tokens, r.num_computed_tokens);
  kv_.truncate(r.request_id, r.num_computed_tokens);
}

std::unique_ptr<Request> Scheduler::finish_request(const std::string& request_id, RequestStatus status) {
  PAGELLM_CHECK(is_finished(status), "finish_request needs a finished status");
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return nullptr;
  std::unique_ptr<Request> r = std::move(it->second);
  requests_.erase(it);
  auto drop = [&](std::vector<Request*>& v) {
    auto p = std::find(v.begin(), v.end(), r.get());
    if (p != v.end()) v.erase(p);
  };
  drop(running_);
  drop(waiting_);
  kv_.free(request_id);
  r->status = status;
  return r;
}

std::vector<std::string> Scheduler::running_ids() const {
  std::vector<std::string> ids;
  for (const Request* r : running_) ids.push_back(r->request_id);
  return ids;
}

std::vector<std::string> Scheduler::waiting_ids() const {
  std::vector<std::string> ids;
  for (const Request* r : waiting_) ids.push_back(r->request_id);
  return ids;
}

}  // namespace pagellm

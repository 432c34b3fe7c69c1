#include "engine/async_engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "engine/engine_core.h"
#include "engine/output_processor.h"

namespace pagellm {
namespace {

// Whether `r` forks the prompt of `prev`, the request added just before it (the members of an
// n > 1 group are consecutive and share one parallel_group): its prompt is computed once.
bool forks_previous(const EngineRequest* prev, const EngineRequest& r) {
  return prev != nullptr && !r.parallel_group.empty() && r.parallel_group == prev->parallel_group;
}

}  // namespace

struct AsyncEngine::Impl {
  explicit Impl(LLM& llm)
      : max_waiting(llm.config().max_waiting),
        max_queue_delay_s(llm.config().max_queue_delay_s),
        limits(llm.config().scheduler_limits()),
        core(llm, limits),
        processor(llm.tokenizer()) {}

  struct Command {
    enum class Kind { kAdd, kAbort } kind = Kind::kAdd;
    EngineRequest request;  // kAdd
    Sink sink;              // kAdd
    std::string id;         // kAbort
  };

  const int64_t max_waiting;       // add_request throws QueueFull beyond this many waiting
  const double max_queue_delay_s;  // ... or beyond this predicted time to first token (0: off)
  const SchedulerLimits limits;
  EngineCore core;  // engine thread only
  // Runs between steps on the engine thread, so that a stop string ends its request before the
  // next step computes it (a remote client would run it on its side, one round trip later).
  OutputProcessor processor;                    // engine thread only
  std::unordered_map<std::string, Sink> sinks;  // engine thread only
  mutable std::mutex mu;                        // guards everything below
  std::condition_variable cv;
  std::deque<Command> inbox;
  int64_t num_queued = 0;  // adds in the inbox + waiting (unforked n > 1 members too)
  // Prompt tokens in the inbox + the scheduler's prefill left, as the scheduler will serve them
  // (running first, then waiting and inbox by priority).
  PrefillBacklog queued_prefill;
  int64_t num_live = 0;  // accepted requests whose final output is not out
  bool stop = false;
  bool draining = false;
  EngineStats stats;
  std::thread thread;

  void deliver(EngineCoreOutput core_out) {
    auto it = sinks.find(core_out.request_id);
    if (it == sinks.end()) return;
    auto stop_in_engine = [this](const std::string& id, const std::string& stop) {
      return core.stop_request(id, stop);
    };
    const RequestOutput out = processor.process(std::move(core_out), stop_in_engine);
    if (!out.finished) {
      it->second(out);
      return;
    }
    Sink sink = std::move(it->second);
    sinks.erase(it);
    sink(out);
    // Release what the sink holds (the server's per-request objects) before the request counts
    // as done: drain() returns at zero, and the server is torn down right after.
    sink = nullptr;
    finished_one();
  }

  void finished_one() {
    std::lock_guard<std::mutex> lock(mu);
    --num_live;
  }

  void apply(Command& c) {
    if (c.kind == Command::Kind::kAdd) {
      const std::string id = c.request.request_id;
      try {
        core.add_request(c.request);
        processor.add_request(id, c.request.stop);
        sinks[id] = std::move(c.sink);
      } catch (const Error& e) {  // validated again by the core: report as an aborted request
        RequestOutput out;
        out.request_id = id;
        out.finished = true;
        out.finish_reason = "abort";
        out.stop_reason = e.what();
        c.sink(out);
        c.sink = nullptr;
        finished_one();
      }
    } else if (auto out = core.abort_request(c.id)) {
      deliver(std::move(*out));
    }
  }

  void publish_stats() {
    std::lock_guard<std::mutex> lock(mu);
    const Scheduler& s = core.scheduler();
    const BlockPool& pool = core.llm().kv_manager().pool();
    stats.num_running = s.num_running();
    stats.num_waiting = core.num_waiting();
    stats.num_blocks = pool.num_blocks();
    stats.num_free_blocks = pool.num_free_blocks();
    stats.kv_cache_usage = pool.usage();
    stats.block_size = core.llm().kv_cache().block_size();
    stats.num_preemptions = s.num_preemptions();
    stats.prompt_tokens = core.counters().prompt_tokens;
    stats.generation_tokens = core.counters().generation_tokens;
    stats.num_steps = core.counters().num_steps;
    stats.prefix_cache_queries = s.prefix_cache_queries();
    stats.prefix_cache_hits = s.prefix_cache_hits();
    stats.num_cached_blocks = pool.num_cached_blocks();
    const StepCostModel& m = s.cost_model();
    stats.step_budget_seconds = s.last_step_budget_seconds();
    stats.step_cost_c_step = m.c_step();
    stats.step_cost_c_token = m.c_token();
    stats.step_cost_c_attn = m.c_attn();
    stats.step_cost_mean_relative_error = m.mean_relative_error();
    stats.last_step_seconds = core.last_step_seconds();
    stats.last_step_predicted_seconds = core.last_step_predicted_seconds();
    stats.step_seconds_total = core.step_seconds_total();
    stats.step_cost_ready = m.ready();
    stats.num_running_decodes = s.num_running_decodes();
    const SpecDecodeCounters& spec = core.counters().spec;
    stats.spec_decode_num_drafts = spec.num_drafts;
    stats.spec_decode_num_draft_tokens = spec.num_draft_tokens;
    stats.spec_decode_num_accepted_tokens = spec.num_accepted_tokens;
    stats.spec_decode_num_accepted_tokens_per_pos.assign(
        spec.num_accepted_tokens_per_pos.begin(),
        spec.num_accepted_tokens_per_pos.begin() + core.llm().config().num_speculative_tokens);
    num_queued = static_cast<int64_t>(inbox.size()) + stats.num_waiting;
    queued_prefill = s.prefill_backlog();
    stats.num_prefill_tokens_left = queued_prefill.total();
    const EngineRequest* prev = nullptr;
    for (const Command& c : inbox) {
      if (c.kind != Command::Kind::kAdd) continue;
      // As add_requests counts them: one prompt per n > 1 group (its members fork it).
      if (!forks_previous(prev, c.request)) {
        queued_prefill.waiting_by_priority[c.request.priority] +=
            static_cast<int64_t>(c.request.prompt_token_ids.size());
      }
      prev = &c.request;
    }
  }

  void loop() {
    for (;;) {
      std::deque<Command> cmds;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || !inbox.empty() || core.has_work(); });
        if (stop && inbox.empty()) break;
        cmds.swap(inbox);
      }
      for (Command& c : cmds) apply(c);
      if (core.has_work()) {
        for (EngineCoreOutput& out : core.step()) deliver(std::move(out));
      }
      publish_stats();
    }
    // Shutdown: abort whatever is left.
    std::vector<std::string> ids;
    for (const auto& [id, sink] : sinks) ids.push_back(id);
    for (const std::string& id : ids) {
      if (auto out = core.abort_request(id)) deliver(std::move(*out));
    }
    publish_stats();
  }
};

AsyncEngine::AsyncEngine(std::unique_ptr<LLM> llm) : llm_(std::move(llm)) {
  llm_->config().validate();  // (LLM validated it when it loaded; cheap, and keeps this honest)
  impl_ = std::make_unique<Impl>(*llm_);
  impl_->publish_stats();
  impl_->thread = std::thread([this] { impl_->loop(); });
}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

void AsyncEngine::add_request(EngineRequest request, Sink sink) {
  std::vector<EngineRequest> requests;
  requests.push_back(std::move(request));
  std::vector<Sink> sinks;
  sinks.push_back(std::move(sink));
  add_requests(std::move(requests), std::move(sinks));
}

void AsyncEngine::add_requests(std::vector<EngineRequest> requests, std::vector<Sink> sinks) {
  PAGELLM_CHECK(requests.size() == sinks.size(), "add_requests: one sink per request");
  if (requests.empty()) return;
  const double now = engine_now();
  for (EngineRequest& r : requests) {
    if (r.arrival_time == 0) r.arrival_time = now;
  }
  const auto k = static_cast<int64_t>(requests.size());
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->draining || impl_->stop) throw Error("the server is shutting down");
    const int64_t max_waiting = impl_->max_waiting;
    if (impl_->num_queued + k > max_waiting) {
      const int64_t room = std::max<int64_t>(0, max_waiting - impl_->num_queued);
      throw QueueFull(k == 1 ? "the waiting queue is full (" + std::to_string(max_waiting) + " requests)"
                             : "the waiting queue is full for this request: it has " + std::to_string(k) +
                                   " sequences, room is left for " + std::to_string(room) + " (the queue holds " +
                                   std::to_string(max_waiting) + ")");
    }
    // The prompt tokens this call adds: one prompt per n > 1 group (its members fork it).
    int64_t prompt_tokens = 0;
    int32_t worst_priority = requests[0].priority;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (!forks_previous(i > 0 ? &requests[i - 1] : nullptr, requests[i])) {
        prompt_tokens += static_cast<int64_t>(requests[i].prompt_token_ids.size());
      }
      worst_priority = std::max(worst_priority, requests[i].priority);
    }
    const EngineStats& st = impl_->stats;
    // What this call's prefill waits behind: the running prompts and the queued ones of the same
    // or a better priority (the call's worst; one HTTP request's prompts share one). Only a
    // request with prefill queued ahead of it is refused: alone, waiting would not make it
    // faster, and a 429 with Retry-After would be retried forever.
    const int64_t ahead = impl_->queued_prefill.ahead_of(worst_priority);
    if (impl_->max_queue_delay_s > 0 && st.step_cost_ready && ahead > 0) {
      const StepCostModel model = StepCostModel::fixed(st.step_cost_c_step, st.step_cost_c_token, st.step_cost_c_attn);
      const SchedulerLimits& l = impl_->limits;
      const double ttft =
          predict_prefill_seconds(model, l.max_step_seconds, l.auto_step_factor, l.max_num_batched_tokens,
                                  l.min_prefill_chunk, ahead + prompt_tokens, st.num_running_decodes);
      if (ttft > impl_->max_queue_delay_s) {
        char msg[256];
        std::snprintf(msg, sizeof msg,
                      "the predicted time to first token, %.1f s (%lld prompt tokens queued ahead, %lld of its own), "
                      "exceeds --max-queue-delay-s %.1f s",
                      ttft, static_cast<long long>(ahead), static_cast<long long>(prompt_tokens),
                      impl_->max_queue_delay_s);
        throw QueueFull(msg);
      }
    }
    for (size_t i = 0; i < requests.size(); ++i) {
      if (!forks_previous(i > 0 ? &requests[i - 1] : nullptr, requests[i])) {
        impl_->queued_prefill.waiting_by_priority[requests[i].priority] +=
            static_cast<int64_t>(requests[i].prompt_token_ids.size());
      }
    }
    impl_->num_queued += k;
    impl_->num_live += k;
    for (size_t i = 0; i < requests.size(); ++i) {
      Impl::Command c;
      c.kind = Impl::Command::Kind::kAdd;
      c.request = std::move(requests[i]);
      c.sink = std::move(sinks[i]);
      impl_->inbox.push_back(std::move(c));
    }
  }
  impl_->cv.notify_all();
}

void AsyncEngine::abort_request(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    Impl::Command c;
    c.kind = Impl::Command::Kind::kAbort;
    c.id = request_id;
    impl_->inbox.push_back(std::move(c));
  }
  impl_->cv.notify_all();
}

void AsyncEngine::drain(double drain_seconds) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->draining = true;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(drain_seconds);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      if (impl_->num_live == 0) return;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // Time is up: stop the loop, which aborts the rest (each sink gets a final "abort").
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

EngineStats AsyncEngine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

}  // namespace pagellm

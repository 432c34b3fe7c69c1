// The engine loop on its own thread, and the two queues through which the rest of the program
// meets it: requests / aborts in, output deltas out (../shared/DESIGN.md, "Threads").
//
//   server thread(s)                       engine thread
//   add_request(req, sink) ──► inbox ──►   EngineCore::step(): schedule -> forward -> sample ->
//   abort_request(id)      ──► inbox         update (token outputs)
//                                          OutputProcessor::process(): text, stop strings (a
//                                            match ends the request in the core, before the
//                                            next step)
//                                          sink(RequestOutput) for every request with news
//
// Sinks are called on the engine thread and must not block: post the output to your own thread
// (e.g. an asio strand) and return. Frontends use it through InProcessEngineClient
// (engine/in_process_client.h).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "engine/engine_types.h"
#include "engine/llm.h"

namespace pagellm {

class AsyncEngine {
 public:
  using Sink = std::function<void(const RequestOutput&)>;

  // Takes the loaded model; starts the engine thread. The scheduler's limits and the waiting-queue
  // bound (max_waiting) are llm->config()'s (EngineConfig: defaults and checks in one place).
  explicit AsyncEngine(std::unique_ptr<LLM> llm);
  ~AsyncEngine();  // stops the thread; unfinished requests get a final "abort" output

  // Thread-safe. Throws QueueFull when max_waiting requests are already waiting, and
  // pagellm::Error for an invalid request (empty prompt, prompt + 1 beyond the context, bad id).
  void add_request(EngineRequest request, Sink sink);
  // Thread-safe. The sequences of one client request (prompts x best_of), admitted all or none:
  // throws QueueFull, adding nothing, when fewer than requests.size() waiting slots are free, so
  // a request never half-enters the queue. sinks[i] receives requests[i]'s outputs.
  void add_requests(std::vector<EngineRequest> requests, std::vector<Sink> sinks);
  // Thread-safe; unknown or finished ids are ignored. The request's blocks are freed within the
  // next step and its sink gets a final output with finish_reason "abort".
  void abort_request(const std::string& request_id);

  // Stop admitting (add_request throws Error "shutting down"), wait up to drain_seconds for
  // running and waiting requests to finish, then abort the rest. Returns when the loop is idle.
  void drain(double drain_seconds);

  EngineStats stats() const;
  const LLM& llm() const { return *llm_; }
  const Tokenizer& tokenizer() const { return llm_->tokenizer(); }
  // Longest prompt + generation one request may have, tokens (LLM::max_model_len).
  int64_t max_model_len() const { return llm_->max_model_len(); }

 private:
  struct Impl;
  std::unique_ptr<LLM> llm_;
  std::unique_ptr<Impl> impl_;
};

// Steady-clock seconds (the clock of every RequestTimes field).
double engine_now();

}  // namespace pagellm

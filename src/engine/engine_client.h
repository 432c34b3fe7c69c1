// What a frontend (the HTTP server, the CLI) may ask of an engine, wherever the engine runs. The
// in-process implementation (engine/in_process_client.h) wraps AsyncEngine; a remote one (a
// router, disaggregated prefill / decode workers) implements the same calls over a transport.
//
//   frontend ── add_requests / abort_request ──► EngineClient ──► engine (any process)
//            ◄── OutputStream(RequestOutput) per request ─┘
//
// All calls are thread-safe. OutputStream callbacks run on a thread of the client (the engine
// thread in-process) and must not block: post the output to your own thread and return. Every
// accepted request gets exactly one finished output, last.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/engine_types.h"

namespace pagellm {

// The facts about the served model that a frontend needs, fixed for the client's lifetime.
struct ModelFacts {
  std::string model_name;           // GGUF general.name, or the file name without ".gguf"
  int32_t vocab_size = 0;           // token ids are in [0, vocab_size)
  int64_t max_model_len = 0;        // longest prompt + generation of one request, tokens
                                    // (LLM::max_model_len: the context, or less in a small pool)
  std::string chat_template;        // GGUF tokenizer.chat_template (Jinja source), "" when absent
  SamplingParams default_sampling;  // the model's general.sampling.* (engine/generation_defaults.h)
  // Why the model's sampling defaults were refused (a bad general.sampling.* value), "" when they
  // were read; default_sampling is then the OpenAI defaults. A frontend that uses the model's
  // defaults must refuse to start on it; one that ignores them need not.
  std::string default_sampling_error;
  bool speculative = false;  // a draft proposer runs (EngineConfig::speculative_ngram)
};

class EngineClient {
 public:
  using OutputStream = std::function<void(const RequestOutput&)>;

  virtual ~EngineClient() = default;

  // The sequences of one client request (prompts x best_of), admitted all or none; streams[i]
  // receives requests[i]'s outputs. Throws QueueFull (adding nothing) when the waiting queue
  // has less room than requests.size(), pagellm::Error "shutting down" after drain() began.
  // Requests the engine then refuses get one finished output with finish_reason "abort".
  virtual void add_requests(std::vector<EngineRequest> requests, std::vector<OutputStream> streams) = 0;
  void add_request(EngineRequest request, OutputStream stream) {
    std::vector<EngineRequest> rs;
    rs.push_back(std::move(request));
    std::vector<OutputStream> ss;
    ss.push_back(std::move(stream));
    add_requests(std::move(rs), std::move(ss));
  }
  // Unknown or finished ids are ignored; a live request ends with finish_reason "abort".
  virtual void abort_request(const std::string& request_id) = 0;
  // Stops admitting, waits up to drain_seconds for live requests, then aborts the rest.
  virtual void drain(double drain_seconds) = 0;
  virtual EngineStats stats() const = 0;
  virtual const ModelFacts& model_facts() const = 0;
};

}  // namespace pagellm

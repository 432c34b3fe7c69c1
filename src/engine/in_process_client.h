// EngineClient over an AsyncEngine in this process: the engine thread runs the core and the
// output processor (so a stop string ends its request before the next step).
#pragma once

#include <memory>

#include "engine/async_engine.h"
#include "engine/engine_client.h"

namespace pagellm {

class InProcessEngineClient : public EngineClient {
 public:
  // Takes the loaded model (its EngineConfig sets the scheduler's limits); starts the engine thread.
  explicit InProcessEngineClient(std::unique_ptr<LLM> llm);

  void add_requests(std::vector<EngineRequest> requests, std::vector<OutputStream> streams) override {
    engine_.add_requests(std::move(requests), std::move(streams));
  }
  void abort_request(const std::string& request_id) override { engine_.abort_request(request_id); }
  void drain(double drain_seconds) override { engine_.drain(drain_seconds); }
  EngineStats stats() const override { return engine_.stats(); }
  const ModelFacts& model_facts() const override { return facts_; }

  // The tokenizer loaded with the model (immutable, thread-safe): the frontend's, so that the
  // vocabulary is loaded once per process. A remote client loads its own from the model files.
  const Tokenizer& tokenizer() const { return engine_.tokenizer(); }

 private:
  AsyncEngine engine_;
  ModelFacts facts_;
};

}  // namespace pagellm

// EngineCore with the output processor in front of it, wired as AsyncEngine wires them (a stop
// string ends its request in the core before the next step): for the tests that look at text.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "engine/output_processor.h"

namespace pagellm::test {

class TextEngine : public EngineCore {
 public:
  TextEngine(LLM& llm, const SchedulerLimits& limits) : EngineCore(llm, limits), processor_(llm.tokenizer()) {}

  void add_request(const EngineRequest& r) {
    EngineCore::add_request(r);
    processor_.add_request(r.request_id, r.stop);
  }
  std::vector<RequestOutput> step() {
    std::vector<RequestOutput> outs;
    for (EngineCoreOutput& o : EngineCore::step()) outs.push_back(process(std::move(o)));
    return outs;
  }
  std::optional<RequestOutput> abort_request(const std::string& id) {
    std::optional<EngineCoreOutput> o = EngineCore::abort_request(id);
    if (!o) return std::nullopt;
    return process(std::move(*o));
  }
  const OutputProcessor& processor() const { return processor_; }

 private:
  RequestOutput process(EngineCoreOutput o) {
    return processor_.process(std::move(o), [this](const std::string& id, const std::string& stop) {
      return EngineCore::stop_request(id, stop);
    });
  }
  OutputProcessor processor_;
};

}  // namespace pagellm::test

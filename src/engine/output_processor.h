// The frontend half of the engine's output path (vLLM v1's OutputProcessor + IncrementalDetokenizer,
// vllm/v1/engine/output_processor.py): the core emits token ids (EngineCoreOutput); this turns
// them into text deltas per request, applies stop strings, and ends a request in the engine as
// soon as one matches.
//
//   EngineCore::step() ──EngineCoreOutput──► OutputProcessor::process() ──RequestOutput──► client
//                      ◄── stop_in_engine(id, stop string) ─┘  (before the next step)
//
// Per request: the pieces of its new tokens go through an IncrementalDetokenizer (complete UTF-8
// only, a possible partial stop-string match held back). A token that the core reports as EOS or
// a stop token id (finish_reason "stop" from the core) is not text. When the request finishes,
// whatever is held back is released (unless a stop string ended it).
// Not thread-safe: one thread (the in-process client's engine thread) calls everything.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/detokenizer.h"
#include "engine/engine_types.h"

namespace pagellm {

class Tokenizer;

class OutputProcessor {
 public:
  // Ends request `id` in the engine with "stop" and stop_reason = `stop`, so that no further step
  // computes it; returns the engine's final output (nullopt when the engine no longer knows it).
  using StopInEngine = std::function<std::optional<EngineCoreOutput>(const std::string& id, const std::string& stop)>;

  // `tokenizer` must outlive this.
  explicit OutputProcessor(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Starts tracking a request admitted to the engine; `stop` are its stop strings (may be empty).
  void add_request(const std::string& id, std::vector<std::string> stop);

  // One core output -> the client's output. When a stop string completes in this output's text,
  // calls stop_in_engine (unless the core already finished the request) and returns a finished
  // output: finish_reason "stop", stop_reason the string, counts and times from the engine's final
  // output; new tokens after the one that completed the stop string are dropped. A finished output
  // ends the tracking. An output for a request not tracked passes through with no text.
  RequestOutput process(EngineCoreOutput out, const StopInEngine& stop_in_engine);

  size_t num_requests() const { return states_.size(); }

 private:
  const Tokenizer& tokenizer_;
  std::unordered_map<std::string, IncrementalDetokenizer> states_;  // by request id
};

}  // namespace pagellm

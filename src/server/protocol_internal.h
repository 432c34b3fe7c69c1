// Pieces shared by protocol_completions.cc and protocol_chat.cc (not part of the server's API).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sample/sampling_params.h"
#include "server/json_fields.h"
#include "server/protocol.h"

namespace pagellm::server {

// The fields common to completions and chat requests.
struct CommonParams {
  SamplingParams sampling;            // logprobs left at -1; the endpoint sets it
  std::optional<int64_t> max_tokens;  // >= 1 when given
  int32_t n = 1;
  std::vector<std::string> stop;      // non-empty strings
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool stream = false;
  bool include_usage = false;
  int32_t priority = 0;
  std::string cache_salt;             // prefix-cache namespace ("" = shared)
  int32_t best_of = 0;                // completions: sequences per prompt (>= n); 0 = n
};

// 404 invalid_request_error, code model_not_found (as OpenAI and vLLM) when `model` is given and
// is not the served model name. Every endpoint that takes `model` checks it first.
void check_model(const Fields& f, const ModelInfo& model);

// Reads sampling fields, n, stop, stop_token_ids, ignore_eos, stream, stream_options,
// priority and user. `max_tokens_field` is the name the endpoint reads first ("max_tokens", or
// chat's "max_completion_tokens", which wins over "max_tokens" as in vLLM).
CommonParams parse_common_params(const Fields& f, const ModelInfo& model, bool chat);

// Checks prompts against the context, fills plan->requests (prompt-major, n per prompt) and the
// plan's flags. default_max_tokens < 0 means "the rest of the context". `prompt_param` names the
// prompt field in errors ("prompt" or "messages").
void fan_out(GenerationPlan* plan, const CommonParams& p, const ModelInfo& model, int64_t default_max_tokens,
             const char* prompt_param);

// Token ids checked against the vocabulary; `param` names the field in errors.
std::vector<int32_t> parse_token_ids(const nlohmann::json& v, int32_t vocab_size, const std::string& param);

// A logprob as a JSON number: -inf and NaN become -9999.0 (JSON has no infinities), as vLLM.
double json_logprob(float logprob);

// A string, or null.
inline nlohmann::json optional_json(const std::optional<std::string>& s) {
  return s ? nlohmann::json(*s) : nlohmann::json(nullptr);
}

}  // namespace pagellm::server

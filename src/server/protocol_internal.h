// Pieces shared by protocol_completions.cc and protocol_chat.cc (not part of the server's API).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sample/sampling_params.h"
#include "server/json_fields.h"
#include "server/protocol.h"

namespace pagellm::server {

// A request field of OpenAI's or vLLM's API that this server does not implement. Sent with a
// value other than null or a no-op one, it is refused (400 "'X' is not supported by this
// server", param X) rather than silently ignored: the client asked for a behaviour it would not
// get. Fields outside the OpenAI / vLLM surface are ignored (as OpenAI does).
struct UnsupportedField {
  const char* name;
  bool completions;  // checked on /v1/completions
  bool chat;         // checked on /v1/chat/completions
  // True for a value that asks for nothing beyond the default (accepted); null always is.
  bool (*is_noop)(const nlohmann::json& v);
};

namespace unsupported {
constexpr bool never(const nlohmann::json&) { return false; }
inline bool is_false(const nlohmann::json& v) { return v.is_boolean() && !v.get<bool>(); }
inline bool is_zero(const nlohmann::json& v) { return v.is_number() && v.get<double>() == 0.0; }
inline bool is_empty_array(const nlohmann::json& v) { return v.is_array() && v.empty(); }
inline bool is_empty_object(const nlohmann::json& v) { return v.is_object() && v.empty(); }
inline bool is_none_or_auto(const nlohmann::json& v) { return v == "none" || v == "auto"; }
}  // namespace unsupported

// The one table of unsupported fields (OpenAI API reference; vLLM
// vllm/entrypoints/openai/protocol.py CompletionRequest / ChatCompletionRequest).
inline constexpr UnsupportedField kUnsupportedFields[] = {
    // Structured output: {"type": "text"} is the default (plain text); json_object / json_schema
    // need constrained decoding, which the sampler does not have.
    {"response_format", true, true,
     [](const nlohmann::json& v) { return v.is_object() && v.size() == 1 && v.value("type", "") == "text"; }},
    // vLLM's guided decoding (older names) and structured_outputs (newer): constrained decoding.
    {"guided_json", true, true, unsupported::never},
    {"guided_regex", true, true, unsupported::never},
    {"guided_choice", true, true, unsupported::never},
    {"guided_grammar", true, true, unsupported::never},
    {"structured_outputs", true, true, unsupported::never},
    // vLLM: names of custom logits processors to load.
    {"logits_processors", true, true, unsupported::never},
    // vLLM: logprobs of the prompt tokens (we never compute prompt logprobs; echo gives null).
    {"prompt_logprobs", true, true, unsupported::never},
    // vLLM: suppress EOS / stop until this many tokens; the engine has no such rule. 0 = off.
    {"min_tokens", true, true, unsupported::is_zero},
    // vLLM: keep only the last k prompt tokens; we refuse an over-long prompt instead.
    {"truncate_prompt_tokens", true, true, unsupported::never},
    // vLLM beam search; length_penalty only acts in beam search (1.0 is its no-op default).
    {"use_beam_search", true, true, unsupported::is_false},
    {"length_penalty", true, true, [](const nlohmann::json& v) { return v.is_number() && v.get<double>() == 1.0; }},
    // LoRA adapters: the server serves one model without adapters.
    {"lora_request", true, true, unsupported::never},
    // vLLM: restrict / forbid tokens; the sampler only has logit_bias.
    {"allowed_token_ids", true, true, unsupported::never},
    {"bad_words", true, true, unsupported::is_empty_array},
    // vLLM: keep the matched stop string in the text; ours are always removed.
    {"include_stop_str_in_output", true, true, unsupported::is_false},
    // vLLM: token pieces as "token_id:N" in logprobs.
    {"return_tokens_as_token_ids", true, true, unsupported::is_false},
    // Completions: fill-in-the-middle text after the completion.
    {"suffix", true, false, unsupported::never},
    // Tool / function calling: no tool-call parsing. An empty list, "none" or "auto" without
    // tools ask for nothing; parallel_tool_calls only matters with tools (refused above).
    {"tools", false, true, unsupported::is_empty_array},
    {"tool_choice", false, true, unsupported::is_none_or_auto},
    {"functions", false, true, unsupported::is_empty_array},
    {"function_call", false, true, unsupported::is_none_or_auto},
    {"parallel_tool_calls", false, true, [](const nlohmann::json& v) { return v.is_boolean(); }},
    // vLLM: a Jinja template of the request's own (we do not run Jinja) and its variables.
    {"chat_template", false, true, unsupported::never},
    {"chat_template_kwargs", false, true, unsupported::is_empty_object},
    // vLLM: continue the last (assistant) message instead of starting a new turn.
    {"continue_final_message", false, true, unsupported::is_false},
    // vLLM: documents for RAG templates.
    {"documents", false, true, unsupported::never},
    // vLLM chat echo: prepend the last message's content (completions' echo is supported).
    {"echo", false, true, unsupported::is_false},
    // OpenAI audio output; modalities ["text"] is the default.
    {"audio", false, true, unsupported::never},
    {"modalities", false, true, [](const nlohmann::json& v) { return v == nlohmann::json::array({"text"}); }},
    // OpenAI predicted outputs, web search, reasoning models.
    {"prediction", false, true, unsupported::never},
    {"web_search_options", false, true, unsupported::never},
    {"reasoning_effort", false, true, unsupported::never},
    // OpenAI stored completions (false / {} ask for nothing).
    {"store", false, true, unsupported::is_false},
    {"metadata", false, true, unsupported::is_empty_object},
};

// 400 naming the first field of kUnsupportedFields that applies to `endpoint` and is present
// with a value that is not a no-op.
void check_unsupported_fields(const Fields& f, Endpoint endpoint);

// The fields common to completions and chat requests.
struct CommonParams {
  SamplingParams sampling;            // logprobs left at -1; the endpoint sets it
  std::optional<int64_t> max_tokens;  // >= 1 when given
  int32_t n = 1;
  std::vector<std::string> stop;  // non-empty strings
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool stream = false;
  bool include_usage = false;
  int32_t priority = 0;
  std::string cache_salt;  // prefix-cache namespace ("" = shared)
  // `speculative`: false -> 0 (off), true / absent -> -1 (the server's), {"num_speculative_tokens": k}
  int32_t num_speculative_tokens = -1;
  int32_t best_of = 0;  // completions: sequences per prompt (>= n); 0 = n
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

// 400 context_length_exceeded (param `prompt_param`) when a prompt of which `parts` are disjoint
// pieces cannot fit in the context, known from its bytes alone before it is tokenised: the
// Tokenizer's lower bound on its tokens, plus `added_tokens` (BOS / EOS the encoding adds), is
// >= max_model_len. Linear in the bytes; tokenising a multi-MB prompt only to refuse it is not.
void check_prompt_bytes(std::span<const std::string_view> parts, size_t added_tokens, const ModelInfo& model,
                        const char* prompt_param);
// BOS / EOS that encode(text, add_special, ...) adds.
size_t added_special_tokens(const Tokenizer& tok, bool add_special);
// max_tokens for a prompt of `prompt_len` tokens, or 400 context_length_exceeded when prompt +
// max_tokens exceeds the context. default_max < 0 means "the rest of the context".
int32_t checked_max_tokens(size_t prompt_len, const CommonParams& p, const ModelInfo& model, int64_t default_max,
                           const char* prompt_param);

// Token ids checked against the vocabulary; `param` names the field in errors.
std::vector<int32_t> parse_token_ids(const nlohmann::json& v, int32_t vocab_size, const std::string& param);

// A logprob as a JSON number: -inf and NaN become -9999.0 (JSON has no infinities), as vLLM.
double json_logprob(float logprob);

// A string, or null.
inline ResponseJson optional_json(const std::optional<std::string>& s) {
  return s ? ResponseJson(*s) : ResponseJson(nullptr);
}

}  // namespace pagellm::server

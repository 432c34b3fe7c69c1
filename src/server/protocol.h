// The OpenAI-compatible request and response bodies: parse + validate (pure functions of the JSON
// body and the served model) and serialise. No I/O here; routes.cc and generation.cc do that.
//
// References: OpenAI API reference ("Completions" (legacy), "Chat Completions", "Models",
// "Error codes"), and vLLM's OpenAI server (`vllm/entrypoints/openai/protocol.py`) where OpenAI is
// silent: `stop_token_ids`, `ignore_eos`, `top_k`, `min_p`, `repetition_penalty`, `priority`,
// `stop_reason`, /tokenize and /detokenize.
//
// Every validation failure throws ApiError (400 unless noted) whose `param` names the field.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/engine_types.h"
#include "server/api_error.h"
#include "server/chat_template.h"

namespace pagellm {
class Tokenizer;
}  // namespace pagellm

namespace pagellm::server {

// Largest `logprobs` (completions) / `top_logprobs` (chat), as vLLM's default max_logprobs.
inline constexpr int32_t kMaxLogprobs = 20;
// Largest `n` per prompt.
inline constexpr int32_t kMaxN = 128;
// Largest number of sequences (prompts x n) one HTTP request may start.
inline constexpr int32_t kMaxSequencesPerRequest = 1024;

// Deepest nesting of arrays and objects a request body may have (the top-level object is level
// 1); deeper bodies are refused before they are parsed (parse_json_body).
inline constexpr int kMaxJsonDepth = 64;

// What the parsers need to know about the served model.
struct ModelInfo {
  const Tokenizer* tokenizer = nullptr;                         // not null
  ChatFormat chat_format = ChatFormat::kFallback;               // of tokenizer.chat_template, detected once at start-up
  std::string served_model_name;                                // the only accepted `model` value
  int32_t max_model_len = 0;                                    // context length, tokens (prompt + generated)
  int32_t max_sequences_per_request = kMaxSequencesPerRequest;  // prompts x best_of (serve --max-n)
  SamplingParams default_sampling;  // what a request's omitted sampling fields take (serve --generation-config)
  bool speculative = false;         // the engine proposes draft tokens (speculative decoding)
};

enum class Endpoint { kCompletions, kChat };

// One prompt after tokenisation.
struct PromptPlan {
  std::vector<int32_t> token_ids;  // non-empty, ids in [0, vocab_size)
  std::string text;                // for echo: the string prompt as given, or the decoded ids
                                   // (special tokens skipped)
  // With echo and logprobs: each token's string in `text` (their concatenation is text wherever
  // the ids spell it: Tokenizer::decode_text_pieces / decode_pieces), for the text_offsets.
  std::vector<std::string> echo_pieces;
};

// A validated generation request, ready for the engine.
struct GenerationPlan {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;    // served model name
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions only
  int32_t n = 1;
  // Sequences generated per prompt (completions' best_of; = n otherwise). With best_of > n the
  // n with the highest cumulative logprob are returned (non-streamed only).
  int32_t best_of = 1;
  int64_t discarded_completion_tokens = 0;  // tokens of best_of sequences not returned (billed)
  int64_t cached_tokens = 0;                // prompt tokens reused from the prefix cache
  bool speculative = false;                 // the engine speculates for this request's sequences
  // Top logprobs per token: -1 none; completions: `logprobs`; chat: `top_logprobs` (0 when
  // `logprobs` is true without it).
  int32_t logprobs = -1;
  std::vector<PromptPlan> prompts;
  // [prompts.size() * best_of]: requests[i] is sequence i, of prompt i / best_of; ids "<id>-<i>";
  // with a seed, sequence j of a prompt uses seed + j (vLLM's parallel-sampling rule). The
  // sequences of one prompt form a parallel group: its prompt is computed once.
  std::vector<EngineRequest> requests;
};

// POST /v1/completions. `id` becomes plan.id; `created` is Unix seconds.
GenerationPlan parse_completion_request(const nlohmann::json& body, const ModelInfo& model, const std::string& id,
                                        int64_t created);
// POST /v1/chat/completions. Default max_tokens: the rest of the context.
GenerationPlan parse_chat_request(const nlohmann::json& body, const ModelInfo& model, const std::string& id,
                                  int64_t created);
// Parses `messages` (array of {role, content: string | [{type: "text", text}]}); text parts are
// joined with "\n" (as vLLM). Roles: system, user, assistant, and developer (OpenAI's newer name
// for system, rendered as system); tool / function and others are 400 naming messages[i].role.
// content is required (400 naming messages[i].content); tool_calls / function_call on a message
// are 400 (tools are not supported).
std::vector<ChatMessage> parse_messages(const nlohmann::json& messages);
// The model's chat template (server/chat_template.h) applied to `messages` and tokenised per its
// BOS contract: exactly one BOS when the tokenizer adds one. Throws ApiError 400 (param
// "messages") for a role the template cannot render, and 400 context_length_exceeded, before
// rendering, when the contents' bytes alone cannot fit in max_model_len tokens.
std::vector<int32_t> tokenize_chat(const ModelInfo& model, const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt);

// Parses a JSON body; 400 for malformed JSON, nesting deeper than kMaxJsonDepth or a top level
// that is not an object.
nlohmann::json parse_json_body(const std::string& body);
// Serialises a response body; invalid UTF-8 (possible in token pieces) becomes U+FFFD.
std::string dump_json(const nlohmann::json& j);
std::string dump_json(const nlohmann::ordered_json& j);

// Response bodies keep their fields in insertion order, as OpenAI and vLLM write them (id,
// object, created, model, choices, usage; top_logprobs best first), which nlohmann::json (a
// std::map per object) cannot. Converting one to nlohmann::json sorts its keys again.
using ResponseJson = nlohmann::ordered_json;

// ---- responses ----

// The finished state of one choice.
struct ChoiceResult {
  std::vector<int32_t> token_ids;
  std::vector<SampleResult> logprobs;  // one per token when plan.logprobs >= 0
  std::string text;                    // generated text (no echo)
  std::string finish_reason;           // "stop" | "length" | "abort"
  std::optional<std::string> stop_reason;
  int32_t num_cached_tokens = 0;          // prompt tokens reused (prefix cache or parallel group)
  double cumulative_logprob = 0;          // when best_of > n
  int32_t num_accepted_draft_tokens = 0;  // of token_ids, accepted speculative draft tokens
};

struct Usage {
  int64_t prompt_tokens = 0;      // each prompt counted once, whatever n
  int64_t completion_tokens = 0;  // all choices (and discarded best_of sequences)
  int64_t cached_tokens = 0;      // usage.prompt_tokens_details.cached_tokens
  // Speculative decoding (plan.speculative): completion tokens that were accepted draft tokens,
  // usage.completion_tokens_details.accepted_prediction_tokens (OpenAI's field for tokens of a
  // prediction that appear in the completion); -1: not speculative, the field is left out.
  int64_t accepted_prediction_tokens = -1;
};
Usage plan_usage(const GenerationPlan& plan, const std::vector<ChoiceResult>& choices);
// {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details: {cached_tokens}
//  [, completion_tokens_details: {accepted_prediction_tokens}]}
ResponseJson usage_json(const Usage& usage);
// Sets plan.cached_tokens, and with best_of > n keeps per prompt the n sequences with the highest
// cumulative logprob (ties: lower index), counting the others in discarded_completion_tokens.
// `all` holds prompts.size() * best_of results in plan order.
std::vector<ChoiceResult> select_best_of(GenerationPlan& plan, std::vector<ChoiceResult> all);

// Non-streamed bodies: object "text_completion" / "chat.completion". choices[i] is choice i.
ResponseJson completion_response(const GenerationPlan& plan, const std::vector<ChoiceResult>& choices,
                                 const Tokenizer& tokenizer);
ResponseJson chat_response(const GenerationPlan& plan, const std::vector<ChoiceResult>& choices,
                           const Tokenizer& tokenizer);

// Streamed chunks. Completions: object "text_completion", choices [{index, text, logprobs,
// finish_reason, stop_reason}]. Chat: object "chat.completion.chunk", choices [{index, delta,
// logprobs, finish_reason, stop_reason}]. With include_usage every chunk carries "usage": null.
ResponseJson completion_chunk(const GenerationPlan& plan, int32_t index, const std::string& text, ResponseJson logprobs,
                              const std::optional<std::string>& finish_reason,
                              const std::optional<std::string>& stop_reason);
ResponseJson chat_chunk(const GenerationPlan& plan, int32_t index, ResponseJson delta, ResponseJson logprobs,
                        const std::optional<std::string>& finish_reason, const std::optional<std::string>& stop_reason);
// The final chunk of stream_options.include_usage: empty choices and the usage.
ResponseJson usage_chunk(const GenerationPlan& plan, const Usage& usage);

// Legacy completions logprobs {tokens, token_logprobs, top_logprobs, text_offset}.
// `echoed` prompt tokens (PromptPlan::echo_pieces) come first with null token_logprobs and
// top_logprobs (we do not compute prompt logprobs). text_offset: byte offset in the choice's
// text, starting at *offset and advancing by each token's string length (updated, for the next
// streamed chunk).
ResponseJson completion_logprobs(const Tokenizer& tokenizer, std::span<const std::string> echoed,
                                 std::span<const SampleResult> sampled, size_t* offset);
// Chat logprobs content [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}].
ResponseJson chat_logprobs_content(const Tokenizer& tokenizer, std::span<const SampleResult> sampled,
                                   int32_t top_logprobs);

// ---- other endpoints ----

// POST /tokenize: {"prompt", "add_special_tokens"?} or {"messages", "add_generation_prompt"?,
// "add_special_tokens"?} -> {"tokens", "count", "max_model_len"}. A prompt whose bytes alone
// cannot fit in max_model_len tokens is refused (400 context_length_exceeded) untokenised.
ResponseJson tokenize_response(const nlohmann::json& body, const ModelInfo& model);
// POST /detokenize: {"tokens": [ids]} -> {"prompt": text}.
ResponseJson detokenize_response(const nlohmann::json& body, const ModelInfo& model);
// GET /v1/models: one model, `created` Unix seconds.
ResponseJson models_response(const ModelInfo& model, int64_t created);

// A fresh id: prefix + 32 random hex digits.
std::string random_id(const std::string& prefix);

}  // namespace pagellm::server

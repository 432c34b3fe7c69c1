// POST /v1/completions (OpenAI's legacy completions): request parsing and response bodies.
#include "server/protocol_internal.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::server {

namespace {

constexpr int64_t kDefaultMaxTokens = 16;  // OpenAI's default for completions

bool all_of_kind(const nlohmann::json& arr, bool (nlohmann::json::*pred)() const noexcept) {
  for (const nlohmann::json& e : arr) {
    if (!(e.*pred)()) return false;
  }
  return true;
}

PromptPlan text_prompt(const std::string& text, const ModelInfo& model, bool add_special, bool echo_pieces) {
  const std::string_view parts[] = {text};
  check_prompt_bytes(parts, added_special_tokens(*model.tokenizer, add_special), model, "prompt");
  PromptPlan p;
  p.text = text;
  p.token_ids = model.tokenizer->encode(text, add_special, /*parse_special=*/true);
  if (echo_pieces) p.echo_pieces = model.tokenizer->decode_text_pieces(p.token_ids, add_special);
  return p;
}

PromptPlan ids_prompt(const nlohmann::json& ids, const ModelInfo& model, const CommonParams& params, bool echo_pieces) {
  // Too many ids is known from the count: refuse before looking at each.
  if (ids.is_array() && ids.size() >= static_cast<size_t>(model.max_model_len)) {
    checked_max_tokens(ids.size(), params, model, kDefaultMaxTokens, "prompt");
  }
  PromptPlan p;
  p.token_ids = parse_token_ids(ids, model.tokenizer->vocab_size(), "prompt");
  p.text = model.tokenizer->decode(p.token_ids, /*skip_special=*/true);
  if (echo_pieces) p.echo_pieces = model.tokenizer->decode_pieces(p.token_ids, /*skip_special=*/true);
  return p;
}

// prompt: string | [string] | [int] | [[int]]; each prompt becomes one PromptPlan (echo_pieces
// filled when asked).
std::vector<PromptPlan> parse_prompts(const Fields& f, const ModelInfo& model, const CommonParams& params,
                                      bool echo_pieces) {
  const nlohmann::json* v = f.get("prompt");
  if (!v) throw bad_request("'prompt' is required", "prompt");
  const bool add_special = f.boolean("add_special_tokens").value_or(true);
  const char* kWhat = "a string, an array of strings, an array of token ids or an array of token-id arrays";
  std::vector<PromptPlan> prompts;
  const bool array = v->is_array() && !v->empty();  // (an empty array is no prompt)
  if (v->is_string()) {
    prompts.push_back(text_prompt(v->get<std::string>(), model, add_special, echo_pieces));
  } else if (array && all_of_kind(*v, &nlohmann::json::is_string)) {
    for (const nlohmann::json& s : *v) {
      prompts.push_back(text_prompt(s.get<std::string>(), model, add_special, echo_pieces));
    }
  } else if (array && all_of_kind(*v, &nlohmann::json::is_number)) {
    prompts.push_back(ids_prompt(*v, model, params, echo_pieces));
  } else if (array && all_of_kind(*v, &nlohmann::json::is_array)) {
    for (const nlohmann::json& ids : *v) prompts.push_back(ids_prompt(ids, model, params, echo_pieces));
  } else {
    wrong_type("prompt", kWhat, *v);
  }
  return prompts;
}

}  // namespace

GenerationPlan parse_completion_request(const nlohmann::json& body, const ModelInfo& model, const std::string& id,
                                        int64_t created) {
  const Fields f(body);
  check_model(f, model);
  check_unsupported_fields(f, Endpoint::kCompletions);
  CommonParams p = parse_common_params(f, model, /*chat=*/false);
  if (auto best_of = f.integer("best_of", 1, kMaxN)) {
    if (*best_of < p.n) {
      throw bad_request("'best_of' (" + std::to_string(*best_of) + ") must be >= n (" + std::to_string(p.n) + ")",
                        "best_of");
    }
    if (*best_of > p.n && p.stream) throw bad_request("'best_of' > n cannot be streamed", "best_of");
    p.best_of = static_cast<int32_t>(*best_of);
  }
  GenerationPlan plan;
  plan.endpoint = Endpoint::kCompletions;
  plan.id = id;
  plan.created = created;
  plan.model = model.served_model_name;
  plan.echo = f.boolean("echo").value_or(false);
  plan.logprobs = static_cast<int32_t>(f.integer("logprobs", 0, kMaxLogprobs).value_or(-1));
  plan.prompts = parse_prompts(f, model, p, plan.echo && plan.logprobs >= 0);
  fan_out(&plan, p, model, kDefaultMaxTokens, "prompt");
  return plan;
}

ResponseJson completion_logprobs(const Tokenizer& tokenizer, std::span<const std::string> echoed,
                                 std::span<const SampleResult> sampled, size_t* offset) {
  ResponseJson tokens = ResponseJson::array(), token_logprobs = ResponseJson::array();
  ResponseJson top = ResponseJson::array(), text_offset = ResponseJson::array();
  auto add_token = [&](int32_t id) {
    std::string piece = tokenizer.token_to_piece(id);
    text_offset.push_back(*offset);
    *offset += piece.size();
    tokens.push_back(std::move(piece));
  };
  for (const std::string& piece : echoed) {
    text_offset.push_back(*offset);
    *offset += piece.size();
    tokens.push_back(piece);
    token_logprobs.push_back(nullptr);
    top.push_back(nullptr);
  }
  for (const SampleResult& s : sampled) {
    add_token(s.token_id);
    token_logprobs.push_back(json_logprob(s.logprob));
    // The top-k map plus the sampled token, as vLLM returns (k + 1 entries at most), best first
    // (as OpenAI and vLLM order them; top_logprobs is sorted, and the sampled token, when not
    // among them, is no better than any). Two tokens with the same piece keep the better one.
    ResponseJson m = ResponseJson::object();
    auto add = [&](int32_t id, float logprob) {
      std::string piece = tokenizer.token_to_piece(id);
      if (!m.contains(piece)) m[std::move(piece)] = json_logprob(logprob);
    };
    for (const TokenLogprob& t : s.top_logprobs) add(t.token_id, t.logprob);
    add(s.token_id, s.logprob);
    top.push_back(std::move(m));
  }
  // OpenAI's field order (vLLM's CompletionLogProbs too).
  return {{"text_offset", std::move(text_offset)},
          {"token_logprobs", std::move(token_logprobs)},
          {"tokens", std::move(tokens)},
          {"top_logprobs", std::move(top)}};
}

ResponseJson completion_response(const GenerationPlan& plan, const std::vector<ChoiceResult>& choices,
                                 const Tokenizer& tokenizer) {
  ResponseJson out = ResponseJson::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    const PromptPlan& prompt = plan.prompts[i / static_cast<size_t>(plan.n)];
    ResponseJson logprobs = nullptr;
    if (plan.logprobs >= 0) {
      size_t offset = 0;
      std::span<const std::string> echoed;
      if (plan.echo) echoed = prompt.echo_pieces;
      logprobs = completion_logprobs(tokenizer, echoed, c.logprobs, &offset);
    }
    out.push_back({{"index", i},
                   {"text", plan.echo ? prompt.text + c.text : c.text},
                   {"logprobs", std::move(logprobs)},
                   {"finish_reason", c.finish_reason},
                   {"stop_reason", optional_json(c.stop_reason)}});
  }
  const Usage u = plan_usage(plan, choices);
  return {{"id", plan.id},       {"object", "text_completion"}, {"created", plan.created},
          {"model", plan.model}, {"choices", std::move(out)},   {"usage", usage_json(u)}};
}

ResponseJson completion_chunk(const GenerationPlan& plan, int32_t index, const std::string& text, ResponseJson logprobs,
                              const std::optional<std::string>& finish_reason,
                              const std::optional<std::string>& stop_reason) {
  ResponseJson choice = {{"index", index},
                         {"text", text},
                         {"logprobs", std::move(logprobs)},
                         {"finish_reason", optional_json(finish_reason)},
                         {"stop_reason", optional_json(stop_reason)}};
  ResponseJson chunk = {{"id", plan.id},
                        {"object", "text_completion"},
                        {"created", plan.created},
                        {"model", plan.model},
                        {"choices", ResponseJson::array({std::move(choice)})}};
  if (plan.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

ResponseJson usage_chunk(const GenerationPlan& plan, const Usage& u) {
  return {{"id", plan.id},
          {"object", plan.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
          {"created", plan.created},
          {"model", plan.model},
          {"choices", ResponseJson::array()},
          {"usage", usage_json(u)}};
}

}  // namespace pagellm::server

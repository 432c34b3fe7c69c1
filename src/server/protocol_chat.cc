// POST /v1/chat/completions: request parsing and response bodies.
#include "core/error.h"
#include "server/protocol_internal.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::server {

namespace {

std::string_view trim_ascii_space(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

// content: string | [{"type": "text", "text": string}, ...] (parts joined by "\n", as vLLM).
std::string parse_content(const nlohmann::json* content, const std::string& param) {
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) wrong_type(param, "a string or an array of content parts", *content);
  std::string text;
  for (size_t i = 0; i < content->size(); ++i) {
    const nlohmann::json& part = (*content)[i];
    const std::string part_param = param + "[" + std::to_string(i) + "]";
    const Fields pf(part);
    const std::optional<std::string> type = pf.string("type");
    if (type != "text") {
      throw bad_request("only content parts of type \"text\" are supported", part_param + ".type");
    }
    const std::optional<std::string> t = pf.string("text");
    if (!t) throw bad_request("a text content part needs 'text'", part_param + ".text");
    if (i > 0) text += "\n";
    text += *t;
  }
  return text;
}

}  // namespace

std::vector<ChatMessage> parse_messages(const nlohmann::json& messages) {
  if (!messages.is_array()) wrong_type("messages", "an array of messages", messages);
  if (messages.empty()) throw bad_request("'messages' must not be empty", "messages");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!messages[i].is_object()) wrong_type(param, "an object", messages[i]);
    const Fields mf(messages[i]);
    ChatMessage m;
    const nlohmann::json* role = mf.get("role");
    if (!role) throw bad_request("each message needs a 'role'", param + ".role");
    if (!role->is_string()) wrong_type(param + ".role", "a string", *role);
    m.role = role->get<std::string>();
    if (m.role == "developer") m.role = "system";  // OpenAI's newer name for the system role
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      // tool / function results answer tool calls, which this server refuses (tools is in
      // kUnsupportedFields), and none of its chat templates renders them.
      throw bad_request(param + ".role '" + m.role.substr(0, 64) +
                            "' is not supported (expected system, developer, user or assistant)",
                        param + ".role");
    }
    if (const nlohmann::json* calls = mf.get("tool_calls"); calls && !(calls->is_array() && calls->empty())) {
      throw bad_request("'tool_calls' is not supported by this server", param + ".tool_calls");
    }
    if (mf.get("function_call")) {
      throw bad_request("'function_call' is not supported by this server", param + ".function_call");
    }
    const nlohmann::json* content = mf.get("content");
    if (!content) throw bad_request(param + " needs 'content'", param + ".content");
    m.content = parse_content(content, param + ".content");
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<int32_t> tokenize_chat(const ModelInfo& model, const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt) {
  // Templates may trim each content (Llama 2 / 3, Gemma), so only the trimmed bytes are sure to
  // reach the prompt.
  std::vector<std::string_view> contents;
  contents.reserve(messages.size());
  for (const ChatMessage& m : messages) contents.push_back(trim_ascii_space(m.content));
  check_prompt_bytes(contents, added_special_tokens(*model.tokenizer, /*add_special=*/true), model, "messages");
  std::string text;
  try {
    text = apply_chat_template(*model.tokenizer, model.chat_format, messages, add_generation_prompt);
  } catch (const Error& e) {
    throw bad_request(std::string("cannot apply the chat template: ") + e.what(), "messages");
  }
  return model.tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/true);
}

GenerationPlan parse_chat_request(const nlohmann::json& body, const ModelInfo& model, const std::string& id,
                                  int64_t created) {
  const Fields f(body);
  check_model(f, model);
  check_unsupported_fields(f, Endpoint::kChat);
  const nlohmann::json* messages = f.get("messages");
  if (!messages) throw bad_request("'messages' is required", "messages");
  const std::vector<ChatMessage> parsed = parse_messages(*messages);
  const CommonParams p = parse_common_params(f, model, /*chat=*/true);
  GenerationPlan plan;
  plan.endpoint = Endpoint::kChat;
  plan.id = id;
  plan.created = created;
  plan.model = model.served_model_name;
  const bool logprobs = f.boolean("logprobs").value_or(false);
  const std::optional<int64_t> top = f.integer("top_logprobs", 0, kMaxLogprobs);
  if (top && !logprobs) throw bad_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
  if (logprobs) plan.logprobs = static_cast<int32_t>(top.value_or(0));
  const bool add_generation_prompt = f.boolean("add_generation_prompt").value_or(true);
  PromptPlan prompt;
  prompt.token_ids = tokenize_chat(model, parsed, add_generation_prompt);
  plan.prompts.push_back(std::move(prompt));
  fan_out(&plan, p, model, /*default_max_tokens=*/-1, "messages");
  return plan;
}

ResponseJson chat_logprobs_content(const Tokenizer& tokenizer, std::span<const SampleResult> sampled,
                                   int32_t top_logprobs) {
  auto entry = [&](int32_t id, float logprob) {
    const std::string piece = tokenizer.token_to_piece(id);
    ResponseJson bytes = ResponseJson::array();
    for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
    return ResponseJson{{"token", piece}, {"logprob", json_logprob(logprob)}, {"bytes", std::move(bytes)}};
  };
  ResponseJson content = ResponseJson::array();
  for (const SampleResult& s : sampled) {
    ResponseJson e = entry(s.token_id, s.logprob);
    ResponseJson top = ResponseJson::array();
    for (size_t k = 0; k < s.top_logprobs.size() && static_cast<int32_t>(k) < top_logprobs; ++k) {
      top.push_back(entry(s.top_logprobs[k].token_id, s.top_logprobs[k].logprob));
    }
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return content;
}

ResponseJson chat_response(const GenerationPlan& plan, const std::vector<ChoiceResult>& choices,
                           const Tokenizer& tokenizer) {
  ResponseJson out = ResponseJson::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    ResponseJson logprobs = nullptr;
    if (plan.logprobs >= 0) logprobs = {{"content", chat_logprobs_content(tokenizer, c.logprobs, plan.logprobs)}};
    out.push_back({{"index", i},
                   {"message", {{"role", "assistant"}, {"content", c.text}}},
                   {"logprobs", std::move(logprobs)},
                   {"finish_reason", c.finish_reason},
                   {"stop_reason", optional_json(c.stop_reason)}});
  }
  const Usage u = plan_usage(plan, choices);
  return {{"id", plan.id},       {"object", "chat.completion"}, {"created", plan.created},
          {"model", plan.model}, {"choices", std::move(out)},   {"usage", usage_json(u)}};
}

ResponseJson chat_chunk(const GenerationPlan& plan, int32_t index, ResponseJson delta, ResponseJson logprobs,
                        const std::optional<std::string>& finish_reason,
                        const std::optional<std::string>& stop_reason) {
  ResponseJson choice = {{"index", index},
                         {"delta", std::move(delta)},
                         {"logprobs", std::move(logprobs)},
                         {"finish_reason", optional_json(finish_reason)},
                         {"stop_reason", optional_json(stop_reason)}};
  ResponseJson chunk = {{"id", plan.id},
                        {"object", "chat.completion.chunk"},
                        {"created", plan.created},
                        {"model", plan.model},
                        {"choices", ResponseJson::array({std::move(choice)})}};
  if (plan.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

}  // namespace pagellm::server

// POST /tokenize, POST /detokenize (vLLM's shapes) and GET /v1/models.
#include "core/error.h"
#include "server/protocol_internal.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::server {

ResponseJson tokenize_response(const nlohmann::json& body, const ModelInfo& model) {
  const Fields f(body);
  check_model(f, model);
  std::vector<int32_t> ids;
  if (const nlohmann::json* messages = f.get("messages")) {
    const std::vector<ChatMessage> parsed = parse_messages(*messages);
    ids = tokenize_chat(model, parsed, f.boolean("add_generation_prompt").value_or(true));
  } else if (const std::optional<std::string> prompt = f.string("prompt")) {
    const bool add_special = f.boolean("add_special_tokens").value_or(true);
    // vLLM's /tokenize has no context limit, but a prompt that cannot fit in the context cannot
    // be sent to this server: refuse it as the generation endpoints do, without tokenising it.
    const std::string_view parts[] = {*prompt};
    check_prompt_bytes(parts, added_special_tokens(*model.tokenizer, add_special), model, "prompt");
    ids = model.tokenizer->encode(*prompt, add_special, /*parse_special=*/true);
  } else {
    throw bad_request("'prompt' (a string) or 'messages' is required", "prompt");
  }
  const auto count = static_cast<int64_t>(ids.size());
  return {{"tokens", std::move(ids)}, {"count", count}, {"max_model_len", model.max_model_len}};
}

ResponseJson detokenize_response(const nlohmann::json& body, const ModelInfo& model) {
  const Fields f(body);
  check_model(f, model);
  const nlohmann::json* tokens = f.get("tokens");
  if (!tokens) throw bad_request("'tokens' is required", "tokens");
  const std::vector<int32_t> ids = parse_token_ids(*tokens, model.tokenizer->vocab_size(), "tokens");
  // The inverse of /tokenize (with add_special_tokens, its default): the BOS / EOS that
  // tokenising adds are dropped, other special tokens render as their text (as vLLM's), and no
  // space is gained or lost (Tokenizer::decode_text; llama.cpp's detokenize differs there).
  return {{"prompt", model.tokenizer->decode_text(ids, /*add_special=*/true)}};
}

ResponseJson models_response(const ModelInfo& model, int64_t created) {
  ResponseJson card = {{"id", model.served_model_name},
                       {"object", "model"},
                       {"created", created},
                       {"owned_by", "pagellm"},
                       {"root", model.served_model_name},
                       {"parent", nullptr},
                       {"max_model_len", model.max_model_len}};
  return {{"object", "list"}, {"data", ResponseJson::array({std::move(card)})}};
}

}  // namespace pagellm::server

#include "server/chat_template.h"

#include <optional>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::server {
namespace {

enum class Role { kSystem, kUser, kAssistant };

struct Turn {
  Role role;
  std::string content;
};

bool contains(std::string_view s, std::string_view needle) { return s.find(needle) != std::string_view::npos; }

// Python str.strip() / Jinja trim over ASCII whitespace.
std::string strip(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(kSpace);
  return std::string(s.substr(b, e - b + 1));
}

std::string_view role_name(Role r) {
  switch (r) {
    case Role::kSystem: return "system";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
  }
  return "";
}

std::vector<Turn> to_turns(const std::vector<ChatMessage>& messages) {
  if (messages.empty()) throw Error("chat: messages must contain at least one message");
  std::vector<Turn> turns;
  turns.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    Role r;
    if (m.role == "system") {
      r = Role::kSystem;
    } else if (m.role == "user") {
      r = Role::kUser;
    } else if (m.role == "assistant") {
      r = Role::kAssistant;
    } else {
      throw Error("chat: messages[" + std::to_string(i) + "].role '" + m.role +
                  "' is not supported (expected system, user or assistant)");
    }
    turns.push_back({r, m.content});
  }
  return turns;
}

// For formats without a system role: each run of system messages is joined ("\n\n") and handed
// with the next user turn to join(system, user); a run with no user turn after it becomes a user
// turn join(system, "").
template <typename Join>
std::vector<Turn> fold_system(std::vector<Turn> turns, Join join) {
  std::vector<Turn> out;
  std::optional<std::string> pending;
  for (Turn& t : turns) {
    if (t.role == Role::kSystem) {
      pending = pending ? *pending + "\n\n" + t.content : t.content;
      continue;
    }
    if (t.role == Role::kUser && pending) {
      t.content = join(*pending, t.content);
      pending.reset();
    }
    out.push_back(std::move(t));
  }
  if (pending) out.push_back({Role::kUser, join(*pending, "")});
  return out;
}

std::string render_chatml(const std::vector<Turn>& turns, bool gen) {
  std::string out;
  for (const Turn& t : turns) {
    out.append("<|im_start|>").append(role_name(t.role)).append("\n").append(t.content).append("<|im_end|>\n");
  }
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

std::string render_llama2(std::vector<Turn> turns, std::string_view bos, std::string_view eos) {
  turns = fold_system(std::move(turns), [](const std::string& sys, const std::string& user) {
    return "<<SYS>>\n" + sys + "\n<</SYS>>\n\n" + user;
  });
  std::string out;
  for (const Turn& t : turns) {
    if (t.role == Role::kUser) {
      out.append(bos).append("[INST] ").append(strip(t.content)).append(" [/INST]");
    } else {
      out.append(" ").append(strip(t.content)).append(" ").append(eos);
    }
  }
  return out;
}

std::string render_llama3(const std::vector<Turn>& turns, bool gen, std::string_view bos) {
  std::string out(bos);
  for (const Turn& t : turns) {
    out.append("<|start_header_id|>").append(role_name(t.role)).append("<|end_header_id|>\n\n");
    out.append(strip(t.content)).append("<|eot_id|>");
  }
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string render_mistral(std::vector<Turn> turns, std::string_view bos, std::string_view eos) {
  turns = fold_system(std::move(turns),
                      [](const std::string& sys, const std::string& user) { return sys + "\n\n" + user; });
  std::string out(bos);
  for (const Turn& t : turns) {
    if (t.role == Role::kUser) {
      out.append("[INST] ").append(t.content).append(" [/INST]");
    } else {
      out.append(t.content).append(eos);
    }
  }
  return out;
}

std::string render_zephyr(const std::vector<Turn>& turns, bool gen, std::string_view eos) {
  std::string out;
  for (const Turn& t : turns) {
    out.append("<|").append(role_name(t.role)).append("|>\n").append(t.content).append(eos).append("\n");
  }
  if (gen) out += "<|assistant|>\n";
  return out;
}

std::string render_gemma(std::vector<Turn> turns, bool gen, std::string_view bos) {
  turns = fold_system(std::move(turns),
                      [](const std::string& sys, const std::string& user) { return sys + "\n\n" + user; });
  std::string out(bos);
  for (const Turn& t : turns) {
    out.append("<start_of_turn>").append(t.role == Role::kAssistant ? "model" : "user").append("\n");
    out.append(strip(t.content)).append("<end_of_turn>\n");
  }
  if (gen) out += "<start_of_turn>model\n";
  return out;
}

std::string render_phi3(const std::vector<Turn>& turns, bool gen, std::string_view bos) {
  std::string out(bos);
  for (const Turn& t : turns) {
    out.append("<|").append(role_name(t.role)).append("|>\n").append(t.content).append("<|end|>\n");
  }
  if (gen) out += "<|assistant|>\n";
  return out;
}

}  // namespace

std::string_view chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::kLlama2: return "llama2";
    case ChatFormat::kLlama3: return "llama3";
    case ChatFormat::kChatML: return "chatml";
    case ChatFormat::kMistral: return "mistral";
    case ChatFormat::kZephyr: return "zephyr";
    case ChatFormat::kGemma: return "gemma";
    case ChatFormat::kPhi3: return "phi3";
    case ChatFormat::kFallback: return "fallback";
  }
  return "";
}

std::string chat_template_summary(std::string_view t) {
  const ChatFormat f = detect_chat_format(t);
  if (f != ChatFormat::kFallback) return std::string(chat_format_name(f));
  if (t.empty()) return "none in the model; chat requests use the fallback ChatML format";
  return "the model's (" + std::to_string(t.size()) +
         " bytes) is not one pagellm recognises; chat requests use the fallback ChatML format";
}

ChatFormat detect_chat_format(std::string_view t) {
  if (contains(t, "<|im_start|>")) return ChatFormat::kChatML;
  if (contains(t, "<|start_header_id|>")) return ChatFormat::kLlama3;
  if (contains(t, "<start_of_turn>")) return ChatFormat::kGemma;
  if (contains(t, "[INST]")) return contains(t, "<<SYS>>") ? ChatFormat::kLlama2 : ChatFormat::kMistral;
  if (contains(t, "<|assistant|>") && contains(t, "<|end|>")) return ChatFormat::kPhi3;
  if (contains(t, "<|user|>") && (contains(t, "</s>") || contains(t, "eos_token"))) return ChatFormat::kZephyr;
  return ChatFormat::kFallback;
}

std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                        std::string_view bos_text, std::string_view eos_text) {
  std::vector<Turn> turns = to_turns(messages);
  const bool gen = add_generation_prompt;
  switch (format) {
    case ChatFormat::kLlama2: return render_llama2(std::move(turns), bos_text, eos_text);
    case ChatFormat::kLlama3: return render_llama3(turns, gen, bos_text);
    case ChatFormat::kChatML: return render_chatml(turns, gen);
    case ChatFormat::kMistral: return render_mistral(std::move(turns), bos_text, eos_text);
    case ChatFormat::kZephyr: return render_zephyr(turns, gen, eos_text);
    case ChatFormat::kGemma: return render_gemma(std::move(turns), gen, bos_text);
    case ChatFormat::kPhi3: return render_phi3(turns, gen, bos_text);
    case ChatFormat::kFallback: return render_chatml(turns, gen);
  }
  return {};
}

std::string apply_chat_template(const Tokenizer& tok, ChatFormat format, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) {
  const std::string bos = tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : std::string();
  const std::string eos = tok.eos_id() >= 0 ? tok.token_text(tok.eos_id()) : std::string();
  std::string text = render_chat(format, messages, add_generation_prompt, bos, eos);
  if (tok.add_bos() && !bos.empty() && text.starts_with(bos)) text.erase(0, bos.size());
  return text;
}

}  // namespace pagellm::server

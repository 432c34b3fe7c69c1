// Chat templates: turn an OpenAI `messages` list into the prompt text a chat model was trained on.
//
// We do not run Jinja. As llama.cpp's legacy llm_chat_detect_template does, the Jinja source in
// the GGUF key `tokenizer.chat_template` is recognised by distinctive markers and mapped to one of
// a few hand-written formats (ChatFormat). Each format below is written out for the conversation
//   system S, user U1, assistant A1, user U2, add_generation_prompt = true
// with <bos> / <eos> standing for the tokenizer's BOS / EOS token texts. The sources are the
// public Hugging Face tokenizer_config.json templates named beside each format.
//
//  kLlama2   meta-llama/Llama-2-7b-chat-hf (contents strip()ped; no generation prompt exists)
//            <bos>[INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST] A1 <eos><bos>[INST] U2 [/INST]
//  kLlama3   meta-llama/Meta-Llama-3-8B-Instruct (contents trimmed)
//            <bos><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>
//            <|start_header_id|>user<|end_header_id|>\n\nU1<|eot_id|> ... (same for A1, U2)
//            <|start_header_id|>assistant<|end_header_id|>\n\n
//  kChatML   teknium/OpenHermes-2.5-Mistral-7B, Qwen (no BOS, contents verbatim)
//            <|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n ... <|im_start|>assistant\n
//  kMistral  mistralai/Mistral-7B-Instruct-v0.1 / Mixtral-8x7B-Instruct-v0.1 (no system role: the
//            system text is prepended to the first user message, "S\n\nU1", as the later v0.1
//            template does)
//            <bos>[INST] S\n\nU1 [/INST]A1<eos>[INST] U2 [/INST]
//  kZephyr   HuggingFaceH4/zephyr-7b-beta
//            <|system|>\nS<eos>\n<|user|>\nU1<eos>\n<|assistant|>\nA1<eos>\n<|user|>\nU2<eos>\n<|assistant|>\n
//  kGemma    google/gemma-7b-it (no system role: "S\n\n" is prepended to the first user turn;
//            assistant is called "model"; contents trimmed)
//            <bos><start_of_turn>user\nS\n\nU1<end_of_turn>\n<start_of_turn>model\nA1<end_of_turn>\n
//            <start_of_turn>user\nU2<end_of_turn>\n<start_of_turn>model\n
//  kPhi3     microsoft/Phi-3-mini-4k-instruct (the template in llama.cpp's ggml-vocab-phi-3.gguf)
//            <bos><|system|>\nS<|end|>\n<|user|>\nU1<|end|>\n<|assistant|>\nA1<|end|>\n
//            <|user|>\nU2<|end|>\n<|assistant|>\n
//  kFallback the documented plain format used when the model has no template or one we do not
//            recognise: ChatML exactly as kChatML, which is also what llama-server and vLLM fall
//            back to (so a template-less model such as stories260K gets the same prompt as
//            llama-server gives it).
//
// In formats without a system role (Llama 2, Mistral, Gemma) every system message is folded into
// the next user turn (Llama 2 wraps it in <<SYS>> ... <</SYS>>); a system message with no user
// turn after it becomes a user turn of its own.
//
// BOS contract (the template is applied once, no double BOS):
//   render_chat() writes <bos> where the model's template writes bos_token.
//   apply_chat_template() then removes a leading BOS text when the tokenizer adds BOS itself
//   (tok.add_bos()). The caller must encode the result with
//     tok.encode(text, /*add_special=*/true, /*parse_special=*/true)
//   so that BOS is added exactly once and marker texts such as <|im_start|> become their control
//   tokens (in a vocabulary that lacks them, e.g. stories260K, they are tokenized as plain text).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pagellm {
class Tokenizer;
}  // namespace pagellm

namespace pagellm::server {

struct ChatMessage {
  std::string role;     // "system", "user" or "assistant"
  std::string content;  // UTF-8 text
};

enum class ChatFormat { kLlama2, kLlama3, kChatML, kMistral, kZephyr, kGemma, kPhi3, kFallback };

// "llama2", "llama3", "chatml", "mistral", "zephyr", "gemma", "phi3", "fallback" (for logs).
std::string_view chat_format_name(ChatFormat format);

// Recognises a Jinja chat template by its markers (first match wins):
//   <|im_start|>                          -> kChatML
//   <|start_header_id|>                   -> kLlama3
//   <start_of_turn>                       -> kGemma
//   [INST] with <<SYS>>                   -> kLlama2
//   [INST] without <<SYS>>                -> kMistral
//   <|assistant|> with <|end|>            -> kPhi3
//   <|user|> with </s> or eos_token       -> kZephyr
//   empty or anything else                -> kFallback
ChatFormat detect_chat_format(std::string_view jinja_template);
// For the start-up log: the format's name, or why chat requests get the fallback (no template, or
// one of `n` bytes that detect_chat_format does not recognise and so is ignored).
std::string chat_template_summary(std::string_view jinja_template);

// Renders `messages` in `format`. add_generation_prompt appends the opening of the assistant's
// turn (Llama 2 and Mistral have none: their prompt already ends with [/INST]). bos_text /
// eos_text are the tokenizer's BOS / EOS token texts (e.g. "<s>", "</s>"), may be empty.
// Throws pagellm::Error when `messages` is empty or a role is not system / user / assistant
// (the message names the role and its index).
std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                        std::string_view bos_text, std::string_view eos_text);

// render_chat() in `format` (detect_chat_format of the model's `tokenizer.chat_template`, done
// once at start-up; absent -> kFallback) with the tokenizer's BOS / EOS texts; a leading BOS text
// is dropped when tok.add_bos() (see the BOS contract above). Throws pagellm::Error as render_chat.
std::string apply_chat_template(const Tokenizer& tok, ChatFormat format, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt);

}  // namespace pagellm::server

// Chat templates: every format rendered for one conversation and compared to the text the model's
// public Hugging Face template produces; detection from real template sources; the no-double-BOS
// contract on real vocabularies; llama-server's prompt length for stories260K (ChatML fallback).
#include "server/chat_template.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::server {
namespace {

// What serve does once at start-up: the format of the file's tokenizer.chat_template.
ChatFormat format_of(const GgufFile& f) {
  return detect_chat_format(f.get_string_opt("tokenizer.chat_template").value_or(""));
}

// The conversation of llama.cpp's tests/test-chat-template.cpp: system, user, assistant (with
// surrounding spaces, so strip()/trim show), user, then add_generation_prompt.
std::vector<ChatMessage> conversation() {
  return {{"system", "You are a helpful assistant"},
          {"user", "Hello"},
          {"assistant", "   I am an assistant   "},
          {"user", "Another question"}};
}

// ---- real template sources (tokenizer_config.json "chat_template"; data, not code) ----

// meta-llama/Llama-2-13b-chat-hf
constexpr std::string_view kLlama2Src =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif "
    "%}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] "
    "== 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

// meta-llama/Meta-Llama-3-8B-Instruct
constexpr std::string_view kLlama3Src =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
    "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

// teknium/OpenHermes-2.5-Mistral-7B
constexpr std::string_view kChatMLSrc =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
    "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

// mistralai/Mixtral-8x7B-Instruct-v0.1
constexpr std::string_view kMistralSrc =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
    "'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
    "are supported!') }}{% endif %}{% endfor %}";

// HuggingFaceH4/zephyr-7b-beta
constexpr std::string_view kZephyrSrc =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + "
    "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token "
    "}}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% "
    "endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";

// google/gemma-7b-it
constexpr std::string_view kGemmaSrc =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% "
    "endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "(message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif "
    "%}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if "
    "add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}";

TEST(ChatTemplateDetect, RealTemplates) {
  EXPECT_EQ(detect_chat_format(kLlama2Src), ChatFormat::kLlama2);
  EXPECT_EQ(detect_chat_format(kLlama3Src), ChatFormat::kLlama3);
  EXPECT_EQ(detect_chat_format(kChatMLSrc), ChatFormat::kChatML);
  EXPECT_EQ(detect_chat_format(kMistralSrc), ChatFormat::kMistral);
  EXPECT_EQ(detect_chat_format(kZephyrSrc), ChatFormat::kZephyr);
  EXPECT_EQ(detect_chat_format(kGemmaSrc), ChatFormat::kGemma);
  EXPECT_EQ(detect_chat_format(""), ChatFormat::kFallback);
  EXPECT_EQ(detect_chat_format("{{ messages[0]['content'] }}"), ChatFormat::kFallback);
}

// The start-up log says which format chat requests get, and when a template is ignored.
TEST(ChatTemplateDetect, SummaryNamesTheFormatOrWhyTheFallback) {
  EXPECT_EQ(chat_template_summary(kLlama3Src), "llama3");
  EXPECT_NE(chat_template_summary("").find("none in the model"), std::string::npos);
  const std::string odd = "{% for m in messages %}<<{{ m.content }}>>{% endfor %}";
  const std::string s = chat_template_summary(odd);
  EXPECT_NE(s.find(std::to_string(odd.size()) + " bytes) is not one pagellm recognises"), std::string::npos) << s;
  EXPECT_NE(s.find("fallback ChatML"), std::string::npos) << s;
}

TEST(ChatTemplateDetect, FromVocabGguf) {
  // llama.cpp's ggml-vocab-phi-3.gguf carries microsoft/Phi-3-mini-4k-instruct's template.
  auto f = GgufFile::open(test::testdata("vocab/ggml-vocab-phi-3.gguf"));
  EXPECT_EQ(detect_chat_format(f->get_string("tokenizer.chat_template")), ChatFormat::kPhi3);
  // The llama-spm vocab has no template.
  auto g = GgufFile::open(test::testdata("vocab/ggml-vocab-llama-spm.gguf"));
  EXPECT_FALSE(g->get_string_opt("tokenizer.chat_template").has_value());
}

// ---- every format, expected text written out from each model's template ----

TEST(ChatTemplateRender, Llama2) {
  EXPECT_EQ(render_chat(ChatFormat::kLlama2, conversation(), true, "<s>", "</s>"),
            "<s>[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] I am an assistant </s>"
            "<s>[INST] Another question [/INST]");
}

TEST(ChatTemplateRender, Llama3) {
  EXPECT_EQ(render_chat(ChatFormat::kLlama3, conversation(), true, "<|begin_of_text|>", "<|end_of_text|>"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplateRender, ChatML) {
  const std::string expected =
      "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
      "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n"
      "<|im_start|>assistant\n";
  EXPECT_EQ(render_chat(ChatFormat::kChatML, conversation(), true, "<s>", "</s>"), expected);
  // The documented fallback is ChatML too.
  EXPECT_EQ(render_chat(ChatFormat::kFallback, conversation(), true, "<s>", "</s>"), expected);
}

TEST(ChatTemplateRender, Mistral) {
  EXPECT_EQ(render_chat(ChatFormat::kMistral, conversation(), true, "<s>", "</s>"),
            "<s>[INST] You are a helpful assistant\n\nHello [/INST]   I am an assistant   </s>"
            "[INST] Another question [/INST]");
  // Without a system message: Mixtral-8x7B-Instruct-v0.1's template, verbatim.
  std::vector<ChatMessage> m = conversation();
  m.erase(m.begin());
  EXPECT_EQ(render_chat(ChatFormat::kMistral, m, true, "<s>", "</s>"),
            "<s>[INST] Hello [/INST]   I am an assistant   </s>[INST] Another question [/INST]");
}

TEST(ChatTemplateRender, Zephyr) {
  EXPECT_EQ(render_chat(ChatFormat::kZephyr, conversation(), true, "<s>", "</s>"),
            "<|system|>\nYou are a helpful assistant</s>\n<|user|>\nHello</s>\n"
            "<|assistant|>\n   I am an assistant   </s>\n<|user|>\nAnother question</s>\n<|assistant|>\n");
}

TEST(ChatTemplateRender, Gemma) {
  EXPECT_EQ(render_chat(ChatFormat::kGemma, conversation(), true, "<bos>", "<eos>"),
            "<bos><start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n"
            "<start_of_turn>model\nI am an assistant<end_of_turn>\n"
            "<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ChatTemplateRender, Phi3) {
  EXPECT_EQ(render_chat(ChatFormat::kPhi3, conversation(), true, "<s>", "<|endoftext|>"),
            "<s><|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n"
            "<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n");
}

TEST(ChatTemplateRender, NoGenerationPrompt) {
  const std::vector<ChatMessage> m = {{"user", "Hi"}};
  EXPECT_EQ(render_chat(ChatFormat::kChatML, m, false, "", ""), "<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(render_chat(ChatFormat::kGemma, m, false, "<bos>", ""), "<bos><start_of_turn>user\nHi<end_of_turn>\n");
  EXPECT_EQ(render_chat(ChatFormat::kLlama3, m, false, "", ""),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

TEST(ChatTemplateRender, SystemOnlyBecomesUserTurn) {
  const std::vector<ChatMessage> m = {{"system", "Be brief."}};
  EXPECT_EQ(render_chat(ChatFormat::kGemma, m, true, "", ""),
            "<start_of_turn>user\nBe brief.<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(render_chat(ChatFormat::kLlama2, m, true, "<s>", "</s>"), "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>> [/INST]");
}

TEST(ChatTemplateRender, UnknownRoleNamesIt) {
  const std::vector<ChatMessage> m = {{"user", "Hi"}, {"tool", "42"}};
  for (ChatFormat f : {ChatFormat::kLlama2, ChatFormat::kChatML, ChatFormat::kFallback}) {
    try {
      render_chat(f, m, true, "<s>", "</s>");
      FAIL() << "no error for role 'tool'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'tool'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("messages[1]"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(render_chat(ChatFormat::kChatML, {}, true, "", ""), Error);
}

// ---- the BOS contract on real vocabularies ----

int count_id(const std::vector<int32_t>& ids, int32_t id) {
  return static_cast<int>(std::count(ids.begin(), ids.end(), id));
}

TEST(ChatTemplateBos, Phi3TemplateBosIsNotDoubled) {
  auto f = GgufFile::open(test::testdata("vocab/ggml-vocab-phi-3.gguf"));
  auto tok = Tokenizer::from_gguf(*f);
  ASSERT_TRUE(tok->add_bos());
  const std::string text = apply_chat_template(*tok, format_of(*f), {{"user", "Hello"}}, true);
  EXPECT_EQ(text, "<|user|>\nHello<|end|>\n<|assistant|>\n");
  const std::vector<int32_t> ids = tok->encode(text, true, true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], tok->bos_id());
  EXPECT_EQ(count_id(ids, tok->bos_id()), 1);
  // parse_special turns the markers into their control tokens.
  EXPECT_EQ(ids[1], tok->find_token("<|user|>").value());
}

TEST(ChatTemplateBos, Llama2KeepsInnerBos) {
  // The llama-spm vocabulary with Llama 2's template added: only the leading BOS is dropped, the
  // BOS that opens the second [INST] stays.
  auto base = GgufFile::open(test::testdata("vocab/ggml-vocab-llama-spm.gguf"));
  GgufWriter w;
  for (const auto& [key, value] : base->metadata()) w.set(key, value);
  w.set("tokenizer.chat_template", GgufValue::str(std::string(kLlama2Src)));
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto f = GgufFile::parse(bytes, "llama2-template");
  auto tok = Tokenizer::from_gguf(*f);
  ASSERT_TRUE(tok->add_bos());
  const std::string text = apply_chat_template(*tok, format_of(*f), conversation(), true);
  EXPECT_EQ(text,
            "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] I am an assistant </s>"
            "<s>[INST] Another question [/INST]");
  const std::vector<int32_t> ids = tok->encode(text, true, true);
  EXPECT_EQ(ids[0], tok->bos_id());
  EXPECT_NE(ids[1], tok->bos_id());
  EXPECT_EQ(count_id(ids, tok->bos_id()), 2);
  EXPECT_EQ(count_id(ids, tok->eos_id()), 1);
}

TEST(ChatTemplateBos, KeepsBosWhenTokenizerDoesNotAddIt) {
  auto base = GgufFile::open(test::testdata("vocab/ggml-vocab-llama-spm.gguf"));
  GgufWriter w;
  for (const auto& [key, value] : base->metadata()) w.set(key, value);
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(false));
  w.set("tokenizer.chat_template", GgufValue::str(std::string(kMistralSrc)));
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto f = GgufFile::parse(bytes, "mistral-template");
  auto tok = Tokenizer::from_gguf(*f);
  ASSERT_FALSE(tok->add_bos());
  const std::string text = apply_chat_template(*tok, format_of(*f), {{"user", "Hi"}}, true);
  EXPECT_EQ(text, "<s>[INST] Hi [/INST]");
  const std::vector<int32_t> ids = tok->encode(text, true, true);
  EXPECT_EQ(ids[0], tok->bos_id());
  EXPECT_EQ(count_id(ids, tok->bos_id()), 1);
}

// ---- stories260K has no template: ChatML fallback, prompt lengths as llama-server reported ----

TEST(ChatTemplateFallback, Stories260KMatchesLlamaServerPromptTokens) {
  auto f = GgufFile::open(test::testdata("stories260K/stories260K-f32.gguf"));
  auto tok = Tokenizer::from_gguf(*f);
  // llama-server-samples/chat-completions: usage.prompt_tokens 92.
  const std::string a = apply_chat_template(
      *tok, format_of(*f), {{"system", "You are a storyteller."}, {"user", "Tell me a story about a cat."}}, true);
  EXPECT_EQ(a,
            "<|im_start|>system\nYou are a storyteller.<|im_end|>\n<|im_start|>user\nTell me a story about a "
            "cat.<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(tok->encode(a, true, true).size(), 92u);
  // llama-server-samples/chat-completions-stream-usage: usage.prompt_tokens 56.
  const std::string b = apply_chat_template(*tok, format_of(*f), {{"user", "Tell me a story about a cat."}}, true);
  EXPECT_EQ(tok->encode(b, true, true).size(), 56u);
}

}  // namespace
}  // namespace pagellm::server

// Request parsing and validation (every bad field -> 400 naming the param), fan-out, and the
// response shapes, on the bundled stories260K tokenizer (no model run).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <memory>

#include "format/gguf.h"
#include "server/json_fields.h"
#include "server/protocol.h"
#include "server/protocol_internal.h"
#include "server/sse.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::server {
namespace {

class ProtocolTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    file_ = GgufFile::open(test::source_dir() + "/models/stories260K-f32.gguf").release();
    tok_ = Tokenizer::from_gguf(*file_).release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete file_;
  }
  ModelInfo model() const {
    ModelInfo m;
    m.tokenizer = tok_;
    m.chat_format = detect_chat_format(file_->get_string_opt("tokenizer.chat_template").value_or(""));
    m.served_model_name = "stories260K";
    m.max_model_len = 512;
    return m;
  }
  GenerationPlan completion(const std::string& body) {
    return parse_completion_request(nlohmann::json::parse(body), model(), "cmpl-x", 1700000000);
  }
  GenerationPlan chat(const std::string& body) {
    return parse_chat_request(nlohmann::json::parse(body), model(), "chatcmpl-x", 1700000000);
  }
  static GgufFile* file_;
  static Tokenizer* tok_;
};
GgufFile* ProtocolTest::file_ = nullptr;
Tokenizer* ProtocolTest::tok_ = nullptr;

struct BadCase {
  const char* body;
  const char* param;  // expected ApiError param
};

const BadCase kBadCompletions[] = {
    {R"({"prompt": "x", "max_tokens": -1})", "max_tokens"},
    {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
    {R"({"prompt": "x", "max_tokens": "5"})", "max_tokens"},
    {R"({"prompt": "x", "max_tokens": 2.5})", "max_tokens"},
    {R"({"prompt": "x", "max_tokens": true})", "max_tokens"},
    {R"({"prompt": "x", "max_tokens": 600})", "max_tokens"},
    {R"({"prompt": "x", "temperature": -0.5})", "temperature"},
    {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
    {R"({"prompt": "x", "top_p": 0})", "top_p"},
    {R"({"prompt": "x", "top_p": 1.5})", "top_p"},
    {R"({"prompt": "x", "top_k": -2})", "top_k"},
    {R"({"prompt": "x", "min_p": 2})", "min_p"},
    {R"({"prompt": "x", "n": 0})", "n"},
    {R"({"prompt": "x", "n": 1000})", "n"},
    {R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty"},
    {R"({"prompt": "x", "frequency_penalty": -3})", "frequency_penalty"},
    {R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
    // The issue's values: (0, 1e-37] overflowed a logit to +inf (HTTP 500); bounds [0.01, 100].
    {R"({"prompt": "x", "repetition_penalty": 1e-37})", "repetition_penalty"},
    {R"({"prompt": "x", "repetition_penalty": 1e-45})", "repetition_penalty"},
    {R"({"prompt": "x", "repetition_penalty": 0.009})", "repetition_penalty"},
    {R"({"prompt": "x", "repetition_penalty": 101})", "repetition_penalty"},
    {R"({"prompt": "x", "logit_bias": {"100000": 1}})", "logit_bias"},
    {R"({"prompt": "x", "logit_bias": {"-1": 1}})", "logit_bias"},
    {R"({"prompt": "x", "logit_bias": {"abc": 1}})", "logit_bias"},
    {R"({"prompt": "x", "logit_bias": {"5": 200}})", "logit_bias"},
    {R"({"prompt": "x", "logit_bias": [1, 2]})", "logit_bias"},
    {R"({"prompt": "x", "stop": 5})", "stop"},
    {R"({"prompt": "x", "stop": [""]})", "stop"},
    {R"({"prompt": "x", "stop": ["a", 1]})", "stop"},
    {R"({"prompt": "x", "stop_token_ids": [99999]})", "stop_token_ids"},
    {R"({"prompt": "x", "stop_token_ids": "1"})", "stop_token_ids"},
    {R"({"prompt": "x", "seed": "x"})", "seed"},
    {R"({"prompt": "x", "logprobs": 21})", "logprobs"},
    {R"({"prompt": "x", "logprobs": -1})", "logprobs"},
    {R"({"prompt": "x", "echo": "yes"})", "echo"},
    {R"({"prompt": "x", "stream": 1})", "stream"},
    {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
    {R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})", "stream_options.include_usage"},
    {R"({"prompt": "x", "logit_bias": {" 5": 1}})", "logit_bias"},
    {R"({"prompt": "x", "logit_bias": {"+5": 1}})", "logit_bias"},
    {R"({"prompt": "x", "logit_bias": {"5 ": 1}})", "logit_bias"},
    {R"({"prompt": "x", "logit_bias": {"99999999999999999999": 1}})", "logit_bias"},
    {R"({"prompt": "x", "user": 5})", "user"},
    {R"({"prompt": "x", "suffix": "y"})", "suffix"},
    {R"({"prompt": "x", "n": 3, "best_of": 2})", "best_of"},
    {R"({"prompt": "x", "best_of": 3, "stream": true})", "best_of"},
    {R"({"prompt": "x", "cache_salt": ""})", "cache_salt"},
    {R"({"prompt": "x", "cache_salt": 5})", "cache_salt"},
    {R"({"max_tokens": 5})", "prompt"},
    {R"({"prompt": 5})", "prompt"},
    {R"({"prompt": []})", "prompt"},
    {R"({"prompt": [1, "a"]})", "prompt"},
    {R"({"prompt": [99999]})", "prompt"},
    {R"({"prompt": [[]]})", "prompt"},
    {R"({"prompt": [[1, 2], [3, -4]]})", "prompt"},
};

TEST_F(ProtocolTest, BadCompletionFieldsAre400NamingTheParam) {
  for (const BadCase& c : kBadCompletions) {
    SCOPED_TRACE(c.body);
    try {
      completion(c.body);
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.type(), "invalid_request_error");
      EXPECT_EQ(e.param().value_or("<none>"), c.param) << e.what();
    }
  }
}

const BadCase kBadChats[] = {
    {R"({})", "messages"},
    {R"({"messages": []})", "messages"},
    {R"({"messages": "hi"})", "messages"},
    {R"({"messages": ["hi"]})", "messages[0]"},
    {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
    {R"({"messages": [{"role": 1, "content": "x"}]})", "messages[0].role"},
    {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
    {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content[0].type"},
    {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", "messages[0].content[0].text"},
    {R"({"messages": [{"role": "robot", "content": "x"}]})", "messages[0].role"},
    {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
    {R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": null}]})", "messages[1].content"},
    {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant"}]})", "messages[1].content"},
    {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]})",
     "messages[1].tool_calls"},
    {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "",
        "function_call": {"name": "f", "arguments": "{}"}}]})",
     "messages[1].function_call"},
    {R"({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "42", "tool_call_id": "c1"}]})",
     "messages[1].role"},
    {R"({"messages": [{"role": "function", "name": "f", "content": "42"}]})", "messages[0].role"},
    {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
    {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})", "top_logprobs"},
    {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", "logprobs"},
    {R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -1})", "max_completion_tokens"},
    {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1000})", "max_tokens"},
    {R"({"messages": [{"role": "user", "content": "x"}], "temperature": -1})", "temperature"},
};

TEST_F(ProtocolTest, BadChatFieldsAre400NamingTheParam) {
  for (const BadCase& c : kBadChats) {
    SCOPED_TRACE(c.body);
    try {
      chat(c.body);
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param().value_or("<none>"), c.param) << e.what();
    }
  }
}

TEST_F(ProtocolTest, MalformedJsonAndNonObjectsAre400) {
  for (const char* body : {"{", "[1, 2]", "\"x\"", "", "{\"prompt\": \"x\",}"}) {
    SCOPED_TRACE(body);
    try {
      parse_json_body(body);
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_FALSE(e.param().has_value());
    }
  }
  EXPECT_TRUE(parse_json_body(R"({"a": 1})").is_object());
}

// `depth` nested arrays around 1, e.g. 2 -> "[[1]]".
std::string nested_array(int depth) { return std::string(depth, '[') + "1" + std::string(depth, ']'); }

TEST_F(ProtocolTest, DeeplyNestedBodyIs400NamingTheLimit) {
  // 100k levels in a field would overflow the stack in the parser or in an error message.
  const std::string deep = R"({"prompt": "x", "stop": )" + nested_array(100000) + "}";
  try {
    parse_json_body(deep);
    FAIL() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.type(), "invalid_request_error");
    EXPECT_NE(std::string(e.what()).find("JSON nesting deeper than 64 levels"), std::string::npos) << e.what();
  }
  // The top-level object is level 1: a field may hold 63 more levels; 64 more are refused.
  const std::string ok = R"({"prompt": "x", "extra": )" + nested_array(kMaxJsonDepth - 1) + "}";
  const nlohmann::json j = parse_json_body(ok);
  EXPECT_NO_THROW(parse_completion_request(j, model(), "cmpl-x", 0));  // unknown field: ignored
  EXPECT_THROW(parse_json_body(R"({"prompt": "x", "extra": )" + nested_array(kMaxJsonDepth) + "}"), ApiError);
  // Brackets inside strings (also after escaped quotes and backslashes) do not count.
  const std::string in_string = R"({"prompt": "\\\"" , "s": ")" + std::string(1000, '[') + R"(\"[[[\\"})";
  EXPECT_EQ(parse_json_body(in_string)["prompt"], "\\\"");
}

TEST_F(ProtocolTest, ErrorMessagesShowABoundedPrefixOfTheValue) {
  nlohmann::json big = nlohmann::json::array();
  for (int i = 0; i < 1000000; ++i) big.push_back(i);
  auto seconds_of = [](auto&& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::string b;
  const double brief_s = seconds_of([&] { b = brief(big); });
  const double dump_s = seconds_of([&] { EXPECT_GT(big.dump().size(), 1000000u); });
  EXPECT_LE(b.size(), 70u) << b;
  EXPECT_EQ(b.rfind("[0,1,2,3,", 0), 0u) << b;
  EXPECT_TRUE(b.ends_with("...")) << b;
  // The 1M elements are not walked: a small fraction of a whole dump() in the same run (~0.02 ms
  // against ~100 ms on a quiet machine; a fixed 1 ms bound failed once under ASan on a busy one).
  EXPECT_LT(brief_s, dump_s / 20) << brief_s << " s against " << dump_s << " s";
  EXPECT_EQ(brief(nlohmann::json::parse(nested_array(60))), "[[[[...]]]]");
  EXPECT_EQ(brief(nlohmann::json::parse(R"({"a": [1, "x"], "b": null})")), R"({"a":[1,"x"],"b":null})");
  EXPECT_EQ(brief(std::string(1000, 'y')), "\"" + std::string(63, 'y') + "...");
  // Every field that quotes a bad value uses it.
  for (const char* field : {"temperature", "top_p", "repetition_penalty", "stop", "max_tokens", "seed"}) {
    SCOPED_TRACE(field);
    try {
      completion(std::string(R"({"prompt": "x", ")") + field + R"(": [["a)" + std::string(100000, 'b') + R"("]]})");
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_LT(std::string(e.what()).size(), 200u) << e.what();
    }
  }
  try {
    completion(R"({"prompt": "x", "logit_bias": {"5": ")" + std::string(100000, 'b') + R"("}})");
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_LT(std::string(e.what()).size(), 200u) << e.what();
  }
  try {
    parse_json_body(R"({"prompt": ")" + std::string(100000, 'b'));  // unterminated
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_LT(std::string(e.what()).size(), 300u) << e.what();
  }
}

TEST_F(ProtocolTest, UnknownModelIs404ModelNotFoundOnEveryEndpoint) {
  const std::vector<std::function<void()>> calls = {
      [&] { completion(R"({"prompt": "x", "model": "gpt-4"})"); },
      [&] { chat(R"({"messages": [{"role": "user", "content": "x"}], "model": "gpt-4"})"); },
      [&] { tokenize_response(nlohmann::json::parse(R"({"prompt": "x", "model": "gpt-4"})"), model()); },
      [&] { detokenize_response(nlohmann::json::parse(R"({"tokens": [1], "model": "gpt-4"})"), model()); },
  };
  for (size_t i = 0; i < calls.size(); ++i) {
    SCOPED_TRACE(i);
    try {
      calls[i]();
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 404);
      EXPECT_EQ(e.code().value_or(""), "model_not_found");
      EXPECT_EQ(e.param().value_or(""), "model");
      EXPECT_NE(std::string(e.what()).find("gpt-4"), std::string::npos) << e.what();
    }
  }
  // The served name (or none) is accepted everywhere.
  EXPECT_NO_THROW(completion(R"({"prompt": "x", "model": "stories260K"})"));
  EXPECT_NO_THROW(tokenize_response(nlohmann::json::parse(R"({"prompt": "x", "model": "stories260K"})"), model()));
  EXPECT_NO_THROW(detokenize_response(nlohmann::json::parse(R"({"tokens": [1], "model": "stories260K"})"), model()));
}

TEST_F(ProtocolTest, ContextOverflowNamesCodeAndLengths) {
  try {
    completion(R"({"prompt": "Once upon a time", "max_tokens": 510})");
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code().value_or(""), "context_length_exceeded");
    EXPECT_NE(std::string(e.what()).find("512"), std::string::npos) << e.what();
  }
  // 5 prompt tokens + 507 = 512 fits exactly.
  EXPECT_EQ(completion(R"({"prompt": "Once upon a time", "max_tokens": 507})").requests[0].max_tokens, 507);
  // param names what to shorten: max_tokens when the prompt fits, the prompt when it alone fills
  // the context (with or without max_tokens).
  auto param_of = [&](const std::string& body) {
    try {
      completion(body);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.code().value_or(""), "context_length_exceeded") << body;
      return e.param().value_or("");
    }
    ADD_FAILURE() << "accepted " << body;
    return std::string();
  };
  std::string ids = "[1";
  for (int i = 0; i < 600; ++i) ids += ", 403";
  ids += "]";
  EXPECT_EQ(param_of(R"({"prompt": "Once upon a time", "max_tokens": 510})"), "max_tokens");
  EXPECT_EQ(param_of(R"({"prompt": )" + ids + R"(, "max_tokens": 4})"), "prompt");
  EXPECT_EQ(param_of(R"({"prompt": )" + ids + "}"), "prompt");
}

TEST_F(ProtocolTest, MultiMegabytePromptIsRefusedBeforeTokenising) {
  std::string big;
  while (big.size() < (4u << 20)) big += "Once upon a time, there was a little girl. ";
  auto expect_refused = [](const std::function<void()>& call, const char* param) {
    try {
      call();
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.code().value_or(""), "context_length_exceeded");
      EXPECT_EQ(e.param().value_or(""), param);
      // "at least": the early refusal, from the bytes (the token count is not known).
      EXPECT_NE(std::string(e.what()).find("is at least"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("maximum context length is 512"), std::string::npos) << e.what();
    }
  };
  const nlohmann::json prompt{{"prompt", big}};
  expect_refused([&] { parse_completion_request(prompt, model(), "cmpl-x", 0); }, "prompt");
  expect_refused(
      [&] {
        parse_completion_request(nlohmann::json{{"prompt", {"x", big}}}, model(), "cmpl-x", 0);
      },
      "prompt");
  expect_refused([&] { tokenize_response(prompt, model()); }, "prompt");
  // Chat: the contents' total counts, even when each message alone would fit.
  nlohmann::json messages = nlohmann::json::array();
  for (int i = 0; i < 2; ++i) messages.push_back({{"role", "user"}, {"content", big.substr(0, 2u << 20)}});
  expect_refused(
      [&] {
        parse_chat_request(nlohmann::json{{"messages", messages}}, model(), "chatcmpl-x", 0);
      },
      "messages");
  expect_refused([&] { tokenize_response(nlohmann::json{{"messages", messages}}, model()); }, "messages");

  // Token ids: too many is refused before the ids are checked (the last one is invalid).
  std::vector<int64_t> ids(1000000, 1);
  ids.back() = 99999;
  try {
    parse_completion_request(nlohmann::json{{"prompt", ids}}, model(), "cmpl-x", 0);
    FAIL() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code().value_or(""), "context_length_exceeded") << e.what();
    EXPECT_NE(std::string(e.what()).find("1000000 in the prompt"), std::string::npos) << e.what();
  }
}

TEST_F(ProtocolTest, ByteBoundNeverExceedsTheRealTokenCount) {
  // The early refusal must never refuse a prompt that fits: the bound is <= the real count.
  const std::vector<std::string> texts = {"Once upon a time",
                                          std::string(3000, ' '),
                                          std::string(3000, 'a'),
                                          "<s></s><unk>\xe2\x96\x81\xe2\x96\x81",
                                          "\xf0\x9f\x98\x80 \xe4\xb8\xad\xe6\x96\x87 ok",
                                          std::string(2000, '\n') + "x"};
  for (const std::string& t : texts) {
    SCOPED_TRACE(t.substr(0, 20));
    const std::string_view parts[] = {t};
    EXPECT_LE(tok_->min_token_count(parts), tok_->encode(t, false, true).size());
  }
  // The same on the vocabularies of tests/tokenizer (SPM and BPE, Phi-3's whitespace-eating
  // special tokens), over their test inputs and runs of whitespace around special tokens.
  for (const char* name : {"llama-spm", "phi-3", "gpt-2", "deepseek-coder", "falcon", "mpt", "refact", "starcoder"}) {
    SCOPED_TRACE(name);
    const std::string path = test::testdata(std::string("vocab/ggml-vocab-") + name + ".gguf");
    const std::unique_ptr<GgufFile> file = GgufFile::open(path);
    const std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(*file);
    std::ifstream in(path + ".inp");
    const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::string> inputs;
    for (size_t b = 0;;) {
      const size_t e = all.find("\n__ggml_vocab_test__\n", b);
      inputs.push_back(all.substr(b, e == std::string::npos ? std::string::npos : e - b));
      if (e == std::string::npos) break;
      b = e + 21;
    }
    ASSERT_GT(inputs.size(), 20u);
    for (const char* special : {"<|end|>", "<|endoftext|>", "</s>", "<s>", "<|assistant|>"}) {
      inputs.push_back(std::string(100, ' ') + special + std::string(500, ' ') + special + std::string(300, '\n'));
    }
    for (const std::string& t : inputs) {
      const std::string_view parts[] = {t};
      EXPECT_LE(tok->min_token_count(parts), tok->encode(t, false, true).size()) << t.substr(0, 40);
    }
  }
  // A prompt just under the context is not refused by the bound: 500 tokens of text fit.
  std::string text;
  while (tok_->encode(text, true, true).size() < 500) text += " Lily";
  EXPECT_NO_THROW(completion(nlohmann::json{{"prompt", text}, {"max_tokens", 1}}.dump()));
}

// Values each asking for something (none is a no-op for any row of the table).
const char* const kSomeRequest[] = {R"({"type": "json_object"})", "true", "5", R"("required")", R"(["x"])"};

TEST_F(ProtocolTest, UnsupportedFieldsAre400NamingTheField) {
  ASSERT_GE(std::size(kUnsupportedFields), 30u);
  for (const UnsupportedField& u : kUnsupportedFields) {
    SCOPED_TRACE(u.name);
    for (const Endpoint endpoint : {Endpoint::kCompletions, Endpoint::kChat}) {
      const bool applies = endpoint == Endpoint::kChat ? u.chat : u.completions;
      nlohmann::json body = endpoint == Endpoint::kChat
                                ? nlohmann::json::parse(R"({"messages": [{"role": "user", "content": "x"}]})")
                                : nlohmann::json::parse(R"({"prompt": "x"})");
      // null is "not given".
      body[u.name] = nullptr;
      EXPECT_NO_THROW(endpoint == Endpoint::kChat ? parse_chat_request(body, model(), "c", 0)
                                                  : parse_completion_request(body, model(), "c", 0));
      if (!applies) continue;  // e.g. echo on completions: a supported field there
      int refused = 0;
      for (const char* value : kSomeRequest) {
        body[u.name] = nlohmann::json::parse(value);
        if (u.is_noop(body[u.name])) continue;
        ++refused;
        try {
          endpoint == Endpoint::kChat ? parse_chat_request(body, model(), "c", 0)
                                      : parse_completion_request(body, model(), "c", 0);
          ADD_FAILURE() << "accepted " << value;
        } catch (const ApiError& e) {
          EXPECT_EQ(e.status(), 400);
          EXPECT_EQ(e.param().value_or(""), u.name);
          EXPECT_EQ(std::string(e.what()), std::string("'") + u.name + "' is not supported by this server");
        }
      }
      EXPECT_GE(refused, 3);
    }
  }
}

TEST_F(ProtocolTest, NoOpValuesOfUnsupportedFieldsAndUnknownFieldsAreAccepted) {
  EXPECT_NO_THROW(chat(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "text"},
      "tools": [], "tool_choice": "none", "parallel_tool_calls": true, "functions": [], "function_call": "auto",
      "min_tokens": 0, "use_beam_search": false, "length_penalty": 1.0, "echo": false, "store": false,
      "metadata": {}, "modalities": ["text"], "chat_template_kwargs": {}, "continue_final_message": false,
      "include_stop_str_in_output": false, "bad_words": [], "return_tokens_as_token_ids": false,
      "some_future_field": {"x": 1}})"));
  EXPECT_NO_THROW(completion(R"({"prompt": "x", "response_format": {"type": "text"}, "min_tokens": 0,
      "use_beam_search": false, "echo": true, "tools": [{"type": "function"}], "some_future_field": 1})"));
  // Rows apply where the field means something: tools on completions are not OpenAI's surface.
  EXPECT_THROW(chat(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})"), ApiError);
  EXPECT_THROW(chat(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})"),
               ApiError);
  EXPECT_THROW(completion(R"({"prompt": "x", "min_tokens": 3})"), ApiError);
}

TEST_F(ProtocolTest, TinyTemperatureIsGreedyAndPenaltyBoundsAreAccepted) {
  // Below 1e-5 is greedy (as vLLM's _SAMPLING_EPS): logits are never divided by 1e-38.
  EXPECT_TRUE(completion(R"({"prompt": "x", "temperature": 1e-38})").requests[0].sampling.is_greedy());
  EXPECT_EQ(completion(R"({"prompt": "x", "repetition_penalty": 0.01})").requests[0].sampling.repetition_penalty,
            0.01f);
  EXPECT_EQ(completion(R"({"prompt": "x", "repetition_penalty": 100})").requests[0].sampling.repetition_penalty,
            100.0f);
  try {
    completion(R"({"prompt": "x", "repetition_penalty": 1e-37})");
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("[0.01, 100"), std::string::npos) << e.what();
  }
}

TEST_F(ProtocolTest, DeveloperRoleIsRenderedAsSystem) {
  const GenerationPlan dev = chat(R"({"messages": [{"role": "developer", "content": "Be brief."},
      {"role": "user", "content": "Hi"}]})");
  const GenerationPlan sys = chat(R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi"}]})");
  EXPECT_EQ(dev.prompts[0].token_ids, sys.prompts[0].token_ids);
  EXPECT_EQ(dev.prompts[0].token_ids, tokenize_chat(model(), {{"system", "Be brief."}, {"user", "Hi"}}, true));
  // An assistant message with an empty tool_calls list is an ordinary message.
  EXPECT_NO_THROW(chat(R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y",
      "tool_calls": []}, {"role": "user", "content": "z"}]})"));
  try {
    chat(R"({"messages": [{"role": "tool", "content": "42", "tool_call_id": "c1"}]})");
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("'tool'"), std::string::npos) << e.what();
  }
}

TEST_F(ProtocolTest, CompletionDefaultsAndMapping) {
  const GenerationPlan p = completion(R"({"model": "stories260K", "prompt": "Once upon a time", "temperature": 0,
      "top_k": 40, "top_p": 0.9, "min_p": 0.1, "stop": "Lily", "stop_token_ids": [2], "ignore_eos": true,
      "logprobs": 3, "echo": true, "logit_bias": {"5": -100}, "priority": 2, "user": "u"})");
  ASSERT_EQ(p.requests.size(), 1u);
  const EngineRequest& r = p.requests[0];
  EXPECT_EQ(r.request_id, "cmpl-x-0");
  EXPECT_EQ(r.prompt_token_ids, tok_->encode("Once upon a time", true, true));
  EXPECT_EQ(r.prompt_token_ids.size(), 5u);  // as llama-server counts it
  EXPECT_EQ(r.max_tokens, 16);               // OpenAI's legacy default
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_EQ(r.sampling.logprobs, 3);
  ASSERT_EQ(r.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(r.sampling.logit_bias[0], (std::pair<int32_t, float>{5, -100.0f}));
  EXPECT_EQ(r.stop, std::vector<std::string>{"Lily"});
  EXPECT_EQ(r.stop_token_ids, std::vector<int32_t>{2});
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_EQ(r.priority, 2);
  EXPECT_TRUE(p.echo);
  EXPECT_EQ(p.prompts[0].text, "Once upon a time");
  EXPECT_FALSE(p.stream);
}

// serve --generation-config auto: the model's defaults fill what a request leaves out, and any
// field the request sets wins (vLLM's behaviour).
TEST_F(ProtocolTest, ModelSamplingDefaultsFillOmittedFieldsOnly) {
  ModelInfo m = model();
  m.default_sampling.temperature = 0.6f;
  m.default_sampling.top_p = 0.9f;
  m.default_sampling.top_k = 20;
  m.default_sampling.repetition_penalty = 1.1f;
  auto parse = [&](const std::string& body) {
    return parse_completion_request(nlohmann::json::parse(body), m, "cmpl-x", 1700000000).requests.at(0).sampling;
  };
  const SamplingParams d = parse(R"({"prompt": "x"})");
  EXPECT_FLOAT_EQ(d.temperature, 0.6f);
  EXPECT_FLOAT_EQ(d.top_p, 0.9f);
  EXPECT_EQ(d.top_k, 20);
  EXPECT_FLOAT_EQ(d.repetition_penalty, 1.1f);
  EXPECT_EQ(d.min_p, 0.0f);
  const SamplingParams o = parse(R"({"prompt": "x", "temperature": 0, "top_k": -1, "top_p": 1})");
  EXPECT_EQ(o.temperature, 0.0f);
  EXPECT_EQ(o.top_k, -1);
  EXPECT_EQ(o.top_p, 1.0f);
  EXPECT_FLOAT_EQ(o.repetition_penalty, 1.1f);
  const SamplingParams c =
      parse_chat_request(nlohmann::json::parse(R"({"messages": [{"role": "user", "content": "hi"}]})"), m, "chatcmpl-x",
                         1700000000)
          .requests.at(0)
          .sampling;
  EXPECT_FLOAT_EQ(c.temperature, 0.6f);
  // Without model defaults (--generation-config vllm) the OpenAI defaults apply.
  const SamplingParams plain = completion(R"({"prompt": "x"})").requests.at(0).sampling;
  EXPECT_EQ(plain.temperature, 1.0f);
  EXPECT_EQ(plain.top_k, 0);
}

TEST_F(ProtocolTest, PromptFormsAndFanOut) {
  // Two string prompts x n=2: choice index = prompt * n + j, seed + j per choice of a prompt.
  GenerationPlan p = completion(R"({"prompt": ["a b", "c"], "n": 2, "seed": 7, "max_tokens": 3})");
  ASSERT_EQ(p.requests.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(p.requests[i].request_id, "cmpl-x-" + std::to_string(i));
    EXPECT_EQ(p.requests[i].sampling.seed, uint64_t(7 + i % 2));
    EXPECT_EQ(p.requests[i].prompt_token_ids, p.prompts[i / 2].token_ids);
  }
  EXPECT_NE(p.prompts[0].token_ids, p.prompts[1].token_ids);
  // Token ids, and lists of them; echo text is the decoded ids.
  p = completion(R"({"prompt": [1, 403, 407]})");
  ASSERT_EQ(p.prompts.size(), 1u);
  EXPECT_EQ(p.prompts[0].token_ids, (std::vector<int32_t>{1, 403, 407}));
  EXPECT_EQ(p.prompts[0].text, " Once upon");  // BOS skipped; SPM keeps the space after a BOS
  p = completion(R"({"prompt": [[1, 403], [1, 407, 5.0]]})");
  ASSERT_EQ(p.prompts.size(), 2u);
  EXPECT_EQ(p.prompts[1].token_ids, (std::vector<int32_t>{1, 407, 5}));
  // Nulls mean "not given".
  p = completion(R"({"prompt": "x", "max_tokens": null, "temperature": null, "stop": null, "n": null})");
  EXPECT_EQ(p.requests[0].max_tokens, 16);
  EXPECT_EQ(p.requests[0].sampling.temperature, 1.0f);
}

TEST_F(ProtocolTest, ChatDefaultsToTheRestOfTheContext) {
  GenerationPlan p = chat(R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]}],
      "stream": true, "stream_options": {"include_usage": true}, "logprobs": true})");
  ASSERT_EQ(p.requests.size(), 1u);
  const auto n_prompt = static_cast<int32_t>(p.prompts[0].token_ids.size());
  EXPECT_EQ(p.requests[0].max_tokens, 512 - n_prompt);
  EXPECT_EQ(p.requests[0].request_id, "chatcmpl-x-0");
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  EXPECT_EQ(p.logprobs, 0);
  EXPECT_EQ(p.requests[0].sampling.logprobs, 0);
  // One BOS, then the ChatML fallback text (stories260K has no template).
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "Hi\nthere"}};
  EXPECT_EQ(p.prompts[0].token_ids, tokenize_chat(model(), msgs, true));
  EXPECT_EQ(p.prompts[0].token_ids[0], tok_->bos_id());
  EXPECT_NE(p.prompts[0].token_ids[1], tok_->bos_id());
  // max_completion_tokens wins over max_tokens; top_logprobs sets k.
  p = chat(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 9, "max_completion_tokens": 4,
      "logprobs": true, "top_logprobs": 5})");
  EXPECT_EQ(p.requests[0].max_tokens, 4);
  EXPECT_EQ(p.requests[0].sampling.logprobs, 5);
}

TEST_F(ProtocolTest, CompletionResponseShape) {
  GenerationPlan p = completion(R"({"prompt": "Once upon a time", "n": 2, "logprobs": 1, "echo": true})");
  std::vector<ChoiceResult> choices(2);
  for (ChoiceResult& c : choices) {
    c.token_ids = {411, 440};
    c.text = "eH";
    c.finish_reason = "length";
    c.logprobs = {SampleResult{411, -0.5f, 1, {{411, -0.5f}}},
                  SampleResult{440, -std::numeric_limits<float>::infinity(), 3, {{436, -0.1f}}}};
  }
  choices[1].finish_reason = "stop";
  choices[1].stop_reason = "X";
  const nlohmann::json j = completion_response(p, choices, *tok_);
  EXPECT_EQ(j["id"], "cmpl-x");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "stories260K");
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][0]["text"], "Once upon a timeeH");
  EXPECT_EQ(j["choices"][0]["stop_reason"], nullptr);
  EXPECT_EQ(j["choices"][1]["stop_reason"], "X");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "stop");
  const nlohmann::json& lp = j["choices"][0]["logprobs"];
  // 5 echoed prompt tokens with null logprobs, then the 2 sampled ones.
  ASSERT_EQ(lp["tokens"].size(), 7u);
  EXPECT_EQ(lp["token_logprobs"][0], nullptr);
  EXPECT_EQ(lp["top_logprobs"][4], nullptr);
  EXPECT_EQ(lp["token_logprobs"][5], -0.5);
  EXPECT_EQ(lp["token_logprobs"][6], -9999.0);  // -inf clamped: JSON has no infinity
  EXPECT_EQ(lp["tokens"][5], "e");
  EXPECT_EQ(lp["top_logprobs"][6].size(), 2u);  // top-1 plus the sampled token
  EXPECT_EQ(lp["text_offset"][0], 0);
  for (int i = 1; i < 7; ++i) EXPECT_GE(lp["text_offset"][i], lp["text_offset"][i - 1]);   // BOS piece is ""
  EXPECT_EQ(lp["text_offset"][6].get<size_t>() - lp["text_offset"][5].get<size_t>(), 1u);  // "e"
  // Each token's string stands at its text_offset in the text: the echoed prompt's SPM
  // dummy-prefix space is not counted (it was counted, and every offset was one byte late).
  auto tokens_at_offsets = [](const nlohmann::json& choice) {
    const std::string text = choice["text"];
    const nlohmann::json& l = choice["logprobs"];
    for (size_t i = 0; i < l["tokens"].size(); ++i) {
      const std::string token = l["tokens"][i];
      const size_t at = l["text_offset"][i];
      ASSERT_LE(at + token.size(), text.size()) << i;
      EXPECT_EQ(text.substr(at, token.size()), token) << i << " in " << text;
    }
  };
  tokens_at_offsets(j["choices"][0]);
  EXPECT_EQ(lp["tokens"][1], "Once");
  // Token-id prompts, with and without a BOS (decode keeps the space after a BOS, drops it
  // from a first token).
  for (const char* ids : {"[1, 403, 407]", "[403, 407]"}) {
    GenerationPlan q = completion(std::string(R"({"prompt": )") + ids + R"(, "logprobs": 0, "echo": true})");
    std::vector<ChoiceResult> one(1, choices[0]);
    const nlohmann::json k = completion_response(q, one, *tok_);
    SCOPED_TRACE(ids);
    tokens_at_offsets(k["choices"][0]);
    EXPECT_EQ(k["choices"][0]["logprobs"]["tokens"].size(), q.prompts[0].token_ids.size() + 2);
  }
  EXPECT_EQ(j["usage"], (nlohmann::json{{"prompt_tokens", 5},
                                        {"completion_tokens", 4},
                                        {"total_tokens", 9},
                                        {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
}

// Position of `needle` in `text` (npos fails the comparisons that use it).
size_t pos(const std::string& text, const std::string& needle) {
  const size_t p = text.find(needle);
  EXPECT_NE(p, std::string::npos) << needle << " not in " << text;
  return p;
}

TEST_F(ProtocolTest, TopLogprobsAreBestFirstAndFieldsInOpenAIOrder) {
  // Four tokens with distinct non-empty pieces, given logprobs in reverse alphabetical order of
  // their pieces (a std::map would print them alphabetically, i.e. worst first).
  std::vector<std::pair<std::string, int32_t>> by_piece;
  for (int32_t id = 0; id < tok_->vocab_size() && by_piece.size() < 4; ++id) {
    const std::string piece = tok_->token_to_piece(id);
    if (piece.size() < 2 || piece.find_first_of("\"\\") != std::string::npos) continue;
    if (std::any_of(piece.begin(), piece.end(), [](char ch) { return ch < 0x20 || ch > 0x7e; })) continue;
    if (std::any_of(by_piece.begin(), by_piece.end(), [&](const auto& e) { return e.first == piece; })) continue;
    by_piece.emplace_back(piece, id);
  }
  ASSERT_EQ(by_piece.size(), 4u);
  std::sort(by_piece.begin(), by_piece.end());
  SampleResult s{by_piece[0].second, -4.0f, 4, {}};  // sampled: the worst, alphabetically first
  for (int k = 0; k < 3; ++k) s.top_logprobs.push_back({by_piece[3 - k].second, -1.0f - static_cast<float>(k)});
  GenerationPlan p = completion(R"({"prompt": "Once", "logprobs": 3})");
  ChoiceResult c;
  c.token_ids = {s.token_id};
  c.text = by_piece[0].first;
  c.finish_reason = "length";
  c.logprobs = {s};
  const std::string body = dump_json(completion_response(p, {c}, *tok_));
  const size_t top = pos(body, "\"top_logprobs\":[{");
  size_t last = top;
  for (int k = 3; k >= 0; --k) {  // best (alphabetically last) first
    const size_t at = pos(body.substr(top), "\"" + by_piece[k].first + "\":") + top;
    EXPECT_GT(at, last) << body;
    last = at;
  }
  // Top-level and choice fields in OpenAI's order.
  EXPECT_LT(pos(body, "\"id\""), pos(body, "\"object\""));
  EXPECT_LT(pos(body, "\"object\""), pos(body, "\"created\""));
  EXPECT_LT(pos(body, "\"created\""), pos(body, "\"model\""));
  EXPECT_LT(pos(body, "\"model\""), pos(body, "\"choices\""));
  EXPECT_LT(pos(body, "\"choices\""), pos(body, "\"usage\""));
  EXPECT_LT(pos(body, "\"index\""), pos(body, "\"text\""));
  EXPECT_LT(pos(body, "\"text_offset\""), pos(body, "\"token_logprobs\""));
  EXPECT_LT(pos(body, "\"prompt_tokens\""), pos(body, "\"completion_tokens\""));
  // The same order in a streamed chunk's logprobs as built here.
  size_t offset = 0;
  const std::string chunk = dump_json(
      completion_chunk(p, 0, "x", completion_logprobs(*tok_, {}, {&s, 1}, &offset), std::nullopt, std::nullopt));
  EXPECT_LT(pos(chunk, "\"" + by_piece[3].first + "\":"), pos(chunk, "\"" + by_piece[0].first + "\":")) << chunk;
  EXPECT_LT(pos(chunk, "\"id\""), pos(chunk, "\"choices\""));
  // Chat: top_logprobs is an array (already ordered); the body's fields in OpenAI's order.
  GenerationPlan cp = chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 3})");
  const std::string chat_body = dump_json(chat_response(cp, {c}, *tok_));
  EXPECT_LT(pos(chat_body, "\"id\""), pos(chat_body, "\"object\""));
  EXPECT_LT(pos(chat_body, "\"choices\""), pos(chat_body, "\"usage\""));
  EXPECT_LT(pos(chat_body, "\"role\""), pos(chat_body, "\"content\""));
  const std::string chat_top = chat_body.substr(pos(chat_body, "\"top_logprobs\""));
  EXPECT_LT(pos(chat_top, "\"" + by_piece[3].first + "\""), pos(chat_top, "\"" + by_piece[1].first + "\""));
  // Error bodies: message, type, param, code.
  const std::string err = error_body(bad_request("m", "p", "c"));
  EXPECT_EQ(err, R"({"error":{"message":"m","type":"invalid_request_error","param":"p","code":"c"}})");
}

TEST_F(ProtocolTest, BestOfFansOutOneParallelGroupPerPromptAndKeepsTheMostLikely) {
  GenerationPlan plan = completion(R"({"prompt": ["a", "b"], "n": 2, "best_of": 3, "seed": 10, "cache_salt": "t1"})");
  ASSERT_EQ(plan.requests.size(), 6u);
  EXPECT_EQ(plan.best_of, 3);
  for (size_t i = 0; i < 6; ++i) {
    const EngineRequest& r = plan.requests[i];
    EXPECT_EQ(r.parallel_group, plan.id + "-p" + std::to_string(i / 3));
    EXPECT_EQ(r.parallel_group_size, 3);
    EXPECT_TRUE(r.need_cumulative_logprob);
    EXPECT_EQ(r.cache_salt, "t1");
    EXPECT_EQ(*r.sampling.seed, 10u + i % 3);
  }
  std::vector<ChoiceResult> all(6);
  const double lp[6] = {-3.0, -1.0, -2.0, -0.5, -0.7, -9.0};
  for (size_t i = 0; i < 6; ++i) {
    all[i].cumulative_logprob = lp[i];
    all[i].token_ids.assign(i + 1, 7);
    all[i].text = std::to_string(i);
    all[i].num_cached_tokens = static_cast<int32_t>(10 * i);
  }
  const std::vector<ChoiceResult> kept = select_best_of(plan, all);
  ASSERT_EQ(kept.size(), 4u);
  EXPECT_EQ(kept[0].text, "1");
  EXPECT_EQ(kept[1].text, "2");
  EXPECT_EQ(kept[2].text, "3");
  EXPECT_EQ(kept[3].text, "4");
  EXPECT_EQ(plan.discarded_completion_tokens, 1 + 6);  // sequences 0 and 5
  EXPECT_EQ(plan.cached_tokens, 0 + 30);               // least per prompt
  const Usage u = plan_usage(plan, kept);
  EXPECT_EQ(u.completion_tokens, 2 + 3 + 4 + 5 + 1 + 6);
  // n alone: one group per prompt too, no cumulative logprobs needed.
  GenerationPlan n2 = completion(R"({"prompt": "a", "n": 2})");
  ASSERT_EQ(n2.requests.size(), 2u);
  EXPECT_EQ(n2.requests[1].parallel_group_size, 2);
  EXPECT_FALSE(n2.requests[1].need_cumulative_logprob);
}

TEST_F(ProtocolTest, ChatResponseAndChunkShapes) {
  GenerationPlan p = chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 1,
      "stream": true, "stream_options": {"include_usage": true}})");
  std::vector<ChoiceResult> choices(1);
  choices[0].token_ids = {436};
  choices[0].text = "\"";
  choices[0].finish_reason = "length";
  choices[0].logprobs = {SampleResult{436, -1.0f, 1, {{436, -1.0f}, {440, -2.0f}}}};
  const nlohmann::json j = chat_response(p, choices, *tok_);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"], (nlohmann::json{{"role", "assistant"}, {"content", "\""}}));
  const nlohmann::json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 1u);
  EXPECT_EQ(content[0]["token"], "\"");
  EXPECT_EQ(content[0]["bytes"], nlohmann::json::array({34}));
  EXPECT_EQ(content[0]["logprob"], -1.0);
  ASSERT_EQ(content[0]["top_logprobs"].size(), 1u);  // top_logprobs = 1 caps the list
  EXPECT_EQ(content[0]["top_logprobs"][0]["token"], "\"");

  const nlohmann::json c = chat_chunk(p, 0, {{"content", "a"}}, nullptr, std::nullopt, std::nullopt);
  EXPECT_EQ(c["object"], "chat.completion.chunk");
  EXPECT_EQ(c["choices"][0]["delta"]["content"], "a");
  EXPECT_EQ(c["choices"][0]["finish_reason"], nullptr);
  EXPECT_TRUE(c.contains("usage"));  // null in every chunk when include_usage
  EXPECT_EQ(c["usage"], nullptr);
  const nlohmann::json u = usage_chunk(p, Usage{7, 3});
  EXPECT_EQ(u["choices"], nlohmann::json::array());
  EXPECT_EQ(u["usage"]["total_tokens"], 10);
  EXPECT_EQ(u["object"], "chat.completion.chunk");
}

TEST_F(ProtocolTest, CompletionChunkOmitsUsageUnlessAsked) {
  GenerationPlan p = completion(R"({"prompt": "x", "stream": true})");
  const nlohmann::json c = completion_chunk(p, 0, "hi", nullptr, std::string("stop"), std::nullopt);
  EXPECT_FALSE(c.contains("usage"));
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "hi");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "stop");
}

TEST_F(ProtocolTest, ErrorBodyIsOpenAIShaped) {
  const nlohmann::json j = nlohmann::json::parse(error_body(bad_request("bad temperature", "temperature")));
  EXPECT_EQ(j, (nlohmann::json{{"error",
                                {{"message", "bad temperature"},
                                 {"type", "invalid_request_error"},
                                 {"param", "temperature"},
                                 {"code", nullptr}}}}));
  const nlohmann::json k =
      nlohmann::json::parse(error_body(ApiError(401, "no", "invalid_request_error", std::nullopt, "invalid_api_key")));
  EXPECT_EQ(k["error"]["param"], nullptr);
  EXPECT_EQ(k["error"]["code"], "invalid_api_key");
}

TEST_F(ProtocolTest, TokenizeDetokenizeModels) {
  nlohmann::json t = tokenize_response(nlohmann::json::parse(R"({"prompt": "Once upon a time"})"), model());
  EXPECT_EQ(t["count"], 5);
  EXPECT_EQ(t["max_model_len"], 512);
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), tok_->encode("Once upon a time", true, true));
  t = tokenize_response(nlohmann::json::parse(R"({"prompt": "Once", "add_special_tokens": false})"), model());
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), tok_->encode("Once", false, true));
  t = tokenize_response(nlohmann::json::parse(R"({"messages": [{"role": "user", "content": "Hi"}]})"), model());
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), tokenize_chat(model(), {{"user", "Hi"}}, true));

  const nlohmann::json d =
      detokenize_response(nlohmann::json{{"tokens", tok_->encode("Once upon a time", false, true)}}, model());
  EXPECT_EQ(d["prompt"], "Once upon a time");
  // The inverse of /tokenize: the BOS it adds is dropped without leaving its space behind.
  EXPECT_EQ(
      detokenize_response(nlohmann::json{{"tokens", tok_->encode("Once upon a time", true, true)}}, model())["prompt"],
      "Once upon a time");
  EXPECT_THROW(detokenize_response(nlohmann::json::parse(R"({"tokens": [100000]})"), model()), ApiError);
  EXPECT_THROW(detokenize_response(nlohmann::json::parse(R"({})"), model()), ApiError);
  EXPECT_THROW(tokenize_response(nlohmann::json::parse(R"({"prompt": 5})"), model()), ApiError);

  const nlohmann::json m = models_response(model(), 42);
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], "stories260K");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(m["data"][0]["created"], 42);
  EXPECT_EQ(m["data"][0]["max_model_len"], 512);
}

TEST(RandomId, PrefixAndHexDigits) {
  const std::string a = random_id("cmpl-"), b = random_id("cmpl-");
  EXPECT_EQ(a.size(), 5u + 32u);
  EXPECT_EQ(a.rfind("cmpl-", 0), 0u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef", 5), std::string::npos);
}

TEST(Sse, FramingAndParsingRoundTrip) {
  const std::string e = sse_event(nlohmann::json{{"a", "x\ny"}});
  EXPECT_EQ(e, "data: {\"a\":\"x\\ny\"}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  const std::string stream = ": comment\n\n" + e + "event: x\r\ndata: 1\r\ndata: 2\r\n\r\n" + sse_done() + "data: part";
  EXPECT_EQ(parse_sse_data(stream), (std::vector<std::string>{"{\"a\":\"x\\ny\"}", "1\n2", "[DONE]"}));
  // Invalid UTF-8 never reaches the wire.
  EXPECT_EQ(sse_event(nlohmann::json{{"t", std::string("\xe2\x82")}}), "data: {\"t\":\"\xef\xbf\xbd\"}\n\n");
}

}  // namespace
}  // namespace pagellm::server

// Replays the hostile request corpus (tests/fuzz/http, see tests/fuzz/README.md) against a live
// `pagellm serve`, plus generated shapes too big to keep in the tree (100k-deep JSON in every
// field). The contract: every one is answered with a 4xx and an OpenAI error body, /health stays
// up after each, no 5xx is ever counted, and the server still generates afterwards.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "server_process.h"

namespace pagellm::test {
namespace {

using nlohmann::json;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string endpoint_of(const std::string& file_name) {
  const std::string kind = file_name.substr(0, file_name.find('.'));
  if (kind == "completions") return "/v1/completions";
  if (kind == "chat") return "/v1/chat/completions";
  if (kind == "tokenize") return "/tokenize";
  if (kind == "detokenize") return "/detokenize";
  return "";
}

HttpResult send_raw(int port, const std::string& text) {
  HttpResult r;
  const int fd = connect_to(port, 30);
  if (fd < 0) return r;
  if (send_all(fd, text)) parse_response(recv_all(fd), &r, /*to_eof=*/true);
  close(fd);
  return r;
}

void expect_4xx_with_error_body(const HttpResult& r) {
  EXPECT_GE(r.status, 400) << r.body;
  EXPECT_LT(r.status, 500) << r.body;
  if (r.status >= 400 && r.status < 500) {
    const json j = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(j.is_object() && j.contains("error") && j["error"]["message"].is_string()) << r.body;
  }
}

void expect_healthy(int port) {
  const HttpResult h = http(port, "GET", "/health", "", {}, 10);
  ASSERT_EQ(h.status, 200) << "the server stopped answering /health";
}

TEST(HostileCorpus, EveryRequestIsA4xxAndTheServerKeepsServing) {
  ServerProcess server({});
  const int port = server.port();
  const std::filesystem::path dir = std::filesystem::path(PAGELLM_SOURCE_DIR) / "tests/fuzz/http";
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 80u);
  int replayed = 0;
  for (const std::filesystem::path& p : files) {
    const std::string name = p.filename().string();
    SCOPED_TRACE(name);
    const std::string data = read_file(p);
    HttpResult r;
    if (p.extension() == ".http") {
      r = send_raw(port, data);
    } else {
      const std::string path = endpoint_of(name);
      ASSERT_FALSE(path.empty()) << "corpus file names start with completions., chat., tokenize. or detokenize.";
      r = http(port, "POST", path, data, {}, 30);
    }
    expect_4xx_with_error_body(r);
    expect_healthy(port);
    ++replayed;
  }

  // 100k-deep arrays and objects in every field of every endpoint (the trial's crash: a
  // recursive dump() of the value in the error path).
  constexpr int kDepth = 100000;
  const std::string deep_array = std::string(kDepth, '[') + std::string(kDepth, ']');
  std::string deep_object;
  for (int i = 0; i < kDepth; ++i) deep_object += "{\"a\":";
  deep_object += "1" + std::string(kDepth, '}');
  const struct {
    const char* path;
    const char* base;  // the rest of a valid body
    std::vector<const char*> fields;
  } endpoints[] = {
      {"/v1/completions",
       R"("prompt": "x")",
       {"prompt", "stop", "max_tokens", "model", "temperature", "top_p", "top_k", "n", "best_of", "logit_bias",
        "stop_token_ids", "seed", "stream", "stream_options", "logprobs", "echo", "user", "priority"}},
      {"/v1/chat/completions",
       R"("messages": [{"role": "user", "content": "x"}])",
       {"messages", "stop", "max_tokens", "max_completion_tokens", "model", "logprobs", "top_logprobs", "n"}},
      {"/tokenize", R"("prompt": "x")", {"prompt", "messages", "model", "add_special_tokens"}},
      {"/detokenize", R"("tokens": [1])", {"tokens", "model"}},
  };
  for (const auto& ep : endpoints) {
    for (const char* field : ep.fields) {
      for (const std::string* deep : std::vector<const std::string*>{&deep_array, &deep_object}) {
        SCOPED_TRACE(std::string(ep.path) + " " + field + (deep == &deep_array ? " array" : " object"));
        const std::string body = std::string("{") + ep.base + ", \"" + field + "\": " + *deep + "}";
        const HttpResult r = http(port, "POST", ep.path, body, {}, 30);
        EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
        expect_healthy(port);
        ++replayed;
      }
    }
  }
  for (const std::string* deep : std::vector<const std::string*>{&deep_array, &deep_object}) {  // the whole body
    const HttpResult r = http(port, "POST", "/v1/completions", *deep, {}, 30);
    EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
    ++replayed;
  }

  const HttpResult ok =
      http(port, "POST", "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})");
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(json::parse(ok.body)["choices"][0]["text"], ", there was a little girl");
  const std::string metrics = http(port, "GET", "/metrics").body;
  EXPECT_EQ(metrics.find("status=\"5"), std::string::npos) << "a hostile request got a 5xx";
  std::printf("replayed %d hostile requests\n", replayed);
  EXPECT_EQ(server.stop(), 0);
}

}  // namespace
}  // namespace pagellm::test

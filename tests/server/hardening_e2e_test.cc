// End to end, against `pagellm serve` on the bundled model: what a hostile or careless client may
// send (big bodies, browser requests from other origins, wrong media types, idle connections past
// the descriptor limit), and the small routes clients expect (HEAD, /v1/models/{id}, /version).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/build_info.h"
#include "server_process.h"

namespace pagellm::test {
namespace {

using nlohmann::json;

// Sends `text` verbatim on a new connection and reads the response to EOF.
HttpResult raw_http(int port, const std::string& text, double timeout_s = 60) {
  HttpResult r;
  const int fd = connect_to(port, timeout_s);
  if (fd < 0) return r;
  if (send_all(fd, text)) parse_response(recv_all(fd), &r, /*to_eof=*/true);
  close(fd);
  return r;
}

std::string post_text(const std::string& path, const std::string& body, const std::vector<std::string>& headers) {
  std::string req = "POST " + path + " HTTP/1.1\r\n";
  for (const std::string& h : headers) req += h + "\r\n";
  return req + "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

void expect_error_body(const HttpResult& r, const std::string& code) {
  const json j = json::parse(r.body);
  ASSERT_TRUE(j.contains("error")) << r.body;
  EXPECT_TRUE(j["error"]["message"].is_string()) << r.body;
  if (!code.empty()) {
    EXPECT_EQ(j["error"]["code"], code) << r.body;
  }
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

TEST(ServeHardening, PostBodiesMustBeJson) {
  ServerProcess server({});
  const std::string body = R"({"prompt": "Once", "max_tokens": 2})";
  const struct {
    std::vector<std::string> headers;
    int status;
  } cases[] = {
      {{"Host: 127.0.0.1"}, 415},  // no Content-Type
      {{"Host: 127.0.0.1", "Content-Type: text/plain"}, 415},
      {{"Host: 127.0.0.1", "Content-Type: application/x-www-form-urlencoded"}, 415},
      {{"Host: 127.0.0.1", "Content-Type: multipart/form-data; boundary=x"}, 415},
      {{"Host: 127.0.0.1", "Content-Type: application/jsonx"}, 415},
      {{"Host: 127.0.0.1", "Content-Type: application/json"}, 200},
      {{"Host: 127.0.0.1", "Content-Type: Application/JSON; charset=utf-8"}, 200},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.headers.back());
    const HttpResult r = raw_http(server.port(), post_text("/v1/completions", body, c.headers));
    EXPECT_EQ(r.status, c.status) << r.body;
    if (c.status == 415) expect_error_body(r, "unsupported_media_type");
  }
  const HttpResult t = raw_http(server.port(), post_text("/tokenize", R"({"prompt": "a"})", {"Host: localhost"}));
  EXPECT_EQ(t.status, 415) << t.body;
  EXPECT_EQ(server.stop(), 0);
}

// A page on another site must not reach a server on 127.0.0.1: not by a DNS name rebound to
// 127.0.0.1 (Host), not from the browser's own origin (Origin).
TEST(ServeHardening, ForeignHostAndOriginAre403UnlessAllowed) {
  ServerProcess server({});
  const int port = server.port();
  const std::string p = std::to_string(port);
  const std::string body = R"({"prompt": "Once", "max_tokens": 2})";
  const std::string json_ct = "Content-Type: application/json";
  for (const std::string& host : std::vector<std::string>{"127.0.0.1", "127.0.0.1:" + p, "localhost:" + p, "LOCALHOST",
                                                          "[::1]:" + p, "app.localhost:" + p, "10.1.2.3:" + p}) {
    SCOPED_TRACE(host);
    EXPECT_EQ(raw_http(port, post_text("/v1/completions", body, {"Host: " + host, json_ct})).status, 200);
  }
  for (const std::string& host :
       std::vector<std::string>{"evil.example", "evil.example:" + p, "127.0.0.1.evil.example", ""}) {
    SCOPED_TRACE(host);
    const HttpResult r = raw_http(port, post_text("/v1/completions", body, {"Host: " + host, json_ct}));
    EXPECT_EQ(r.status, 403) << r.body;
    expect_error_body(r, "host_not_allowed");
  }
  // The browser says where the page came from.
  const HttpResult foreign = raw_http(
      port, post_text("/v1/completions", body, {"Host: 127.0.0.1:" + p, json_ct, "Origin: https://evil.example"}));
  EXPECT_EQ(foreign.status, 403) << foreign.body;
  expect_error_body(foreign, "origin_not_allowed");
  EXPECT_EQ(raw_http(port,
                     "OPTIONS /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: https://evil.example\r\n"
                     "Access-Control-Request-Method: POST\r\nConnection: close\r\n\r\n")
                .status,
            403);
  // Same origin (a page served from this host:port) is fine.
  EXPECT_EQ(raw_http(port, post_text("/v1/completions", body,
                                     {"Host: 127.0.0.1:" + p, json_ct, "Origin: http://127.0.0.1:" + p}))
                .status,
            200);
  EXPECT_EQ(server.stop(), 0);
}

TEST(ServeHardening, AllowedOriginsGetCors) {
  ServerProcess server({"--allowed-origins", "https://ui.example,http://127.0.0.1:3000"});
  const int port = server.port();
  const std::string body = R"({"prompt": "Once", "max_tokens": 2})";
  HttpResult pre = raw_http(port,
                            "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: https://ui.example\r\n"
                            "Access-Control-Request-Method: POST\r\n"
                            "Access-Control-Request-Headers: content-type, authorization\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(pre.status, 204);
  EXPECT_EQ(pre.headers["access-control-allow-origin"], "https://ui.example");
  EXPECT_NE(pre.headers["access-control-allow-methods"].find("POST"), std::string::npos);
  EXPECT_NE(pre.headers["access-control-allow-headers"].find("authorization"), std::string::npos);
  // The page's own request, and a Host that names the allowed origin's host.
  HttpResult r =
      raw_http(port, post_text("/v1/completions", body,
                               {"Host: ui.example", "Content-Type: application/json", "Origin: https://ui.example"}));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["access-control-allow-origin"], "https://ui.example");
  // Streams carry the header too.
  HttpResult s =
      raw_http(port, post_text("/v1/completions", R"({"prompt": "Once", "max_tokens": 2, "stream": true})",
                               {"Host: 127.0.0.1", "Content-Type: application/json", "Origin: http://127.0.0.1:3000"}));
  EXPECT_EQ(s.status, 200);
  EXPECT_EQ(s.headers["access-control-allow-origin"], "http://127.0.0.1:3000");
  EXPECT_EQ(
      raw_http(port, post_text("/v1/completions", body,
                               {"Host: 127.0.0.1", "Content-Type: application/json", "Origin: https://other.example"}))
          .status,
      403);
  EXPECT_EQ(server.stop(), 0);
}

TEST(ServeHardening, SmallRoutesClientsExpect) {
  ServerProcess server({});
  const int port = server.port();
  HttpResult health = http(port, "GET", "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(json::parse(health.body)["status"], "ok");
  EXPECT_EQ(health.headers["content-type"], "application/json");

  HttpResult head = raw_http(port, "HEAD /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.headers["content-length"], std::to_string(health.body.size()));
  EXPECT_EQ(head.body, "");
  const HttpResult head_models =
      raw_http(port, "HEAD /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(head_models.status, 200);
  EXPECT_EQ(head_models.body, "");
  EXPECT_EQ(raw_http(port, "HEAD /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").status,
            405);

  const HttpResult card = http(port, "GET", "/v1/models/stories260K");
  ASSERT_EQ(card.status, 200) << card.body;
  const json c = json::parse(card.body);
  EXPECT_EQ(c["id"], "stories260K");
  EXPECT_EQ(c["object"], "model");
  EXPECT_EQ(c["max_model_len"], 512);
  EXPECT_EQ(c["pagellm_version"], build_info().version);  // extension field, in the list too
  const HttpResult list = http(port, "GET", "/v1/models");
  ASSERT_EQ(list.status, 200) << list.body;
  EXPECT_EQ(json::parse(list.body)["data"][0]["pagellm_version"], build_info().version);
  const HttpResult missing = http(port, "GET", "/v1/models/gpt-4");
  EXPECT_EQ(missing.status, 404);
  expect_error_body(missing, "model_not_found");

  const HttpResult version = http(port, "GET", "/version");
  EXPECT_EQ(version.status, 200);
  EXPECT_EQ(json::parse(version.body)["version"], build_info().version);
  EXPECT_EQ(http(port, "GET", "/ping").status, 200);
  EXPECT_EQ(http(port, "POST", "/ping", "{}").status, 200);
  HttpResult options = raw_http(port, "OPTIONS /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(options.status, 204);
  EXPECT_NE(options.headers["allow"].find("GET"), std::string::npos);
  EXPECT_EQ(server.stop(), 0);
}

// /tokenize then /detokenize gives back the text: no space gained after BOS or lost around
// special tokens.
TEST(ServeHardening, TokenizeThenDetokenizeIsTheIdentity) {
  ServerProcess server({});
  const int port = server.port();
  for (const std::string text : {"Hello world", " Hello", "  two leading spaces", "Once upon a time.", "</s>after",
                                 "a <s> b </s> c", "trailing space ", "line\nbreak", "\xe2\x82\xac euro"}) {
    SCOPED_TRACE(text);
    for (const bool add_special : {true, false}) {
      const HttpResult t =
          http(port, "POST", "/tokenize", json{{"prompt", text}, {"add_special_tokens", add_special}}.dump());
      ASSERT_EQ(t.status, 200) << t.body;
      const json ids = json::parse(t.body)["tokens"];
      const HttpResult d = http(port, "POST", "/detokenize", json{{"tokens", ids}}.dump());
      ASSERT_EQ(d.status, 200) << d.body;
      EXPECT_EQ(json::parse(d.body)["prompt"], text) << "add_special_tokens " << add_special << ", ids " << ids.dump();
    }
  }
  EXPECT_EQ(server.stop(), 0);
}

// Completions top_logprobs are best first (OpenAI's and vLLM's order), streamed and not: the
// order of the keys as sent, read with an order-preserving JSON.
TEST(ServeHardening, CompletionsTopLogprobsAreBestFirst) {
  ServerProcess server({});
  const json body = {
      {"prompt", "Once upon a time"}, {"max_tokens", 8}, {"logprobs", 5}, {"temperature", 1.0}, {"seed", 7}};
  auto check = [](const nlohmann::ordered_json& logprobs, int* entries) {
    for (const auto& top : logprobs["top_logprobs"]) {
      double prev = 1;
      for (const auto& [piece, lp] : top.items()) {
        EXPECT_LE(lp.get<double>(), prev) << top.dump();
        prev = lp.get<double>();
        ++*entries;
      }
    }
  };
  int entries = 0;
  const HttpResult whole = http(server.port(), "POST", "/v1/completions", body.dump());
  ASSERT_EQ(whole.status, 200) << whole.body;
  check(nlohmann::ordered_json::parse(whole.body)["choices"][0]["logprobs"], &entries);
  json streamed = body;
  streamed["stream"] = true;
  const HttpResult st = http(server.port(), "POST", "/v1/completions", streamed.dump());
  ASSERT_EQ(st.status, 200);
  size_t at = 0;
  while ((at = st.body.find("data: {", at)) != std::string::npos) {
    const size_t end = st.body.find("\n\n", at);
    const auto chunk = nlohmann::ordered_json::parse(st.body.substr(at + 6, end - at - 6));
    if (!chunk["choices"].empty() && !chunk["choices"][0]["logprobs"].is_null()) {
      check(chunk["choices"][0]["logprobs"], &entries);
    }
    at = end;
  }
  EXPECT_GE(entries, 2 * 8 * 5);  // 5 or 6 entries per token, both ways
  EXPECT_EQ(server.stop(), 0);
}

// The default body limit comes from the model's context: 1 MiB + 64 bytes per token.
TEST(ServeHardening, DefaultBodyLimitFollowsTheContext) {
  ServerProcess server({});
  const int64_t limit = (int64_t{1} << 20) + 64 * 512;
  EXPECT_NE(server.log().find("request bodies up to " + std::to_string(limit) + " bytes"), std::string::npos)
      << server.log();
  const std::string over = R"({"prompt": ")" + std::string(limit, 'a') + R"("})";
  EXPECT_EQ(http(server.port(), "POST", "/v1/completions", over).status, 413);
  EXPECT_EQ(http(server.port(), "GET", "/health").status, 200);
  EXPECT_EQ(server.stop(), 0);
}

// A body that takes a worker a while: /detokenize of a million token ids (4.8 MB; about 0.3 s
// to parse and decode on the bundled model; prompts that large are refused before tokenising).
std::string big_detokenize_body() {
  std::string body = "{\"tokens\": [";
  for (int i = 0; i < 1'000'000; ++i) body += (i ? "," : "") + std::to_string(3 + i % 500);
  return body + "]}";
}

// Big bodies are parsed and decoded off the I/O threads: /health (and everybody else's stream)
// is answered at once meanwhile.
TEST(ServeHardening, HealthAnswersWhileBigBodiesAreProcessed) {
  ServerProcess server({"--max-body-bytes", "20000000"});
  const int port = server.port();
  const std::string body = big_detokenize_body();
  constexpr int kBig = 8;
  std::atomic<int> big_done{0};
  std::vector<int> statuses(kBig);
  std::vector<std::thread> big;
  for (int i = 0; i < kBig; ++i) {
    big.emplace_back([&, i] {
      statuses[i] = http(port, "POST", "/detokenize", body, {}, 120).status;
      ++big_done;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the bodies are in and being worked on
  double worst = 0;
  int probes_while_busy = 0;
  for (int i = 0; i < 100 && big_done.load() < kBig; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const HttpResult h = http(port, "GET", "/health", "", {}, 10);
    const double dt = seconds_since(t0);
    EXPECT_EQ(h.status, 200);
    if (big_done.load() < kBig) {
      ++probes_while_busy;
      worst = std::max(worst, dt);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (std::thread& t : big) t.join();
  for (int s : statuses) EXPECT_EQ(s, 200);
  ASSERT_GE(probes_while_busy, 3) << "the big bodies were done before /health was probed: make them bigger";
  EXPECT_LT(worst, 0.1) << "slowest /health while big bodies were worked on: " << worst << " s";
  EXPECT_EQ(server.stop(), 0);
}

// The parsing queue has its own bound: beyond it, 429 with Retry-After (and nothing is lost).
TEST(ServeHardening, FullParseQueueIs429) {
  ServerProcess server({"--max-body-bytes", "20000000", "--api-threads", "1", "--api-queue", "1"});
  const int port = server.port();
  const std::string body = big_detokenize_body();
  constexpr int kClients = 4;
  expect_served_or_rate_limited(http_concurrently(port, kClients, "POST", "/detokenize", body));
  EXPECT_EQ(http(port, "POST", "/tokenize", R"({"prompt": "a"})").status, 200);
  EXPECT_EQ(server.stop(), 0);
}

// HTTP edge cases from the fresh-user trial: each gets the status RFC 9110/9112 names.
TEST(ServeHardening, HttpFramingAndHeaderEdgeCases) {
  ServerProcess server({"--api-key", "sekret"});
  const int port = server.port();
  const std::string get_health = "GET /health HTTP/1.1\r\n";
  const std::string close = "Connection: close\r\n\r\n";
  EXPECT_EQ(raw_http(port, get_health + "Host: 127.0.0.1\r\nX-Big: " + std::string(70000, 'a') + "\r\n" + close).status,
            431);
  EXPECT_EQ(raw_http(port, get_health + close).status, 400);              // HTTP/1.1 without Host
  EXPECT_EQ(raw_http(port, "GET /health HTTP/1.0\r\n\r\n").status, 200);  // 1.0 may omit it
  EXPECT_EQ(raw_http(port, get_health + "Host: localhost\r\nHost: evil.example\r\n" + close).status, 400);
  // Absolute form: the target's authority stands for Host.
  EXPECT_EQ(
      raw_http(port, "GET http://127.0.0.1:" + std::to_string(port) + "/health HTTP/1.1\r\nHost: x\r\n" + close).status,
      200);
  EXPECT_EQ(raw_http(port, "GET http://evil.example/health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + close).status, 403);
  const std::string body = R"({"prompt": "a"})";
  auto post = [&](const std::string& extra) {
    return raw_http(port,
                    "POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer sekret\r\n"
                    "Content-Type: application/json\r\n" +
                        extra + "Content-Length: " + std::to_string(body.size()) + "\r\n" + close + body);
  };
  EXPECT_EQ(post("").status, 200);
  EXPECT_EQ(post("Content-Encoding: gzip\r\n").status, 415);
  EXPECT_EQ(post("Content-Encoding: identity\r\n").status, 200);
  EXPECT_EQ(post("Expect: 200-ok\r\n").status, 417);
  // The auth scheme is case-insensitive, the key is not.
  for (const std::string auth : {"bearer sekret", "BEARER sekret"}) {
    EXPECT_EQ(http(port, "GET", "/v1/models", "", {"Authorization: " + auth}).status, 200) << auth;
  }
  EXPECT_EQ(http(port, "GET", "/v1/models", "", {"Authorization: Bearer SEKRET"}).status, 401);
  EXPECT_EQ(server.stop(), 0);
}

// Bodies being received are bounded in bytes (by their Content-Length: 512 MiB by default, for
// every connection together): a crowd of slow uploads gets 503 before its bodies are read,
// instead of growing the process to connections x body limit.
TEST(ServeHardening, BytesOfBodiesBeingReceivedAreBounded) {
  ServerProcess server({"--max-body-bytes", "20000000"});  // 26 such bodies fill 512 MiB
  const int port = server.port();
  std::vector<int> fds;
  for (int i = 0; i < 30; ++i) {
    const int fd = connect_to(port, 10);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd,
                         "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         "Content-Length: 20000000\r\n\r\n{"));
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the refusals are written at once
  int refused = 0;
  for (int fd : fds) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) != 1) continue;  // still uploading: nothing to read
    HttpResult r;
    parse_response(recv_all(fd), &r, true);
    if (r.status == 503) {
      ++refused;
      EXPECT_EQ(r.headers["retry-after"], "1");
    }
  }
  EXPECT_EQ(refused, 30 - 26);
  for (int fd : fds) close(fd);
  // Their reservations are returned: a new upload gets in again.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(http(port, "POST", "/tokenize", R"({"prompt": "a"})").status, 200);
  EXPECT_EQ(server.stop(), 0);
}

// A body that does not arrive in time gets 408 (it used to be cut off without a word).
TEST(ServeHardening, SlowBodyGets408) {
  ServerProcess server({"--timeout", "1"});
  const int fd = connect_to(server.port(), 10);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd,
                       "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       "Content-Length: 29\r\n\r\n{\"prompt\""));
  HttpResult r;
  parse_response(recv_all(fd), &r, true);
  close(fd);
  EXPECT_EQ(r.status, 408) << r.body;
  EXPECT_EQ(http(server.port(), "GET", "/health").status, 200);
  EXPECT_EQ(server.stop(), 0);
}

// Under a hard descriptor limit, idle connections cannot lock everybody out: the server keeps
// its connections below the limit and closes the idlest to let a new client in.
TEST(ServeHardening, IdleConnectionsBeyondTheFdLimitDoNotLockClientsOut) {
  constexpr int64_t kFdLimit = 192;  // -> at most 192 - 64 = 128 connections
  ServerProcess server({}, "", kFdLimit);
  const int port = server.port();
  EXPECT_NE(server.log().find("up to 128 open connections"), std::string::npos) << server.log();
  // Half of them stall in the middle of a body: connections not yet in an exchange can be closed
  // too (else a client trickling bodies would hold every slot).
  std::vector<int> idle;
  for (int i = 0; i < 300; ++i) {
    const int fd = connect_to(port, 5);
    if (fd < 0) continue;
    if (i % 2) {
      send_all(fd,
               "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               "Content-Length: 100\r\n\r\n{");
    }
    idle.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // A new client still gets in, many times over.
  for (int i = 0; i < 5; ++i) {
    const HttpResult h = http(port, "GET", "/health", "", {}, 10);
    EXPECT_EQ(h.status, 200);
  }
  const HttpResult ok = http(port, "POST", "/v1/completions", R"({"prompt": "Once", "max_tokens": 2})", {}, 30);
  EXPECT_EQ(ok.status, 200);
  // The oldest idle connections were the ones closed (they read EOF).
  int closed = 0;
  for (int fd : idle) {
    pollfd p{fd, POLLIN, 0};
    char c;
    if (poll(&p, 1, 0) == 1 && recv(fd, &c, 1, MSG_DONTWAIT) <= 0) ++closed;
  }
  EXPECT_GE(closed, 300 - 128);
  for (int fd : idle) close(fd);
  EXPECT_EQ(server.stop(), 0);
}

}  // namespace
}  // namespace pagellm::test

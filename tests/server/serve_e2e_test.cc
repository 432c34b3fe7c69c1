// End to end: `pagellm serve` on the bundled stories260K model, driven over real sockets.
// Every test starts its own server process on an ephemeral port; ServerProcess kills it on exit.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "nan_model.h"
#include "server/sse.h"
#include "server_process.h"
#include "test_util.h"

namespace pagellm::test {
namespace {

using nlohmann::json;

// Polls /metrics until every block is free and nothing runs; false after timeout_s.
bool wait_all_blocks_free(int port, double timeout_s = 5) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    auto m = read_metrics(port);
    if (m["pagellm:num_blocks"] > 0 && m["pagellm:num_free_blocks"] == m["pagellm:num_blocks"] &&
        m["pagellm:num_requests_running"] == 0 && m["pagellm:num_requests_waiting"] == 0) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

struct BadRequest {
  const char* method;
  const char* path;
  const char* body;
  int status;
};

TEST(ServeE2E, BadRequestsGetTheirStatusAndTheServerKeepsServing) {
  ServerProcess server({});
  const BadRequest cases[] = {
      {"POST", "/v1/completions", "{", 400},
      {"POST", "/v1/completions", "[]", 400},
      {"POST", "/v1/completions", R"({"prompt": "x", "max_tokens": -1})", 400},
      {"POST", "/v1/completions", R"({"prompt": "x", "temperature": -0.5})", 400},
      {"POST", "/v1/completions", R"({"prompt": "x", "top_p": 1.5})", 400},
      {"POST", "/v1/completions", R"({"prompt": "x", "n": 0})", 400},
      {"POST", "/v1/completions", R"({"prompt": "x", "logit_bias": {"99999": 1}})", 400},
      {"POST", "/v1/completions", R"({"prompt": "x", "model": "nope"})", 404},  // model_not_found
      {"POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 100000})", 400},
      {"POST", "/v1/completions", R"({"prompt": [70000]})", 400},
      {"POST", "/v1/chat/completions", R"({"messages": 5})", 400},
      {"POST", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", 400},
      {"POST", "/tokenize", R"({"prompt": 5})", 400},
      {"POST", "/detokenize", R"({"tokens": [-1]})", 400},
      {"GET", "/v1/completions", "", 405},
      {"POST", "/v1/models", "{}", 405},
      {"GET", "/nope", "", 404},
      {"DELETE", "/health", "", 405},
  };
  for (const BadRequest& c : cases) {
    SCOPED_TRACE(std::string(c.method) + " " + c.path + " " + c.body);
    HttpResult r = http(server.port(), c.method, c.path, c.body);
    EXPECT_EQ(r.status, c.status) << r.body;
    const json j = json::parse(r.body);
    EXPECT_TRUE(j["error"].contains("message") && j["error"].contains("type") && j["error"].contains("param") &&
                j["error"].contains("code"))
        << r.body;
    if (c.status == 405) {
      EXPECT_TRUE(r.headers.contains("allow"));
    }
  }
  // Not even HTTP.
  const int fd = connect_to(server.port(), 10);
  ASSERT_GE(fd, 0);
  send_all(fd, "garbage\r\n\r\n");
  HttpResult g;
  parse_response(recv_all(fd), &g, true);
  close(fd);
  EXPECT_EQ(g.status, 400);

  const HttpResult ok = http(server.port(), "POST", "/v1/completions",
                             R"({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})");
  ASSERT_EQ(ok.status, 200) << ok.body;
  const json j = json::parse(ok.body);
  EXPECT_EQ(j["choices"][0]["text"], ", there was a little girl");  // as llama-server, 8 tokens
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  auto m = read_metrics(server.port());
  EXPECT_EQ(m["pagellm:http_errors_total{model_name=\"stories260K\",status=\"400\"}"], 14);
  EXPECT_EQ(m["pagellm:http_errors_total{model_name=\"stories260K\",status=\"405\"}"], 3);
  EXPECT_EQ(m["pagellm:http_errors_total{model_name=\"stories260K\",status=\"404\"}"],
            2);  // unknown route and unknown model
  EXPECT_EQ(server.stop(), 0);
}

TEST(ServeE2E, ApiKeyGuardsTheApiButNotHealthOrMetrics) {
  ServerProcess server({"--api-key", "sekret"});
  EXPECT_EQ(http(server.port(), "GET", "/v1/models").status, 401);
  EXPECT_EQ(http(server.port(), "GET", "/v1/models", "", {"Authorization: Bearer wrong"}).status, 401);
  EXPECT_EQ(http(server.port(), "POST", "/tokenize", R"({"prompt": "a"})").status, 401);
  const HttpResult r = http(server.port(), "GET", "/v1/models", "", {"Authorization: Bearer sekret"});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["data"][0]["id"], "stories260K");
  EXPECT_EQ(http(server.port(), "GET", "/health").status, 200);
  EXPECT_EQ(http(server.port(), "GET", "/metrics").status, 200);
  EXPECT_EQ(server.stop(), 0);
}

TEST(ServeE2E, OversizedBodyIs413) {
  ServerProcess server({"--max-body-bytes", "1000"});
  const std::string big = R"({"prompt": ")" + std::string(5000, 'a') + R"("})";
  EXPECT_EQ(http(server.port(), "POST", "/v1/completions", big).status, 413);
  // Announced with Expect: 100-continue (as curl does for large bodies): refused before the body.
  const int fd = connect_to(server.port(), 10);
  ASSERT_GE(fd, 0);
  send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\nExpect: 100-continue\r\n\r\n");
  HttpResult r;
  parse_response(recv_all(fd), &r, true);
  close(fd);
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(http(server.port(), "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 2})").status, 200);
  EXPECT_EQ(server.stop(), 0);
}

TEST(ServeE2E, FullWaitingQueueIs429WithRetryAfter) {
  ServerProcess server({"--max-waiting", "1", "--max-num-seqs", "1"});
  constexpr int kClients = 24;
  expect_served_or_rate_limited(
      http_concurrently(server.port(), kClients, "POST", "/v1/completions",
                        R"({"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": true})"));
  EXPECT_TRUE(wait_all_blocks_free(server.port()));
  EXPECT_EQ(http(server.port(), "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 2})").status, 200);
  EXPECT_EQ(server.stop(), 0);
}

TEST(ServeE2E, DisconnectMidStreamFreesTheBlocks) {
  ServerProcess server({});
  const std::string aborted = "pagellm:request_success_total{model_name=\"stories260K\",finished_reason=\"abort\"}";
  double aborts = 0;
  for (bool stream : {true, false}) {
    SCOPED_TRACE(stream ? "streaming" : "not streaming");
    const int fd = connect_to(server.port(), 10);
    ASSERT_GE(fd, 0);
    // 8 x 500 tokens take long enough to be cut off (about a second on the bundled model).
    json body = {
        {"prompt", "Once upon a time"}, {"max_tokens", 500}, {"n", 8}, {"ignore_eos", true}, {"stream", stream}};
    ASSERT_TRUE(send_all(fd, request_text("POST", "/v1/completions", body.dump(), {})));
    if (stream) {
      std::string got;
      char buf[4096];
      while (got.find("data: ") == std::string::npos) {
        const ssize_t n = recv(fd, buf, sizeof buf, 0);
        ASSERT_GT(n, 0);
        got.append(buf, static_cast<size_t>(n));
      }
    } else {
      // Wait until the engine runs it (its body is parsed off the I/O threads first; a client
      // that leaves before that is never started at all).
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (read_metrics(server.port())["pagellm:num_requests_running"] == 0 &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    close(fd);  // mid-generation
    EXPECT_TRUE(wait_all_blocks_free(server.port()));
    // The engine frees the blocks, then hands the final "abort" outputs to the server.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (read_metrics(server.port())[aborted] < aborts + 8 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(read_metrics(server.port())[aborted], aborts + 8);
    aborts += 8;
  }
  EXPECT_EQ(http(server.port(), "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 2})").status, 200);
  EXPECT_EQ(server.stop(), 0);
}

// A model whose logits are all NaN: every generation is an HTTP 500 server_error with an
// OpenAI-style body (streaming: an error event, then [DONE]); the blocks come back and the server
// keeps answering (it used to abort in the sampler on the first request).
TEST(ServeE2E, NonFiniteLogitsAre500AndTheServerKeepsServing) {
  ServerProcess server({}, test::write_nan_logits_model(::testing::TempDir() + "/serve_nan_logits.gguf"));
  for (double temperature : {1.0, 0.0}) {
    SCOPED_TRACE(temperature);
    const json req = {{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", temperature}, {"n", 2}};
    const HttpResult r = http(server.port(), "POST", "/v1/completions", req.dump());
    ASSERT_EQ(r.status, 500) << r.body;
    const json e = json::parse(r.body);
    EXPECT_EQ(e["error"]["type"], "server_error");
    EXPECT_NE(e["error"]["message"].get<std::string>().find("not finite"), std::string::npos) << r.body;
  }
  json chat = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}, {"max_tokens", 8}, {"stream", true}};
  const HttpResult s = http(server.port(), "POST", "/v1/chat/completions", chat.dump());
  ASSERT_EQ(s.status, 200) << s.body;  // the stream had started: the error comes as an event
  EXPECT_NE(s.body.find("data: {\"error\""), std::string::npos) << s.body;
  EXPECT_NE(s.body.find("data: [DONE]"), std::string::npos) << s.body;
  EXPECT_TRUE(wait_all_blocks_free(server.port()));
  auto m = read_metrics(server.port());
  // 5 sequences: each request's first failing choice ends it; with n = 2 the other choice fails
  // too, or is aborted if the engine had not sampled it yet (the two are submitted one by one).
  const double errors = m["pagellm:request_success_total{model_name=\"stories260K\",finished_reason=\"error\"}"];
  const double aborts = m["pagellm:request_success_total{model_name=\"stories260K\",finished_reason=\"abort\"}"];
  EXPECT_GE(errors, 3);
  EXPECT_EQ(errors + aborts, 5);
  EXPECT_EQ(http(server.port(), "GET", "/health").status, 200);
  EXPECT_EQ(server.stop(), 0);
}

TEST(ServeE2E, StreamEqualsNonStreamForTheSameSeed) {
  ServerProcess server({});
  for (bool chat : {false, true}) {
    SCOPED_TRACE(chat ? "chat" : "completions");
    json req = {{"max_tokens", 40}, {"temperature", 1.0}, {"seed", 11}, {"n", 2}};
    if (chat)
      req["messages"] = json::array({{{"role", "user"}, {"content", "Tell me a story"}}});
    else
      req["prompt"] = "Lily and Ben";
    const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    const HttpResult whole = http(server.port(), "POST", path, req.dump());
    ASSERT_EQ(whole.status, 200) << whole.body;
    const json w = json::parse(whole.body);
    req["stream"] = true;
    req["stream_options"] = {{"include_usage", true}};
    req["n"] = 1;
    const HttpResult streamed = http(server.port(), "POST", path, req.dump());
    ASSERT_EQ(streamed.status, 200);
    EXPECT_EQ(streamed.headers.at("content-type").rfind("text/event-stream", 0), 0u);
    const Streamed s = collect(streamed.body, chat);
    EXPECT_TRUE(s.done);
    const json& c0 = w["choices"][0];
    EXPECT_EQ(s.text, chat ? c0["message"]["content"] : c0["text"]);
    ASSERT_EQ(s.finish_reasons.size(), 1u);
    EXPECT_EQ(s.finish_reasons[0], c0["finish_reason"]);
    EXPECT_EQ(s.usage["prompt_tokens"], w["usage"]["prompt_tokens"]);
    // n=2 with seed: choice 1 uses seed + 1, so the two choices differ (with near certainty).
    EXPECT_NE(w["choices"][0], w["choices"][1]);
  }
  EXPECT_EQ(server.stop(), 0);
}

TEST(ServeE2E, KeepAliveServesSeveralRequestsOnOneConnection) {
  ServerProcess server({});
  const int fd = connect_to(server.port(), 30);
  ASSERT_GE(fd, 0);
  // Pipelined: three requests sent at once, answered in order.
  std::string reqs =
      request_text("GET", "/v1/models", "", {}, false) +
      request_text("POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 3, "stream": true})", {}, false) +
      request_text("POST", "/tokenize", R"({"prompt": "Once upon a time"})", {}, true);
  ASSERT_TRUE(send_all(fd, reqs));
  const std::string raw = recv_all(fd);
  close(fd);
  HttpResult r;
  size_t used = parse_response(raw, &r, false);
  ASSERT_GT(used, 0u);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["object"], "list");
  std::string rest = raw.substr(used);
  used = parse_response(rest, &r, false);
  ASSERT_GT(used, 0u);
  EXPECT_TRUE(collect(r.body, false).done);
  rest = rest.substr(used);
  ASSERT_GT(parse_response(rest, &r, true), 0u);
  EXPECT_EQ(json::parse(r.body)["count"], 5);
  EXPECT_EQ(server.stop(), 0);
}

TEST(ServeE2E, SigtermDrainsThenAbortsWithAFinalChunk) {
  ServerProcess server({"--max-num-seqs", "1", "--drain-timeout", "0"});
  constexpr int kStreams = 6;
  std::vector<int> fds;
  for (int i = 0; i < kStreams; ++i) {
    const int fd = connect_to(server.port(), 30);
    ASSERT_GE(fd, 0);
    json body = {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
                 {"max_tokens", 400},
                 {"ignore_eos", true},
                 {"stream", true}};
    ASSERT_TRUE(send_all(fd, request_text("POST", "/v1/chat/completions", body.dump(), {})));
    fds.push_back(fd);
  }
  // Each stream has started (the role chunk is out) before the signal.
  std::vector<std::string> raw(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    char buf[4096];
    while (raw[i].find("data: ") == std::string::npos) {
      const ssize_t n = recv(fds[i], buf, sizeof buf, 0);
      ASSERT_GT(n, 0);
      raw[i].append(buf, static_cast<size_t>(n));
    }
  }
  kill(server.pid(), SIGTERM);
  int aborted = 0;
  for (int i = 0; i < kStreams; ++i) {
    raw[i] += recv_all(fds[i]);
    close(fds[i]);
    HttpResult r;
    parse_response(raw[i], &r, true);
    const Streamed s = collect(r.body, true);
    EXPECT_TRUE(s.done) << "stream " << i;
    ASSERT_EQ(s.finish_reasons.size(), 1u);
    if (s.finish_reasons[0] == "abort") ++aborted;
  }
  EXPECT_GE(aborted, 1);
  EXPECT_EQ(server.wait_exit(20), 0);
}

// 1,000 streams open at once are served by a bounded number of threads (no thread per
// connection): main + engine + model workers + I/O threads.
TEST(ServeE2E, ThousandConcurrentStreamsWithBoundedThreads) {
  constexpr int kStreams = 1000;
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_max < kStreams + 64) GTEST_SKIP() << "RLIMIT_NOFILE hard limit " << rl.rlim_max;
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  ServerProcess server({"--max-num-seqs", "64", "--max-waiting", "2000", "--kv-cache-memory", "512blocks"});
  const std::string req = request_text("POST", "/v1/completions",
                                       R"({"prompt": "Once upon a time", "max_tokens": 24, "ignore_eos": true,
                                           "stream": true})",
                                       {});
  std::vector<int> fds;
  for (int i = 0; i < kStreams; ++i) {
    const int fd = connect_to(server.port(), 60);
    ASSERT_GE(fd, 0) << "connection " << i;
    ASSERT_TRUE(send_all(fd, req));
    fds.push_back(fd);
  }
  int threads = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(server.pid()) + "/task")) {
    (void)e;
    ++threads;
  }
  RecordProperty("server_threads", threads);
  EXPECT_LE(threads, 8);  // main, engine, 1 model worker, 2 I/O (+ slack)
  int done = 0;
  for (int fd : fds) {
    HttpResult r;
    parse_response(recv_all(fd), &r, true);
    close(fd);
    if (r.status == 200 && collect(r.body, false).done) ++done;
  }
  EXPECT_EQ(done, kStreams);
  EXPECT_TRUE(wait_all_blocks_free(server.port()));
  EXPECT_EQ(server.stop(), 0);
}

// ---- issue 12: hardening from the hostile-client trial (engine side) ----

nlohmann::json completion_body(const nlohmann::json& extra) {
  json body = {{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0}};
  body.update(extra);
  return body;
}

// --max-n bounds the sequences (prompts x n, x best_of) of one request: more is a 400 naming n.
TEST(ServeE2E, MaxNBoundsTheSequencesOfOneRequest) {
  ServerProcess server({"--max-n", "8"});
  for (const json& extra :
       {json{{"n", 9}}, json{{"n", 2}, {"best_of", 9}}, json{{"n", 3}, {"prompt", json::array({"a", "b", "c"})}}}) {
    SCOPED_TRACE(extra.dump());
    const HttpResult r = http(server.port(), "POST", "/v1/completions", completion_body(extra).dump());
    EXPECT_EQ(r.status, 400) << r.body;
    const json j = json::parse(r.body);
    EXPECT_EQ(j["error"]["param"], extra.contains("best_of") ? "best_of" : "n");  // the field that set the count
    EXPECT_NE(j["error"]["message"].get<std::string>().find("at most 8"), std::string::npos) << r.body;
  }
  const HttpResult ok = http(server.port(), "POST", "/v1/completions", completion_body({{"n", 8}}).dump());
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(json::parse(ok.body)["choices"].size(), 8u);
  EXPECT_EQ(server.stop(), 0);
}

// The waiting queue takes a request's sequences all or none: with --max-waiting 4, n = 5 (or 8)
// is a 429 that leaves nothing behind (no sequence was admitted, so none was aborted; they used
// to enter one by one until the queue was full, then be aborted), while n = 4 runs.
// A random stories15M-shaped model with a 1024-token context: about 8 ms a token on one thread,
// so 400 tokens keep a request running for seconds. Written once per test process.
const std::string& slow_stories15m() {
  static const std::string path = [] {
    std::string p = "/tmp/pagellm-e2e-stories15m-" + std::to_string(getpid()) + ".gguf";
    const std::string cmd = std::string(PAGELLM_BINARY) +
                            " make-model --shape stories15M --dtype q8_0 --seed 1 --context 1024 --vocab " +
                            PAGELLM_TESTDATA_DIR + "/vocab/ggml-vocab-llama-spm.gguf -o " + p + " > /dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("make-model failed: " + cmd);
    std::atexit([] { std::filesystem::remove("/tmp/pagellm-e2e-stories15m-" + std::to_string(getpid()) + ".gguf"); });
    return p;
  }();
  return path;
}

TEST(ServeE2E, WaitingQueueAdmitsAllOfARequestOrNone) {
  ServerProcess server({"--max-n", "8", "--max-waiting", "4", "--max-num-seqs", "1"}, slow_stories15m());
  const auto completion = [&](const json& extra) {
    return http(server.port(), "POST", "/v1/completions", completion_body(extra).dump());
  };
  // More than the whole queue can ever hold: the cap in force is min(--max-n, --max-waiting).
  const HttpResult never = completion({{"n", 5}, {"max_tokens", 1}});
  EXPECT_EQ(never.status, 400) << never.body;
  EXPECT_EQ(json::parse(never.body)["error"]["param"], "n");
  // One long request runs (--max-num-seqs 1); a second one's 3 sequences wait behind it.
  const json slow = {{"max_tokens", 400}, {"ignore_eos", true}};
  std::thread runner([&] { EXPECT_EQ(completion(slow).status, 200); });
  auto wait_for = [&](const char* gauge, double value) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (read_metrics(server.port())[gauge] < value && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };
  wait_for("pagellm:num_requests_running", 1);
  json three = slow;
  three["n"] = 3;
  std::thread waiter([&] { EXPECT_EQ(completion(three).status, 200); });
  wait_for("pagellm:num_requests_waiting", 3);
  // Room for 1 more: a request of 2 sequences gets 429 (none of them enters), one of 1 fits.
  const HttpResult full = completion({{"n", 2}, {"max_tokens", 1}});
  EXPECT_EQ(full.status, 429) << full.body;
  EXPECT_EQ(full.headers.at("retry-after"), "1");
  EXPECT_NE(json::parse(full.body)["error"]["message"].get<std::string>().find("2 sequences"), std::string::npos)
      << full.body;
  EXPECT_EQ(completion({{"n", 1}, {"max_tokens", 1}}).status, 200);
  runner.join();
  waiter.join();
  EXPECT_TRUE(wait_all_blocks_free(server.port()));
  auto m = read_metrics(server.port());
  EXPECT_EQ(m["pagellm:request_success_total{model_name=\"stories260K\",finished_reason=\"abort\"}"], 0);
  EXPECT_EQ(m["pagellm:request_success_total{model_name=\"stories260K\",finished_reason=\"length\"}"], 5);
  EXPECT_EQ(server.stop(), 0);
}

// Text held back for a stop string that never completes comes out when the request ends: as
// the last delta of a stream and in the whole text. logit_bias forces " happy" (id 393), a
// proper prefix of the stop string; max_tokens 1 ends the request right after it.
TEST(ServeE2E, HeldBackStopPrefixIsReturnedAtTheEnd) {
  ServerProcess server({});
  for (const bool chat : {false, true}) {
    for (const bool stream : {false, true}) {
      SCOPED_TRACE(std::string(chat ? "chat" : "completions") + (stream ? " stream" : ""));
      json body = {{"max_tokens", 1},
                   {"temperature", 0},
                   {"logit_bias", {{"393", 100}}},
                   {"stop", json::array({" happy never"})},
                   {"stream", stream}};
      if (chat)
        body["messages"] = json::array({{{"role", "user"}, {"content", "Hi"}}});
      else
        body["prompt"] = "Once upon a time";
      const HttpResult r = http(server.port(), "POST", chat ? "/v1/chat/completions" : "/v1/completions", body.dump());
      ASSERT_EQ(r.status, 200) << r.body;
      if (stream) {
        const Streamed st = collect(r.body, chat);
        EXPECT_EQ(st.text, " happy");
        EXPECT_EQ(st.finish_reasons, std::vector<std::string>{"length"});
      } else {
        const json c = json::parse(r.body)["choices"][0];
        EXPECT_EQ(chat ? c["message"]["content"] : c["text"], " happy") << r.body;
        EXPECT_EQ(c["finish_reason"], "length");
      }
    }
  }
  EXPECT_EQ(server.stop(), 0);
}

// A Hugging Face directory whose generation_config.json says temperature 0: requests that leave
// temperature out are greedy (the same text for any seed, equal to an explicit temperature 0);
// with --generation-config vllm they sample at temperature 1.
TEST(ServeE2E, GenerationConfigSuppliesTheDefaultSampling) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("pagellm-genconfig-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(testdata("tinystories-656k/hf")))
    fs::copy_file(e.path(), dir / e.path().filename());
  fs::permissions(dir / "generation_config.json", fs::perms::owner_write, fs::perm_options::add);
  std::ofstream(dir / "generation_config.json") << R"({"bos_token_id": 1, "eos_token_id": 2, "temperature": 0.0})";
  auto text = [](const ServerProcess& server, const json& extra) {
    json req = {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"ignore_eos", true}};
    req.update(extra);
    const HttpResult r = http(server.port(), "POST", "/v1/completions", req.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return r.status == 200 ? json::parse(r.body)["choices"][0]["text"].get<std::string>() : std::string();
  };
  {
    ServerProcess server({}, dir.string());
    const std::string greedy = text(server, {{"temperature", 0}});
    EXPECT_FALSE(greedy.empty());
    EXPECT_EQ(text(server, {{"seed", 1}}), greedy);
    EXPECT_EQ(text(server, {{"seed", 2}}), greedy);
    EXPECT_EQ(server.stop(), 0);
  }
  {
    ServerProcess server({"--generation-config", "vllm"}, dir.string());
    EXPECT_NE(text(server, {{"seed", 1}}), text(server, {{"seed", 2}}));
    EXPECT_EQ(server.stop(), 0);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pagellm::test

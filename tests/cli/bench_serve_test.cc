// `pagellm bench serve`: the pure parts (statistics, SSE framing, chunk parsing, arrival schedule,
// SVG) on known data, then whole runs against a small fake OpenAI-style SSE server (Beast) that
// streams chunked responses and splits events across writes.
#include "cli/bench_serve.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace pagellm::cli {
namespace {

// ---- statistics ----

TEST(BenchServeStats, PercentileMatchesNumpyLinear) {
  const std::vector<double> v = {10, 1, 9, 2, 8, 3, 7, 4, 6, 5};
  EXPECT_DOUBLE_EQ(percentile(v, 50), 5.5);     // numpy.percentile(range(1, 11), 50)
  EXPECT_NEAR(percentile(v, 99), 9.91, 1e-12);  // 1 + 9 * 0.99
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 10);
  EXPECT_DOUBLE_EQ(percentile({42}, 99), 42);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
  const Summary s = summarize(v);
  EXPECT_DOUBLE_EQ(s.mean, 5.5);
  EXPECT_DOUBLE_EQ(s.median, 5.5);
  EXPECT_NEAR(s.std, std::sqrt(8.25), 1e-12);  // numpy.std (population)
  EXPECT_NEAR(s.p99, 9.91, 1e-12);
}

TEST(BenchServeStats, MetricsFromKnownResults) {
  RequestResult a;  // 4 tokens: chunks at 0.1, 0.2, 0.4, 0.5 s
  a.success = true;
  a.ttft_s = 0.1;
  a.e2el_s = 0.5;
  a.chunk_s = {0.1, 0.2, 0.4, 0.5};
  a.output_tokens = 4;
  a.prompt_tokens = 10;
  RequestResult b;  // 1 token: no TPOT, no ITL
  b.success = true;
  b.ttft_s = 0.3;
  b.e2el_s = 0.3;
  b.chunk_s = {0.3};
  b.output_tokens = 1;
  b.prompt_len_estimate = 7;
  RequestResult c;  // failed
  c.error = "HTTP 500";
  const BenchMetrics m = compute_metrics({a, b, c}, 2.0);
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_output_tokens, 5);
  EXPECT_EQ(m.total_input_tokens, 17);  // usage where sent, the estimate otherwise
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(m.output_throughput, 2.5);
  EXPECT_NEAR(m.ttft_ms.mean, 200, 1e-9);
  EXPECT_NEAR(m.tpot_ms.mean, (500 - 100) / 3.0, 1e-9);
  EXPECT_NEAR(m.itl_ms.mean, 400 / 3.0, 1e-9);  // gaps 100, 200, 100
  EXPECT_NEAR(m.itl_ms.median, 100, 1e-9);
  EXPECT_NEAR(m.e2el_ms.median, 400, 1e-9);
}

// ---- SSE ----

std::vector<std::string> feed_in_pieces(std::string_view stream, size_t piece) {
  SseParser p;
  std::vector<std::string> events;
  for (size_t i = 0; i < stream.size(); i += piece) p.feed(stream.substr(i, piece), &events);
  return events;
}

TEST(BenchServeSse, EventsSurviveAnySplit) {
  const std::string stream =
      ": keep-alive comment\r\n\r\n"
      "data: {\"a\":1}\r\n\r\n"
      "event: message\ndata:{\"b\":2}\n\n"
      "data: line1\ndata: line2\n\n"
      "id: 7\n\n"  // no data: no event
      "data: [DONE]\n\n"
      "data: partial";  // unterminated: not an event yet
  const std::vector<std::string> expected = {"{\"a\":1}", "{\"b\":2}", "line1\nline2", "[DONE]"};
  for (size_t piece : {1u, 2u, 3u, 7u, 1000u}) EXPECT_EQ(feed_in_pieces(stream, piece), expected) << piece;
}

TEST(BenchServeSse, ParsesCompletionChatUsageAndErrorChunks) {
  StreamChunk c = parse_stream_chunk(R"({"choices":[{"index":0,"text":" cat","finish_reason":null}]})");
  EXPECT_EQ(c.text, " cat");
  EXPECT_FALSE(c.completion_tokens);
  c = parse_stream_chunk(R"({"choices":[{"delta":{"content":"dog"}}]})");
  EXPECT_EQ(c.text, "dog");
  c = parse_stream_chunk(R"({"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":16,"total_tokens":21}})");
  EXPECT_EQ(c.text, "");
  EXPECT_EQ(c.completion_tokens, 16);
  EXPECT_EQ(c.prompt_tokens, 5);
  EXPECT_FALSE(c.cached_tokens);
  c = parse_stream_chunk(
      R"({"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":32}}})");
  EXPECT_EQ(c.cached_tokens, 32);
  EXPECT_EQ(c.prompt_tokens, 40);
  c = parse_stream_chunk(R"({"choices":[],"usage":{"prompt_tokens":4,"prompt_tokens_details":null}})");
  EXPECT_FALSE(c.cached_tokens);
  c = parse_stream_chunk(R"({"error":{"message":"boom","type":"server_error"}})");
  EXPECT_EQ(c.error, "boom");
  EXPECT_THROW(parse_stream_chunk("not json"), Error);
}

// ---- arrivals and prompts ----

TEST(BenchServeSchedule, PoissonIsSeededAndHasTheRate) {
  const std::vector<double> a = poisson_arrivals(20000, 4.0, 7);
  EXPECT_EQ(a, poisson_arrivals(20000, 4.0, 7));
  EXPECT_NE(a, poisson_arrivals(20000, 4.0, 8));
  EXPECT_EQ(a[0], 0.0);
  for (size_t i = 1; i < a.size(); ++i) ASSERT_GE(a[i], a[i - 1]);
  EXPECT_NEAR(a.back() / 19999.0, 0.25, 0.25 * 0.03);  // mean gap 1 / rate
  EXPECT_EQ(poisson_arrivals(3, INFINITY, 1), std::vector<double>(3, 0.0));
  EXPECT_THROW(poisson_arrivals(3, 0, 1), Error);
  EXPECT_THROW(poisson_arrivals(3, -1, 1), Error);
}

TEST(BenchServePrompts, RandomWordsAndDataset) {
  const std::string p = random_words_prompt(50, 3);
  EXPECT_EQ(p, random_words_prompt(50, 3));
  EXPECT_NE(p, random_words_prompt(50, 4));
  EXPECT_EQ(std::count(p.begin(), p.end(), ' '), 49);

  const std::string path = testing::TempDir() + "bench_serve_dataset.jsonl";
  {
    std::ofstream out(path);
    out << "{\"prompt\": \"Once upon a time\"}\n\nplain text line\r\n{\"prompt\": \"x\\ny\"}\n";
  }
  BenchServeConfig cfg;
  cfg.dataset = path;
  cfg.num_prompts = 5;
  EXPECT_EQ(make_prompts(cfg), (std::vector<std::string>{"Once upon a time", "plain text line", "x\ny",
                                                         "Once upon a time", "plain text line"}));
  cfg.dataset = path + ".missing";
  EXPECT_THROW(make_prompts(cfg), Error);
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> w;
  std::istringstream in(s);
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

TEST(BenchServePrompts, SharedPrefixIsCommonAndSuffixesAreUnique) {
  BenchServeConfig cfg;
  cfg.dataset_name = "shared-prefix";
  cfg.num_prompts = 6;
  cfg.prefix_len = 40;
  cfg.seed = 9;
  EXPECT_EQ(effective_input_len(cfg), 100);  // the shared-prefix default
  cfg.input_len = 12;
  const std::vector<std::string> p = make_prompts(cfg);
  ASSERT_EQ(p.size(), 6u);
  const std::string prefix = shared_prefix(cfg);
  EXPECT_EQ(split_words(prefix).size(), 40u);
  std::set<std::string> suffixes;
  for (const std::string& x : p) {
    ASSERT_EQ(x.rfind(prefix + " ", 0), 0u) << x;
    const std::string suffix = x.substr(prefix.size() + 1);
    EXPECT_EQ(split_words(suffix).size(), 12u);
    suffixes.insert(suffix);
  }
  EXPECT_EQ(suffixes.size(), 6u);
  EXPECT_EQ(make_prompts(cfg), p);  // seeded
  cfg.seed = 10;
  EXPECT_NE(shared_prefix(cfg), prefix);
  // The random workload's prompts are the suffixes alone.
  BenchServeConfig r = cfg;
  r.seed = 9;
  r.dataset_name = "random";
  EXPECT_EQ(make_prompts(r)[0], p[0].substr(prefix.size() + 1));
  r.input_len = 0;
  EXPECT_EQ(effective_input_len(r), 128);
}

TEST(BenchServePrompts, MultiTurnPromptsExtendTheHistory) {
  const std::string t0 = multi_turn_prompt("", "hello there");
  EXPECT_EQ(t0, "User: hello there\nAssistant:");
  const std::string t1 = multi_turn_prompt(t0 + " hi", "and then");
  EXPECT_EQ(t1, "User: hello there\nAssistant: hi\nUser: and then\nAssistant:");
  EXPECT_EQ(t1.rfind(t0, 0), 0u);
  BenchServeConfig cfg;
  cfg.dataset_name = "multi-turn";
  cfg.num_prompts = 5;
  cfg.input_len = 3;
  const std::vector<std::string> u = make_prompts(cfg);  // user texts, one per request
  ASSERT_EQ(u.size(), 5u);
  for (const std::string& x : u) EXPECT_EQ(split_words(x).size(), 3u);
  EXPECT_NE(u[0], u[1]);
  EXPECT_EQ(request_cache_salt(3, 17), "bench-3-17");
  EXPECT_NE(request_cache_salt(3, 17), request_cache_salt(3, 18));
}

TEST(BenchServePrompts, BadWorkloadSettings) {
  BenchServeConfig cfg;
  cfg.dataset_name = "nope";
  EXPECT_THROW(make_prompts(cfg), Error);
  cfg.dataset_name = "shared-prefix";
  cfg.prefix_len = 0;
  EXPECT_THROW(make_prompts(cfg), Error);
  cfg.dataset_name = "multi-turn";
  cfg.num_turns = 0;
  EXPECT_THROW(make_prompts(cfg), Error);
  cfg.num_turns = 2;
  cfg.dataset = "/dev/null";
  EXPECT_THROW(make_prompts(cfg), Error);  // --dataset is single-turn
  cfg.dataset.clear();
  cfg.input_len = -1;
  EXPECT_THROW(make_prompts(cfg), Error);
}

TEST(BenchServeStats, MeanCachedTokensOverRequestsThatReportIt) {
  RequestResult a, b, c;
  for (RequestResult* r : {&a, &b, &c}) {
    r->success = true;
    r->chunk_s = {0.1};
    r->ttft_s = r->e2el_s = 0.1;
    r->output_tokens = 1;
  }
  a.cached_tokens = 10;
  b.cached_tokens = 0;
  EXPECT_EQ(compute_metrics({c}, 1.0).requests_with_cached_tokens, 0);
  const BenchMetrics m = compute_metrics({a, b, c}, 1.0);
  EXPECT_EQ(m.requests_with_cached_tokens, 2);
  EXPECT_EQ(m.total_cached_tokens, 10);
  EXPECT_DOUBLE_EQ(m.mean_cached_tokens, 5.0);
}

// ---- SVG ----

// Every tag closed in order (a small XML well-formedness check: no attributes with '>' inside).
bool tags_balanced(const std::string& svg, std::string* why) {
  std::vector<std::string> stack;
  size_t i = 0;
  while ((i = svg.find('<', i)) != std::string::npos) {
    const size_t end = svg.find('>', i);
    if (end == std::string::npos) return *why = "unterminated tag", false;
    const std::string tag = svg.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty() || tag[0] == '?' || tag[0] == '!' || tag.back() == '/') continue;
    const size_t sp = tag.find_first_of(" \n");
    if (tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1)) return *why = "unexpected </" + tag.substr(1) + ">", false;
      stack.pop_back();
    } else {
      stack.push_back(tag.substr(0, sp));
    }
  }
  if (!stack.empty()) return *why = "unclosed <" + stack.back() + ">", false;
  return true;
}

TEST(BenchServePlot, SvgIsWellFormed) {
  BenchRun run;
  run.duration_s = 2;
  for (int i = 0; i < 20; ++i) {
    RequestResult r;
    r.success = true;
    r.start_s = 0.05 * i;
    r.chunk_s = {0.1 + 0.01 * i, 0.15 + 0.01 * i, 0.3 + 0.01 * i};
    r.ttft_s = r.chunk_s[0];
    r.e2el_s = r.chunk_s.back();
    r.output_tokens = 3;
    run.results.push_back(r);
  }
  std::string why;
  const std::string svg = plot_svg(run);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_TRUE(tags_balanced(svg, &why)) << why;
  for (const char* title : {"Time to first token", "Inter-token latency", "End-to-end latency", "<polyline"}) {
    EXPECT_NE(svg.find(title), std::string::npos) << title;
  }
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
  // No successful request: still a valid picture.
  const std::string empty = plot_svg(BenchRun{});
  EXPECT_TRUE(tags_balanced(empty, &why)) << why;
  EXPECT_EQ(empty.find("nan"), std::string::npos);
}

// ---- a fake OpenAI-compatible streaming server ----

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

class FakeServer {
 public:
  struct Options {
    bool send_usage = true;
    int status = 200;
    std::chrono::milliseconds token_gap{2};
    int cached_tokens = -1;   // >= 0: usage.prompt_tokens_details.cached_tokens
    int max_model_len = 0;    // > 0: in the model card of GET /v1/models
    int tokens_per_word = 0;  // > 0: POST /tokenize answers {"count": words x this}
  };
  explicit FakeServer(Options o) : opt_(o), acceptor_(io_, {net::ip::make_address("127.0.0.1"), 0}) {
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { accept_loop(); });
  }
  ~FakeServer() {
    stop_ = true;
    try {  // wake the blocking accept
      net::io_context io;
      tcp::socket s(io);
      s.connect({net::ip::make_address("127.0.0.1"), port_});
    } catch (const std::exception&) {
    }
    thread_.join();
    for (std::thread& t : workers_) t.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<nlohmann::json> bodies() {
    std::lock_guard<std::mutex> l(mu_);
    return bodies_;
  }
  int max_in_flight() const { return max_in_flight_; }
  std::vector<std::string> tokenized() {
    std::lock_guard<std::mutex> l(mu_);
    return tokenized_;
  }

 private:
  void accept_loop() {
    while (true) {
      tcp::socket s(io_);
      acceptor_.accept(s);
      if (stop_) return;
      workers_.emplace_back([this, sock = std::move(s)]() mutable { serve(std::move(sock)); });
    }
  }

  static void write_chunk(tcp::socket& s, std::string_view data) {
    char head[32];
    std::snprintf(head, sizeof head, "%zx\r\n", data.size());
    net::write(s, net::buffer(std::string(head) + std::string(data) + "\r\n"));
  }

  void serve(tcp::socket s) {
    try {
      beast::flat_buffer buf;
      http::request<http::string_body> req;
      http::read(s, buf, req);
      if (req.method() == http::verb::get && req.target() == "/v1/models") {
        http::response<http::string_body> res{http::status::ok, 11};
        res.set(http::field::content_type, "application/json");
        nlohmann::json card = {{"id", "fake-model"}, {"object", "model"}};
        if (opt_.max_model_len > 0) card["max_model_len"] = opt_.max_model_len;
        res.body() = nlohmann::json{{"object", "list"}, {"data", {card}}}.dump();
        res.prepare_payload();
        http::write(s, res);
        return;
      }
      if (req.method() == http::verb::post && req.target() == "/tokenize" && opt_.tokens_per_word > 0) {
        const std::string prompt = nlohmann::json::parse(req.body()).at("prompt").get<std::string>();
        {
          std::lock_guard<std::mutex> l(mu_);
          tokenized_.push_back(prompt);
        }
        int words = 0;
        for (size_t i = 0; i < prompt.size(); ++i) words += prompt[i] != ' ' && (i == 0 || prompt[i - 1] == ' ');
        http::response<http::string_body> res{http::status::ok, 11};
        res.set(http::field::content_type, "application/json");
        res.body() = nlohmann::json{{"count", words * opt_.tokens_per_word}}.dump();
        res.prepare_payload();
        http::write(s, res);
        return;
      }
      const nlohmann::json body = nlohmann::json::parse(req.body());
      {
        std::lock_guard<std::mutex> l(mu_);
        bodies_.push_back(body);
      }
      if (opt_.status != 200) {
        http::response<http::string_body> res{static_cast<http::status>(opt_.status), 11};
        res.body() = R"({"error":{"message":"nope","type":"invalid_request_error","param":null,"code":null}})";
        res.prepare_payload();
        http::write(s, res);
        return;
      }
      const int now = ++in_flight_;
      for (int m = max_in_flight_; now > m && !max_in_flight_.compare_exchange_weak(m, now);) {
      }
      net::write(s, net::buffer(std::string("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")));
      const int n = body.at("max_tokens").get<int>();
      for (int k = 0; k < n; ++k) {
        std::this_thread::sleep_for(opt_.token_gap);
        const std::string ev = "data: {\"choices\":[{\"index\":0,\"text\":\" w" + std::to_string(k) + "\"}]}\n\n";
        write_chunk(s, ev.substr(0, ev.size() / 2));  // one event over two writes
        write_chunk(s, ev.substr(ev.size() / 2));
      }
      write_chunk(s, "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}]}\n\n");
      if (opt_.send_usage) {
        const std::string details =
            opt_.cached_tokens >= 0
                ? ",\"prompt_tokens_details\":{\"cached_tokens\":" + std::to_string(opt_.cached_tokens) + "}"
                : "";
        write_chunk(s, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":" +
                           std::to_string(n) + details + "}}\n\n");
      }
      // Leave the in-flight count before the client can see the end of the stream: it may open
      // its next request as soon as it reads [DONE].
      --in_flight_;
      write_chunk(s, "data: [DONE]\n\n");
      write_chunk(s, "");  // last chunk "0\r\n\r\n"
    } catch (const std::exception&) {
    }
  }

  Options opt_;
  net::io_context io_;
  tcp::acceptor acceptor_;
  unsigned short port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::thread> workers_;  // touched by the accept thread only
  std::mutex mu_;
  std::vector<nlohmann::json> bodies_;
  std::vector<std::string> tokenized_;
  std::atomic<int> in_flight_{0}, max_in_flight_{0};
};

TEST(BenchServeRun, FixedConcurrencyAgainstFakeServer) {
  FakeServer server({});
  BenchServeConfig cfg;
  cfg.base_url = server.url() + "/v1";
  cfg.num_prompts = 8;
  cfg.max_concurrency = 2;
  cfg.input_len = 5;
  cfg.output_len = 6;
  cfg.progress = false;
  const BenchRun run = run_bench_serve(cfg);
  EXPECT_EQ(run.model, "fake-model");
  EXPECT_EQ(run.metrics.completed, 8);
  EXPECT_EQ(run.metrics.failed, 0);
  EXPECT_EQ(run.metrics.total_output_tokens, 48);
  EXPECT_EQ(run.metrics.total_input_tokens, 88);  // usage.prompt_tokens 11 each
  EXPECT_LE(server.max_in_flight(), 2);
  for (const RequestResult& r : run.results) {
    EXPECT_TRUE(r.success) << r.error;
    EXPECT_EQ(r.chunk_s.size(), 6u);
    EXPECT_GT(r.ttft_s, 0);
    EXPECT_GE(r.e2el_s, r.chunk_s.back());
  }
  EXPECT_GT(run.metrics.itl_ms.mean, 1.0);  // 2 ms between tokens
  EXPECT_GT(run.metrics.output_throughput, 0);
  const std::vector<nlohmann::json> bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 8u);
  EXPECT_EQ(bodies[0]["model"], "fake-model");
  EXPECT_EQ(bodies[0]["stream"], true);
  EXPECT_EQ(bodies[0]["max_tokens"], 6);
  EXPECT_EQ(bodies[0]["ignore_eos"], true);
  EXPECT_EQ(bodies[0]["temperature"], 0);
  EXPECT_EQ(bodies[0]["stream_options"]["include_usage"], true);

  const nlohmann::json j = nlohmann::json::parse(metrics_json(cfg, run));
  for (const char* k : {"request_throughput", "output_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
                        "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
                        "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms"}) {
    EXPECT_TRUE(j.contains(k) && j[k].is_number()) << k;
  }
}

TEST(BenchServeRun, PoissonRateWithoutUsageCountsChunks) {
  FakeServer server({.send_usage = false});
  BenchServeConfig cfg;
  cfg.base_url = server.url();
  cfg.model = "given";
  cfg.num_prompts = 6;
  cfg.request_rate = 200;
  cfg.output_len = 3;
  cfg.input_len = 4;
  cfg.progress = false;
  const BenchRun run = run_bench_serve(cfg);
  EXPECT_EQ(run.model, "given");
  EXPECT_EQ(run.metrics.completed, 6);
  EXPECT_EQ(run.metrics.total_output_tokens, 18);
  EXPECT_EQ(run.metrics.total_input_tokens, 24);  // the estimate: input_len each
}

TEST(BenchServeRun, MultiTurnConversationsCarryTheirAnswers) {
  FakeServer server({.cached_tokens = 8});
  BenchServeConfig cfg;
  cfg.base_url = server.url();
  cfg.model = "m";
  cfg.dataset_name = "multi-turn";
  cfg.num_turns = 3;
  cfg.num_prompts = 7;  // conversations of 3, 3 and 1 turns
  cfg.max_concurrency = 2;
  cfg.input_len = 2;
  cfg.output_len = 3;
  cfg.cache_salt_per_request = true;
  cfg.progress = false;
  const BenchRun run = run_bench_serve(cfg);
  EXPECT_EQ(run.metrics.completed, 7);
  EXPECT_EQ(run.metrics.requests_with_cached_tokens, 7);
  EXPECT_DOUBLE_EQ(run.metrics.mean_cached_tokens, 8.0);
  EXPECT_LE(server.max_in_flight(), 2);
  const std::vector<std::string> user = make_prompts(cfg);
  std::set<std::string> prompts, salts;
  for (const nlohmann::json& b : server.bodies()) {
    prompts.insert(b["prompt"].get<std::string>());
    salts.insert(b["cache_salt"].get<std::string>());
  }
  EXPECT_EQ(salts.size(), 7u);
  // The fake server answers " w0 w1 w2" to every request.
  for (int c = 0; c < 3; ++c) {
    std::string history;
    for (int t = 0; t < 3 && c * 3 + t < 7; ++t) {
      const auto i = static_cast<size_t>(c) * 3 + static_cast<size_t>(t);
      const std::string p = multi_turn_prompt(history, user[i]);
      EXPECT_TRUE(prompts.count(p)) << "conversation " << c << " turn " << t << ": " << p;
      EXPECT_EQ(run.results[i].text, " w0 w1 w2");
      history = p + " w0 w1 w2";
    }
  }
  const nlohmann::json j = nlohmann::json::parse(metrics_json(cfg, run));
  EXPECT_EQ(j["dataset_name"], "multi-turn");
  EXPECT_EQ(j["num_turns"], 3);
  EXPECT_DOUBLE_EQ(j["mean_cached_tokens"].get<double>(), 8.0);
}

TEST(BenchServeRun, SharedPrefixWithoutCachedTokens) {
  FakeServer server({});
  BenchServeConfig cfg;
  cfg.base_url = server.url();
  cfg.model = "m";
  cfg.dataset_name = "shared-prefix";
  cfg.prefix_len = 20;
  cfg.input_len = 5;
  cfg.num_prompts = 4;
  cfg.output_len = 2;
  cfg.progress = false;
  const BenchRun run = run_bench_serve(cfg);
  EXPECT_EQ(run.metrics.completed, 4);
  EXPECT_EQ(run.metrics.requests_with_cached_tokens, 0);
  for (const nlohmann::json& b : server.bodies()) {
    EXPECT_EQ(b["prompt"].get<std::string>().rfind(shared_prefix(cfg) + " ", 0), 0u);
    EXPECT_FALSE(b.contains("cache_salt"));
  }
  const nlohmann::json j = nlohmann::json::parse(metrics_json(cfg, run));
  EXPECT_TRUE(j["mean_cached_tokens"].is_null());
  EXPECT_EQ(j["prefix_len"], 20);
  EXPECT_NE(metrics_table(cfg, run).find("shared-prefix"), std::string::npos);
}

// Prompts that cannot fit the served model's context (max_model_len of GET /v1/models) fail at
// start with the flags to lower, before any request is sent: the shared-prefix default (1,000
// words of prefix) against a 512-token model used to send requests that all failed.
TEST(BenchServeRun, PromptsBeyondTheContextFailAtStart) {
  FakeServer server({.max_model_len = 512, .tokens_per_word = 2});
  BenchServeConfig cfg;
  cfg.base_url = server.url();
  cfg.dataset_name = "shared-prefix";
  cfg.num_prompts = 4;
  cfg.output_len = 8;
  cfg.progress = false;
  try {
    run_bench_serve(cfg);
    FAIL() << "1,100 words of prompt fit 512 tokens";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("2200 tokens (--prefix-len 1000 + --input-len 100 words)"), std::string::npos) << m;
    EXPECT_NE(m.find("max_model_len 512"), std::string::npos) << m;
    EXPECT_NE(m.find("lower --prefix-len"), std::string::npos) << m;
  }
  EXPECT_TRUE(server.bodies().empty());
  EXPECT_EQ(server.tokenized().size(), 1u);  // the longest prompt, counted by the server
  // Counted in tokens, not words: 200 words fit 512 tokens, but not at 3 tokens a word.
  cfg.prefix_len = 150;
  cfg.input_len = 50;
  EXPECT_NO_THROW(run_bench_serve(cfg));  // 400 + 8 <= 512
  EXPECT_EQ(server.bodies().size(), 4u);
  FakeServer dense({.max_model_len = 512, .tokens_per_word = 3});
  cfg.base_url = dense.url();
  EXPECT_THROW(run_bench_serve(cfg), Error);
  EXPECT_TRUE(dense.bodies().empty());
  // Without /tokenize, the words are the estimate; --model picks the card by id.
  FakeServer no_tokenize({.max_model_len = 100});
  cfg.base_url = no_tokenize.url();
  cfg.model = "fake-model";
  EXPECT_THROW(run_bench_serve(cfg), Error);
  cfg.prefix_len = 50;
  cfg.input_len = 10;
  EXPECT_EQ(run_bench_serve(cfg).metrics.completed, 4);
  // Random prompts too.
  BenchServeConfig random = cfg;
  random.dataset_name = "random";
  random.input_len = 200;
  EXPECT_THROW(run_bench_serve(random), Error);
}

TEST(BenchServeRun, HttpErrorsAreCountedNotThrown) {
  FakeServer server({.status = 400});
  BenchServeConfig cfg;
  cfg.base_url = server.url();
  cfg.model = "m";
  cfg.num_prompts = 3;
  cfg.output_len = 2;
  cfg.progress = false;
  const BenchRun run = run_bench_serve(cfg);
  EXPECT_EQ(run.metrics.completed, 0);
  EXPECT_EQ(run.metrics.failed, 3);
  EXPECT_NE(run.results[0].error.find("HTTP 400"), std::string::npos) << run.results[0].error;
  EXPECT_NE(run.results[0].error.find("nope"), std::string::npos) << run.results[0].error;
}

TEST(BenchServeRun, BadBaseUrl) {
  BenchServeConfig cfg;
  cfg.base_url = "https://example.com";
  cfg.progress = false;
  EXPECT_THROW(run_bench_serve(cfg), Error);
}

TEST(BenchServeCli, JsonAndPlotFromTheBinary) {
  FakeServer server({});
  const std::string svg = testing::TempDir() + "bench_serve_plot.svg";
  const std::string out = testing::TempDir() + "bench_serve_out.json";
  std::filesystem::remove(svg);
  const std::string cmd = std::string(PAGELLM_BINARY) + " bench serve --base-url " + server.url() +
                          " --num-prompts 5 --request-rate inf --input-len 4 --output-len 4 --json --plot " + svg +
                          " > " + out + " 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(out);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["completed"], 5);
  EXPECT_EQ(j["total_output_tokens"], 20);
  EXPECT_GT(j["output_throughput"].get<double>(), 0);
  std::ifstream s(svg);
  const std::string text((std::istreambuf_iterator<char>(s)), std::istreambuf_iterator<char>());
  std::string why;
  EXPECT_TRUE(tags_balanced(text, &why)) << why;
}

}  // namespace
}  // namespace pagellm::cli

// The HTTP side of `pagellm bench serve` (see bench_serve.h): Boost.Beast over plain TCP, one
// blocking connection per request, each request on its own thread, started at its arrival time
// and held back while max_concurrency requests are in flight. Meant for runs of up to a few
// thousand requests. http:// only (no TLS).
#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/bench_serve.h"
#include "core/error.h"

namespace pagellm::cli {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Url {
  std::string host, port, prefix;  // prefix: "" or "/path" (no trailing '/')
};

// http://host[:port][/prefix]; a trailing "/v1" is dropped (both ".../v1" and "..." are accepted).
Url parse_base_url(const std::string& s) {
  constexpr std::string_view kScheme = "http://";
  if (s.rfind(kScheme, 0) != 0) throw Error("--base-url must start with http:// (no TLS), got '" + s + "'");
  std::string rest = s.substr(kScheme.size());
  Url u;
  const size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  u.prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!u.prefix.empty() && u.prefix.back() == '/') u.prefix.pop_back();
  if (u.prefix.size() >= 3 && u.prefix.compare(u.prefix.size() - 3, 3, "/v1") == 0)
    u.prefix.resize(u.prefix.size() - 3);
  const size_t colon = hostport.rfind(':');
  if (colon != std::string::npos && hostport.find(']', colon) == std::string::npos) {
    u.host = hostport.substr(0, colon);
    u.port = hostport.substr(colon + 1);
  } else {
    u.host = hostport;
    u.port = "80";
  }
  if (u.host.size() > 2 && u.host.front() == '[' && u.host.back() == ']') u.host = u.host.substr(1, u.host.size() - 2);
  if (u.host.empty() || u.port.empty()) throw Error("--base-url has no host or port: '" + s + "'");
  return u;
}

tcp::socket connect(net::io_context& io, const Url& u) {
  tcp::resolver resolver(io);
  tcp::socket sock(io);
  net::connect(sock, resolver.resolve(u.host, u.port));
  sock.set_option(tcp::no_delay(true));
  return sock;
}

http::request<http::string_body> make_request(http::verb verb, const Url& u, const std::string& path,
                                              const std::string& api_key, std::string body) {
  http::request<http::string_body> req{verb, u.prefix + path, 11};
  req.set(http::field::host, u.host + ":" + u.port);
  req.set(http::field::user_agent, "pagellm-bench-serve");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  if (verb == http::verb::post) {
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, "text/event-stream");
    req.body() = std::move(body);
    req.prepare_payload();
  }
  return req;
}

// The served model: `model` if given, else the first of GET /v1/models, with its max_model_len
// (vLLM's and pagellm's model card field; 0 when the server does not say). Without --model the
// list must answer; with it, a failing list only leaves max_model_len unknown.
struct ServedModel {
  std::string id;
  int64_t max_model_len = 0;
};

ServedModel served_model(const Url& u, const std::string& api_key, const std::string& model);

ServedModel served_model_or_unknown(const Url& u, const std::string& api_key, const std::string& model) {
  if (model.empty()) return served_model(u, api_key, model);
  try {
    return served_model(u, api_key, model);
  } catch (const std::exception&) {
    return ServedModel{model, 0};  // the requests will say what is wrong
  }
}

ServedModel served_model(const Url& u, const std::string& api_key, const std::string& model) {
  net::io_context io;
  tcp::socket sock = connect(io, u);
  http::write(sock, make_request(http::verb::get, u, "/v1/models", api_key, ""));
  beast::flat_buffer fb;
  http::response<http::string_body> res;
  http::read(sock, fb, res);
  ServedModel m{model, 0};
  if (res.result() != http::status::ok) {
    if (!model.empty()) return m;
    throw Error("GET /v1/models: HTTP " + std::to_string(res.result_int()) + ": " + res.body().substr(0, 300));
  }
  const nlohmann::json j = nlohmann::json::parse(res.body(), nullptr, false);
  const bool listed = j.is_object() && j.contains("data") && j["data"].is_array();
  const nlohmann::json* card = nullptr;
  if (listed) {
    for (const nlohmann::json& c : j["data"]) {
      if (!c.is_object() || !c.contains("id") || !c["id"].is_string()) continue;
      if (model.empty() || c["id"].get<std::string>() == model) {
        card = &c;
        break;
      }
    }
  }
  if (card == nullptr) {
    if (!model.empty()) return m;
    throw Error("GET /v1/models: no data[0].id in " + res.body().substr(0, 300) + " (pass --model)");
  }
  m.id = (*card)["id"].get<std::string>();
  if (card->contains("max_model_len") && (*card)["max_model_len"].is_number_integer()) {
    m.max_model_len = (*card)["max_model_len"].get<int64_t>();
  }
  return m;
}

// Tokens of `prompt` from the server's POST /tokenize (vLLM's and pagellm's), or -1 when it has
// none or refuses.
int64_t server_token_count(const Url& u, const std::string& api_key, const std::string& model,
                           const std::string& prompt) {
  try {
    net::io_context io;
    tcp::socket sock = connect(io, u);
    const nlohmann::json body = {{"model", model}, {"prompt", prompt}};
    http::write(sock, make_request(http::verb::post, u, "/tokenize", api_key, body.dump()));
    beast::flat_buffer fb;
    http::response<http::string_body> res;
    http::read(sock, fb, res);
    if (res.result() != http::status::ok) return -1;
    const nlohmann::json j = nlohmann::json::parse(res.body(), nullptr, false);
    if (j.is_object() && j.contains("count") && j["count"].is_number_integer()) return j["count"].get<int64_t>();
    if (j.is_object() && j.contains("tokens") && j["tokens"].is_array())
      return static_cast<int64_t>(j["tokens"].size());
  } catch (const std::exception&) {
  }
  return -1;
}

std::string request_body(const BenchServeConfig& cfg, const std::string& model, const std::string& prompt,
                         int64_t request_index) {
  nlohmann::json j = {{"model", model},   {"prompt", prompt}, {"max_tokens", cfg.output_len},
                      {"temperature", 0}, {"stream", true},   {"stream_options", {{"include_usage", true}}}};
  if (cfg.ignore_eos) j["ignore_eos"] = true;
  if (cfg.cache_salt_per_request) j["cache_salt"] = request_cache_salt(cfg.seed, request_index);
  // Random-weight models emit arbitrary bytes; keep invalid UTF-8 from stopping the run.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Reads the SSE stream of one response; fills r's times (relative to t0) and token counts.
void read_stream(tcp::socket& sock, beast::flat_buffer& fb, http::response_parser<http::buffer_body>& p,
                 Clock::time_point t0, RequestResult* r) {
  SseParser sse;
  std::vector<std::string> events;
  std::optional<int64_t> usage_tokens;
  char buf[16384];
  bool done = false;
  while (!done && !p.is_done()) {
    p.get().body().data = buf;
    p.get().body().size = sizeof buf;
    beast::error_code ec;
    http::read_some(sock, fb, p, ec);
    if (ec == http::error::need_buffer) ec = {};
    const bool eof = ec == http::error::end_of_stream || ec == net::error::eof;
    if (ec && !eof) throw beast::system_error(ec);
    const Clock::time_point now = Clock::now();
    sse.feed(std::string_view(buf, sizeof buf - p.get().body().size), &events);
    for (const std::string& e : events) {
      if (e == "[DONE]") {
        done = true;
        break;
      }
      const StreamChunk c = parse_stream_chunk(e);
      if (c.error) throw Error("error in stream: " + *c.error);
      if (!c.text.empty()) {
        r->chunk_s.push_back(seconds(now - t0));
        r->text += c.text;
      }
      if (c.completion_tokens) usage_tokens = c.completion_tokens;
      if (c.prompt_tokens) r->prompt_tokens = *c.prompt_tokens;
      if (c.cached_tokens) r->cached_tokens = *c.cached_tokens;
    }
    events.clear();
    if (eof) break;
  }
  r->e2el_s = seconds(Clock::now() - t0);
  r->output_tokens = usage_tokens.value_or(static_cast<int64_t>(r->chunk_s.size()));
}

RequestResult run_one(const Url& u, const std::string& api_key, const std::string& body, Clock::time_point start) {
  RequestResult r;
  const Clock::time_point t0 = Clock::now();
  r.start_s = seconds(t0 - start);
  try {
    net::io_context io;
    tcp::socket sock = connect(io, u);
    http::write(sock, make_request(http::verb::post, u, "/v1/completions", api_key, body));
    beast::flat_buffer fb;
    http::response_parser<http::buffer_body> p;
    p.body_limit(std::numeric_limits<std::uint64_t>::max());
    http::read_header(sock, fb, p);
    if (p.get().result() != http::status::ok) {
      std::string text;
      char buf[4096];
      beast::error_code ec;
      while (!p.is_done() && !ec && text.size() < 2000) {
        p.get().body().data = buf;
        p.get().body().size = sizeof buf;
        http::read_some(sock, fb, p, ec);
        if (ec == http::error::need_buffer) ec = {};
        text.append(buf, sizeof buf - p.get().body().size);
      }
      r.error = "HTTP " + std::to_string(p.get().result_int()) + ": " + text.substr(0, 300);
      return r;
    }
    read_stream(sock, fb, p, t0, &r);
    if (r.chunk_s.empty()) {
      r.error = "the stream ended without text";
      return r;
    }
    r.ttft_s = r.chunk_s.front();
    r.success = true;
  } catch (const std::exception& e) {
    r.error = e.what();
    r.e2el_s = seconds(Clock::now() - t0);
  }
  return r;
}

// Whitespace-separated words: the input-token estimate for dataset prompts without usage.
int64_t count_words(std::string_view s) {
  int64_t n = 0;
  bool in_word = false;
  for (char c : s) {
    const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    n += !space && !in_word;
    in_word = !space;
  }
  return n;
}

// "\r[=========>          ]  45/100  (1 failed)  3.2 s" on stderr.
void draw_progress(int64_t done, int64_t failed, int64_t total, double elapsed_s) {
  constexpr int kWidth = 30;
  const int fill = total > 0 ? static_cast<int>(kWidth * done / total) : kWidth;
  std::string bar(kWidth, ' ');
  for (int i = 0; i < fill; ++i) bar[i] = '=';
  if (fill < kWidth) bar[fill] = '>';
  std::fprintf(stderr, "\r[%s] %lld/%lld", bar.c_str(), static_cast<long long>(done), static_cast<long long>(total));
  if (failed > 0) std::fprintf(stderr, "  (%lld failed)", static_cast<long long>(failed));
  std::fprintf(stderr, "  %.1f s", elapsed_s);
  if (done == total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

}  // namespace

BenchRun run_bench_serve(const BenchServeConfig& cfg) {
  if (cfg.num_prompts < 1) throw Error("--num-prompts must be >= 1, got " + std::to_string(cfg.num_prompts));
  if (cfg.output_len < 1) throw Error("--output-len must be >= 1, got " + std::to_string(cfg.output_len));
  validate_workload(cfg);
  const Url url = parse_base_url(cfg.base_url);
  BenchRun run;
  const ServedModel served = served_model_or_unknown(url, cfg.api_key, cfg.model);
  run.model = served.id;
  // texts[i]: the prompt of request i, or for multi-turn the user text of its turn.
  const std::vector<std::string> texts = make_prompts(cfg);
  const bool multi_turn = cfg.dataset.empty() && cfg.dataset_name == "multi-turn";
  if (served.max_model_len > 0) {
    // Every request would fail if its prompt + output_len exceed the context: say so now. The
    // longest prompt (the first turn for multi-turn) is counted by the server's /tokenize, else
    // estimated in words.
    const auto longest = std::max_element(
        texts.begin(), texts.end(), [](const std::string& a, const std::string& b) { return a.size() < b.size(); });
    const std::string prompt = multi_turn ? multi_turn_prompt("", *longest) : *longest;
    int64_t tokens = server_token_count(url, cfg.api_key, run.model, prompt);
    if (tokens < 0) tokens = count_words(prompt);
    check_fits_context(cfg, tokens, served.max_model_len);
  }
  // A conversation is `turns` consecutive requests run one after another; single-turn workloads
  // have conversations of one request. Arrivals and max_concurrency apply to conversations.
  const int64_t turns = multi_turn ? cfg.num_turns : 1;
  const int64_t num_conversations = (cfg.num_prompts + turns - 1) / turns;
  const double rate = cfg.request_rate > 0 ? cfg.request_rate : std::numeric_limits<double>::infinity();
  const std::vector<double> arrivals = poisson_arrivals(num_conversations, rate, cfg.seed);

  const size_t n = static_cast<size_t>(cfg.num_prompts);
  run.results.resize(n);
  std::mutex mu;
  std::condition_variable cv;
  int64_t in_flight = 0, done = 0, failed = 0;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(num_conversations));
  const Clock::time_point start = Clock::now();
  if (cfg.progress) draw_progress(0, 0, cfg.num_prompts, 0);
  for (int64_t c = 0; c < num_conversations; ++c) {
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(arrivals[static_cast<size_t>(c)])));
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return cfg.max_concurrency <= 0 || in_flight < cfg.max_concurrency; });
      ++in_flight;
    }
    threads.emplace_back([&, c] {
      const int64_t first = c * turns, last = std::min(first + turns, cfg.num_prompts);
      std::string history;  // multi-turn: previous prompt + its answer
      bool broken = false;  // a turn failed: the rest of the conversation is not sent
      for (int64_t i = first; i < last; ++i) {
        const size_t k = static_cast<size_t>(i);
        const std::string prompt = multi_turn ? multi_turn_prompt(history, texts[k]) : texts[k];
        RequestResult r;
        if (broken) {
          r.error = "not sent: an earlier turn of its conversation failed";
        } else {
          r = run_one(url, cfg.api_key, request_body(cfg, run.model, prompt, i), start);
        }
        r.prompt_len_estimate = count_words(prompt);
        if (multi_turn && r.success) history = prompt + r.text;
        broken = broken || !r.success;
        std::lock_guard<std::mutex> lock(mu);
        run.results[k] = std::move(r);
        ++done;
        if (!run.results[k].success) ++failed;
        if (cfg.progress) draw_progress(done, failed, cfg.num_prompts, seconds(Clock::now() - start));
      }
      std::lock_guard<std::mutex> lock(mu);
      --in_flight;
      cv.notify_all();
    });
  }
  for (std::thread& t : threads) t.join();
  run.duration_s = seconds(Clock::now() - start);
  run.metrics = compute_metrics(run.results, run.duration_s);
  return run;
}

}  // namespace pagellm::cli

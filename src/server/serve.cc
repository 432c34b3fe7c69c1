#include "server/serve.h"

#include <pthread.h>
#include <sys/resource.h>
#include <algorithm>

#include <atomic>
#include <cctype>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "engine/in_process_client.h"
#include "server/chat_template.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/routes.h"
#include "server/work_queue.h"

namespace pagellm::server {

namespace {

void log(const std::string& line) {
  std::fprintf(stderr, "pagellm serve: %s\n", line.c_str());
  std::fflush(stderr);
}

// Each thread started after this inherits the mask; ShutdownSignals takes the signals in sigwait.
sigset_t block_shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  return set;
}

// SIGINT / SIGTERM, blocked in every thread, are taken by one thread in sigwait from the start.
// While the model loads (which can take long, and used to ignore the signals until it was done)
// a signal exits at once with 128 + its number (130 / 143, as a shell reports it); once
// loaded() was called it is handed to wait(), and run_serve drains.
class ShutdownSignals {
 public:
  ShutdownSignals() : set_(block_shutdown_signals()), thread_([this] { take(); }) {}
  ~ShutdownSignals() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
    }
    // Ends its sigwait: SIGTERM is blocked in every thread, so this only wakes the waiter.
    if (received_ == 0) pthread_kill(thread_.native_handle(), SIGTERM);  // NOLINT(bugprone-bad-signal-to-kill-thread)
    thread_.join();
  }
  void loaded() {
    std::lock_guard<std::mutex> lock(mu_);
    loaded_ = true;
  }
  int wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return received_ != 0; });
    return received_;
  }

 private:
  void take() {
    int sig = 0;
    sigwait(&set_, &sig);
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) return;
    if (!loaded_) {
      log(std::string("received ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + " while loading the model: exiting");
      std::_Exit(128 + sig);
    }
    received_ = sig;
    cv_.notify_all();
  }

  sigset_t set_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool loaded_ = false;
  bool closing_ = false;
  std::atomic<int> received_{0};
  std::thread thread_;  // last: starts after the members above exist
};

// Each open connection holds a descriptor: lift the soft limit to the hard one (often 1024 ->
// 1M), so that thousands of streams can be open at once.
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

// "temperature=0.6 top_p=0.9 ..." for the start-up log.
std::string describe(const SamplingParams& s) {
  char b[160];
  std::snprintf(b, sizeof b, "temperature=%g top_k=%d top_p=%g min_p=%g repetition_penalty=%g", s.temperature,
                static_cast<int>(s.top_k), s.top_p, s.min_p, s.repetition_penalty);
  return b;
}

std::unique_ptr<LLM> load_model(const ServeOptions& o) {
  log("loading model '" + o.engine.model_path + "'");
  auto llm = std::make_unique<LLM>(o.engine);  // opens the file once; plan_kv_cache sizes the pool
  const auto& kv = llm->kv_cache();            // (engine/llm.h: the pool plan_kv_cache sized)
  const int64_t tokens = int64_t{kv.num_blocks()} * kv.block_size();
  char line[256];
  // With a draft model every block also holds the draft's K/V (its own storage, same block ids).
  const int64_t bytes = kv.bytes() + (llm->draft_runner() != nullptr ? llm->draft_runner()->kv_cache().bytes() : 0);
  std::snprintf(line, sizeof line, "KV cache: %d blocks x %d tokens = %lld tokens, %.1f MiB (%s); context %lld tokens",
                kv.num_blocks(), kv.block_size(), static_cast<long long>(tokens), bytes / 1048576.0,
                o.engine.kv_dtype == GgmlType::F16 ? "f16" : "f32",
                static_cast<long long>(llm->model().config().max_position_embeddings));
  log(line);
  log(o.engine.enable_prefix_caching ? "prefix caching: on" : "prefix caching: off");
  const EngineConfig& e = o.engine;
  if (e.speculative()) {
    std::string proposer = "draft model " + e.speculative_model;
    if (e.speculative_ngram) {
      proposer = "n-gram lookup, n in [" + std::to_string(e.ngram_min) + ", " + std::to_string(e.ngram_max) + "]";
    } else if (e.speculative_self_layers > 0) {
      proposer = "self-speculation, the first " + std::to_string(e.speculative_self_layers) + " layers";
    }
    log("speculative decoding: " + proposer + ", up to " + std::to_string(e.num_speculative_tokens) +
        " draft tokens, " + (e.speculative_adaptive ? "adaptive k" : "fixed k"));
  } else {
    log("speculative decoding: off");
  }
  if (const std::string w = kv_cache_limit_warning(*llm); !w.empty()) log(w);
  for (const std::string& w : llm->load_warnings()) log("warning: " + w);
  return llm;
}

}  // namespace

KvCacheMemory parse_kv_cache_memory(const std::string& text) {
  auto fail = [&](const std::string& why) -> KvCacheMemory {
    throw Error("--kv-cache-memory: " + why + ", got '" + text + "'");
  };
  const std::string expected = "expected bytes (e.g. 1073741824, 64MiB, 1.5GiB) or a block count (e.g. 200blocks)";
  // [spaces] number [spaces] unit [spaces]; the number: digits, then optionally '.' and at least
  // one digit (no sign, exponent, hex or inf/nan; "2." is refused as ".5" is); leading zeros are
  // skipped.
  auto space = [](char ch) { return std::isspace(static_cast<unsigned char>(ch)) != 0; };
  auto digit = [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; };
  size_t at = 0;
  while (at < text.size() && space(text[at])) ++at;
  if (at == text.size() || !digit(text[at])) return fail(expected);
  while (at + 1 < text.size() && text[at] == '0' && digit(text[at + 1])) ++at;
  const size_t begin = at;
  while (at < text.size() && digit(text[at])) ++at;
  const size_t int_digits = at - begin;
  if (at < text.size() && text[at] == '.') {
    ++at;
    if (at == text.size() || !digit(text[at])) return fail(expected);
    while (at < text.size() && digit(text[at])) ++at;
  }
  const std::string number = text.substr(begin, at - begin);
  while (at < text.size() && space(text[at])) ++at;
  std::string unit;
  for (; at < text.size() && !space(text[at]); ++at)
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[at])));
  while (at < text.size() && space(text[at])) ++at;
  if (at != text.size()) return fail(expected);
  const bool whole = number.size() == int_digits;
  // (at most 40 digits read: beyond any limit below, and within a double's range)
  const double value = int_digits > 40 ? 1e40 : std::stod(number);
  KvCacheMemory m;
  if (unit == "blocks" || unit == "block") {
    if (!whole) return fail("a block count is a whole number");
    if (value < 1) return fail("the cache needs at least 1 block");
    if (value > 2e9) return fail("more than 2e9 blocks");
    m.blocks = static_cast<int64_t>(value);
    return m;
  }
  static const std::pair<const char*, double> kUnits[] = {{"", 1},
                                                          {"b", 1},
                                                          {"kb", 1e3},
                                                          {"mb", 1e6},
                                                          {"gb", 1e9},
                                                          {"tb", 1e12},
                                                          {"k", 1024.0},
                                                          {"kib", 1024.0},
                                                          {"m", 1048576.0},
                                                          {"mib", 1048576.0},
                                                          {"g", 1073741824.0},
                                                          {"gib", 1073741824.0},
                                                          {"t", 1099511627776.0},
                                                          {"tib", 1099511627776.0}};
  for (const auto& [name, scale] : kUnits) {
    if (unit != name) continue;
    const double bytes = value * scale;
    if (bytes < 1) return fail("the cache needs at least 1 byte");
    if (bytes > 9e18) return fail("more than 9e18 bytes");
    m.bytes = static_cast<int64_t>(bytes);
    return m;
  }
  return fail(expected);
}

int64_t default_max_body_bytes(int64_t max_model_len) { return (int64_t{1} << 20) + 64 * max_model_len; }

std::string default_served_model_name(const std::string& model_path) {
  std::filesystem::path p(model_path);
  if (p.extension() == ".gguf") return p.stem().string();
  return p.filename().string();
}

int run_serve(const ServeOptions& o) {
  ShutdownSignals signals;
  raise_fd_limit();
  const std::string name =
      o.served_model_name.empty() ? default_served_model_name(o.engine.model_path) : o.served_model_name;
  const EngineConfig& ec = o.engine;
  InProcessEngineClient engine(load_model(o));  // its scheduler limits are o.engine's
  signals.loaded();
  ServerMetrics metrics(name);
  HttpServer::Options http;
  http.host = o.host;
  http.port = o.port;
  http.max_body_bytes =
      o.max_body_bytes > 0 ? o.max_body_bytes : default_max_body_bytes(engine.model_facts().max_model_len);
  // Bodies waiting to be parsed: as many as may wait in the engine, holding at most 16 full-size
  // bodies (a burst of small requests is admitted; a pile of big ones gets 429).
  WorkQueue work(o.api_threads, static_cast<size_t>(o.api_queue > 0 ? o.api_queue : ec.max_waiting),
                 16 * http.max_body_bytes);
  RoutesOptions ro;
  ro.served_model_name = name;
  ro.api_key = o.api_key;
  ro.listen_host = o.host;
  ro.allowed_origins = o.allowed_origins;
  ro.max_sequences_per_request = std::min(o.max_n, ec.max_waiting);
  ro.model_generation_config = o.generation_config == "auto";
  if (ro.model_generation_config && !engine.model_facts().default_sampling_error.empty()) {
    throw Error(engine.model_facts().default_sampling_error +
                " (--generation-config vllm serves the model with the OpenAI defaults instead)");
  }
  if (ro.model_generation_config) log("sampling defaults: " + describe(engine.model_facts().default_sampling));
  log("chat template: " + chat_template_summary(engine.model_facts().chat_template));
  if (ec.max_step_ms > 0) {
    char ms[32];
    std::snprintf(ms, sizeof ms, "%g", ec.max_step_ms);
    log(std::string("step-time budget: ") + ms + " ms (prefill chunks sized by the fitted step cost)");
  } else if (ec.max_step_ms < 0) {
    char factor[32];
    std::snprintf(factor, sizeof factor, "%g", ec.auto_step_factor);
    log(std::string("step-time budget: auto (") + factor + " x the predicted time of the running decodes alone)");
  } else {
    log("step-time budget: none (--max-num-batched-tokens alone sizes prefill chunks)");
  }
  Routes routes(engine, engine.tokenizer(), metrics, work, ro);
  http.io_threads = o.io_threads;
  http.idle_timeout_seconds = o.timeout_seconds;
  http.on_status = [&metrics](int status) { metrics.on_http_status(status); };
  HttpServer server(
      http, [&routes](HttpRequest req, const std::shared_ptr<Exchange>& ex) { routes.handle(std::move(req), ex); });
  server.start();
  log("request bodies up to " + std::to_string(http.max_body_bytes) + " bytes; up to " +
      std::to_string(server.max_connections()) + " open connections");
  log("serving model '" + name + "' on http://" + o.host + ":" + std::to_string(server.port()) +
      (o.api_key.empty() ? "" : " (API key required)"));

  const int sig = signals.wait();
  log(std::string("received ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + ": draining (up to " +
      [&] {
        char b[32];
        std::snprintf(b, sizeof b, "%g", o.drain_timeout_seconds);
        return std::string(b);
      }() +
      " s)");
  routes.set_draining();
  server.stop_accepting();
  engine.drain(o.drain_timeout_seconds);
  work.shutdown();  // bodies still queued are answered (503: the engine no longer admits)
  if (!server.wait_idle(5.0)) log("some responses were still being written at exit");
  server.stop();
  log("stopped");
  return 0;
}

}  // namespace pagellm::server

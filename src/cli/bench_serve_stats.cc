// Statistics, arrival schedule and reports of `pagellm bench serve` (see bench_serve.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "cli/bench_serve.h"
#include "core/error.h"

namespace pagellm::cli {

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  // numpy "linear": position (n - 1) * q / 100 between the two neighbouring order statistics.
  const double pos = (static_cast<double>(values.size()) - 1) * std::clamp(q, 0.0, 100.0) / 100.0;
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

Summary summarize(const std::vector<double>& values) {
  Summary s;
  if (values.empty()) return s;
  const double n = static_cast<double>(values.size());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
  double ss = 0;
  for (double v : values) ss += (v - s.mean) * (v - s.mean);
  s.std = std::sqrt(ss / n);  // population std, as numpy.std
  s.median = percentile(values, 50);
  s.p99 = percentile(values, 99);
  return s;
}

std::vector<double> poisson_arrivals(int64_t n, double rate, uint64_t seed) {
  if (!(rate > 0)) throw Error("--request-rate must be > 0 or inf, got " + std::to_string(rate));
  std::vector<double> t(static_cast<size_t>(std::max<int64_t>(n, 0)), 0.0);
  if (std::isinf(rate)) return t;
  std::mt19937_64 rng(seed);
  for (size_t i = 1; i < t.size(); ++i) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
    t[i] = t[i - 1] - std::log1p(-u) / rate;
  }
  return t;
}

BenchMetrics compute_metrics(const std::vector<RequestResult>& results, double duration_s) {
  BenchMetrics m;
  m.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2el;
  for (const RequestResult& r : results) {
    if (!r.success) {
      ++m.failed;
      continue;
    }
    ++m.completed;
    m.total_input_tokens += r.prompt_tokens >= 0 ? r.prompt_tokens : r.prompt_len_estimate;
    m.total_output_tokens += r.output_tokens;
    if (r.cached_tokens >= 0) {
      ++m.requests_with_cached_tokens;
      m.total_cached_tokens += r.cached_tokens;
    }
    ttft.push_back(r.ttft_s * 1e3);
    e2el.push_back(r.e2el_s * 1e3);
    if (r.output_tokens > 1) tpot.push_back((r.e2el_s - r.ttft_s) * 1e3 / static_cast<double>(r.output_tokens - 1));
    for (size_t i = 1; i < r.chunk_s.size(); ++i) itl.push_back((r.chunk_s[i] - r.chunk_s[i - 1]) * 1e3);
  }
  if (duration_s > 0) {
    m.request_throughput = static_cast<double>(m.completed) / duration_s;
    m.output_throughput = static_cast<double>(m.total_output_tokens) / duration_s;
    m.total_token_throughput = static_cast<double>(m.total_input_tokens + m.total_output_tokens) / duration_s;
  }
  if (m.requests_with_cached_tokens > 0) {
    m.mean_cached_tokens =
        static_cast<double>(m.total_cached_tokens) / static_cast<double>(m.requests_with_cached_tokens);
  }
  m.ttft_ms = summarize(ttft);
  m.tpot_ms = summarize(tpot);
  m.itl_ms = summarize(itl);
  m.e2el_ms = summarize(e2el);
  return m;
}

namespace {

void put_summary(nlohmann::json& j, const char* name, const Summary& s) {
  const std::string n(name);
  j["mean_" + n + "_ms"] = s.mean;
  j["median_" + n + "_ms"] = s.median;
  j["std_" + n + "_ms"] = s.std;
  j["p99_" + n + "_ms"] = s.p99;
}

void table_summary(std::string* out, const char* title, const char* name, const Summary& s) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s\n  %-34s %12.2f\n  %-34s %12.2f\n  %-34s %12.2f\n", title,
                ("Mean " + std::string(name) + " (ms):").c_str(), s.mean,
                ("Median " + std::string(name) + " (ms):").c_str(), s.median,
                ("P99 " + std::string(name) + " (ms):").c_str(), s.p99);
  *out += buf;
}

}  // namespace

std::string metrics_json(const BenchServeConfig& cfg, const BenchRun& run) {
  const BenchMetrics& m = run.metrics;
  nlohmann::json j;
  j["base_url"] = cfg.base_url;
  j["model"] = run.model;
  j["num_prompts"] = cfg.num_prompts;
  if (std::isinf(cfg.request_rate)) {
    j["request_rate"] = "inf";
  } else {
    j["request_rate"] = cfg.request_rate;
  }
  j["max_concurrency"] = cfg.max_concurrency > 0 ? nlohmann::json(cfg.max_concurrency) : nlohmann::json(nullptr);
  j["dataset_name"] = cfg.dataset.empty() ? cfg.dataset_name : "file";
  if (!cfg.dataset.empty()) j["dataset"] = cfg.dataset;
  j["input_len"] = effective_input_len(cfg);
  if (cfg.dataset_name == "shared-prefix") j["prefix_len"] = cfg.prefix_len;
  if (cfg.dataset_name == "multi-turn") j["num_turns"] = cfg.num_turns;
  j["cache_salt_per_request"] = cfg.cache_salt_per_request;
  j["output_len"] = cfg.output_len;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["duration"] = m.duration_s;
  j["total_input_tokens"] = m.total_input_tokens;
  j["total_output_tokens"] = m.total_output_tokens;
  j["request_throughput"] = m.request_throughput;
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  // null when the server sent no usage.prompt_tokens_details.cached_tokens
  j["mean_cached_tokens"] =
      m.requests_with_cached_tokens > 0 ? nlohmann::json(m.mean_cached_tokens) : nlohmann::json(nullptr);
  j["total_cached_tokens"] =
      m.requests_with_cached_tokens > 0 ? nlohmann::json(m.total_cached_tokens) : nlohmann::json(nullptr);
  put_summary(j, "ttft", m.ttft_ms);
  put_summary(j, "tpot", m.tpot_ms);
  put_summary(j, "itl", m.itl_ms);
  put_summary(j, "e2el", m.e2el_ms);
  std::vector<std::string> errors;
  for (const RequestResult& r : run.results) {
    if (!r.success && errors.size() < 5) errors.push_back(r.error);
  }
  j["errors"] = errors;
  return j.dump();
}

std::string metrics_table(const BenchServeConfig& cfg, const BenchRun& run) {
  const BenchMetrics& m = run.metrics;
  std::string out = "============ Serving Benchmark Result ============\n";
  char buf[256];
  auto row = [&](const char* k, double v, const char* fmt) {
    std::snprintf(buf, sizeof buf, fmt, k, v);
    out += buf;
  };
  out += "  Model:                             " + run.model + "\n";
  out +=
      "  Workload:                          " + (cfg.dataset.empty() ? cfg.dataset_name : "file " + cfg.dataset) + "\n";
  row("Successful requests:", static_cast<double>(m.completed), "  %-34s %12.0f\n");
  row("Failed requests:", static_cast<double>(m.failed), "  %-34s %12.0f\n");
  if (cfg.max_concurrency > 0)
    row("Maximum request concurrency:", static_cast<double>(cfg.max_concurrency), "  %-34s %12.0f\n");
  row("Benchmark duration (s):", m.duration_s, "  %-34s %12.2f\n");
  row("Total input tokens:", static_cast<double>(m.total_input_tokens), "  %-34s %12.0f\n");
  row("Total generated tokens:", static_cast<double>(m.total_output_tokens), "  %-34s %12.0f\n");
  if (m.requests_with_cached_tokens > 0) {
    row("Mean cached prompt tokens:", m.mean_cached_tokens, "  %-34s %12.1f\n");
  }
  row("Request throughput (req/s):", m.request_throughput, "  %-34s %12.2f\n");
  row("Output token throughput (tok/s):", m.output_throughput, "  %-34s %12.2f\n");
  row("Total token throughput (tok/s):", m.total_token_throughput, "  %-34s %12.2f\n");
  table_summary(&out, "---------------Time to First Token----------------", "TTFT", m.ttft_ms);
  table_summary(&out, "-----Time per Output Token (excl. 1st token)------", "TPOT", m.tpot_ms);
  table_summary(&out, "---------------Inter-token Latency----------------", "ITL", m.itl_ms);
  table_summary(&out, "----------------End-to-end Latency----------------", "E2EL", m.e2el_ms);
  out += "==================================================\n";
  int shown = 0;
  for (const RequestResult& r : run.results) {
    if (!r.success && shown++ < 3) out += "  error: " + r.error + "\n";
  }
  return out;
}

}  // namespace pagellm::cli

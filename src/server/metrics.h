// Server metrics in the Prometheus text exposition format, version 0.0.4
// (prometheus.io/docs/instrumenting/exposition_formats), with vLLM's names under the `pagellm:`
// prefix. Every series carries a `model_name` label. docs/metrics.md lists them all.
//
// Request histograms are computed from RequestOutput.times as the outputs stream by (engine
// thread); gauges and engine counters come from AsyncEngine::stats() when /metrics is rendered
// (I/O thread). All state is behind one mutex.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/async_engine.h"
#include "engine/engine_types.h"

namespace pagellm::server {

// A cumulative histogram with fixed upper bounds (seconds), plus +Inf.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending
  void observe(double value);
  const std::vector<double>& upper_bounds() const { return bounds_; }
  // counts()[i]: observations <= upper_bounds()[i]; counts().back(): all (le="+Inf").
  std::vector<uint64_t> cumulative_counts() const;
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> buckets_;  // [bounds + 1], per bucket (not cumulative)
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);

  // Every output of every request, in order per request. Thread-safe; never blocks for long.
  void on_output(const RequestOutput& out);
  // Every HTTP response sent; statuses >= 400 are counted in pagellm:http_errors_total.
  void on_http_status(int status);

  // The /metrics body. `stats` supplies the gauges and the preemption counter.
  std::string render(const EngineStats& stats) const;

  // Content-Type of render()'s text.
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  std::string model_name_;
  mutable std::mutex mu_;
  Histogram ttft_, itl_, tpot_, e2e_, queue_, prefill_, decode_;
  uint64_t prompt_tokens_ = 0;
  uint64_t generation_tokens_ = 0;
  std::map<std::string, uint64_t> finished_;            // by finish_reason
  std::map<int, uint64_t> http_errors_;                 // by status
  std::unordered_map<std::string, double> last_token_;  // live request id -> last token time
};

// "a\"b" -> "a\\\"b": a Prometheus label value with \, " and newline escaped.
std::string escape_label_value(const std::string& v);

}  // namespace pagellm::server

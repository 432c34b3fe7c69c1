#include "server/metrics.h"

#include <algorithm>
#include <charconv>

#include "core/build_info.h"

namespace pagellm::server {

namespace {

// Upper bounds, seconds. Finer at the low end than vLLM's: a small model on a CPU answers in
// milliseconds.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,  0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
const std::vector<double> kTokenBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,  0.3,
                                           0.4,   0.5,    0.75,  1.0,  2.5,   5.0,  7.5,   10.0, 20.0, 40.0, 80.0};
const std::vector<double> kRequestBuckets = {0.01, 0.025, 0.05,  0.1,   0.3,   0.5,    0.8,   1.0,  1.5,
                                             2.0,  2.5,   5.0,   10.0,  15.0,  20.0,   30.0,  40.0, 50.0,
                                             60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

std::string num(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

class Writer {
 public:
  explicit Writer(const std::string& model_name) : label_("model_name=\"" + escape_label_value(model_name) + "\"") {}

  void header(const char* name, const char* type, const char* help) {
    out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const std::string& name, const std::string& extra_labels, const std::string& value) {
    out_ += name + "{" + label_ + (extra_labels.empty() ? "" : "," + extra_labels) + "} " + value + "\n";
  }
  void scalar(const char* name, const char* type, const char* help, double value) {
    header(name, type, help);
    sample(name, "", num(value));
  }
  void histogram(const char* name, const char* help, const Histogram& h) {
    header(name, "histogram", help);
    const std::vector<uint64_t> c = h.cumulative_counts();
    const std::string bucket = std::string(name) + "_bucket";
    for (size_t i = 0; i < h.upper_bounds().size(); ++i) {
      sample(bucket, "le=\"" + num(h.upper_bounds()[i]) + "\"", std::to_string(c[i]));
    }
    sample(bucket, "le=\"+Inf\"", std::to_string(c.back()));
    sample(std::string(name) + "_sum", "", num(h.sum()));
    sample(std::string(name) + "_count", "", std::to_string(h.count()));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string label_;
  std::string out_;
};

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), buckets_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);  // first bound >= value
  ++buckets_[static_cast<size_t>(it - bounds_.begin())];
  sum_ += value;
  ++count_;
}

std::vector<uint64_t> Histogram::cumulative_counts() const {
  std::vector<uint64_t> c(buckets_.size());
  uint64_t acc = 0;
  for (size_t i = 0; i < buckets_.size(); ++i) c[i] = acc += buckets_[i];
  return c;
}

std::string escape_label_value(const std::string& v) {
  std::string out;
  for (char ch : v) {
    if (ch == '\\')
      out += "\\\\";
    else if (ch == '"')
      out += "\\\"";
    else if (ch == '\n')
      out += "\\n";
    else
      out += ch;
  }
  return out;
}

ServerMetrics::ServerMetrics(std::string model_name)
    : model_name_(std::move(model_name)),
      ttft_(kTtftBuckets),
      itl_(kTokenBuckets),
      tpot_(kTokenBuckets),
      e2e_(kRequestBuckets),
      queue_(kRequestBuckets),
      prefill_(kRequestBuckets),
      decode_(kRequestBuckets),
      finished_{{"stop", 0}, {"length", 0}, {"abort", 0}, {"error", 0}} {}

void ServerMetrics::on_output(const RequestOutput& out) {
  const RequestTimes& t = out.times;
  std::lock_guard<std::mutex> lock(mu_);
  if (!out.new_token_ids.empty()) {
    generation_tokens_ += out.new_token_ids.size();
    const auto it = last_token_.find(out.request_id);
    if (it == last_token_.end()) {
      // Once per prompt: a parallel-sampling member that forked the prompt's blocks reports all
      // of them cached (a prefix-cache hit always leaves at least one token to compute).
      if (out.num_cached_tokens < out.num_prompt_tokens) prompt_tokens_ += static_cast<uint64_t>(out.num_prompt_tokens);
      if (t.first_token > 0 && t.arrival > 0) ttft_.observe(t.first_token - t.arrival);
      last_token_.emplace(out.request_id, t.last_token);
    } else {
      if (t.last_token > 0 && it->second > 0) itl_.observe(t.last_token - it->second);
      it->second = t.last_token;
    }
  }
  if (!out.finished) return;
  last_token_.erase(out.request_id);
  ++finished_[out.finish_reason];
  if (t.finished > 0 && t.arrival > 0) e2e_.observe(t.finished - t.arrival);
  if (t.first_scheduled > 0 && t.arrival > 0) queue_.observe(t.first_scheduled - t.arrival);
  if (t.first_token > 0) {
    prefill_.observe(t.prefill_seconds);
    const double decode = t.last_token - t.first_token;
    decode_.observe(decode);
    if (out.num_generated_tokens > 1) tpot_.observe(decode / (out.num_generated_tokens - 1));
  }
}

void ServerMetrics::on_http_status(int status) {
  if (status < 400) return;
  std::lock_guard<std::mutex> lock(mu_);
  ++http_errors_[status];
}

std::string ServerMetrics::render(const EngineStats& s) const {
  Writer w(model_name_);
  const BuildInfo& b = build_info();
  w.header("pagellm:build_info", "gauge", "Build information in the labels; the value is always 1.");
  w.sample("pagellm:build_info",
           "version=\"" + escape_label_value(b.version) + "\",commit=\"" + escape_label_value(b.commit) +
               "\",compiler=\"" + escape_label_value(b.compiler) + "\",build_type=\"" +
               escape_label_value(b.build_type) + "\"",
           "1");
  w.scalar("pagellm:num_requests_running", "gauge", "Number of requests in the running batch.",
           static_cast<double>(s.num_running));
  w.scalar("pagellm:num_requests_waiting", "gauge", "Number of requests waiting to be scheduled.",
           static_cast<double>(s.num_waiting));
  w.scalar("pagellm:kv_cache_usage_perc", "gauge", "KV-cache usage: fraction of blocks held, 0 to 1.",
           s.kv_cache_usage);
  w.scalar("pagellm:num_blocks", "gauge", "KV-cache blocks in the pool.", static_cast<double>(s.num_blocks));
  w.scalar("pagellm:num_free_blocks", "gauge", "KV-cache blocks not held by any request (cached ones included).",
           static_cast<double>(s.num_free_blocks));
  w.scalar("pagellm:num_preemptions_total", "counter", "Cumulative number of preemptions (recompute).",
           static_cast<double>(s.num_preemptions));
  w.scalar("pagellm:prefix_cache_queries_total", "counter",
           "Prompt tokens looked up in the prefix cache at admission (tokens).",
           static_cast<double>(s.prefix_cache_queries));
  w.scalar("pagellm:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache (tokens).",
           static_cast<double>(s.prefix_cache_hits));
  w.scalar("pagellm:prefix_cache_hit_rate", "gauge",
           "prefix_cache_hits_total / prefix_cache_queries_total (0 before any query).",
           s.prefix_cache_queries > 0 ? static_cast<double>(s.prefix_cache_hits) / s.prefix_cache_queries : 0.0);
  w.scalar("pagellm:num_cached_blocks", "gauge", "KV-cache blocks registered in the prefix cache (held or free).",
           static_cast<double>(s.num_cached_blocks));
  w.scalar("pagellm:num_steps_total", "counter", "Engine steps (forward passes).", static_cast<double>(s.num_steps));
  w.scalar("pagellm:step_seconds_total", "counter",
           "Wall time of all engine steps after scheduling: forward, sampling, stop checks (seconds).",
           s.step_seconds_total);
  w.scalar("pagellm:last_step_seconds", "gauge", "Wall time of the last engine step (seconds).", s.last_step_seconds);
  w.scalar("pagellm:last_step_predicted_seconds", "gauge",
           "The step cost model's prediction for the last step (seconds).", s.last_step_predicted_seconds);
  w.scalar("pagellm:step_budget_seconds", "gauge",
           "Step-time budget the last step's prefill chunks were sized by (seconds; 0: none).", s.step_budget_seconds);
  w.header("pagellm:step_cost_coefficient", "gauge",
           "Fitted step cost: t = step + token * tokens + attn * attention pairs / 1024 (seconds).");
  w.sample("pagellm:step_cost_coefficient", "term=\"step\"", num(s.step_cost_c_step));
  w.sample("pagellm:step_cost_coefficient", "term=\"token\"", num(s.step_cost_c_token));
  w.sample("pagellm:step_cost_coefficient", "term=\"attn\"", num(s.step_cost_c_attn));
  w.scalar("pagellm:step_cost_mean_relative_error", "gauge",
           "Weighted mean of |predicted - measured| / measured step time over recent steps.",
           s.step_cost_mean_relative_error);
  // Speculative decoding: vLLM's spec_decode_* counters (0 without a proposer).
  w.scalar("pagellm:spec_decode_num_drafts_total", "counter", "Verify steps of a request with draft tokens.",
           static_cast<double>(s.spec_decode_num_drafts));
  w.scalar("pagellm:spec_decode_num_draft_tokens_total", "counter", "Draft tokens verified.",
           static_cast<double>(s.spec_decode_num_draft_tokens));
  w.scalar("pagellm:spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.",
           static_cast<double>(s.spec_decode_num_accepted_tokens));
  w.header("pagellm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
           "Draft tokens accepted at each draft position (0-based).");
  for (size_t i = 0; i < s.spec_decode_num_accepted_tokens_per_pos.size(); ++i) {
    w.sample("pagellm:spec_decode_num_accepted_tokens_per_pos_total", "position=\"" + std::to_string(i) + "\"",
             std::to_string(s.spec_decode_num_accepted_tokens_per_pos[i]));
  }
  w.scalar("pagellm:spec_decode_mean_accepted_length", "gauge",
           "Tokens per verify step: 1 + accepted / drafts (0 before any draft).",
           s.spec_decode_num_drafts > 0
               ? 1.0 + static_cast<double>(s.spec_decode_num_accepted_tokens) / s.spec_decode_num_drafts
               : 0.0);
  std::lock_guard<std::mutex> lock(mu_);
  w.scalar("pagellm:prompt_tokens_total", "counter", "Number of prompt tokens processed (once per request).",
           static_cast<double>(prompt_tokens_));
  w.scalar("pagellm:generation_tokens_total", "counter", "Number of generated tokens.",
           static_cast<double>(generation_tokens_));
  w.header("pagellm:request_success_total", "counter", "Count of finished requests by finish reason.");
  for (const auto& [reason, n] : finished_) {
    w.sample("pagellm:request_success_total", "finished_reason=\"" + escape_label_value(reason) + "\"",
             std::to_string(n));
  }
  w.header("pagellm:http_errors_total", "counter", "HTTP responses with status >= 400, by status.");
  for (const auto& [status, n] : http_errors_) {
    w.sample("pagellm:http_errors_total", "status=\"" + std::to_string(status) + "\"", std::to_string(n));
  }
  w.histogram("pagellm:time_to_first_token_seconds", "Time from arrival to the first generated token, seconds.", ttft_);
  w.histogram("pagellm:inter_token_latency_seconds", "Time between consecutive token outputs of a request, seconds.",
              itl_);
  w.histogram("pagellm:time_per_output_token_seconds", "Per request: decode time / (generated tokens - 1), seconds.",
              tpot_);
  w.histogram("pagellm:e2e_request_latency_seconds", "Time from arrival to finish, seconds.", e2e_);
  w.histogram("pagellm:request_queue_time_seconds", "Time from arrival to first scheduled, seconds.", queue_);
  w.histogram("pagellm:request_prefill_time_seconds", "Time from first scheduled to first token, seconds.", prefill_);
  w.histogram("pagellm:request_decode_time_seconds", "Time from first token to last token, seconds.", decode_);
  return w.take();
}

}  // namespace pagellm::server

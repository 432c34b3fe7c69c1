// `pagellm bench serve`: a serving benchmark in the manner of vLLM's benchmarks/benchmark_serving.py,
// against any OpenAI-compatible HTTP server (ours, vLLM, llama-server, ...).
//
// N requests are sent to POST {base_url}/v1/completions with stream: true, max_tokens =
// output_len, ignore_eos: true (a vLLM / llama.cpp / pagellm extension), temperature 0 and
// stream_options.include_usage. Arrival times are a seeded Poisson process of rate R (R = inf:
// all at once); max_concurrency caps the requests in flight. Per request, all times in seconds
// from the moment its connection is opened:
//   TTFT  = arrival of the first chunk whose text is non-empty
//   ITL   = the gaps between consecutive non-empty chunks (one sample per gap)
//   E2EL  = arrival of the end of the stream ([DONE] or EOF)
//   TPOT  = (E2EL - TTFT) / (output_tokens - 1), only for output_tokens > 1
//   output_tokens = usage.completion_tokens of the final chunk when the server sends usage,
//                   else the number of non-empty chunks
// Throughputs divide by the benchmark's duration: from the first request's start to the last
// request's end. Summaries follow numpy.percentile (linear interpolation).
//
// Workloads (--dataset-name):
//   random         every prompt is input_len random common words (default input_len 128)
//   shared-prefix  every prompt = one common prefix of prefix_len words + " " + a unique suffix of
//                  input_len words (defaults 1000 and 100): a shared system prompt or document
//   multi-turn     conversations of num_turns turns; turn k's prompt = turn k-1's prompt + its
//                  answer + "\nUser: <input_len new words>\nAssistant:" (turn 0: the same without
//                  history); a conversation's turns run one after another, conversations
//                  concurrently (max_concurrency caps the conversations in flight, arrivals are
//                  per conversation). Request i is turn i % num_turns of conversation
//                  i / num_turns, so num_prompts counts requests, not conversations.
//   --dataset FILE prompts from a file (single-turn).
// cache_salt_per_request adds a unique "cache_salt" to every request, defeating prefix sharing on
// servers that honour it. When the server reports usage.prompt_tokens_details.cached_tokens, the
// mean and total are reported.
//
// The pure parts (SSE framing, chunk parsing, statistics, arrival schedule, SVG plot) are here
// for tests; the HTTP client (Boost.Beast, one thread per request in flight, http:// only) lives in
// bench_serve_client.cc.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagellm::cli {

// ---- Server-Sent Events ----

// Incremental SSE framing: bytes may arrive split anywhere (inside a line, inside "\r\n").
// Lines end with "\n" or "\r\n"; "data:" lines (one leading space dropped) of one event are
// joined with "\n"; a blank line ends the event; comments (":...") and other fields are ignored.
class SseParser {
 public:
  // Appends the data payload of every event completed by `bytes` to *events.
  void feed(std::string_view bytes, std::vector<std::string>* events);

 private:
  void take_line(std::string_view line, std::vector<std::string>* events);
  std::string line_;  // partial line carried over between feeds
  std::string data_;  // data of the event being read
  bool has_data_ = false;
};

// One streamed chunk of /v1/completions (choices[0].text) or /v1/chat/completions
// (choices[0].delta.content).
struct StreamChunk {
  std::string text;                          // "" when the chunk carries no text
  std::optional<int64_t> completion_tokens;  // usage.completion_tokens, when present
  std::optional<int64_t> prompt_tokens;      // usage.prompt_tokens, when present
  std::optional<int64_t> cached_tokens;      // usage.prompt_tokens_details.cached_tokens, when present
  std::optional<std::string> error;          // error.message of an in-stream error object
};
// Throws pagellm::Error when `json` is not a JSON object.
StreamChunk parse_stream_chunk(std::string_view json);

// ---- statistics ----

struct Summary {
  double mean = 0, median = 0, std = 0, p99 = 0;  // units of the input; all 0 for no samples
};
// numpy.percentile(values, q) with linear interpolation; q in [0, 100]; 0 for no values.
double percentile(std::vector<double> values, double q);
Summary summarize(const std::vector<double>& values);

// Arrival offsets in seconds for n requests: [0, g1, g1+g2, ...] with exponential gaps of mean
// 1/rate drawn from a 64-bit Mersenne Twister seeded with `seed` (bit-identical across platforms).
// rate = +inf (or <= 0 is an error): all zeros. Throws pagellm::Error when rate <= 0.
std::vector<double> poisson_arrivals(int64_t n, double rate, uint64_t seed);

// ---- one benchmark run ----

struct RequestResult {
  bool success = false;
  std::string error;   // why it failed (HTTP status and body, socket error, ...)
  double start_s = 0;  // from the benchmark's start to opening the connection
  double ttft_s = 0;   // see the file comment
  double e2el_s = 0;
  std::vector<double> chunk_s;  // arrival of each non-empty chunk, from this request's start
  int64_t output_tokens = 0;
  int64_t prompt_tokens = -1;       // usage.prompt_tokens; -1 when the server sent none
  int64_t prompt_len_estimate = 0;  // tokens the client meant to send (words of the prompt)
  int64_t cached_tokens = -1;       // usage.prompt_tokens_details.cached_tokens; -1 when not sent
  std::string text;                 // the generated text (multi-turn feeds it to the next turn)
};

struct BenchMetrics {
  int64_t completed = 0, failed = 0;
  double duration_s = 0;
  int64_t total_input_tokens = 0;  // usage.prompt_tokens summed (estimates where absent)
  int64_t total_output_tokens = 0;
  double request_throughput = 0;  // completed requests / s
  double output_throughput = 0;   // output tokens / s
  double total_token_throughput = 0;
  Summary ttft_ms, tpot_ms, itl_ms, e2el_ms;
  int64_t requests_with_cached_tokens = 0;  // completed requests whose usage had cached_tokens
  int64_t total_cached_tokens = 0;          // their cached_tokens summed
  double mean_cached_tokens = 0;            // total / requests_with_cached_tokens (0 when none)
};
BenchMetrics compute_metrics(const std::vector<RequestResult>& results, double duration_s);

struct BenchServeConfig {
  std::string base_url = "http://127.0.0.1:8000";  // http://host[:port][/prefix]
  std::string model;                               // "" -> the first id of GET /v1/models
  std::string api_key;                             // sent as "Authorization: Bearer ..." when not empty
  int64_t num_prompts = 100;
  double request_rate = 0;      // requests/s; +inf = all at once
  int64_t max_concurrency = 0;  // 0 = no cap
  // Words (~tokens) of each random prompt, shared-prefix suffix or multi-turn user turn;
  // 0 = the workload's default (128 random, 100 shared-prefix and multi-turn).
  int64_t input_len = 0;
  int64_t output_len = 128;
  std::string dataset;                  // JSONL {"prompt": ...} or plain text, one prompt per line
  std::string dataset_name = "random";  // random | shared-prefix | multi-turn (see the file comment)
  int64_t prefix_len = 1000;            // shared-prefix: words of the common prefix
  int64_t num_turns = 4;                // multi-turn: turns per conversation
  bool cache_salt_per_request = false;  // send a unique cache_salt with every request
  uint64_t seed = 0;
  bool ignore_eos = true;
  bool progress = true;  // progress bar on stderr
};

struct BenchRun {
  std::string model;
  std::vector<RequestResult> results;  // in request order
  double duration_s = 0;
  BenchMetrics metrics;
};

// input_len, or the workload's default when it is 0. Throws pagellm::Error for an unknown
// dataset_name.
int64_t effective_input_len(const BenchServeConfig& cfg);
// Checks the workload settings (dataset_name, lengths, turns; --dataset only with random).
void validate_workload(const BenchServeConfig& cfg);

// One string per request, seeded: random/dataset/shared-prefix: the whole prompt (dataset lines
// cycled to num_prompts); multi-turn: the new user text of that turn (the prompt is built while the
// run goes, from the answers, by multi_turn_prompt). Throws pagellm::Error when the dataset cannot
// be read or holds no prompt, or for bad workload settings.
std::vector<std::string> make_prompts(const BenchServeConfig& cfg);
// A prompt of `num_words` words drawn from a fixed list of common English words.
std::string random_words_prompt(int64_t num_words, uint64_t seed);
// The common prefix of the shared-prefix workload (prefix_len words, from the seed).
std::string shared_prefix(const BenchServeConfig& cfg);
// Throws pagellm::Error, naming the workload's length flags, when the longest prompt
// (prompt_tokens) plus output_len exceeds the served model's max_model_len: every request would
// fail (the shared-prefix default of 1,000 words does not fit a 512-token model).
void check_fits_context(const BenchServeConfig& cfg, int64_t prompt_tokens, int64_t max_model_len);
// The prompt of a multi-turn request: `history` is the previous turn's prompt followed by its
// answer ("" for the first turn). history + "\nUser: " + user_text + "\nAssistant:" (no "\n"
// before "User:" on the first turn), so every prompt starts with the text of the previous one.
std::string multi_turn_prompt(const std::string& history, const std::string& user_text);
// The cache_salt sent for request i with --cache-salt-per-request.
std::string request_cache_salt(uint64_t seed, int64_t request_index);

// Runs the benchmark (bench_serve_client.cc). Throws pagellm::Error for a bad base URL or when
// the model list cannot be fetched; failed requests are counted, not thrown.
BenchRun run_bench_serve(const BenchServeConfig& cfg);

// The metrics as one JSON object (keys as vLLM's --save-result: request_throughput,
// output_throughput, mean_ttft_ms, median_ttft_ms, p99_ttft_ms, ... for tpot, itl, e2el).
std::string metrics_json(const BenchServeConfig& cfg, const BenchRun& run);
// The human-readable table printed without --json.
std::string metrics_table(const BenchServeConfig& cfg, const BenchRun& run);

// A self-contained SVG: histograms of TTFT, ITL and E2EL (ms) and output tokens/s over time.
std::string plot_svg(const BenchRun& run);

// Registers `serve` on the `bench` sub-app; the handler returns 1 when `serve` was not chosen.
std::function<int()> add_bench_serve(CLI::App& bench);

}  // namespace pagellm::cli

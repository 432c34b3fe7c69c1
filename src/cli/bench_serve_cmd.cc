// `pagellm bench serve` options, prompts and output (see bench_serve.h).
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/bench_serve.h"
#include "core/error.h"

namespace pagellm::cli {
namespace {

// Common English words, each one token in Llama / GPT-style vocabularies (with its leading space),
// so a prompt of L words is about L tokens there (more in tiny vocabularies such as stories260K's).
constexpr std::array<std::string_view, 64> kWords = {
    "the", "of",   "and",  "to",    "in",    "is",  "you",  "that",  "it",    "he",   "was",  "for",   "on",
    "are", "as",   "with", "his",   "they",  "at",  "be",   "this",  "have",  "from", "or",   "one",   "had",
    "by",  "word", "but",  "not",   "what",  "all", "were", "we",    "when",  "your", "can",  "said",  "there",
    "use", "an",   "each", "which", "she",   "do",  "how",  "their", "if",    "will", "up",   "other", "about",
    "out", "many", "then", "them",  "these", "so",  "some", "her",   "would", "make", "like", "time"};

std::vector<std::string> read_dataset(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("--dataset: cannot open '" + path + "'");
  std::vector<std::string> prompts;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("prompt") && j["prompt"].is_string()) {
      prompts.push_back(j["prompt"].get<std::string>());
    } else {
      prompts.push_back(line);  // plain text: the line is the prompt
    }
  }
  if (prompts.empty()) throw Error("--dataset: no prompt in '" + path + "'");
  return prompts;
}

}  // namespace

std::string random_words_prompt(int64_t num_words, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out;
  for (int64_t i = 0; i < num_words; ++i) {
    if (i > 0) out += ' ';
    out += kWords[rng() % kWords.size()];
  }
  return out;
}

int64_t effective_input_len(const BenchServeConfig& cfg) {
  if (cfg.dataset_name != "random" && cfg.dataset_name != "shared-prefix" && cfg.dataset_name != "multi-turn") {
    throw Error("--dataset-name must be random, shared-prefix or multi-turn, got '" + cfg.dataset_name + "'");
  }
  if (cfg.input_len != 0) return cfg.input_len;
  return cfg.dataset_name == "random" ? 128 : 100;
}

void validate_workload(const BenchServeConfig& cfg) {
  const int64_t input_len = effective_input_len(cfg);
  if (!cfg.dataset.empty() && cfg.dataset_name != "random") {
    throw Error("--dataset FILE gives single-turn prompts; it cannot be combined with --dataset-name " +
                cfg.dataset_name);
  }
  if (cfg.dataset.empty() && input_len < 1) {
    throw Error("--input-len must be >= 1, got " + std::to_string(input_len));
  }
  if (cfg.dataset_name == "shared-prefix" && cfg.prefix_len < 1) {
    throw Error("--prefix-len must be >= 1, got " + std::to_string(cfg.prefix_len));
  }
  if (cfg.dataset_name == "multi-turn" && cfg.num_turns < 1) {
    throw Error("--num-turns must be >= 1, got " + std::to_string(cfg.num_turns));
  }
}

std::string shared_prefix(const BenchServeConfig& cfg) {
  // A seed stream of its own, so that the prefix never equals one of the suffixes.
  return random_words_prompt(cfg.prefix_len, cfg.seed * 1000003u + 0x5eed5eedu);
}

void check_fits_context(const BenchServeConfig& cfg, int64_t prompt_tokens, int64_t max_model_len) {
  if (prompt_tokens + cfg.output_len <= max_model_len) return;
  const std::string input = std::to_string(effective_input_len(cfg));
  std::string what, flags;
  if (!cfg.dataset.empty()) {
    what = "from --dataset";
    flags = "use shorter prompts or lower --output-len";
  } else if (cfg.dataset_name == "shared-prefix") {
    what = "--prefix-len " + std::to_string(cfg.prefix_len) + " + --input-len " + input + " words";
    flags = "lower --prefix-len, --input-len or --output-len";
  } else if (cfg.dataset_name == "multi-turn") {
    what = "the first turn, --input-len " + input + " words";
    flags = "lower --input-len or --output-len";
  } else {
    what = "--input-len " + input + " words";
    flags = "lower --input-len or --output-len";
  }
  throw Error("the prompts do not fit the served model: the longest is " + std::to_string(prompt_tokens) + " tokens (" +
              what + ") + --output-len " + std::to_string(cfg.output_len) + " = " +
              std::to_string(prompt_tokens + cfg.output_len) + " > its max_model_len " + std::to_string(max_model_len) +
              " (GET /v1/models), so every request would fail; " + flags);
}

std::string multi_turn_prompt(const std::string& history, const std::string& user_text) {
  std::string p = history;
  if (!p.empty()) p += '\n';
  p += "User: ";
  p += user_text;
  p += "\nAssistant:";
  return p;
}

std::string request_cache_salt(uint64_t seed, int64_t request_index) {
  return "bench-" + std::to_string(seed) + "-" + std::to_string(request_index);
}

std::vector<std::string> make_prompts(const BenchServeConfig& cfg) {
  validate_workload(cfg);
  std::vector<std::string> prompts;
  if (!cfg.dataset.empty()) {
    const std::vector<std::string> lines = read_dataset(cfg.dataset);
    for (int64_t i = 0; i < cfg.num_prompts; ++i) prompts.push_back(lines[static_cast<size_t>(i) % lines.size()]);
    return prompts;
  }
  const int64_t input_len = effective_input_len(cfg);
  const std::string prefix = cfg.dataset_name == "shared-prefix" ? shared_prefix(cfg) + " " : "";
  for (int64_t i = 0; i < cfg.num_prompts; ++i) {
    prompts.push_back(prefix + random_words_prompt(input_len, cfg.seed * 1000003u + static_cast<uint64_t>(i)));
  }
  return prompts;
}

std::function<int()> add_bench_serve(CLI::App& bench) {
  CLI::App* sub = bench.add_subcommand(
      "serve", "Serving benchmark against an OpenAI-compatible server: throughput, TTFT, TPOT, ITL, E2E latency");
  auto cfg = std::make_shared<BenchServeConfig>();
  auto rate = std::make_shared<std::string>("inf");
  auto json = std::make_shared<bool>(false);
  auto plot = std::make_shared<std::string>();
  auto no_ignore_eos = std::make_shared<bool>(false);
  sub->add_option("--base-url", cfg->base_url, "Server, http://host:port[/prefix]")->capture_default_str();
  sub->add_option("--model", cfg->model, "Model name to send (default: the first of GET /v1/models)");
  sub->add_option("--api-key", cfg->api_key, "Sent as 'Authorization: Bearer KEY'");
  sub->add_option("-n,--num-prompts", cfg->num_prompts, "Number of requests")->capture_default_str();
  CLI::Option* r = sub->add_option("--request-rate", *rate, "Poisson arrival rate, requests/s, or inf (all at once)")
                       ->capture_default_str();
  CLI::Option* c = sub->add_option("--max-concurrency", cfg->max_concurrency, "Cap on requests in flight");
  r->excludes(c);
  sub->add_option("--input-len", cfg->input_len,
                  "Words (~tokens) per random prompt, shared-prefix suffix or multi-turn user turn "
                  "(default 128 random, 100 otherwise)");
  sub->add_option("--output-len", cfg->output_len, "max_tokens of every request")->capture_default_str();
  sub->add_option("--dataset", cfg->dataset,
                  "JSONL with {\"prompt\": ...} per line, or plain text (one prompt a line)");
  sub->add_option("--dataset-name", cfg->dataset_name,
                  "Workload: random, shared-prefix (common prefix + unique suffix) or multi-turn (conversations)")
      ->check(CLI::IsMember({"random", "shared-prefix", "multi-turn"}))
      ->capture_default_str();
  sub->add_option("--prefix-len", cfg->prefix_len, "shared-prefix: words (~tokens) of the common prefix")
      ->capture_default_str();
  sub->add_option("--num-turns", cfg->num_turns,
                  "multi-turn: turns per conversation (--num-prompts counts requests, i.e. turns)")
      ->capture_default_str();
  sub->add_flag("--cache-salt-per-request", cfg->cache_salt_per_request,
                "Send a unique cache_salt with every request (defeats prefix-cache sharing)");
  sub->add_option("--seed", cfg->seed, "Seed of the arrival times and random prompts")->capture_default_str();
  sub->add_flag("--no-ignore-eos", *no_ignore_eos, "Do not send ignore_eos: true (for servers that reject it)");
  sub->add_flag("--json", *json, "Print one JSON object instead of the table");
  sub->add_option("--plot", *plot, "Write latency histograms and throughput over time to FILE.svg");
  sub->add_flag(
      "--no-progress", [cfg](int64_t) { cfg->progress = false; }, "No progress bar on stderr");
  return [=] {
    if (!sub->parsed()) return 1;
    if (*rate == "inf" || *rate == "Inf" || *rate == "INF") {
      cfg->request_rate = std::numeric_limits<double>::infinity();
    } else {
      try {
        cfg->request_rate = std::stod(*rate);
      } catch (const std::exception&) {
        throw Error("--request-rate: '" + *rate + "' is not a number or inf");
      }
      if (!(cfg->request_rate > 0)) throw Error("--request-rate must be > 0 or inf, got '" + *rate + "'");
    }
    if (!plot->empty() && !(plot->size() > 4 && plot->compare(plot->size() - 4, 4, ".svg") == 0)) {
      throw Error("--plot: only .svg files are written, got '" + *plot + "'");
    }
    cfg->ignore_eos = !*no_ignore_eos;
    validate_workload(*cfg);
    const BenchRun run = run_bench_serve(*cfg);
    if (*json) {
      std::puts(metrics_json(*cfg, run).c_str());
    } else {
      std::fputs(metrics_table(*cfg, run).c_str(), stdout);
    }
    if (!plot->empty()) {
      std::ofstream out(*plot);
      out << plot_svg(run);
      if (!out) throw Error("--plot: cannot write '" + *plot + "'");
    }
    return run.metrics.completed > 0 ? 0 : 1;
  };
}

}  // namespace pagellm::cli

// `pagellm bench latency`: single-stream prompt processing and generation speed of one model,
// with a memory-bandwidth probe in the same run, so that the fraction of the machine's bandwidth
// reached by decode (model bytes x tokens/s / probe GB/s) is a ratio measured at one time.
// --batch B1,B2,..: batched decode, B requests advancing one token per engine step (one forward
// pass over the weights serves all of them), output tokens/s per B. Every figure runs through
// EngineCore (scheduler, model runner, sampler), as serving does.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/bandwidth_probe.h"
#include "cli/bench_serve.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/system_memory.h"
#include "engine/engine_core.h"
#include "engine/llm.h"

namespace pagellm::cli {
namespace {

struct LatencyArgs {
  std::string model;
  int64_t prompt_tokens = 512;
  int32_t gen_tokens = 128;
  int threads = 0;
  int32_t block_size = EngineConfig{}.block_size;
  std::string kv_dtype = "f32";
  std::string kv_cache_memory;
  int64_t probe_mib = 2048;
  std::vector<int64_t> batch;  // batched decode sizes
  bool json = false;
};

constexpr int64_t kBatchPrompt = 4;  // tokens of each batched-decode sequence's prompt

// Decode steps `num_seqs` sequences can take together in this KV cache (each a kBatchPrompt-token
// prompt plus one token per step), at most max_steps.
int64_t batch_steps(LLM& llm, int64_t num_seqs, int64_t max_steps) {
  const int64_t blocks_per_seq = llm.runner().num_blocks() / num_seqs;
  return std::min(max_steps, blocks_per_seq * llm.kv_manager().block_size() - kBatchPrompt);
}

// Output tokens/s of `num_seqs` requests decoding together through EngineCore (scheduler and
// greedy sampler included, as in serving): each a kBatchPrompt-token random prompt and
// batch_steps() tokens, EOS ignored. The first step (untimed) prefills every prompt and samples
// each request's first token; the batch_steps() - 1 timed steps give one token per request each.
// Precondition: batch_steps() >= 2 (run_latency checks it).
double batch_decode_tokens_per_s(LLM& llm, int64_t num_seqs, int64_t max_steps, std::mt19937& rng) {
  const int64_t steps = batch_steps(llm, num_seqs, max_steps);
  PAGELLM_CHECK(steps >= 2, "batch_decode_tokens_per_s: the batch does not fit");
  const int64_t vocab = llm.model().config().vocab_size;
  // Every sequence runs from the first step on, its prompt prefilled in that step.
  SchedulerLimits limits = llm.config().scheduler_limits();
  limits.max_num_seqs = static_cast<int32_t>(num_seqs);
  limits.max_num_batched_tokens = std::max(limits.max_num_batched_tokens, num_seqs * kBatchPrompt);
  EngineCore core(llm, limits);
  for (int64_t s = 0; s < num_seqs; ++s) {
    EngineRequest req;
    req.request_id = "batch-" + std::to_string(s);
    for (int64_t i = 0; i < kBatchPrompt; ++i) req.prompt_token_ids.push_back(static_cast<int32_t>(rng() % vocab));
    req.sampling.temperature = 0;
    req.max_tokens = static_cast<int32_t>(steps);
    req.ignore_eos = true;
    core.add_request(req);
  }
  int64_t tokens = 0;
  for (const EngineCoreOutput& out : core.step()) tokens += static_cast<int64_t>(out.new_token_ids.size());
  PAGELLM_CHECK(tokens == num_seqs, "bench: the first step did not start every sequence");
  tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (core.has_work()) {
    for (const EngineCoreOutput& out : core.step()) tokens += static_cast<int64_t>(out.new_token_ids.size());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  PAGELLM_CHECK(tokens == num_seqs * (steps - 1), "bench: a sequence stopped early");
  return secs > 0 ? static_cast<double>(tokens) / secs : 0;
}

double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is KiB on Linux
}

int run_latency(const LatencyArgs& a) {
  EngineConfig cfg;
  cfg.model_path = a.model.empty() ? default_model_path() : a.model;
  cfg.num_threads = a.threads;
  cfg.block_size = a.block_size;
  cfg.kv_dtype = parse_kv_dtype(a.kv_dtype);
  apply_kv_cache_memory(a.kv_cache_memory, cfg);
  LLM llm(cfg);
  for (const std::string& w : llm.load_warnings()) std::fprintf(stderr, "warning: %s\n", one_line(w).c_str());
  if (const std::string w = kv_cache_limit_warning(llm); !w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
  // The probe touches every byte of its buffer at the end: refuse it now rather than be killed then.
  if (const std::optional<MemoryLimit> bound = memory_bound_exceeded(a.probe_mib << 20)) {
    throw Error("bandwidth probe: --probe-mib " + std::to_string(a.probe_mib) + " needs " +
                format_mib(a.probe_mib << 20) + ", but " + bound->source + " is " + format_mib(bound->bytes) +
                "; lower --probe-mib");
  }
  const LlamaConfig& mc = llm.model().config();
  const int64_t ctx = llm.max_model_len();  // the context, or the KV pool when smaller
  // Decode needs 2 generated tokens to time one step; the prompt gives way to them.
  if (ctx < 3) {
    throw Error("a request holds at most " + std::to_string(ctx) +
                " tokens in this KV cache; bench latency needs 3 (a prompt token and 2 generated): give a larger "
                "--kv-cache-memory");
  }
  if (a.gen_tokens < 2 || a.gen_tokens > ctx - 1) {
    throw Error("--gen-tokens must be in [2, " + std::to_string(ctx - 1) + "] here (requests hold " +
                std::to_string(ctx) + " tokens: the model's context, or less in the KV cache), got " +
                std::to_string(a.gen_tokens));
  }
  if (a.prompt_tokens < 1) throw Error("--prompt-tokens must be >= 1, got " + std::to_string(a.prompt_tokens));
  const int64_t n_prompt = std::min<int64_t>(a.prompt_tokens, ctx - a.gen_tokens);
  const auto n_gen = static_cast<int32_t>(a.gen_tokens);
  if (n_prompt < a.prompt_tokens) {
    std::fprintf(
        stderr, "note: --prompt-tokens %lld + --gen-tokens %d exceed the context (%lld tokens): prompt of %lld\n",
        static_cast<long long>(a.prompt_tokens), n_gen, static_cast<long long>(ctx), static_cast<long long>(n_prompt));
  }
  // Every batch size must fit the KV cache for >= 2 steps.
  for (int64_t b : a.batch) {
    if (batch_steps(llm, b, n_gen) >= 2) continue;
    int64_t largest = 0;
    while (batch_steps(llm, largest + 1, n_gen) >= 2) ++largest;
    throw Error("--batch " + std::to_string(b) + ": " + std::to_string(b) + " sequences do not fit the KV cache (" +
                std::to_string(llm.runner().num_blocks()) + " blocks of " +
                std::to_string(llm.kv_manager().block_size()) + " tokens); at most " + std::to_string(largest) +
                " here");
  }

  // Deterministic random prompt over non-special tokens.
  std::mt19937 rng(1);
  std::vector<int32_t> prompt;
  if (llm.tokenizer().bos_id() >= 0) prompt.push_back(llm.tokenizer().bos_id());
  while (static_cast<int64_t>(prompt.size()) < n_prompt) {
    const auto id = static_cast<int32_t>(rng() % mc.vocab_size);
    if (!llm.tokenizer().is_control(id)) prompt.push_back(id);
  }
  GenerateOptions opt;
  opt.ignore_eos = true;
  opt.sampling.temperature = 0;
  opt.max_tokens = 4;  // warm-up: page in the weights, spin up the workers
  llm.generate(std::vector<int32_t>(prompt.begin(), prompt.begin() + std::min<int64_t>(8, n_prompt)), opt);
  opt.max_tokens = n_gen;
  const GenerateResult r = llm.generate(prompt, opt);
  const GenerateTimings& t = r.timings;
  nlohmann::json batch_tps = nlohmann::json::object();
  for (int64_t b : a.batch) batch_tps[std::to_string(b)] = batch_decode_tokens_per_s(llm, b, n_gen, rng);

  const double rss_mib = peak_rss_mib();  // before the probe's buffer
  const double bw = measure_read_bandwidth_gbps(llm.pool(), a.probe_mib << 20, 5);
  const double model_bytes = static_cast<double>(llm.model().weight_bytes());
  // What one decode step streams: every weight but the untied embedding table (one row of it).
  const double decode_bytes = static_cast<double>(llm.model().decode_bytes_per_token());
  const double achieved = decode_bytes * t.decode_tokens_per_s() / 1e9;
  // The kernels the model runs on (LLM loads it with the default: the CPU's best, capped by
  // PAGELLM_NO_AVX512 / PAGELLM_NO_AVX2), named with the figures.
  const char* isa = kernels::isa_name(kernels::default_isa());
  nlohmann::json j = {{"model", cfg.model_path},
                      {"threads", llm.pool().num_threads()},
                      {"kernels", isa},
                      {"kv_dtype", a.kv_dtype},
                      {"model_bytes", llm.model().weight_bytes()},
                      {"decode_bytes_per_token", llm.model().decode_bytes_per_token()},
                      {"prompt_tokens", n_prompt},
                      {"gen_tokens", t.decode_tokens},
                      {"prefill_tokens_per_s", t.prompt_tokens_per_s()},
                      {"decode_tokens_per_s", t.decode_tokens_per_s()},
                      {"decode_gb_per_s", achieved},
                      {"bandwidth_gb_per_s", bw},
                      {"bandwidth_fraction", bw > 0 ? achieved / bw : 0},
                      {"batch_decode_tokens_per_s", batch_tps},
                      {"peak_rss_mib", rss_mib}};
  if (a.json) {
    std::puts(j.dump().c_str());
  } else {
    std::printf("model %s (%.1f MiB of weights), %d threads, %s kernels, %s KV cache\n", cfg.model_path.c_str(),
                model_bytes / 1048576.0, llm.pool().num_threads(), isa, a.kv_dtype.c_str());
    std::printf("prompt processing: %lld tokens, %.1f tokens/s\n", static_cast<long long>(n_prompt),
                t.prompt_tokens_per_s());
    std::printf("generation:        %lld tokens, %.2f tokens/s (%.2f GB/s of weights)\n",
                static_cast<long long>(t.decode_tokens), t.decode_tokens_per_s(), achieved);
    std::printf("memory bandwidth probe: %.2f GB/s -> decode reaches %.1f%% of it\n", bw,
                bw > 0 ? 100 * achieved / bw : 0);
    // Batches decode after a kBatchPrompt-token prompt, the single stream after --prompt-tokens:
    // the ratio is against batch 1 when it was measured (the same context), else the single stream.
    const bool have_b1 = batch_tps.contains("1");
    const double base = have_b1 ? batch_tps["1"].get<double>() : t.decode_tokens_per_s();
    for (int64_t b : a.batch) {
      const double tps = batch_tps[std::to_string(b)].get<double>();
      std::printf("batched decode, %3lld sequences: %.2f output tokens/s (%.2fx %s)\n", static_cast<long long>(b), tps,
                  base > 0 ? tps / base : 0, have_b1 ? "batch 1" : "single stream");
    }
    std::printf("peak RSS (before the probe): %.1f MiB\n", rss_mib);
  }
  return 0;
}

}  // namespace

Handler add_bench(CLI::App& app) {
  app.require_subcommand(1);
  CLI::App* lat = app.add_subcommand("latency", "Single-stream prompt and generation tokens/s, with a bandwidth probe");
  auto a = std::make_shared<LatencyArgs>();
  lat->add_option("-m,--model", a->model, "GGUF model or Hugging Face directory (default: the bundled stories260K)");
  lat->add_option("--prompt-tokens", a->prompt_tokens,
                  "Prompt length, tokens (shortened so that prompt + generated tokens fit the context)");
  lat->add_option("--gen-tokens", a->gen_tokens,
                  "Tokens to generate (>= 2; the first comes from the prefill, the rest are timed decode steps)");
  lat->add_option("-t,--threads", a->threads, "Worker threads (0 or unset: all cores)")->check(CLI::Range(0, 4096));
  lat->add_option("--block-size", a->block_size, "Tokens per KV block (a power of two in [1, 256])")
      ->capture_default_str();
  lat->add_option("--kv-dtype", a->kv_dtype, "KV cache element type: f32 or f16")->capture_default_str();
  add_kv_cache_memory_option(*lat, a->kv_cache_memory, "one full context, at most 1 GiB");
  lat->add_option("--probe-mib", a->probe_mib, "Size of the bandwidth probe's buffer, MiB")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  lat->add_option("--batch", a->batch,
                  "Batched decode sizes, e.g. 1,4,16 (none by default); each must fit the KV cache of one context")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  lat->add_flag("--json", a->json, "Print one JSON object");
  Handler serve = add_bench_serve(app);
  return [a, lat, serve] {
    if (lat->parsed()) return run_latency(*a);
    return serve();
  };
}

}  // namespace pagellm::cli

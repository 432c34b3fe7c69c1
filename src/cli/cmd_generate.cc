#include <cstdio>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/llm.h"

namespace pagellm::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt;
  int32_t max_tokens = 128;
  float temperature = 0.8f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repetition_penalty = 1.0f;
  int64_t seed = -1;
  int threads = 0;
  int32_t block_size = EngineConfig{}.block_size;
  std::string kv_dtype = "f32";
  std::string kv_cache_memory;
  bool ignore_eos = false;
  bool json = false;
  EngineConfig speculative;  // its speculative_* / ngram_* / num_speculative_tokens fields only
};

int run_generate(const GenerateArgs& a) {
  EngineConfig cfg;
  cfg.model_path = a.model.empty() ? default_model_path() : a.model;
  cfg.num_threads = a.threads;
  cfg.block_size = a.block_size;
  cfg.kv_dtype = parse_kv_dtype(a.kv_dtype);
  apply_kv_cache_memory(a.kv_cache_memory, cfg);
  cfg.speculative_ngram = a.speculative.speculative_ngram;
  cfg.speculative_self_layers = a.speculative.speculative_self_layers;
  cfg.speculative_model = a.speculative.speculative_model;
  cfg.ngram_min = a.speculative.ngram_min;
  cfg.ngram_max = a.speculative.ngram_max;
  cfg.num_speculative_tokens = a.speculative.num_speculative_tokens;
  cfg.speculative_adaptive = a.speculative.speculative_adaptive;
  LLM llm(cfg);  // validates cfg
  for (const std::string& w : llm.load_warnings()) std::fprintf(stderr, "warning: %s\n", one_line(w).c_str());
  if (const std::string w = kv_cache_limit_warning(llm); !w.empty()) std::fprintf(stderr, "%s\n", w.c_str());

  GenerateOptions opt;
  opt.max_tokens = a.max_tokens;
  opt.ignore_eos = a.ignore_eos;
  opt.sampling.temperature = a.temperature;
  opt.sampling.top_k = a.top_k;
  opt.sampling.top_p = a.top_p;
  opt.sampling.min_p = a.min_p;
  opt.sampling.repetition_penalty = a.repetition_penalty;
  if (a.seed >= 0) opt.sampling.seed = static_cast<uint64_t>(a.seed);

  opt.sampling.validate(llm.tokenizer().vocab_size());  // before anything is printed
  const std::vector<int32_t> prompt_ids =
      llm.tokenizer().encode(a.prompt, /*add_special=*/true, /*parse_special=*/false);
  if (!a.json) {
    std::fputs(a.prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  auto on_text = [&](std::string_view delta) {
    if (a.json) return;
    std::fwrite(delta.data(), 1, delta.size(), stdout);
    std::fflush(stdout);
  };
  GenerateResult r;
  try {
    r = llm.generate(prompt_ids, opt, on_text);
  } catch (const Error&) {
    if (!a.json) std::fputs("\n", stdout);  // the error goes on its own line, after the text so far
    std::fflush(stdout);
    throw;
  }
  const GenerateTimings& t = r.timings;
  if (a.json) {
    nlohmann::json j;
    j["prompt_token_ids"] = r.prompt_token_ids;
    j["token_ids"] = r.token_ids;
    j["text"] = r.text;
    j["finish_reason"] = r.finish_reason;
    j["timings"] = {{"prompt_tokens", t.prompt_tokens},
                    {"prompt_ms", t.prompt_seconds * 1e3},
                    {"prompt_tokens_per_s", t.prompt_tokens_per_s()},
                    {"decode_tokens", t.decode_tokens},
                    {"decode_steps", t.decode_steps},
                    {"accepted_draft_tokens", t.num_accepted_draft_tokens},
                    {"spec_decode",
                     {{"num_drafts", t.spec.num_drafts},
                      {"num_draft_tokens", t.spec.num_draft_tokens},
                      {"num_accepted_tokens", t.spec.num_accepted_tokens},
                      {"num_accepted_tokens_per_pos",
                       std::vector<int64_t>(t.spec.num_accepted_tokens_per_pos.begin(),
                                            t.spec.num_accepted_tokens_per_pos.begin() +
                                                std::min<size_t>(t.spec.num_accepted_tokens_per_pos.size(),
                                                                 static_cast<size_t>(cfg.num_speculative_tokens)))}}},
                    {"decode_ms", t.decode_seconds * 1e3},
                    {"decode_tokens_per_s", t.decode_tokens_per_s()}};
    std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fputs("\n", stdout);
    std::fprintf(stderr,
                 "\nprompt: %lld tokens in %.1f ms (%.1f tokens/s); generation: %zu tokens, %lld decode steps in %.1f "
                 "ms (%.1f tokens/s, %lld accepted draft tokens); finish_reason=%s\n",
                 static_cast<long long>(t.prompt_tokens), t.prompt_seconds * 1e3, t.prompt_tokens_per_s(),
                 r.token_ids.size(), static_cast<long long>(t.decode_steps), t.decode_seconds * 1e3,
                 t.decode_tokens_per_s(), static_cast<long long>(t.num_accepted_draft_tokens), r.finish_reason.c_str());
  }
  return 0;
}

}  // namespace

Handler add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  app.add_option("-m,--model", a->model,
                 "GGUF model file or Hugging Face directory (default: models/stories260K-f32.gguf)");
  app.add_option("-p,--prompt", a->prompt, "Prompt text")->required();
  // (CLI::Range rather than NonNegativeNumber: its message would print the largest double in full.)
  app.add_option("-n,--max-tokens", a->max_tokens, "Tokens to generate (clamped to the context)")
      ->check(CLI::Range(0, std::numeric_limits<int32_t>::max()));
  app.add_option("--temp,--temperature", a->temperature, "Sampling temperature; 0 = greedy");
  app.add_option("--top-k", a->top_k, "Keep the k most likely tokens (0 = off)");
  app.add_option("--top-p", a->top_p, "Nucleus sampling mass in (0, 1]");
  app.add_option("--min-p", a->min_p, "Drop tokens below min_p x the top probability");
  app.add_option("--repeat-penalty", a->repetition_penalty, "Repetition penalty (1 = off)");
  app.add_option("--seed", a->seed, "RNG seed (-1 = random)");
  app.add_option("-t,--threads", a->threads, "Worker threads (default: all cores)")->check(CLI::Range(0, 4096));
  app.add_option("--block-size", a->block_size, "Tokens per KV block (a power of two in [1, 256])")
      ->capture_default_str();
  app.add_option("--kv-dtype", a->kv_dtype, "KV cache element type: f32 or f16");
  add_kv_cache_memory_option(app, a->kv_cache_memory, "one full context, at most 1 GiB");
  app.add_flag("--ignore-eos", a->ignore_eos, "Keep generating after the end-of-sequence token");
  add_speculative_options(app, a->speculative);
  app.add_flag("--json", a->json, "Print one JSON object: prompt_token_ids, token_ids, text, timings");
  return [a] { return run_generate(*a); };
}

}  // namespace pagellm::cli

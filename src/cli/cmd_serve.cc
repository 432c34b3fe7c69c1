// `pagellm serve`: the OpenAI-compatible HTTP server (src/server/serve.h).
#include <cstdlib>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "server/protocol.h"
#include "server/serve.h"

namespace pagellm::cli {

Handler add_serve(CLI::App& app) {
  auto o = std::make_shared<server::ServeOptions>();
  auto kv_dtype = std::make_shared<std::string>("f32");
  auto kv_cache_memory = std::make_shared<std::string>();
  EngineConfig& e = o->engine;
  app.add_option("-m,--model", e.model_path,
                 "GGUF model file or Hugging Face directory (default: the bundled stories260K)");
  app.add_option("--host", o->host, "Address to listen on")->capture_default_str();
  app.add_option("--port", o->port, "TCP port (0: any free port, printed at start-up)")->capture_default_str();
  app.add_option("--threads", e.num_threads,
                 "Model worker threads (0: all logical CPUs, std::thread::hardware_concurrency)")
      ->capture_default_str();
  app.add_option("--io-threads", o->io_threads, "HTTP I/O threads")->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--max-num-seqs", e.max_num_seqs, "Most requests running in one step")->capture_default_str();
  app.add_option("--max-num-batched-tokens", e.max_num_batched_tokens, "Token budget of one step (forward pass)")
      ->capture_default_str();
  app.add_option("--block-size", e.block_size, "Tokens per KV block (a power of two in [1, 256])")
      ->capture_default_str();
  add_kv_cache_memory_option(app, *kv_cache_memory, "16 full contexts, at most 1 GiB");
  app.add_option("--kv-dtype", *kv_dtype, "KV cache dtype: f32 or f16")->capture_default_str();
  auto max_step = std::make_shared<std::string>("auto");
  auto* max_step_opt =
      app.add_option("--max-step-ms", *max_step,
                     "Step-time budget (ms): prefill chunks are sized so that a step's predicted time stays within "
                     "it and running decodes never wait behind a long prompt; auto: --auto-step-factor x the "
                     "predicted time of the running decodes alone; 0: none")
          ->capture_default_str();
  auto* factor_opt =
      app.add_option("--auto-step-factor", e.auto_step_factor,
                     "With --max-step-ms auto: a step may take this many times the predicted time of its decodes alone")
          ->capture_default_str();
  app.add_option("--max-queue-delay-s", e.max_queue_delay_s,
                 "Refuse (429) a request whose predicted time to first token, from the prompt tokens queued ahead "
                 "of it (running, and waiting of its priority or better) at the measured step speed, exceeds "
                 "this many seconds (0: off)")
      ->capture_default_str();
  auto target_itl = std::make_shared<double>(0);
  app.add_option("--target-itl-ms", *target_itl, "Inter-token latency target (ms): sets --max-step-ms to 0.9 x it")
      ->excludes(max_step_opt)
      ->check(CLI::Range(0.0, 3.6e6));
  add_speculative_options(app, e);
  app.add_flag(
      "--no-prefix-caching", [o](int64_t) { o->engine.enable_prefix_caching = false; },
      "Turn off automatic prefix caching (shared KV blocks for shared prompt prefixes)");
  app.add_option("--max-waiting", e.max_waiting, "Waiting-queue bound; beyond it requests get 429")
      ->capture_default_str();
  app.add_option("--max-n", o->max_n,
                 "Most sequences (prompts x n, or x best_of) one request may start, and at most --max-waiting; "
                 "more is a 400")
      ->capture_default_str()
      ->check(CLI::Range(1, server::kMaxSequencesPerRequest));
  app.add_option("--api-key", o->api_key, "Require 'Authorization: Bearer KEY' (default: $PAGELLM_API_KEY if set)");
  app.add_option("--served-model-name", o->served_model_name,
                 "Model name in the API (default: the file name without .gguf)");
  app.add_option("--max-body-bytes", o->max_body_bytes,
                 "Largest request body; larger ones get 413 (default: 1 MiB + 64 bytes per token of context)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--api-threads", o->api_threads, "Threads that parse request bodies and tokenise prompts")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--api-queue", o->api_queue,
                 "Request bodies waiting for those threads (default: --max-waiting; at most 16 x --max-body-bytes "
                 "held); beyond it requests get 429")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--generation-config", o->generation_config,
                 "auto: sampling fields a request leaves out take the model's defaults (generation_config.json, "
                 "GGUF general.sampling.*); vllm: the OpenAI defaults (temperature 1, nothing else)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "vllm"}));
  app.add_option("--allowed-origins", o->allowed_origins,
                 "Origins (scheme://host[:port], or *) whose web pages may call the API (CORS); default: none")
      ->delimiter(',');
  app.add_option("--timeout", o->timeout_seconds,
                 "Seconds a client may take to send a request's headers (and to idle between requests), then as "
                 "long for its body (408 past it)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  app.add_option("--drain-timeout", o->drain_timeout_seconds,
                 "Seconds to let running requests finish after SIGINT/SIGTERM")
      ->capture_default_str();
  return [o, kv_dtype, kv_cache_memory, target_itl, max_step, factor_opt] {
    EngineConfig& e = o->engine;
    if (*max_step == "auto") {
      e.max_step_ms = EngineConfig::kAutoMaxStepMs;
    } else {
      size_t used = 0;
      try {
        e.max_step_ms = std::stod(*max_step, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != max_step->size() || !(e.max_step_ms >= 0)) {
        throw Error("--max-step-ms must be auto or in [0, 3600000] milliseconds, got '" + *max_step + "'");
      }
    }
    if (*target_itl > 0) e.max_step_ms = 0.9 * *target_itl;  // headroom for the model's error
    if (factor_opt->count() > 0 && e.max_step_ms != EngineConfig::kAutoMaxStepMs) {
      throw Error(
          "--auto-step-factor applies only with --max-step-ms auto, not with a fixed budget (--max-step-ms "
          "MS, --target-itl-ms MS) or none");
    }
    if (e.model_path.empty()) e.model_path = default_model_path();
    if (o->api_key.empty()) {
      if (const char* key = std::getenv("PAGELLM_API_KEY")) o->api_key = key;
    }
    e.kv_dtype = parse_kv_dtype(*kv_dtype);
    apply_kv_cache_memory(*kv_cache_memory, e);
    if (o->drain_timeout_seconds < 0) throw Error("--drain-timeout must be >= 0");
    return server::run_serve(*o);
  };
}

}  // namespace pagellm::cli

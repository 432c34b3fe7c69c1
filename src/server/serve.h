// `pagellm serve`: loads the model, starts the engine thread and the HTTP server, and runs until
// SIGINT / SIGTERM; then stops accepting, lets running requests finish for up to the drain
// timeout, aborts the rest (their streams end with finish_reason "abort"), and returns 0. A signal
// during the model load exits the process at once with 128 + the signal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine_config.h"

namespace pagellm::server {

// serve's engine defaults: EngineConfig's, with a KV pool of 16 full contexts (at most 1 GiB).
inline EngineConfig serve_engine_defaults() {
  EngineConfig c;
  c.kv_cache_default_contexts = 16;
  return c;
}

struct ServeOptions {
  // Model, threads, block size, KV pool, batch limits, waiting-queue bound, prefix caching: built
  // once from the command line, validated by LLM's constructor.
  EngineConfig engine = serve_engine_defaults();
  std::string host = "127.0.0.1";
  uint16_t port = 8000;   // 0: ephemeral (the log line names it)
  int io_threads = 2;     // HTTP I/O threads
  int api_threads = 2;    // threads that parse bodies and tokenise (WorkQueue)
  int32_t api_queue = 0;  // bodies waiting for those threads (0: max_waiting);
                          // they may hold 16 x max_body_bytes; beyond: 429
  // --max-n: the most sequences (prompts x best_of, i.e. x n) one HTTP request may start; more is
  // a 400. Default 64, the default --max-num-seqs: one request's sequences then fit one step's
  // batch, so its n children run side by side as in vLLM, and one request can take at most 1/16 of
  // the default waiting queue instead of all of it (the protocol's hard cap is 1024). In force:
  // min(max_n, max_waiting), so a request that could never enter the queue is a 400, not a 429
  // that no retry can cure.
  int32_t max_n = 64;
  std::string api_key;                       // "" : no authentication
  std::string served_model_name;             // "" : the model file name without ".gguf"
  int64_t max_body_bytes = 0;                // 0: default_max_body_bytes(max_model_len)
  std::vector<std::string> allowed_origins;  // CORS: origins whose pages may call the API ("*": any)
  // --generation-config: "auto" (the model's general.sampling.* fill a request's omitted sampling
  // fields, as vLLM's default) or "vllm" (the OpenAI defaults: temperature 1, no top_k/top_p/min_p).
  std::string generation_config = "auto";
  double drain_timeout_seconds = 30;
  double timeout_seconds = 60;  // --timeout: HttpServer::Options::idle_timeout_seconds
};

// A --kv-cache-memory value: exactly one of the two is > 0.
struct KvCacheMemory {
  int64_t bytes = 0;
  int64_t blocks = 0;
};

// "1073741824", "64MiB", "1.5GiB", "512KB", "2G", "200blocks", "200 blocks". Units: B; KB, MB, GB,
// TB (powers of 1000); KiB, MiB, GiB, TiB and K, M, G, T (powers of 1024). Case-insensitive; the
// number is decimal digits with an optional fraction (a block count: digits only).
// Throws pagellm::Error naming the flag, the value and what is wrong: anything else, a value < 1,
// more than 9e18 bytes or 2e9 blocks.
KvCacheMemory parse_kv_cache_memory(const std::string& text);

// The default request body limit, bytes, for a model whose requests hold at most max_model_len
// tokens: 1 MiB + 64 bytes per token of context. 64 bytes covers one token of prompt as JSON text
// at its worst (a long piece with every byte escaped as \u00XX) or as an id ("151935, "); the MiB
// leaves room for the other fields (stop strings, logit_bias, messages' framing, a few prompts).
// stories260K (512 tokens): 1.03 MiB; an 8k-context model: 1.5 MiB; 128k: 9 MiB.
int64_t default_max_body_bytes(int64_t max_model_len);

// "models/stories260K-f32.gguf" -> "stories260K-f32".
std::string default_served_model_name(const std::string& model_path);

// Runs the server; returns the process exit code. Throws pagellm::Error for a bad model file,
// option or address (before anything is served).
int run_serve(const ServeOptions& options);

}  // namespace pagellm::server

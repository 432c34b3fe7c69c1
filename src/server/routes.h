// The HTTP routes of `pagellm serve` (OpenAI-compatible API plus vLLM's extras):
//   POST /v1/completions        POST /v1/chat/completions   GET /v1/models   GET /v1/models/{id}
//   POST /tokenize              POST /detokenize
//   GET  /health  /ping  /version  /metrics                  (never need the API key)
// Every GET route answers HEAD too (headers only). Unknown path: 404; known path, other method:
// 405 with Allow. Before a route runs, in this order:
//   - Host: when the server listens on a loopback address, the Host header must name a loopback
//     host (localhost, *.localhost, 127.0.0.0/8, [::1]), an IP literal, the --host value or the
//     host of an allowed origin; else 403 (a page that rebinds its own DNS name to 127.0.0.1 then
//     cannot reach the server). On other addresses any Host is accepted.
//   - Origin (sent by browsers): it must be the server's own origin (same host:port as Host) or
//     one of --allowed-origins ("*" for any); else 403. Allowed origins get CORS headers and
//     their OPTIONS preflights are answered 204.
//   - With an API key, "Authorization: Bearer <key>" (401 otherwise).
//   - POST bodies must be Content-Type application/json (415 otherwise): a form or text/plain
//     body is what a browser may send cross-origin without a preflight.
// Bodies are parsed, validated and tokenised on the WorkQueue's threads, never on the I/O
// threads; a full queue gets 429 with Retry-After. While draining, generation and /health
// answer 503 with Retry-After.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_client.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/protocol.h"
#include "server/work_queue.h"

namespace pagellm::server {

struct RoutesOptions {
  std::string served_model_name;
  std::string api_key;                                          // "" for none
  std::string listen_host = "127.0.0.1";                        // --host
  std::vector<std::string> allowed_origins;                     // --allowed-origins: "scheme://host[:port]" or "*"
  int32_t max_sequences_per_request = kMaxSequencesPerRequest;  // --max-n
  bool model_generation_config = true;  // --generation-config auto: the model's general.sampling.* defaults
};

class Routes {
 public:
  // All references must outlive this. `tokenizer` is the frontend's, loaded once at start-up;
  // the chat format is detected here, once, from engine.model_facts().chat_template.
  Routes(EngineClient& engine, const Tokenizer& tokenizer, ServerMetrics& metrics, WorkQueue& work,
         RoutesOptions options);

  // The RequestHandler: runs on the connection's strand; never throws.
  void handle(HttpRequest request, const std::shared_ptr<Exchange>& exchange);

  // From now on new generation requests get 503 (thread-safe).
  void set_draining() { draining_ = true; }

 private:
  HttpResponse dispatch(HttpRequest& req, const std::shared_ptr<Exchange>& ex, bool* answered);
  // On a WorkQueue thread: parses the body and answers (through the exchange's strand).
  void run_post(const HttpRequest& req, const std::shared_ptr<Exchange>& ex);
  void check_host(const HttpRequest& req) const;
  // Whether `origin` may call the API from a browser (CORS).
  bool origin_allowed(const std::string& origin, const std::string& host) const;
  bool authorized(const HttpRequest& req) const;

  EngineClient& engine_;
  ServerMetrics& metrics_;
  WorkQueue& work_;
  RoutesOptions options_;
  bool loopback_only_;  // listen_host is a loopback address or name
  ModelInfo model_;
  int64_t created_;  // Unix seconds at start-up (the model card's `created`)
  std::atomic<bool> draining_{false};
};

// The host part of a Host header value or of an origin's authority, lower-cased: "[::1]:8000"
// -> "::1", "Example.com:80" -> "example.com".
std::string host_name_of(const std::string& authority);
// Whether the host (as host_name_of returns it) is localhost, *.localhost, 127.0.0.0/8 or ::1.
bool is_loopback_host(const std::string& host);

}  // namespace pagellm::server

// The HTTP routes of `pagellm serve` (OpenAI-compatible API plus vLLM's extras):
//   POST /v1/completions        POST /v1/chat/completions   GET /v1/models
//   POST /tokenize              POST /detokenize
//   GET  /health                GET  /metrics               (never need the API key)
// Unknown path: 404; known path, other method: 405 with Allow. With an API key, every other
// route needs "Authorization: Bearer <key>" (401 otherwise). While draining, generation and
// /health answer 503 with Retry-After.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/async_engine.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/protocol.h"

namespace pagellm::server {

class Routes {
 public:
  // api_key: "" for none. All references must outlive this.
  Routes(AsyncEngine& engine, ServerMetrics& metrics, std::string served_model_name, std::string api_key);

  // The RequestHandler: runs on the connection's strand; never throws.
  void handle(HttpRequest request, std::shared_ptr<Exchange> exchange);

  // From now on new generation requests get 503 (thread-safe).
  void set_draining() { draining_ = true; }

 private:
  HttpResponse dispatch(const HttpRequest& req, const std::shared_ptr<Exchange>& ex, bool* answered);
  void generate(Endpoint endpoint, const HttpRequest& req, const std::shared_ptr<Exchange>& ex);
  bool authorized(const HttpRequest& req) const;

  AsyncEngine& engine_;
  ServerMetrics& metrics_;
  ModelInfo model_;
  std::string api_key_;
  int64_t created_;  // Unix seconds at start-up (the model card's `created`)
  std::atomic<bool> draining_{false};
};

}  // namespace pagellm::server

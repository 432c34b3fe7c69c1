// One generation request (completions or chat) in flight: its sequences in the engine, their
// outputs relayed to the client as one JSON body or as SSE chunks, and aborts when the client
// goes away.
#pragma once

#include <memory>

#include "engine/engine_client.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/protocol.h"

namespace pagellm::server {

// Submits plan.requests to the engine and answers `exchange` when all have finished (streams
// as they go when plan.stream). Call on the exchange's strand. Every output also goes to
// metrics.on_output (on the engine thread).
// Throws ApiError 429 (waiting queue full, with Retry-After), 503 (shutting down) or 400 (the
// engine refused a request) before anything was sent; then none of its sequences is in the engine
// (they are admitted all or none, EngineClient::add_requests). `tokenizer` (the frontend's)
// renders logprobs; it and `engine` must outlive the generation.
void start_generation(GenerationPlan plan, std::shared_ptr<Exchange> exchange, EngineClient& engine,
                      const Tokenizer& tokenizer, ServerMetrics& metrics);

}  // namespace pagellm::server

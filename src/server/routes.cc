#include "server/routes.h"

#include <ctime>

#include "core/error.h"
#include "server/generation.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::server {

namespace {

struct Route {
  const char* path;
  const char* method;
};

constexpr Route kRoutes[] = {
    {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"}, {"/v1/models", "GET"}, {"/tokenize", "POST"},
    {"/detokenize", "POST"},     {"/health", "GET"},               {"/metrics", "GET"},
};

HttpResponse json_response(const nlohmann::json& body) {
  HttpResponse r;
  r.body = dump_json(body);
  return r;
}

HttpResponse error_response(const ApiError& e) {
  HttpResponse r;
  r.status = e.status();
  r.body = error_body(e);
  r.headers = e.headers;
  return r;
}

ApiError unavailable() {
  ApiError e(503, "the server is shutting down", "service_unavailable");
  e.headers.emplace_back("Retry-After", "1");
  return e;
}

// Compares without an early exit, so the time taken does not reveal how much of the key matched.
bool constant_time_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

Routes::Routes(AsyncEngine& engine, ServerMetrics& metrics, std::string served_model_name, std::string api_key)
    : engine_(engine), metrics_(metrics), api_key_(std::move(api_key)), created_(std::time(nullptr)) {
  model_.tokenizer = &engine.tokenizer();
  model_.file = &engine.llm().file();
  model_.served_model_name = std::move(served_model_name);
  model_.max_model_len = static_cast<int32_t>(engine.max_model_len());
}

bool Routes::authorized(const HttpRequest& req) const {
  if (api_key_.empty() || req.path == "/health" || req.path == "/metrics") return true;
  return constant_time_equal(req.authorization, "Bearer " + api_key_);
}

void Routes::handle(HttpRequest req, std::shared_ptr<Exchange> ex) {
  HttpResponse r;
  bool answered = false;
  try {
    r = dispatch(req, ex, &answered);
  } catch (const ApiError& e) {
    r = error_response(e);
  } catch (const Error& e) {
    r = error_response(bad_request(e.what()));
  } catch (const std::exception& e) {
    r = error_response(ApiError(500, std::string("internal error: ") + e.what(), "server_error"));
    answered = false;
  }
  if (!answered) ex->respond(std::move(r));
}

// Returns the response, or sets *answered when the exchange is answered later (generation).
HttpResponse Routes::dispatch(const HttpRequest& req, const std::shared_ptr<Exchange>& ex, bool* answered) {
  const Route* route = nullptr;
  std::string allow;
  for (const Route& rt : kRoutes) {
    if (req.path != rt.path) continue;
    allow = rt.method;
    if (req.method == rt.method) route = &rt;
  }
  if (allow.empty()) {
    throw ApiError(404, "Invalid URL (" + req.method + " " + req.path + ")", "invalid_request_error");
  }
  if (!route) {
    ApiError e(405, "Method " + req.method + " not allowed on " + req.path + "; use " + allow, "invalid_request_error");
    e.headers.emplace_back("Allow", allow);
    throw e;
  }
  if (!authorized(req)) {
    throw ApiError(401, "Incorrect or missing API key: send 'Authorization: Bearer <key>'", "invalid_request_error",
                   std::nullopt, "invalid_api_key");
  }
  const std::string& path = req.path;
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    generate(path == "/v1/completions" ? Endpoint::kCompletions : Endpoint::kChat, req, ex);
    *answered = true;
    return {};
  }
  if (path == "/health") {
    if (draining_) throw unavailable();
    return HttpResponse{200, "application/json", "", {}};
  }
  if (path == "/metrics") {
    HttpResponse r;
    r.content_type = ServerMetrics::kContentType;
    r.body = metrics_.render(engine_.stats());
    return r;
  }
  if (path == "/v1/models") return json_response(models_response(model_, created_));
  if (path == "/tokenize") return json_response(tokenize_response(parse_json_body(req.body), model_));
  return json_response(detokenize_response(parse_json_body(req.body), model_));
}

void Routes::generate(Endpoint endpoint, const HttpRequest& req, const std::shared_ptr<Exchange>& ex) {
  if (draining_) throw unavailable();
  const nlohmann::json body = parse_json_body(req.body);
  const int64_t now = std::time(nullptr);
  GenerationPlan plan = endpoint == Endpoint::kChat
                            ? parse_chat_request(body, model_, random_id("chatcmpl-"), now)
                            : parse_completion_request(body, model_, random_id("cmpl-"), now);
  start_generation(std::move(plan), ex, engine_, metrics_);
}

}  // namespace pagellm::server

#include "server/routes.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <ctime>

#include "core/build_info.h"
#include "core/error.h"
#include "server/generation.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::server {

namespace {

// How a route is served: inline on the I/O strand (cheap, bounded work) or on the WorkQueue.
enum class Kind { kInline, kWorker };

struct Route {
  const char* path;     // exact, or a prefix when it ends with '/'
  const char* methods;  // "GET" routes answer HEAD too
  Kind kind;
};

constexpr Route kRoutes[] = {
    {"/v1/completions", "POST", Kind::kWorker},
    {"/v1/chat/completions", "POST", Kind::kWorker},
    {"/tokenize", "POST", Kind::kWorker},
    {"/detokenize", "POST", Kind::kWorker},
    {"/v1/models", "GET", Kind::kInline},
    {"/v1/models/", "GET", Kind::kInline},  // /v1/models/{id}
    {"/health", "GET", Kind::kInline},
    {"/ping", "GET, POST", Kind::kInline},  // as vLLM (SageMaker's liveness probe)
    {"/version", "GET", Kind::kInline},
    {"/metrics", "GET", Kind::kInline},
};

bool path_matches(const Route& rt, const std::string& path) {
  const std::string p = rt.path;
  if (p.back() == '/') return path.size() > p.size() && path.compare(0, p.size(), p) == 0;
  return path == p;
}

bool method_allowed(const Route& rt, const std::string& method) {
  const std::string allow = rt.methods;
  const std::string m = method == "HEAD" ? "GET" : method;
  size_t pos = 0;
  while (pos < allow.size()) {
    size_t end = allow.find(", ", pos);
    if (end == std::string::npos) end = allow.size();
    if (allow.compare(pos, end - pos, m) == 0) return true;
    pos = end + 2;
  }
  return false;
}

std::string allow_header(const Route& rt) {
  std::string allow = rt.methods;
  if (allow.find("GET") != std::string::npos) allow += ", HEAD";
  return allow + ", OPTIONS";
}

template <class Json>
HttpResponse json_response(const Json& body) {
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

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "application/json; charset=utf-8" -> true (the media type, case-insensitive, before any ';').
bool is_json_media_type(const std::string& content_type) {
  std::string type = lower(content_type.substr(0, content_type.find(';')));
  type.erase(0, type.find_first_not_of(" \t"));
  type.erase(type.find_last_not_of(" \t") + 1);
  return type == "application/json";
}

bool is_ip_literal(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// "http://a.b:8000" -> "a.b:8000" (the authority of an origin), "" if it has no "://".
std::string origin_authority(const std::string& origin) {
  const size_t p = origin.find("://");
  return p == std::string::npos ? "" : origin.substr(p + 3);
}

}  // namespace

std::string host_name_of(const std::string& authority) {
  std::string a = lower(authority);
  if (!a.empty() && a.front() == '[') {
    const size_t close = a.find(']');
    return close == std::string::npos ? a : a.substr(1, close - 1);
  }
  const size_t colon = a.find(':');
  if (colon != std::string::npos && a.find(':', colon + 1) == std::string::npos) a.resize(colon);
  if (!a.empty() && a.back() == '.') a.pop_back();  // "localhost." names the same host
  return a;
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  const std::string suffix = ".localhost";  // RFC 6761: always the loopback interface
  if (host.size() > suffix.size() && host.compare(host.size() - suffix.size(), suffix.size(), suffix) == 0) return true;
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

Routes::Routes(EngineClient& engine, const Tokenizer& tokenizer, ServerMetrics& metrics, WorkQueue& work,
               RoutesOptions options)
    : engine_(engine),
      metrics_(metrics),
      work_(work),
      options_(std::move(options)),
      loopback_only_(is_loopback_host(host_name_of(options_.listen_host))),
      created_(std::time(nullptr)) {
  model_.tokenizer = &tokenizer;
  model_.chat_format = detect_chat_format(engine.model_facts().chat_template);
  model_.served_model_name = options_.served_model_name;
  model_.max_model_len = static_cast<int32_t>(engine.model_facts().max_model_len);
  model_.max_sequences_per_request = options_.max_sequences_per_request;
  model_.speculative = engine.model_facts().speculative;
  if (options_.model_generation_config) model_.default_sampling = engine.model_facts().default_sampling;
}

bool Routes::authorized(const HttpRequest& req) const {
  if (options_.api_key.empty()) return true;
  for (const char* open : {"/health", "/metrics", "/ping", "/version"}) {
    if (req.path == open) return true;
  }
  // The scheme is case-insensitive (RFC 9110 11.1), the key is not.
  const std::string scheme = "bearer ";
  const std::string& a = req.authorization;
  if (a.size() < scheme.size() || lower(a.substr(0, scheme.size())) != scheme) return false;
  return constant_time_equal(a.substr(scheme.size()), options_.api_key);
}

void Routes::check_host(const HttpRequest& req) const {
  if (req.host_headers > 1) throw bad_request("more than one Host header");
  if (req.host_headers == 0) {
    if (req.version >= 11) throw bad_request("an HTTP/1.1 request needs a Host header");
    return;  // HTTP/1.0 may omit it; browsers always send one
  }
  if (!loopback_only_) return;
  const std::string host = host_name_of(req.host);
  if (is_loopback_host(host) || is_ip_literal(host) || host == host_name_of(options_.listen_host)) return;
  for (const std::string& o : options_.allowed_origins) {
    if (o != "*" && host == host_name_of(origin_authority(o))) return;
  }
  throw ApiError(403,
                 "Host '" + req.host.substr(0, 256) +
                     "' is not this server's: a server on a loopback address answers only to loopback host "
                     "names, IP addresses, --host and the hosts of --allowed-origins",
                 "invalid_request_error", std::nullopt, "host_not_allowed");
}

bool Routes::origin_allowed(const std::string& origin, const std::string& host) const {
  for (const std::string& o : options_.allowed_origins) {
    if (o == "*" || lower(o) == lower(origin)) return true;
  }
  // Same origin: a page served from this very host:port.
  const std::string authority = origin_authority(origin);
  return !authority.empty() && lower(authority) == lower(host);
}

void Routes::handle(HttpRequest req, const std::shared_ptr<Exchange>& ex) {
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

// Returns the response, or sets *answered when the exchange is answered later (on a worker, or
// by a generation).
HttpResponse Routes::dispatch(HttpRequest& req, const std::shared_ptr<Exchange>& ex, bool* answered) {
  check_host(req);
  const Route* route = nullptr;
  for (const Route& rt : kRoutes) {
    if (path_matches(rt, req.path)) route = &rt;
  }
  if (!route) throw ApiError(404, "Invalid URL (" + req.method + " " + req.path + ")", "invalid_request_error");
  if (!req.origin.empty()) {
    if (!origin_allowed(req.origin, req.host)) {
      throw ApiError(403,
                     "Origin '" + req.origin.substr(0, 256) +
                         "' is not allowed; start the server with "
                         "--allowed-origins to let a web page call it",
                     "invalid_request_error", std::nullopt, "origin_not_allowed");
    }
    ex->set_response_headers({{"Access-Control-Allow-Origin", req.origin}, {"Vary", "Origin"}});
  }
  if (req.method == "OPTIONS") {  // a CORS preflight, or a plain OPTIONS
    HttpResponse r{204, "application/json", "", {{"Allow", allow_header(*route)}}};
    if (!req.origin.empty()) {
      r.headers.emplace_back("Access-Control-Allow-Methods", allow_header(*route));
      r.headers.emplace_back("Access-Control-Allow-Headers", "authorization, content-type");
      r.headers.emplace_back("Access-Control-Max-Age", "600");
    }
    return r;
  }
  if (!method_allowed(*route, req.method)) {
    ApiError e(405, "Method " + req.method + " not allowed on " + req.path + "; use " + route->methods,
               "invalid_request_error");
    e.headers.emplace_back("Allow", allow_header(*route));
    throw e;
  }
  if (!authorized(req)) {
    throw ApiError(401, "Incorrect or missing API key: send 'Authorization: Bearer <key>'", "invalid_request_error",
                   std::nullopt, "invalid_api_key");
  }
  const std::string& path = req.path;
  if (route->kind == Kind::kWorker) {
    if (!is_json_media_type(req.content_type)) {
      throw ApiError(415,
                     "Content-Type must be application/json, got " +
                         (req.content_type.empty() ? std::string("none") : "'" + req.content_type.substr(0, 128) + "'"),
                     "invalid_request_error", std::nullopt, "unsupported_media_type");
    }
    const bool generation = path == "/v1/completions" || path == "/v1/chat/completions";
    if (generation && draining_) throw unavailable();
    auto shared = std::make_shared<HttpRequest>(std::move(req));
    const auto bytes = static_cast<int64_t>(shared->body.size());
    if (!work_.try_submit([this, shared, ex] { run_post(*shared, ex); }, bytes)) {
      ApiError e(429,
                 "too many request bodies waiting to be parsed (at most " + std::to_string(work_.max_queued()) +
                     " holding " + std::to_string(work_.max_queued_bytes()) + " bytes); retry later",
                 "rate_limit_error", std::nullopt, "rate_limit_exceeded");
      e.headers.emplace_back("Retry-After", "1");
      throw e;
    }
    *answered = true;
    return {};
  }
  if (path == "/health") {
    if (draining_) throw unavailable();
    return json_response(nlohmann::json{{"status", "ok"}});
  }
  if (path == "/ping") return json_response(nlohmann::json{{"status", "ok"}});
  if (path == "/version") return json_response(nlohmann::json{{"version", build_info().version}});
  if (path == "/metrics") {
    HttpResponse r;
    r.content_type = ServerMetrics::kContentType;
    r.body = metrics_.render(engine_.stats());
    return r;
  }
  ResponseJson models = models_response(model_, created_);
  for (auto& card : models["data"]) card["pagellm_version"] = build_info().version;  // extension field
  if (path == "/v1/models") return json_response(models);
  // /v1/models/{id}
  const std::string id = path.substr(std::string("/v1/models/").size());
  if (id != model_.served_model_name) {
    throw ApiError(404, "The model '" + id.substr(0, 256) + "' does not exist", "invalid_request_error", "model",
                   "model_not_found");
  }
  return json_response(models["data"][0]);
}

void Routes::run_post(const HttpRequest& req, const std::shared_ptr<Exchange>& ex) {
  auto answer = [&ex](HttpResponse r) {
    auto shared = std::make_shared<HttpResponse>(std::move(r));
    ex->post([ex, shared] { ex->respond(std::move(*shared)); });
  };
  try {
    const std::string& path = req.path;
    if (path == "/tokenize") return answer(json_response(tokenize_response(parse_json_body(req.body), model_)));
    if (path == "/detokenize") return answer(json_response(detokenize_response(parse_json_body(req.body), model_)));
    const auto body = parse_json_body(req.body);
    const int64_t now = std::time(nullptr);
    auto plan = std::make_shared<GenerationPlan>(path == "/v1/chat/completions"
                                                     ? parse_chat_request(body, model_, random_id("chatcmpl-"), now)
                                                     : parse_completion_request(body, model_, random_id("cmpl-"), now));
    ex->post([this, ex, plan] {
      if (!ex->is_open()) return;  // the client left while its body was parsed
      try {
        if (draining_) throw unavailable();
        start_generation(std::move(*plan), ex, engine_, *model_.tokenizer, metrics_);
      } catch (const ApiError& e) {
        ex->respond(error_response(e));
      } catch (const std::exception& e) {
        ex->respond(error_response(ApiError(500, std::string("internal error: ") + e.what(), "server_error")));
      }
    });
  } catch (const ApiError& e) {
    answer(error_response(e));
  } catch (const Error& e) {
    answer(error_response(bad_request(e.what())));
  } catch (const std::exception& e) {
    answer(error_response(ApiError(500, std::string("internal error: ") + e.what(), "server_error")));
  }
}

}  // namespace pagellm::server

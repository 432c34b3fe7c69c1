// Errors returned to HTTP clients, in the body shape of the OpenAI API reference
// ("Error codes"; vLLM's `ErrorResponse`):
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "temperature", "code": null}}
// An ApiError is thrown by the request parsers and caught at the route boundary, which turns it
// into a response with `status`; the server then keeps serving.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace pagellm::server {

class ApiError : public std::runtime_error {
 public:
  // status: HTTP status (400, 401, 404, 405, 413, 429, 503 ...). type: OpenAI's error type.
  // param: the offending request field (dotted path for nested ones), or none.
  // code: OpenAI's machine-readable code (e.g. "model_not_found"), or none.
  ApiError(int status, const std::string& message, std::string type, std::optional<std::string> param = std::nullopt,
           std::optional<std::string> code = std::nullopt)
      : std::runtime_error(message),
        status_(status),
        type_(std::move(type)),
        param_(std::move(param)),
        code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::optional<std::string>& param() const { return param_; }
  const std::optional<std::string>& code() const { return code_; }
  // Extra response headers (e.g. Retry-After for 429 / 503).
  std::vector<std::pair<std::string, std::string>> headers;

 private:
  int status_;
  std::string type_;
  std::optional<std::string> param_;
  std::optional<std::string> code_;
};

// 400 invalid_request_error naming `param`.
inline ApiError bad_request(const std::string& message, std::optional<std::string> param = std::nullopt,
                            std::optional<std::string> code = std::nullopt) {
  return ApiError(400, message, "invalid_request_error", std::move(param), std::move(code));
}

// The JSON body {"error": {...}} of `e`, serialised.
std::string error_body(const ApiError& e);

}  // namespace pagellm::server

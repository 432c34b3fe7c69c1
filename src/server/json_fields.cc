#include "server/json_fields.h"

#include <cmath>

#include "server/api_error.h"

namespace pagellm::server {

namespace {

std::string brief(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 64) s = s.substr(0, 61) + "...";
  return s;
}

}  // namespace

void wrong_type(const std::string& param, const char* what, const nlohmann::json& value) {
  throw bad_request("'" + param + "' must be " + what + ", got " + brief(value), param);
}

std::optional<int64_t> as_integer(const nlohmann::json& v) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.2e18) return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

Fields::Fields(const nlohmann::json& obj) : obj_(obj) {
  if (!obj.is_object()) throw bad_request("the request body must be a JSON object, got " + brief(obj));
}

const nlohmann::json* Fields::get(const char* name) const {
  const auto it = obj_.find(name);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<int64_t> Fields::integer(const char* name, int64_t min, int64_t max) const {
  const nlohmann::json* v = get(name);
  if (!v) return std::nullopt;
  const std::optional<int64_t> i = as_integer(*v);
  if (!i) wrong_type(name, "an integer", *v);
  if (*i < min || *i > max) {
    throw bad_request("'" + std::string(name) + "' must be in [" + std::to_string(min) + ", " + std::to_string(max) +
                          "], got " + std::to_string(*i),
                      name);
  }
  return i;
}

std::optional<double> Fields::number(const char* name, double min, double max) const {
  const nlohmann::json* v = get(name);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(name, "a number", *v);
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < min || d > max) {
    std::string range = std::isfinite(max) ? "in [" + brief(min) + ", " + brief(max) + "]" : ">= " + brief(min);
    throw bad_request("'" + std::string(name) + "' must be " + range + ", got " + brief(*v), name);
  }
  return d;
}

std::optional<bool> Fields::boolean(const char* name) const {
  const nlohmann::json* v = get(name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(name, "a boolean", *v);
  return v->get<bool>();
}

std::optional<std::string> Fields::string(const char* name) const {
  const nlohmann::json* v = get(name);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong_type(name, "a string", *v);
  return v->get<std::string>();
}

}  // namespace pagellm::server

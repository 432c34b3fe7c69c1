#include "server/json_fields.h"

#include <cmath>

#include "server/api_error.h"

namespace pagellm::server {

namespace {

constexpr size_t kBriefBudget = 64;  // characters of the value itself; "..." follows when cut
constexpr int kBriefDepth = 3;       // containers nested deeper print as [...] / {...}

// The first bytes of s that fit, JSON-quoted; a cut UTF-8 character becomes U+FFFD.
bool brief_string(const std::string& s, std::string* out, size_t budget) {
  const size_t room = budget - out->size();
  const nlohmann::json head = s.size() > room ? s.substr(0, room) : s;
  out->append(head.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return s.size() <= room && out->size() <= budget;
}

// Appends v to *out until out holds `budget` characters. Walks at most as many elements as fit
// (an element costs at least one character) and never deeper than kBriefDepth, so the cost is
// bounded by the budget whatever the size or depth of v. Returns false when it stopped early.
bool brief_into(const nlohmann::json& v, std::string* out, size_t budget, int depth) {
  if (out->size() >= budget) return false;
  if (v.is_string()) return brief_string(v.get_ref<const std::string&>(), out, budget);
  if (!v.is_array() && !v.is_object()) {  // number, bool, null: a few characters
    out->append(v.dump());
    return out->size() <= budget;
  }
  const bool array = v.is_array();
  if (depth >= kBriefDepth) {
    out->append(v.empty() ? (array ? "[]" : "{}") : (array ? "[...]" : "{...}"));
    return out->size() <= budget;
  }
  out->push_back(array ? '[' : '{');
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (out->size() >= budget) return false;
    if (!first) out->push_back(',');
    first = false;
    if (!array) {
      if (out->size() >= budget || !brief_string(it.key(), out, budget)) return false;
      out->push_back(':');
    }
    if (!brief_into(*it, out, budget, depth + 1)) return false;
  }
  out->push_back(array ? ']' : '}');
  return out->size() <= budget;
}

}  // namespace

std::string brief(const nlohmann::json& v) {
  std::string s;
  if (!brief_into(v, &s, kBriefBudget, 0) || s.size() > kBriefBudget) {
    if (s.size() > kBriefBudget) s.resize(kBriefBudget);
    s += "...";
  }
  return s;
}

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

Fields::Fields(const nlohmann::json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {
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
  if (!i) wrong_type(prefix_ + name, "an integer", *v);
  if (*i < min || *i > max) {
    throw bad_request("'" + prefix_ + name + "' must be in [" + std::to_string(min) + ", " + std::to_string(max) +
                          "], got " + std::to_string(*i),
                      prefix_ + name);
  }
  return i;
}

std::optional<double> Fields::number(const char* name, double min, double max) const {
  const nlohmann::json* v = get(name);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(prefix_ + name, "a number", *v);
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < min || d > max) {
    std::string range = std::isfinite(max) ? "in [" + brief(min) + ", " + brief(max) + "]" : ">= " + brief(min);
    throw bad_request("'" + prefix_ + name + "' must be " + range + ", got " + brief(*v), prefix_ + name);
  }
  return d;
}

std::optional<bool> Fields::boolean(const char* name) const {
  const nlohmann::json* v = get(name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(prefix_ + name, "a boolean", *v);
  return v->get<bool>();
}

std::optional<std::string> Fields::string(const char* name) const {
  const nlohmann::json* v = get(name);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong_type(prefix_ + name, "a string", *v);
  return v->get<std::string>();
}

}  // namespace pagellm::server

// Typed access to the optional fields of a JSON request object. A field that is absent or null
// reads as "not given"; a field of the wrong type or out of range throws ApiError 400 whose
// param is the field name. Integers accept JSON integers and integral floats (5.0), never bools.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace pagellm::server {

class Fields {
 public:
  // obj must outlive this. Throws ApiError 400 when obj is not an object. `prefix` comes before
  // every field name in errors (e.g. "stream_options." for a nested object).
  explicit Fields(const nlohmann::json& obj, std::string prefix = "");

  // The value of `name`, or nullptr when it is absent or null.
  const nlohmann::json* get(const char* name) const;
  // Integer in [min, max].
  std::optional<int64_t> integer(const char* name, int64_t min, int64_t max) const;
  // Finite number in [min, max].
  std::optional<double> number(const char* name, double min, double max) const;
  std::optional<bool> boolean(const char* name) const;
  std::optional<std::string> string(const char* name) const;

 private:
  const nlohmann::json& obj_;
  std::string prefix_;
};

// A short rendering of an untrusted request value for error messages: compact JSON, at most 64
// characters of it then "...". Bounded work: never walks more elements than fit, never recurses
// more than 3 levels (deeper containers print as [...] / {...}), so a huge or deeply nested
// value costs no more than a small one. Use this, never dump(), to put a request value into a
// message.
std::string brief(const nlohmann::json& v);
// Shared by the field readers and array element checks; `what` is e.g. "an integer".
[[noreturn]] void wrong_type(const std::string& param, const char* what, const nlohmann::json& value);
// `v` as an int64 if it is an integer or integral float, else nullopt.
std::optional<int64_t> as_integer(const nlohmann::json& v);

}  // namespace pagellm::server

#include "format/hf_json.h"

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace pagellm::hf {

constexpr int64_t kMaxJsonBytes = int64_t{512} << 20;
// Deepest nesting a file may have. Hugging Face's files nest at most ~6 levels; nlohmann's copy
// constructor and dump() recurse once per level, so a hostile file nested a million levels deep
// would overflow the stack wherever the loader copies or prints a value.
constexpr int kMaxJsonDepth = 64;

// Whether `root` nests deeper than kMaxJsonDepth, without recursion.
bool too_deep(const Json& root) {
  std::vector<std::pair<const Json*, int>> stack = {{&root, 0}};
  while (!stack.empty()) {
    const auto [v, depth] = stack.back();
    stack.pop_back();
    if (!v->is_structured()) continue;
    if (depth >= kMaxJsonDepth) return true;
    for (const Json& x : *v) stack.emplace_back(&x, depth + 1);
  }
  return false;
}

namespace {

bool shallow(const Json& v, int depth) {
  if (!v.is_structured()) return true;
  if (depth >= 8) return false;
  for (const Json& x : v) {
    if (!shallow(x, depth + 1)) return false;
  }
  return true;
}

}  // namespace

std::string shown(const Json& v, size_t max_chars) {
  if (!shallow(v, 0)) return std::string("an ") + v.type_name() + " nested more than 8 deep";
  return v.dump().substr(0, max_chars);
}

void JsonFile::fail(const std::string& field, const std::string& what) const {
  throw Error("'" + path + "': field '" + field + "' " + what);
}

const Json* JsonFile::find(const std::string& field) const {
  if (!json.is_object()) return nullptr;
  auto it = json.find(field);
  return it == json.end() || it->is_null() ? nullptr : &*it;
}

std::optional<int64_t> JsonFile::integer_opt(const std::string& field, int64_t lo, int64_t hi) const {
  const Json* v = find(field);
  if (v == nullptr) return std::nullopt;
  // 2.0 is accepted as 2, as Python's json would compare it (checked in range before the cast:
  // converting 1e300 to int64 is undefined).
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && std::trunc(d) == d) {
      if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) {
        fail(field, "= " + shown(*v) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      }
      return static_cast<int64_t>(d);
    }
  }
  if (!v->is_number_integer()) fail(field, "must be an integer, got " + shown(*v));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    fail(field, "= " + shown(*v) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  const auto x = v->get<int64_t>();
  if (x < lo || x > hi) {
    fail(field, "= " + shown(*v) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return x;
}

int64_t JsonFile::integer(const std::string& field, int64_t lo, int64_t hi) const {
  auto v = integer_opt(field, lo, hi);
  if (!v) fail(field, "is missing");
  return *v;
}

std::optional<double> JsonFile::number_opt(const std::string& field) const {
  const Json* v = find(field);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) fail(field, "must be a number, got " + shown(*v));
  return v->get<double>();
}

std::optional<bool> JsonFile::boolean_opt(const std::string& field) const {
  const Json* v = find(field);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) fail(field, "must be true or false, got " + shown(*v));
  return v->get<bool>();
}

std::optional<std::string> JsonFile::string_opt(const std::string& field) const {
  const Json* v = find(field);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) fail(field, "must be a string, got " + shown(*v));
  return v->get<std::string>();
}

std::optional<std::string> read_text_file(const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  if (!S_ISREG(st.st_mode)) throw Error("'" + path + "' is not a regular file");
  if (st.st_size > kMaxJsonBytes) throw Error("'" + path + "' is larger than 512 MiB");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

JsonFile read_json(const std::string& dir, const std::string& name, bool required) {
  JsonFile f;
  f.path = dir + "/" + name;
  const std::optional<std::string> text = read_text_file(dir, name);
  if (!text) {
    if (!required) return f;
    throw Error("Hugging Face directory '" + dir + "' has no " + name);
  }
  try {
    f.json = Json::parse(*text);
  } catch (const Json::exception& e) {
    throw Error("'" + f.path + "' is not valid JSON: " + e.what());
  }
  if (!f.json.is_object()) throw Error("'" + f.path + "' is not a JSON object");
  if (too_deep(f.json)) {
    throw Error("'" + f.path + "' nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  return f;
}

}  // namespace pagellm::hf

// JSON files of a Hugging Face directory: reading them and their fields with errors that name
// the file and the field (internal to src/format/hf_*.cc).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "format/gguf.h"

namespace pagellm::hf {

using Json = nlohmann::json;
using Metadata = std::vector<std::pair<std::string, GgufValue>>;

// One parsed JSON file and its path (for messages).
struct JsonFile {  // NOLINT(bugprone-exception-escape): the implicit moves do not throw (std::string, nlohmann::json)
  std::string path;
  Json json;  // null when the file is absent and optional

  bool present() const { return !json.is_null(); }
  [[noreturn]] void fail(const std::string& field, const std::string& what) const;
  // The field when present and not null, else nullptr.
  const Json* find(const std::string& field) const;
  // Typed fields. The _opt forms return nullopt for an absent or null field; every form throws
  // naming the file and field for a value of the wrong type or out of range.
  int64_t integer(const std::string& field, int64_t lo, int64_t hi) const;
  std::optional<int64_t> integer_opt(const std::string& field, int64_t lo, int64_t hi) const;
  std::optional<double> number_opt(const std::string& field) const;
  std::optional<bool> boolean_opt(const std::string& field) const;
  std::optional<std::string> string_opt(const std::string& field) const;
};

// `v` as JSON text for an error message, cut to `max_chars`. A value nested deeper than 8 levels
// is named only by its type: dump() recurses, and a hostile file may nest a million levels.
std::string shown(const Json& v, size_t max_chars = 80);

// Reads dir/name as text (at most 512 MiB, a regular file); nullopt when absent. Throws
// pagellm::Error naming the file when it is not a regular file, too large or unreadable.
std::optional<std::string> read_text_file(const std::string& dir, const std::string& name);

// Reads and parses dir/name (at most 512 MiB). Throws pagellm::Error naming the file: absent
// (when required), unreadable, not a JSON object, or nested deeper than 64 levels.
JsonFile read_json(const std::string& dir, const std::string& name, bool required);

// The tokenizer.* metadata of tokenizer.json + tokenizer_config.json (+ the special token ids
// of config.json and generation_config.json), padded to `vocab_size` tokens as the converter
// pads (tokens "[PAD<id>]" of type UNUSED). Appends to `kv`.
void tokenizer_metadata(const std::string& dir, const JsonFile& config, const JsonFile& generation, int64_t vocab_size,
                        Metadata& kv);

}  // namespace pagellm::hf

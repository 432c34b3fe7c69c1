// safetensors reader (Hugging Face's tensor file format).
// Spec: https://github.com/huggingface/safetensors (README, "Format").
//
// Layout: u64 N (little-endian) | N bytes of UTF-8 JSON, optionally padded with spaces |
// tensor data. The JSON object maps each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end]} (byte offsets relative to the start of the data section, row-major data);
// the optional "__metadata__" entry maps strings to strings.
//
// Every field is checked: the header length against the file, the JSON's syntax, each dtype,
// each shape (non-negative, no overflow), each data_offsets pair against the data section and
// against shape x element size, and no two tensors overlap. A malformed file throws
// pagellm::Error whose message names the file, the tensor and the field.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "format/mapped_file.h"

namespace pagellm {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;              // "F32", "F16", "BF16", "I64", ... as written
  std::vector<int64_t> shape;     // row-major: shape.back() is the contiguous dimension
  uint64_t begin = 0, end = 0;    // data_offsets, bytes from the start of the data section
  const uint8_t* data = nullptr;  // into the file's bytes; valid while the SafetensorsFile lives

  int64_t num_elements() const;
};

class SafetensorsFile {
 public:
  // Memory-maps `path` read-only and parses its header. Throws pagellm::Error.
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  // Parses a buffer the caller keeps alive (fuzzing, tests); `name` is used in messages.
  static std::unique_ptr<SafetensorsFile> parse(std::span<const uint8_t> bytes, const std::string& name);

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when absent.
  const SafetensorsTensor* find(const std::string& name) const;
  // The mapping of open() (nullptr for parse()); the tensors' data stays valid only while the
  // returned object lives.
  std::unique_ptr<MappedFile> take_mapping() { return std::move(mapping_); }

  // Bytes per element of a safetensors dtype; 0 when the name is not one.
  static int dtype_bytes(const std::string& dtype);

 private:
  SafetensorsFile() = default;
  void parse_all(std::span<const uint8_t> bytes);
  [[noreturn]] void fail(const std::string& what) const;

  std::string path_;
  std::unique_ptr<MappedFile> mapping_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace pagellm

// GGUF reader, versions 2 and 3 (the writer: format/gguf_writer.h).
// Spec: ggml docs/gguf.md (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md).
//
// Layout: magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv | n_kv x (string key, u32 type,
// value) | n_tensors x (string name, u32 n_dims, n_dims x u64 ne, u32 ggml_type, u64 offset) |
// padding to general.alignment (default 32) | tensor data (each offset relative to the start of
// the data section and a multiple of the alignment). Strings are u64 length + bytes (no NUL).
// Little-endian only.
//
// Every read of untrusted bytes is bounds-checked; a malformed file throws pagellm::Error whose
// message names the file, the key or tensor, and what is wrong.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "format/mapped_file.h"

namespace pagellm {

enum class GgufValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
const char* gguf_type_name(GgufValueType t);

struct GgufValue;
struct GgufArray {
  GgufValueType elem_type = GgufValueType::UINT8;
  std::vector<GgufValue> items;
};

// One metadata value. Integers keep their declared type in `type`; the accessors below convert
// between integer widths when the value fits, and throw pagellm::Error otherwise.
struct GgufValue {
  GgufValueType type = GgufValueType::UINT8;
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> v;

  static GgufValue u32(uint32_t x) { return {GgufValueType::UINT32, uint64_t{x}}; }
  static GgufValue i32(int32_t x) { return {GgufValueType::INT32, int64_t{x}}; }
  static GgufValue u64(uint64_t x) { return {GgufValueType::UINT64, x}; }
  static GgufValue f32(float x) { return {GgufValueType::FLOAT32, double{x}}; }
  static GgufValue boolean(bool x) { return {GgufValueType::BOOL, x}; }
  static GgufValue str(std::string x) { return {GgufValueType::STRING, std::move(x)}; }
  static GgufValue array(GgufValueType elem, std::vector<GgufValue> items) {
    return {GgufValueType::ARRAY, GgufArray{elem, std::move(items)}};
  }
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the contiguous (row) dimension
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;            // from the start of the data section, bytes
  uint64_t size_bytes = 0;        // rows x row_size_bytes(type, ne[0])
  const uint8_t* data = nullptr;  // into the mapping; valid while the GgufFile lives

  int64_t num_elements() const;
};

class GgufFile {
 public:
  // Memory-maps `path` read-only (zero copy) and parses it. Throws pagellm::Error.
  static std::unique_ptr<GgufFile> open(const std::string& path);
  // Parses a buffer that the caller keeps alive (fuzzing, tests). `name` is used in messages.
  static std::unique_ptr<GgufFile> parse(std::span<const uint8_t> bytes, const std::string& name);

  // A model description that is not one GGUF file: the metadata and tensors the GGUF conversion
  // of some other format would hold (format/hf_dir.h: a Hugging Face directory). Each tensor's
  // `data` points into one of `mappings` or `owned`, which the result keeps alive; `offset` is
  // unused. version() is 0 and file_size() 0. Throws pagellm::Error on a duplicate key or tensor
  // name.
  static std::unique_ptr<GgufFile> assemble(std::string path, std::vector<std::pair<std::string, GgufValue>> kv,
                                            std::vector<GgufTensorInfo> tensors,
                                            std::vector<std::unique_ptr<MappedFile>> mappings,
                                            std::vector<std::unique_ptr<uint8_t[]>> owned);

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  // Tells the kernel this process no longer reads [data, data + size) of the mapping: whole pages
  // inside it leave the resident set (the page cache keeps them; a later read maps them again).
  // For tensors copied elsewhere at load (repacked weights). No-op for parse()d buffers and for
  // memory this object does not map.
  void drop_pages(const void* data, size_t size) const;
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return bytes_.size(); }
  uint64_t data_offset() const { return data_offset_; }

  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  // nullptr when absent.
  const GgufValue* find(const std::string& key) const;
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  // Throws pagellm::Error naming the file and tensor when absent.
  const GgufTensorInfo& tensor(const std::string& name) const;

  // Typed access; throw pagellm::Error naming the file and key when the key is absent (no default
  // given) or has an incompatible type / out-of-range value.
  std::string get_string(const std::string& key) const;
  std::optional<std::string> get_string_opt(const std::string& key) const;
  uint64_t get_u64(const std::string& key) const;
  std::optional<uint64_t> get_u64_opt(const std::string& key) const;
  int64_t get_i64(const std::string& key) const;
  float get_f32(const std::string& key, std::optional<float> dflt = std::nullopt) const;
  bool get_bool(const std::string& key, std::optional<bool> dflt = std::nullopt) const;
  // Array accessors; the element type must match (any integer type for the int variant).
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<float> get_f32_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;

 private:
  GgufFile() = default;
  void parse_all();
  [[noreturn]] void fail(const std::string& what) const;

  std::string path_;
  std::span<const uint8_t> bytes_;
  std::vector<std::unique_ptr<MappedFile>> mappings_;  // what open() / assemble() map (none for parse())
  std::vector<std::unique_ptr<uint8_t[]>> owned_;      // assemble(): tensor data converted at load
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Scalar value conversions shared by GgufFile's accessors (throw pagellm::Error with `ctx`).
uint64_t gguf_as_u64(const GgufValue& v, const std::string& ctx);
int64_t gguf_as_i64(const GgufValue& v, const std::string& ctx);
double gguf_as_f64(const GgufValue& v, const std::string& ctx);

}  // namespace pagellm

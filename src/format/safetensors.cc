#include "format/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace pagellm {
namespace {

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // the reference implementation's limit
constexpr int64_t kMaxDim = int64_t{1} << 40;

struct DtypeSize {
  const char* name;
  int bytes;
};
constexpr DtypeSize kDtypes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
                                 {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
                                 {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};

}  // namespace

int64_t SafetensorsTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int SafetensorsFile::dtype_bytes(const std::string& dtype) {
  for (const auto& d : kDtypes) {
    if (dtype == d.name) return d.bytes;
  }
  return 0;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->mapping_ = MappedFile::open(path, "safetensors file");
  f->parse_all(f->mapping_->bytes());
  return f;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::parse(std::span<const uint8_t> bytes, const std::string& name) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = name;
  f->parse_all(bytes);
  return f;
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::fail(const std::string& what) const { throw Error("safetensors file '" + path_ + "': " + what); }

void SafetensorsFile::parse_all(std::span<const uint8_t> bytes) {
  if (bytes.size() < 8)
    fail("file is too small (" + std::to_string(bytes.size()) + " bytes) to hold the header length");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);  // little-endian hosts only (as the GGUF reader)
  if (n > kMaxHeaderBytes) fail("header length " + std::to_string(n) + " exceeds the 100 MiB limit");
  if (n > bytes.size() - 8) {
    fail("header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(bytes.size()) +
         " bytes)");
  }
  const auto* text = reinterpret_cast<const char*>(bytes.data() + 8);
  // The format pads the header with spaces; a NUL (where the JSON reader would stop) means a
  // header length that reaches into the data, or padding that is not the format's.
  if (const void* nul = std::memchr(text, 0, n); nul != nullptr) {
    fail("the header (" + std::to_string(n) + " bytes, from its length field) holds a NUL byte at header offset " +
         std::to_string(static_cast<const char*>(nul) - text) + ": the length is wrong or the padding is not spaces");
  }
  const nlohmann::json header = nlohmann::json::parse(text, text + n, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) fail("the header is not valid JSON");
  if (!header.is_object()) fail("the header is not a JSON object");
  const uint8_t* data = bytes.data() + 8 + n;
  const uint64_t data_size = bytes.size() - 8 - n;

  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) fail("__metadata__ is not an object");
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) fail("__metadata__." + k + " is not a string");
        metadata_[k] = s.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "': ";
    if (!v.is_object()) fail(where + "entry is not an object");
    SafetensorsTensor t;
    t.name = name;
    const auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) fail(where + "'dtype' is missing or not a string");
    t.dtype = dt->get<std::string>();
    const int elem = dtype_bytes(t.dtype);
    if (elem == 0) fail(where + "'dtype' \"" + t.dtype + "\" is not a safetensors dtype");
    const auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) fail(where + "'shape' is missing or not an array");
    if (sh->size() > 8) fail(where + "'shape' has " + std::to_string(sh->size()) + " dimensions (at most 8)");
    int64_t numel = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(kMaxDim)) {
        // A scalar is shown; a nested value only by its type (dump() recurses, and the header
        // may nest a million levels deep).
        std::string msg = where + "'shape' entry ";
        msg += d.is_primitive() ? d.dump().substr(0, 80) : std::string("an ") + d.type_name();
        msg += " is not an integer in [0, 2^40]";
        fail(msg);
      }
      const auto x = d.get<int64_t>();
      if (x != 0 && numel > (int64_t{1} << 50) / x) fail(where + "'shape' has more than 2^50 elements");
      numel *= x;
      t.shape.push_back(x);
    }
    const auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned()) {
      fail(where + "'data_offsets' is missing or not two non-negative integers");
    }
    t.begin = (*off)[0].get<uint64_t>();
    t.end = (*off)[1].get<uint64_t>();
    if (t.begin > t.end || t.end > data_size) {
      fail(where + "'data_offsets' [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
           "] is outside the data section (" + std::to_string(data_size) + " bytes)");
    }
    const auto want = static_cast<uint64_t>(numel) * static_cast<uint64_t>(elem);
    if (t.end - t.begin != want) {
      std::string msg = where + "'data_offsets' span " + std::to_string(t.end - t.begin) + " bytes, but shape [";
      for (size_t i = 0; i < t.shape.size(); ++i) msg += (i > 0 ? ", " : "") + std::to_string(t.shape[i]);
      msg += "] x " + t.dtype + " needs " + std::to_string(want);
      fail(msg);
    }
    t.data = data + t.begin;
    index_[name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  std::vector<const SafetensorsTensor*> by_offset;
  for (const auto& t : tensors_) {
    if (t.end > t.begin) by_offset.push_back(&t);  // an empty tensor overlaps nothing
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const SafetensorsTensor* a, const SafetensorsTensor* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      fail("tensor '" + by_offset[i]->name + "': 'data_offsets' overlap those of '" + by_offset[i - 1]->name + "'");
    }
  }
}

}  // namespace pagellm

#include "format/gguf.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "format/mapped_file.h"

namespace pagellm {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;
constexpr uint64_t kMaxArrayDepth = 4;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

// Bounds-checked cursor over untrusted bytes.
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, const std::string& path) : bytes_(bytes), path_(path) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("GGUF file '" + path_ + "': " + what + " (at byte offset " + std::to_string(pos_) + ")");
  }

  template <typename T>
  T read(const char* what) {
    if (remaining() < sizeof(T)) fail(std::string("truncated while reading ") + what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // `what()` describes the string for error messages; it is only called on failure, so reading
  // many strings under one long key stays linear in the input size.
  template <typename Describe>
  std::string read_string_lazy(Describe&& what) {
    if (remaining() < sizeof(uint64_t)) fail("truncated while reading " + what());
    const uint64_t n = read<uint64_t>("string length");
    if (n > kMaxStringBytes) fail(what() + " has implausible length " + std::to_string(n));
    if (n > remaining()) fail("truncated inside " + what() + " (length " + std::to_string(n) + ")");
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  std::string read_string(const std::string& what) {
    return read_string_lazy([&] { return what; });
  }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& path_;
  uint64_t pos_ = 0;
};

// Smallest on-disk size of one element of `t` (used to reject absurd array lengths before
// allocating: an array of n elements needs at least n * min_size bytes left in the file).
uint64_t min_value_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16:
    case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::FLOAT64:
    case GgufValueType::STRING: return 8;
    case GgufValueType::ARRAY: return 12;
  }
  return 1;
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::FLOAT64); }

GgufValue read_value(Reader& r, GgufValueType type, const std::string& key, uint64_t depth) {
  GgufValue out;
  out.type = type;
  const char* k = key.c_str();
  switch (type) {
    case GgufValueType::UINT8: out.v = uint64_t{r.read<uint8_t>(k)}; break;
    case GgufValueType::INT8: out.v = int64_t{r.read<int8_t>(k)}; break;
    case GgufValueType::UINT16: out.v = uint64_t{r.read<uint16_t>(k)}; break;
    case GgufValueType::INT16: out.v = int64_t{r.read<int16_t>(k)}; break;
    case GgufValueType::UINT32: out.v = uint64_t{r.read<uint32_t>(k)}; break;
    case GgufValueType::INT32: out.v = int64_t{r.read<int32_t>(k)}; break;
    case GgufValueType::UINT64: out.v = r.read<uint64_t>(k); break;
    case GgufValueType::INT64: out.v = r.read<int64_t>(k); break;
    case GgufValueType::FLOAT32: out.v = double{r.read<float>(k)}; break;
    case GgufValueType::FLOAT64: out.v = r.read<double>(k); break;
    case GgufValueType::BOOL: {
      const uint8_t b = r.read<uint8_t>(k);
      if (b > 1) r.fail("key '" + key + "': bool value " + std::to_string(b) + " is neither 0 nor 1");
      out.v = b == 1;
      break;
    }
    case GgufValueType::STRING: out.v = r.read_string_lazy([&] { return "string value of key '" + key + "'"; }); break;
    case GgufValueType::ARRAY: {
      if (depth >= kMaxArrayDepth) r.fail("key '" + key + "': arrays nested too deeply");
      const uint32_t et = r.read<uint32_t>(k);
      if (!valid_value_type(et)) {
        r.fail("key '" + key + "': unknown array element type " + std::to_string(et));
      }
      const uint64_t n = r.read<uint64_t>(k);
      const auto elem = static_cast<GgufValueType>(et);
      if (n > r.remaining() / min_value_size(elem)) {
        r.fail("key '" + key + "': array of " + std::to_string(n) + " elements does not fit in the file");
      }
      GgufArray arr;
      arr.elem_type = elem;
      arr.items.reserve(n);
      for (uint64_t i = 0; i < n; ++i) arr.items.push_back(read_value(r, elem, key, depth + 1));
      out.v = std::move(arr);
      break;
    }
  }
  return out;
}

}  // namespace

const char* gguf_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: return "uint8";
    case GgufValueType::INT8: return "int8";
    case GgufValueType::UINT16: return "uint16";
    case GgufValueType::INT16: return "int16";
    case GgufValueType::UINT32: return "uint32";
    case GgufValueType::INT32: return "int32";
    case GgufValueType::FLOAT32: return "float32";
    case GgufValueType::BOOL: return "bool";
    case GgufValueType::STRING: return "string";
    case GgufValueType::ARRAY: return "array";
    case GgufValueType::UINT64: return "uint64";
    case GgufValueType::INT64: return "int64";
    case GgufValueType::FLOAT64: return "float64";
  }
  return "unknown";
}

int64_t GgufTensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->mappings_.push_back(MappedFile::open(path, "model file"));
  f->bytes_ = f->mappings_.back()->bytes();
  f->parse_all();
  return f;
}

std::unique_ptr<GgufFile> GgufFile::assemble(std::string path, std::vector<std::pair<std::string, GgufValue>> kv,
                                             std::vector<GgufTensorInfo> tensors,
                                             std::vector<std::unique_ptr<MappedFile>> mappings,
                                             std::vector<std::unique_ptr<uint8_t[]>> owned) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::move(path);
  f->version_ = 0;
  f->kv_ = std::move(kv);
  f->tensors_ = std::move(tensors);
  f->mappings_ = std::move(mappings);
  f->owned_ = std::move(owned);
  for (size_t i = 0; i < f->kv_.size(); ++i) {
    if (!f->kv_index_.emplace(f->kv_[i].first, i).second) f->fail("duplicate metadata key '" + f->kv_[i].first + "'");
  }
  for (size_t i = 0; i < f->tensors_.size(); ++i) {
    if (!f->tensor_index_.emplace(f->tensors_[i].name, i).second) {
      f->fail("duplicate tensor '" + f->tensors_[i].name + "'");
    }
  }
  return f;
}

void GgufFile::drop_pages(const void* data, size_t size) const {
  for (const auto& m : mappings_) m->drop_pages(data, size);
}

std::unique_ptr<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, const std::string& name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = name;
  f->bytes_ = bytes;
  f->parse_all();
  return f;
}

GgufFile::~GgufFile() = default;

void GgufFile::fail(const std::string& what) const {
  throw Error((version_ == 0 ? "Hugging Face directory '" : "GGUF file '") + path_ + "': " + what);
}

void GgufFile::parse_all() {
  Reader r(bytes_, path_);
  if (bytes_.size() < 4) r.fail("file is too small to be GGUF (" + std::to_string(bytes_.size()) + " bytes)");
  const uint32_t magic = r.read<uint32_t>("magic");
  if (magic != kMagic) r.fail("bad magic: not a GGUF file");
  version_ = r.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3) {
    r.fail("unsupported GGUF version " + std::to_string(version_) + " (supported: 2, 3)");
  }
  const uint64_t n_tensors = r.read<uint64_t>("tensor count");
  const uint64_t n_kv = r.read<uint64_t>("metadata count");
  // Each kv needs >= 8 (key length) + 4 (type) + 1 bytes; each tensor info >= 8 + 4 + 4 + 8.
  if (n_kv > r.remaining() / 13) r.fail("metadata count " + std::to_string(n_kv) + " does not fit in the file");
  if (n_tensors > r.remaining() / 24) {
    r.fail("tensor count " + std::to_string(n_tensors) + " does not fit in the file");
  }

  kv_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.read_string("metadata key #" + std::to_string(i));
    const uint32_t t = r.read<uint32_t>("metadata type");
    if (!valid_value_type(t)) r.fail("key '" + key + "': unknown value type " + std::to_string(t));
    GgufValue v = read_value(r, static_cast<GgufValueType>(t), key, 0);
    if (kv_index_.count(key) != 0) r.fail("duplicate metadata key '" + key + "'");
    kv_index_[key] = kv_.size();
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = find("general.alignment")) {
    const uint64_t al = gguf_as_u64(*a, "GGUF file '" + path_ + "', key 'general.alignment'");
    if (al == 0 || (al & (al - 1)) != 0 || al > (uint64_t{1} << 20)) {
      fail("general.alignment = " + std::to_string(al) + " is not a power of two in [1, 2^20]");
    }
    alignment_ = al;
  }

  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo ti;
    ti.name = r.read_string("tensor name #" + std::to_string(i));
    const std::string ctx = "tensor '" + ti.name + "'";
    const uint32_t n_dims = r.read<uint32_t>("tensor n_dims");
    if (n_dims == 0 || n_dims > kMaxDims) {
      r.fail(ctx + ": n_dims = " + std::to_string(n_dims) + " (must be 1.." + std::to_string(kMaxDims) + ")");
    }
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = r.read<uint64_t>("tensor dimension");
      if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        r.fail(ctx + ": dimension " + std::to_string(d) + " = " + std::to_string(ne) + " is invalid");
      }
      if (n_elems > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / ne) {
        r.fail(ctx + ": element count overflows");
      }
      n_elems *= ne;
      ti.ne.push_back(static_cast<int64_t>(ne));
    }
    const uint32_t type_id = r.read<uint32_t>("tensor type");
    const TypeTraits* tt = type_traits(type_id);
    if (tt == nullptr) r.fail(ctx + ": unknown ggml type id " + std::to_string(type_id));
    ti.type = static_cast<GgmlType>(type_id);
    if (ti.ne[0] % tt->block_size != 0) {
      r.fail(ctx + ": row length " + std::to_string(ti.ne[0]) + " is not a multiple of the " + tt->name +
             " block size " + std::to_string(tt->block_size));
    }
    ti.offset = r.read<uint64_t>("tensor offset");
    if (ti.offset % alignment_ != 0) {
      r.fail(ctx + ": data offset " + std::to_string(ti.offset) + " is not a multiple of the alignment " +
             std::to_string(alignment_));
    }
    const uint64_t blocks = n_elems / static_cast<uint64_t>(tt->block_size);
    if (blocks > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(tt->type_size)) {
      r.fail(ctx + ": byte size overflows");
    }
    ti.size_bytes = blocks * static_cast<uint64_t>(tt->type_size);
    if (tensor_index_.count(ti.name) != 0) r.fail("duplicate tensor name '" + ti.name + "'");
    tensor_index_[ti.name] = tensors_.size();
    tensors_.push_back(std::move(ti));
  }

  const uint64_t header_end = r.pos();
  data_offset_ = (header_end + alignment_ - 1) / alignment_ * alignment_;
  if (n_tensors > 0 && data_offset_ > bytes_.size()) fail("truncated: tensor data section is missing");
  const uint64_t data_size = bytes_.size() - std::min<uint64_t>(data_offset_, bytes_.size());
  for (GgufTensorInfo& ti : tensors_) {
    if (ti.offset > data_size || ti.size_bytes > data_size - ti.offset) {
      fail("tensor '" + ti.name + "' (" + std::to_string(ti.size_bytes) + " bytes at data offset " +
           std::to_string(ti.offset) + ") extends past the end of the file (data section holds " +
           std::to_string(data_size) + " bytes)");
    }
    ti.data = bytes_.data() + data_offset_ + ti.offset;
  }
  // No two tensors share bytes (llama.cpp's reader goes further and wants them back to back): a
  // flipped offset or type id would otherwise read another tensor's data as this one's.
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& ti : tensors_) by_offset.push_back(&ti);
  std::sort(by_offset.begin(), by_offset.end(), [](const GgufTensorInfo* a, const GgufTensorInfo* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->size_bytes < b->size_bytes;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = *by_offset[i - 1];
    const GgufTensorInfo& ti = *by_offset[i];
    if (ti.offset < prev.offset + prev.size_bytes) {
      fail("tensor '" + ti.name + "' (data offset " + std::to_string(ti.offset) + ") overlaps tensor '" + prev.name +
           "' (" + std::to_string(prev.size_bytes) + " bytes at data offset " + std::to_string(prev.offset) + ")");
    }
  }
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (t == nullptr) fail("required tensor '" + name + "' is missing");
  return *t;
}

uint64_t gguf_as_u64(const GgufValue& v, const std::string& ctx) {
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v.v)) {
    if (*i < 0) throw Error(ctx + ": expected a non-negative integer, got " + std::to_string(*i));
    return static_cast<uint64_t>(*i);
  }
  throw Error(ctx + ": expected an integer, got " + gguf_type_name(v.type));
}

int64_t gguf_as_i64(const GgufValue& v, const std::string& ctx) {
  if (const auto* i = std::get_if<int64_t>(&v.v)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&v.v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw Error(ctx + ": integer " + std::to_string(*u) + " is out of range");
    }
    return static_cast<int64_t>(*u);
  }
  throw Error(ctx + ": expected an integer, got " + gguf_type_name(v.type));
}

double gguf_as_f64(const GgufValue& v, const std::string& ctx) {
  if (const auto* d = std::get_if<double>(&v.v)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&v.v)) return static_cast<double>(*i);
  throw Error(ctx + ": expected a number, got " + gguf_type_name(v.type));
}

namespace {
std::string key_ctx(const std::string& path, const std::string& key) {
  return "GGUF file '" + path + "', key '" + key + "'";
}
}  // namespace

std::optional<std::string> GgufFile::get_string_opt(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  const auto* s = std::get_if<std::string>(&v->v);
  if (s == nullptr) throw Error(key_ctx(path_, key) + ": expected a string, got " + gguf_type_name(v->type));
  return *s;
}

std::string GgufFile::get_string(const std::string& key) const {
  auto s = get_string_opt(key);
  if (!s) fail("required key '" + key + "' is missing");
  return *s;
}

std::optional<uint64_t> GgufFile::get_u64_opt(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  return gguf_as_u64(*v, key_ctx(path_, key));
}

uint64_t GgufFile::get_u64(const std::string& key) const {
  auto u = get_u64_opt(key);
  if (!u) fail("required key '" + key + "' is missing");
  return *u;
}

int64_t GgufFile::get_i64(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail("required key '" + key + "' is missing");
  return gguf_as_i64(*v, key_ctx(path_, key));
}

float GgufFile::get_f32(const std::string& key, std::optional<float> dflt) const {
  const GgufValue* v = find(key);
  if (v == nullptr) {
    if (!dflt) fail("required key '" + key + "' is missing");
    return *dflt;
  }
  return static_cast<float>(gguf_as_f64(*v, key_ctx(path_, key)));
}

bool GgufFile::get_bool(const std::string& key, std::optional<bool> dflt) const {
  const GgufValue* v = find(key);
  if (v == nullptr) {
    if (!dflt) fail("required key '" + key + "' is missing");
    return *dflt;
  }
  const auto* b = std::get_if<bool>(&v->v);
  if (b == nullptr) throw Error(key_ctx(path_, key) + ": expected a bool, got " + gguf_type_name(v->type));
  return *b;
}

namespace {
const GgufArray& need_array(const GgufFile& f, const GgufValue* v, const std::string& key) {
  if (v == nullptr) throw Error("GGUF file '" + f.path() + "': required key '" + key + "' is missing");
  const auto* a = std::get_if<GgufArray>(&v->v);
  if (a == nullptr) throw Error(key_ctx(f.path(), key) + ": expected an array, got " + gguf_type_name(v->type));
  return *a;
}
}  // namespace

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufArray& a = need_array(*this, find(key), key);
  if (a.elem_type != GgufValueType::STRING) {
    throw Error(key_ctx(path_, key) + ": expected an array of strings, got array of " + gguf_type_name(a.elem_type));
  }
  std::vector<std::string> out;
  out.reserve(a.items.size());
  for (const GgufValue& v : a.items) out.push_back(std::get<std::string>(v.v));
  return out;
}

std::vector<float> GgufFile::get_f32_array(const std::string& key) const {
  const GgufArray& a = need_array(*this, find(key), key);
  std::vector<float> out;
  out.reserve(a.items.size());
  for (const GgufValue& v : a.items) out.push_back(static_cast<float>(gguf_as_f64(v, key_ctx(path_, key))));
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufArray& a = need_array(*this, find(key), key);
  std::vector<int64_t> out;
  out.reserve(a.items.size());
  for (const GgufValue& v : a.items) out.push_back(gguf_as_i64(v, key_ctx(path_, key)));
  return out;
}

}  // namespace pagellm

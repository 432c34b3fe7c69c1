#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "format/gguf.h"

namespace pagellm {
namespace {

class ByteSink {
 public:
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) {
    while (out_.size() % alignment != 0) out_.push_back(0);
  }
  void put_bytes(const std::vector<uint8_t>& b) { out_.insert(out_.end(), b.begin(), b.end()); }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

void put_value(ByteSink& s, const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::UINT8: s.put<uint8_t>(static_cast<uint8_t>(std::get<uint64_t>(v.v))); break;
    case GgufValueType::INT8: s.put<int8_t>(static_cast<int8_t>(std::get<int64_t>(v.v))); break;
    case GgufValueType::UINT16: s.put<uint16_t>(static_cast<uint16_t>(std::get<uint64_t>(v.v))); break;
    case GgufValueType::INT16: s.put<int16_t>(static_cast<int16_t>(std::get<int64_t>(v.v))); break;
    case GgufValueType::UINT32: s.put<uint32_t>(static_cast<uint32_t>(std::get<uint64_t>(v.v))); break;
    case GgufValueType::INT32: s.put<int32_t>(static_cast<int32_t>(std::get<int64_t>(v.v))); break;
    case GgufValueType::UINT64: s.put<uint64_t>(std::get<uint64_t>(v.v)); break;
    case GgufValueType::INT64: s.put<int64_t>(std::get<int64_t>(v.v)); break;
    case GgufValueType::FLOAT32: s.put<float>(static_cast<float>(std::get<double>(v.v))); break;
    case GgufValueType::FLOAT64: s.put<double>(std::get<double>(v.v)); break;
    case GgufValueType::BOOL: s.put<uint8_t>(std::get<bool>(v.v) ? 1 : 0); break;
    case GgufValueType::STRING: s.put_string(std::get<std::string>(v.v)); break;
    case GgufValueType::ARRAY: {
      const auto& a = std::get<GgufArray>(v.v);
      s.put<uint32_t>(static_cast<uint32_t>(a.elem_type));
      s.put<uint64_t>(a.items.size());
      for (const GgufValue& item : a.items) {
        PAGELLM_CHECK(item.type == a.elem_type, "GGUF array element type mismatch");
        put_value(s, item);
      }
      break;
    }
  }
}

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
  if (key == "general.alignment") {  // written from alignment_, never twice
    alignment_ = gguf_as_u64(value, key);
    PAGELLM_CHECK(alignment_ > 0 && (alignment_ & (alignment_ - 1)) == 0, "alignment must be a power of two");
    return;
  }
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                            std::vector<uint8_t> data) {
  PAGELLM_CHECK(!ne.empty() && ne.size() <= 4, "tensor " + name + ": bad rank");
  int64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
  const int64_t expect = rows * row_size_bytes(type, ne[0]);
  PAGELLM_CHECK(static_cast<int64_t>(data.size()) == expect,
                "tensor " + name + ": " + std::to_string(data.size()) + " bytes, expected " + std::to_string(expect));
  tensors_.push_back(PendingTensor{name, type, std::move(ne), std::move(data)});
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  ByteSink s;
  s.put<uint32_t>(0x46554747);
  s.put<uint32_t>(3);
  s.put<uint64_t>(tensors_.size());
  const bool has_alignment_key = alignment_ != 32;
  s.put<uint64_t>(kv_.size() + (has_alignment_key ? 1 : 0));
  if (has_alignment_key) {
    s.put_string("general.alignment");
    s.put<uint32_t>(static_cast<uint32_t>(GgufValueType::UINT32));
    s.put<uint32_t>(static_cast<uint32_t>(alignment_));
  }
  for (const auto& [key, value] : kv_) {
    s.put_string(key);
    s.put<uint32_t>(static_cast<uint32_t>(value.type));
    put_value(s, value);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    s.put_string(t.name);
    s.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) s.put<uint64_t>(static_cast<uint64_t>(d));
    s.put<uint32_t>(static_cast<uint32_t>(t.type));
    s.put<uint64_t>(offset);
    offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  s.pad_to(alignment_);
  for (const PendingTensor& t : tensors_) {
    s.put_bytes(t.data);
    s.pad_to(alignment_);
  }
  return std::move(s.bytes());
}

void GgufWriter::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = to_bytes();
  const std::string tmp = path + ".tmp";
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
  if (!f) throw Error("cannot write GGUF file '" + tmp + "': " + std::strerror(errno));
  if (std::fwrite(bytes.data(), 1, bytes.size(), f.get()) != bytes.size() || std::fflush(f.get()) != 0) {
    throw Error("cannot write GGUF file '" + tmp + "': " + std::strerror(errno));
  }
  f.reset();
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw Error("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
  }
}

}  // namespace pagellm

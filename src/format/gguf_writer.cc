#include "format/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace pagellm {
namespace {

// Builds the header in memory (its size is the metadata's, mostly a vocab: a few MiB at most).
class ByteBuffer {
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
  void pad_to(uint64_t alignment) { out_.resize((out_.size() + alignment - 1) / alignment * alignment, 0); }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

// The value's payload (not its type tag), as GGUF stores it.
void put_value(ByteBuffer& s, const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::UINT8: s.put<uint8_t>(static_cast<uint8_t>(std::get<uint64_t>(v.v))); return;
    case GgufValueType::INT8: s.put<int8_t>(static_cast<int8_t>(std::get<int64_t>(v.v))); return;
    case GgufValueType::UINT16: s.put<uint16_t>(static_cast<uint16_t>(std::get<uint64_t>(v.v))); return;
    case GgufValueType::INT16: s.put<int16_t>(static_cast<int16_t>(std::get<int64_t>(v.v))); return;
    case GgufValueType::UINT32: s.put<uint32_t>(static_cast<uint32_t>(std::get<uint64_t>(v.v))); return;
    case GgufValueType::INT32: s.put<int32_t>(static_cast<int32_t>(std::get<int64_t>(v.v))); return;
    case GgufValueType::UINT64: s.put<uint64_t>(std::get<uint64_t>(v.v)); return;
    case GgufValueType::INT64: s.put<int64_t>(std::get<int64_t>(v.v)); return;
    case GgufValueType::FLOAT32: s.put<float>(static_cast<float>(std::get<double>(v.v))); return;
    case GgufValueType::FLOAT64: s.put<double>(std::get<double>(v.v)); return;
    case GgufValueType::BOOL: s.put<uint8_t>(std::get<bool>(v.v) ? 1 : 0); return;
    case GgufValueType::STRING: s.put_string(std::get<std::string>(v.v)); return;
    case GgufValueType::ARRAY: {
      const auto& a = std::get<GgufArray>(v.v);
      s.put<uint32_t>(static_cast<uint32_t>(a.elem_type));
      s.put<uint64_t>(a.items.size());
      for (const GgufValue& item : a.items) {
        PAGELLM_CHECK(item.type == a.elem_type, "GGUF array element type mismatch");
        put_value(s, item);
      }
      return;
    }
  }
  PAGELLM_CHECK(false, "bad GGUF value type " + std::to_string(static_cast<uint32_t>(v.type)));
}

uint64_t padded(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

// Forwards a producer's bytes and counts them, so that the writer can check the tensor's size.
class CountingSink : public GgufDataSink {
 public:
  explicit CountingSink(GgufDataSink& out) : out_(out) {}
  using GgufDataSink::write;
  void write(std::span<const std::byte> bytes) override {
    out_.write(bytes);
    count_ += bytes.size();
  }
  uint64_t count() const { return count_; }

 private:
  GgufDataSink& out_;
  uint64_t count_ = 0;
};

class VectorSink : public GgufDataSink {
 public:
  using GgufDataSink::write;
  void write(std::span<const std::byte> bytes) override {
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
    out.insert(out.end(), p, p + bytes.size());
  }
  std::vector<uint8_t> out;
};

// A file that is removed unless commit() renames it into place.
class TmpFileSink : public GgufDataSink {
 public:
  explicit TmpFileSink(std::string path) : path_(std::move(path)), f_(std::fopen(path_.c_str(), "wb")) {
    if (f_ == nullptr) fail("cannot write GGUF file '" + path_ + "'");
  }
  ~TmpFileSink() override {
    if (f_ != nullptr) {
      std::fclose(f_);
      std::remove(path_.c_str());  // not committed: an exception is unwinding
    }
  }
  TmpFileSink(const TmpFileSink&) = delete;
  TmpFileSink& operator=(const TmpFileSink&) = delete;

  using GgufDataSink::write;
  void write(std::span<const std::byte> bytes) override {
    if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f_) != bytes.size()) {
      fail("cannot write GGUF file '" + path_ + "'");
    }
  }
  void commit(const std::string& final_path) {
    const bool flushed = std::fflush(f_) == 0;
    const bool closed = std::fclose(f_) == 0;
    f_ = nullptr;
    if (!flushed || !closed) {
      const int err = errno;
      std::remove(path_.c_str());
      errno = err;
      fail("cannot write GGUF file '" + path_ + "'");
    }
    if (std::rename(path_.c_str(), final_path.c_str()) != 0) {
      const int err = errno;
      std::remove(path_.c_str());
      errno = err;
      fail("cannot rename '" + path_ + "' to '" + final_path + "'");
    }
  }

 private:
  [[noreturn]] static void fail(const std::string& what) { throw Error(what + ": " + std::strerror(errno)); }
  std::string path_;
  FILE* f_;
};

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

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, TensorDataFn produce) {
  PAGELLM_CHECK(!ne.empty() && ne.size() <= 4, "tensor " + name + ": bad rank");
  int64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
  const uint64_t size = static_cast<uint64_t>(rows * row_size_bytes(type, ne[0]));
  tensors_.push_back(PendingTensor{name, type, std::move(ne), size, std::move(produce)});
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                            std::vector<uint8_t> data) {
  const size_t n = data.size();
  add_tensor(name, type, std::move(ne), [d = std::move(data)](GgufDataSink& out) { out.write(d.data(), d.size()); });
  PAGELLM_CHECK(n == tensors_.back().size_bytes, "tensor " + name + ": " + std::to_string(n) + " bytes, expected " +
                                                     std::to_string(tensors_.back().size_bytes));
}

std::vector<uint8_t> GgufWriter::header_bytes() const {
  ByteBuffer s;
  s.put<uint32_t>(0x46554747);  // "GGUF"
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
    offset += padded(t.size_bytes, alignment_);
  }
  s.pad_to(alignment_);
  return std::move(s.bytes());
}

void GgufWriter::write_to(GgufDataSink& out) const {
  const std::vector<uint8_t> header = header_bytes();
  out.write(header.data(), header.size());
  const std::vector<uint8_t> zeros(alignment_, 0);
  for (const PendingTensor& t : tensors_) {
    CountingSink counted(out);
    t.produce(counted);
    PAGELLM_CHECK(counted.count() == t.size_bytes, "tensor " + t.name + ": produced " +
                                                       std::to_string(counted.count()) + " bytes, expected " +
                                                       std::to_string(t.size_bytes));
    out.write(zeros.data(), padded(t.size_bytes, alignment_) - t.size_bytes);
  }
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  VectorSink sink;
  write_to(sink);
  return std::move(sink.out);
}

void GgufWriter::write(const std::string& path) const {
  TmpFileSink file(path + ".tmp");
  write_to(file);
  file.commit(path);
}

}  // namespace pagellm

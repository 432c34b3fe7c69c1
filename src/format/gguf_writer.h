// Streaming GGUF v3 writer. Spec: ggml docs/gguf.md; layout as in format/gguf.h.
//
// The header (metadata in insertion order, then one info per tensor) is written first; then each
// tensor's bytes, produced on demand by its TensorDataFn in the order the tensors were added, each
// followed by zero padding to the alignment. Only the header and the chunk a producer hands over
// are in memory at a time, so a file of any size is written in bounded memory (a 2 GiB F16 model
// needs no 2 GiB buffer).
//
// Example (a 1-D F32 tensor of 8 values streamed in two chunks):
//   GgufWriter w;
//   w.set("general.architecture", GgufValue::str("llama"));
//   w.add_tensor("x", GgmlType::F32, {8}, [&](GgufDataSink& out) {
//     out.write(std::as_bytes(std::span(first4)));   // 16 bytes
//     out.write(std::as_bytes(std::span(last4)));    // 16 bytes: 32 in all, as ne says
//   });
//   w.write("x.gguf");
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "format/gguf.h"

namespace pagellm {

// Where the writer's bytes go (a file, a memory buffer). write() throws pagellm::Error on failure.
class GgufDataSink {
 public:
  virtual ~GgufDataSink() = default;
  virtual void write(std::span<const std::byte> bytes) = 0;
  void write(const uint8_t* p, size_t n) { write(std::as_bytes(std::span(p, n))); }
};

// Produces one tensor's bytes into `out`: exactly rows x row_size_bytes(type, ne[0]) bytes in all,
// in any number of write() calls. Called once per write()/to_bytes(), in add_tensor order, after
// the tensors before it have been written. An exception it throws aborts the write.
using TensorDataFn = std::function<void(GgufDataSink& out)>;

class GgufWriter {
 public:
  // `alignment`: bytes, a power of two; written as general.alignment when it is not 32.
  explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}

  // Adds or replaces (in place, keeping its position) metadata `key`. "general.alignment" sets the
  // alignment instead (a u64-convertible power of two).
  void set(const std::string& key, GgufValue value);

  // A tensor whose bytes `produce` streams at write time. ne: ggml order, 1 to 4 dimensions.
  void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, TensorDataFn produce);
  // A tensor held in memory: `data` must be exactly rows x row_size_bytes(type, ne[0]) bytes.
  void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, std::vector<uint8_t> data);

  // Writes the file through `path`.tmp, renamed to `path` once complete (removed if anything
  // fails). Throws pagellm::Error when the file cannot be written or renamed, or what a producer
  // throws.
  void write(const std::string& path) const;
  // The whole file in memory (small files: tests, fuzzing).
  std::vector<uint8_t> to_bytes() const;
  // Header, then every tensor's data, into `out`. A producer that writes more or fewer bytes than
  // its tensor's size is a broken invariant (PAGELLM_CHECK).
  void write_to(GgufDataSink& out) const;

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    uint64_t size_bytes;
    TensorDataFn produce;
  };
  std::vector<uint8_t> header_bytes() const;

  uint64_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace pagellm

// A read-only memory mapping of one regular file (the weights of GGUF and safetensors files are
// used in place from it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace pagellm {

class MappedFile {
 public:
  // Maps `path` read-only, shared. Refuses anything but a regular file (a FIFO would block
  // open() until a writer comes) and opens without blocking, checking again on the descriptor
  // in case the path is replaced in between. Throws pagellm::Error naming the path; `what`
  // ("model file", "safetensors file") starts the message.
  static std::unique_ptr<MappedFile> open(const std::string& path, const std::string& what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  std::span<const uint8_t> bytes() const { return {static_cast<const uint8_t*>(map_), size_}; }
  // Whether [data, data + size) lies inside the mapping.
  bool contains(const void* data, size_t size) const;
  // Tells the kernel this process no longer reads the whole pages of [data, data + size)
  // (madvise MADV_DONTNEED; the page cache keeps them). No-op outside the mapping.
  void drop_pages(const void* data, size_t size) const;

 private:
  MappedFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pagellm

#include "format/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace pagellm {
namespace {

const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

[[noreturn]] void not_regular(const std::string& what, const std::string& path, mode_t mode) {
  throw Error(what + " '" + path + "' is " + file_kind(mode) + ", not a regular file");
}

}  // namespace

std::unique_ptr<MappedFile> MappedFile::open(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) not_regular(what, path, st.st_mode);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error("cannot open " + what + " '" + path + "': " + std::strerror(errno));
  if (::fstat(fd, &st) != 0) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    throw Error("cannot stat " + what + " '" + path + "': " + err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    not_regular(what, path, st.st_mode);
  }
  const auto size = static_cast<size_t>(st.st_size);
  void* map = nullptr;
  if (size > 0) {
    map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
      const std::string err = std::strerror(errno);
      ::close(fd);
      throw Error("cannot mmap " + what + " '" + path + "': " + err);
    }
  }
  ::close(fd);
  std::unique_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->map_ = map;
  m->size_ = size;
  return m;
}

MappedFile::~MappedFile() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

bool MappedFile::contains(const void* data, size_t size) const {
  const auto lo = reinterpret_cast<uintptr_t>(data), map_lo = reinterpret_cast<uintptr_t>(map_);
  return map_ != nullptr && lo >= map_lo && size <= size_ && lo - map_lo <= size_ - size;
}

void MappedFile::drop_pages(const void* data, size_t size) const {
  if (size == 0 || !contains(data, size)) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto lo = reinterpret_cast<uintptr_t>(data), hi = lo + size;
  const uintptr_t first = (lo + page - 1) / page * page, last = hi / page * page;
  if (first < last) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

}  // namespace pagellm

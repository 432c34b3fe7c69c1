#include "core/huge_pages.h"

#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace pagellm {

void HugePageFree::operator()(uint8_t* p) const noexcept { std::free(p); }

HugePageBuffer allocate_huge_page_buffer(size_t bytes) {
  if (bytes == 0) return nullptr;
  // Below one huge page the advice cannot take effect: plain alignment to a cache line will do.
  const size_t align = bytes >= kHugePageBytes ? kHugePageBytes : 64;
  if (bytes > SIZE_MAX - align) throw std::bad_alloc();
  const size_t rounded = (bytes + align - 1) / align * align;  // aligned_alloc needs a multiple
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) throw std::bad_alloc();
#if defined(MADV_HUGEPAGE)
  // Advice only: EINVAL (a kernel without THP) leaves ordinary pages, which is still correct.
  if (align == kHugePageBytes) (void)::madvise(p, rounded, MADV_HUGEPAGE);
#endif
  return HugePageBuffer(static_cast<uint8_t*>(p));
}

}  // namespace pagellm

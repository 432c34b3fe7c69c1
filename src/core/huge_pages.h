// Large, long-lived buffers (repacked weights, the KV cache) backed by transparent huge pages where Linux
// allows them.
//
// A 1B-parameter model's weights span ~150k 4 KiB pages; every decode step streams through all of
// them, so each step takes TLB misses on every page, and a kernel that periodically clears the
// pages' accessed bits (DAMON, on the cloud VMs we run on, every 0.5 s) makes the next steps
// re-walk the page tables: measured on the EPYC Zen 5 VM, single-stream p99 ITL 26.5-30.8 ms with
// 4 KiB pages, 21.9-24.5 ms with huge pages (docs/benchmarks.md, "step-time budget"). Aligning
// the buffer to 2 MiB and advising MADV_HUGEPAGE (Linux madvise(2)) lets the kernel map it with
// 2 MiB pages when /sys/kernel/mm/transparent_hugepage/enabled is "always" or "madvise"; with
// "never" (or outside Linux) it is ordinary memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace pagellm {

struct HugePageFree {
  void operator()(uint8_t* p) const noexcept;
};
using HugePageBuffer = std::unique_ptr<uint8_t[], HugePageFree>;

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// An uninitialised buffer of `bytes` bytes (rounded up to a whole number of 2 MiB pages when it
// is at least one page, so that its tail page can be huge too), aligned to 2 MiB, advised
// MADV_HUGEPAGE. bytes == 0 gives nullptr. Throws std::bad_alloc when the memory is not there.
HugePageBuffer allocate_huge_page_buffer(size_t bytes);

}  // namespace pagellm

#include "core/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

namespace pagellm {
namespace {

TEST(HugePages, BuffersAreAlignedWritableAndSizedAsAsked) {
  EXPECT_EQ(allocate_huge_page_buffer(0), nullptr);
  for (size_t bytes : {size_t{1}, size_t{4095}, kHugePageBytes - 1, kHugePageBytes, 3 * kHugePageBytes + 17}) {
    HugePageBuffer b = allocate_huge_page_buffer(bytes);
    ASSERT_NE(b, nullptr) << bytes;
    const auto addr = reinterpret_cast<uintptr_t>(b.get());
    EXPECT_EQ(addr % (bytes >= kHugePageBytes ? kHugePageBytes : 64), 0u) << bytes;
    std::memset(b.get(), 0xA5, bytes);  // every byte asked for is ours (ASan checks the bound)
    EXPECT_EQ(b[bytes - 1], 0xA5);
  }
}

TEST(HugePages, AnImpossibleSizeThrowsBadAlloc) {
  EXPECT_THROW(allocate_huge_page_buffer(SIZE_MAX - 5), std::bad_alloc);
}

// Where the kernel offers THP on request, a touched multi-page buffer is (at least partly) backed
// by huge pages; elsewhere the advice is a no-op and there is nothing to check.
TEST(HugePages, TheAdviceTakesEffectWhereTransparentHugePagesAreOffered) {
  std::ifstream mode_file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(mode_file, mode);
  if (mode.find("[madvise]") == std::string::npos && mode.find("[always]") == std::string::npos) {
    GTEST_SKIP() << "transparent huge pages off here: '" << mode << "'";
  }
  const size_t bytes = 8 * kHugePageBytes;
  HugePageBuffer b = allocate_huge_page_buffer(bytes);
  std::memset(b.get(), 1, bytes);
  std::ifstream smaps("/proc/self/smaps");
  const auto start = reinterpret_cast<uintptr_t>(b.get());
  std::string line;
  bool in_mapping = false;
  int64_t huge_kb = -1;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(' ') < line.find(':')) {
      in_mapping = lo <= start && start < hi;
    } else if (in_mapping && line.rfind("AnonHugePages:", 0) == 0) {
      huge_kb = std::stoll(line.substr(14));
      break;
    }
  }
  ASSERT_GE(huge_kb, 0) << "the buffer's mapping was not found in /proc/self/smaps";
  // The kernel may fail to find free 2 MiB frames (fragmentation); it is advice. Require only that
  // a fresh 16 MiB buffer got at least one huge page, which the test machines give.
  EXPECT_GT(huge_kb, 0);
}

}  // namespace
}  // namespace pagellm

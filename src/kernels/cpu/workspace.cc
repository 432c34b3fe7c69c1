#include "kernels/cpu/workspace.h"

#include <cstddef>

namespace pagellm::kernels {

void* Workspace::get(Slot slot, int64_t bytes) {
  constexpr int64_t kAlign = 64;
  std::vector<uint8_t>& v = buffers_[slot];
  const auto need = static_cast<std::size_t>((bytes > 0 ? bytes : 0) + kAlign);
  if (v.size() < need) v.resize(need);
  const auto p = reinterpret_cast<uintptr_t>(v.data());
  return v.data() + (kAlign - p % kAlign) % kAlign;
}

int64_t Workspace::reserved_bytes() const {
  int64_t total = 0;
  for (const auto& v : buffers_) total += static_cast<int64_t>(v.size());
  return total;
}

}  // namespace pagellm::kernels

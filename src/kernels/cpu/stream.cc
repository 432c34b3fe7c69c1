// stream_sum (ops.h): the read-bandwidth probe's streaming sum, dispatched on the Isa.
#include <string>

#include "core/error.h"
#include "kernels/cpu/kernels_impl.h"
#include "kernels/cpu/ops.h"

namespace pagellm::kernels {

float stream_sum(const float* p, int64_t n, Isa isa, int64_t prefetch_bytes, int streams) {
  PAGELLM_CHECK(streams == 1 || streams == 2, "stream_sum: streams " + std::to_string(streams));
  if (isa >= Isa::kAvx2) return avx2::stream_sum(p, n, prefetch_bytes, streams);
  float lanes[8] = {};  // 8 independent chains, so the loop is not bound by one add latency
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) lanes[l] += p[i + l];
  float total = 0;
  for (float l : lanes) total += l;
  for (; i < n; ++i) total += p[i];
  return total;
}

}  // namespace pagellm::kernels

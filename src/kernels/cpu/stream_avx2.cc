// The AVX2 streaming sum of the read-bandwidth probe (kernels::stream_sum, ops.h; entered only
// with an Isa >= kAvx2).
#include <immintrin.h>

#include "kernels/cpu/kernels_impl.h"

namespace pagellm::kernels::avx2 {

float stream_sum(const float* p, int64_t n, int64_t prefetch_bytes) {
  const int64_t ahead = prefetch_bytes / 4;
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    // The loops are unrolled by pragma: at -O2 GCC kept acc[] on the stack (a load and a store
    // per add), and the probe read 19 GB/s, less than decode itself streams (28-32), where this
    // loop in registers reads 27-28 (Xeon model 167 VM, 2 threads).
    if (ahead > 0) {
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) _mm_prefetch(reinterpret_cast<const char*>(p + i + ahead + 16 * k), _MM_HINT_T0);
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) acc[k] = _mm256_add_ps(acc[k], _mm256_loadu_ps(p + i + 8 * k));
  }
  __m256 s = acc[0];
#pragma GCC unroll 8
  for (int k = 1; k < 8; ++k) s = _mm256_add_ps(s, acc[k]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float total = 0;
  for (float l : lanes) total += l;
  for (; i < n; ++i) total += p[i];
  return total;
}

}  // namespace pagellm::kernels::avx2

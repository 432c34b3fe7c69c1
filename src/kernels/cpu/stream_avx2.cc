// The AVX2 streaming sum of the read-bandwidth probe (kernels::stream_sum, ops.h; entered only
// with an Isa >= kAvx2).
#include <immintrin.h>

#include "kernels/cpu/kernels_impl.h"

namespace pagellm::kernels::avx2 {

namespace {

// kStreams parts of p[0, n) side by side, 256 bytes a step in all (see stream_sum below).
template <int kStreams>
float stream_sum_parts(const float* p, int64_t n, int64_t prefetch_bytes) {
  constexpr int64_t kStep = 64 / kStreams;  // floats of each part per step
  const int64_t ahead = prefetch_bytes / 4;
  const int64_t part = n / kStreams / kStep * kStep;
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  // The loops are unrolled by pragma: at -O2 GCC kept acc[] on the stack (a load and a store
  // per add), and the probe read 19 GB/s, less than decode itself streams (28-32), where this
  // loop in registers reads 27-28 (Xeon model 167 VM, 2 threads).
  for (int64_t i = 0; i < part; i += kStep) {
#pragma GCC unroll 2
    for (int s = 0; s < kStreams; ++s) {
      const float* q = p + s * part + i;
      if (ahead > 0) {
#pragma GCC unroll 4
        for (int64_t k = 0; k < kStep / 16; ++k) {
          _mm_prefetch(reinterpret_cast<const char*>(q + ahead + 16 * k), _MM_HINT_T0);
        }
      }
#pragma GCC unroll 8
      for (int64_t k = 0; k < kStep / 8; ++k) {
        acc[s * kStep / 8 + k] = _mm256_add_ps(acc[s * kStep / 8 + k], _mm256_loadu_ps(q + 8 * k));
      }
    }
  }
  __m256 s = acc[0];
#pragma GCC unroll 8
  for (int k = 1; k < 8; ++k) s = _mm256_add_ps(s, acc[k]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float total = 0;
  for (float l : lanes) total += l;
  for (int64_t i = kStreams * part; i < n; ++i) total += p[i];
  return total;
}

}  // namespace

float stream_sum(const float* p, int64_t n, int64_t prefetch_bytes, int streams) {
  return streams == 2 ? stream_sum_parts<2>(p, n, prefetch_bytes) : stream_sum_parts<1>(p, n, prefetch_bytes);
}

}  // namespace pagellm::kernels::avx2

// The read-bandwidth probe of bench latency: the threads' streaming sums run in src/kernels/cpu
// (kernels::stream_sum, behind the same Isa dispatch as the kernels, with a scalar fallback).
#include <algorithm>
#include <chrono>
#include <new>
#include <string>
#include <vector>

#include "cli/bandwidth_probe.h"
#include "core/error.h"
#include "core/huge_pages.h"
#include "kernels/cpu/ops.h"

namespace pagellm::cli {
namespace {

// The read patterns tried: each thread's part as one stream or as two halves read side by side
// (as the Q4_0 / Q8_0 decode tiles read two tiles far apart), with no software prefetch or
// prefetcht0 some bytes ahead. Which reads fastest depends on the CPU: on the Xeon model 167 VM
// (2 threads, huge pages) one stream 1 KiB ahead read 30-36 GB/s, 2 KiB the same, 8 KiB 28-29,
// none 31-32; two streams 512 bytes to 2 KiB ahead read 10-15% more than one (interleaved
// runs). The probe is the best of them, so that it bounds what any kernel streams.
struct ReadPattern {
  int streams;
  int64_t prefetch_bytes;
};
constexpr ReadPattern kProbePatterns[] = {{1, 0}, {1, 1024}, {1, 8192}, {2, 0}, {2, 512}, {2, 1024}, {2, 2048}};

}  // namespace

double measure_read_bandwidth_gbps(ThreadPool& pool, int64_t bytes, int reps) {
  const kernels::Isa isa = kernels::default_isa();
  const int64_t n = bytes / 4 / 64 * 64;
  HugePageBuffer mem;
  try {
    // Huge pages, as the repacked weights that decode streams (core/huge_pages.h).
    mem = allocate_huge_page_buffer(static_cast<size_t>(n) * 4);
  } catch (const std::bad_alloc&) {
    throw Error("bandwidth probe: cannot allocate " + std::to_string(bytes >> 20) + " MiB (lower --probe-mib)");
  }
  float* const data = reinterpret_cast<float*>(mem.get());
  const int nt = pool.num_threads();
  auto part = [&](int t, int64_t& b, int64_t& e) {
    b = n * t / nt / 64 * 64;
    e = t + 1 == nt ? n : n * (t + 1) / nt / 64 * 64;
  };
  pool.run([&](int t, int) {  // first touch by the reading thread
    int64_t b, e;
    part(t, b, e);
    for (int64_t i = b; i < e; ++i) data[i] = 1.0f;
  });
  std::vector<float> sink(static_cast<size_t>(nt));
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    for (const ReadPattern& pattern : kProbePatterns) {  // interleaved, so drift hits each alike
      const auto t0 = std::chrono::steady_clock::now();
      pool.run([&](int t, int) {
        int64_t b, e;
        part(t, b, e);
        sink[static_cast<size_t>(t)] =
            kernels::stream_sum(data + b, e - b, isa, pattern.prefetch_bytes, pattern.streams);
      });
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, static_cast<double>(n) * 4 / s / 1e9);
    }
  }
  volatile float keep = sink[0];
  (void)keep;
  return best;
}

}  // namespace pagellm::cli

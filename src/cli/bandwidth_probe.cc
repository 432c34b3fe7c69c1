// The read-bandwidth probe of bench latency: the threads' streaming sums run in src/kernels/cpu
// (kernels::stream_sum, behind the same Isa dispatch as the kernels, with a scalar fallback).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cli/bandwidth_probe.h"
#include "core/error.h"
#include "kernels/cpu/ops.h"

namespace pagellm::cli {

double measure_read_bandwidth_gbps(ThreadPool& pool, int64_t bytes, int reps) {
  const kernels::Isa isa = kernels::default_isa();
  const int64_t n = bytes / 4 / 64 * 64;
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> buf(static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(n) * 4)));
  if (buf == nullptr) {
    throw Error("bandwidth probe: cannot allocate " + std::to_string(bytes >> 20) + " MiB (lower --probe-mib)");
  }
  const int nt = pool.num_threads();
  auto part = [&](int t, int64_t& b, int64_t& e) {
    b = n * t / nt / 64 * 64;
    e = t + 1 == nt ? n : n * (t + 1) / nt / 64 * 64;
  };
  pool.run([&](int t, int) {  // first touch by the reading thread
    int64_t b, e;
    part(t, b, e);
    for (int64_t i = b; i < e; ++i) buf.get()[i] = 1.0f;
  });
  std::vector<float> sink(static_cast<size_t>(nt));
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int t, int) {
      int64_t b, e;
      part(t, b, e);
      sink[static_cast<size_t>(t)] = kernels::stream_sum(buf.get() + b, e - b, isa);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n) * 4 / s / 1e9);
  }
  volatile float keep = sink[0];
  (void)keep;
  return best;
}

}  // namespace pagellm::cli

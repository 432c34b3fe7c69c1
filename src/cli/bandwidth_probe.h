// Memory read-bandwidth probe: every thread sums its own contiguous part of a large f32 buffer
// (in huge pages where Linux gives them, as the repacked weights; first-touched by that thread)
// with kernels::stream_sum (AVX2 where the CPU has it, else scalar); the best of `reps`
// repetitions of each of seven read patterns (one stream or two, with or without software
// prefetch, bandwidth_probe.cc).
// GB = 1e9 bytes. The method of the anchors in ../shared/testdata/perf/perf_anchors.json, plus
// the prefetching patterns, so that the probe is at least what decode can stream.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"

namespace pagellm::cli {

// Returns read bandwidth in GB/s over a buffer of `bytes` bytes. Throws pagellm::Error when the
// buffer cannot be allocated.
double measure_read_bandwidth_gbps(ThreadPool& pool, int64_t bytes, int reps);

}  // namespace pagellm::cli

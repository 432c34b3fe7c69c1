#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace pagellm {
namespace {

// Every run() executes fn exactly once per thread index, back to back (spinning workers).
TEST(ThreadPool, EveryIndexOncePerRun) {
  for (int n : {1, 2, 3, 5}) {
    ThreadPool pool(n);
    std::vector<std::atomic<int>> hits(n);
    const int runs = n <= 2 ? 20000 : 2000;  // n > cores: every run waits for time slices
    for (int r = 0; r < runs; ++r) {
      pool.run([&](int t, int nt) {
        ASSERT_EQ(nt, n);
        hits[t].fetch_add(1, std::memory_order_relaxed);
      });
    }
    for (int t = 0; t < n; ++t) EXPECT_EQ(hits[t].load(), runs) << "threads=" << n << " index=" << t;
  }
}

// Runs separated by pauses longer than the spin phase go through the futex sleep and wake-up.
TEST(ThreadPool, WakesSleepingWorkers) {
  ThreadPool pool(3);
  std::atomic<int> total{0};
  for (int r = 0; r < 30; ++r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(r % 3 == 0 ? 20 : 0));
    pool.run([&](int, int) { total.fetch_add(1); });
    EXPECT_EQ(total.load(), 3 * (r + 1));  // run() returned only after all three
  }
}

// run() returns only when the workers' writes are done and visible to the caller.
TEST(ThreadPool, ResultsVisibleAfterRun) {
  ThreadPool pool(2);
  std::vector<int64_t> out(1 << 16);
  for (int r = 1; r <= 200; ++r) {
    pool.parallel_for(static_cast<int64_t>(out.size()), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = i * r;
    });
    int64_t expect = 0;
    for (size_t i = 0; i < out.size(); ++i) expect += static_cast<int64_t>(i) * r;
    ASSERT_EQ(std::accumulate(out.begin(), out.end(), int64_t{0}), expect);
  }
}

TEST(ThreadPool, ParallelForCoversRangeOnce) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 3, 7, 1000}) {
    std::vector<int> seen(n, 0);
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ++seen[i];
    });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << n << " " << i;
  }
  pool.parallel_for(0, [&](int64_t, int64_t) { ADD_FAILURE() << "empty range called"; });
}

// Guided chunks cover [0, n) exactly once, back to back; a chunk starting at b has size
// min(n - b, max(min_grain, ceil((n - b) / (2 x threads)))), whichever thread took it, so the
// boundaries do not depend on timing. min_grain below 1, equal to and larger than n.
TEST(ThreadPool, ParallelForGuidedChunksShrinkAndCoverOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 7, 1000}) {
      for (int64_t min_grain : {0, 1, 3, 64, 5000}) {
        std::mutex mu;
        std::vector<std::pair<int64_t, int64_t>> chunks;
        pool.parallel_for_guided(n, min_grain, [&](int64_t b, int64_t e) {
          std::lock_guard<std::mutex> lock(mu);
          chunks.emplace_back(b, e);
        });
        std::sort(chunks.begin(), chunks.end());
        const int64_t g = std::max<int64_t>(1, min_grain), parts = 2 * threads;
        int64_t at = 0;
        for (const auto& [b, e] : chunks) {
          ASSERT_EQ(b, at) << "threads=" << threads << " n=" << n << " min_grain=" << min_grain;
          EXPECT_EQ(e - b, std::min(n - b, std::max(g, (n - b + parts - 1) / parts)))
              << "threads=" << threads << " n=" << n << " min_grain=" << min_grain << " b=" << b;
          at = e;
        }
        EXPECT_EQ(at, n) << "threads=" << threads << " min_grain=" << min_grain;
      }
    }
  }
}

// With a head, thread t first gets [head * t / T, head * (t + 1) / T) (empty ranges skipped),
// from that thread, and the guided chunks cover [head, n) by the same rule as without one; a
// head beyond n is n, a negative one 0. Every index once.
TEST(ThreadPool, ParallelForGuidedDealsTheHeadOneRangePerThread) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 7, 160, 1000}) {
      for (int64_t head : {int64_t{-3}, int64_t{0}, n / 2, n * 7 / 8, n, n + 5}) {
        std::mutex mu;
        std::vector<std::pair<int64_t, int64_t>> chunks;
        std::vector<std::pair<int64_t, int64_t>> first(threads, {-1, -1});  // each thread's first call
        std::vector<std::thread::id> ids(threads);
        pool.run([&](int t, int) { ids[t] = std::this_thread::get_id(); });
        pool.parallel_for_guided(
            n, 1,
            [&](int64_t b, int64_t e) {
              std::lock_guard<std::mutex> lock(mu);
              chunks.emplace_back(b, e);
              const auto t = std::find(ids.begin(), ids.end(), std::this_thread::get_id()) - ids.begin();
              if (first[t].first < 0) first[t] = {b, e};
            },
            head);
        const int64_t h = std::clamp<int64_t>(head, 0, n);
        SCOPED_TRACE("threads=" + std::to_string(threads) + " n=" + std::to_string(n) +
                     " head=" + std::to_string(head));
        for (int t = 0; t < threads; ++t) {
          const int64_t b = h * t / threads, e = h * (t + 1) / threads;
          if (b < e) EXPECT_EQ(first[t], std::make_pair(b, e)) << "thread " << t;
        }
        std::sort(chunks.begin(), chunks.end());
        int64_t at = 0;
        for (const auto& [b, e] : chunks) {
          ASSERT_EQ(b, at);
          if (b >= h) {
            const int64_t parts = 2 * threads;
            EXPECT_EQ(e - b, std::min(n - b, std::max<int64_t>(1, (n - b + parts - 1) / parts))) << "b=" << b;
          }
          at = e;
        }
        EXPECT_EQ(at, n);
      }
    }
  }
}

// Destroying a pool whose workers sleep (or never ran a job) returns.
TEST(ThreadPool, DestroyIdleAndSleeping) {
  { ThreadPool never_used(4); }
  ThreadPool pool(2);
  pool.run([](int, int) {});
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
}

}  // namespace
}  // namespace pagellm

// A fixed pool of worker threads for data-parallel kernels. No thread is created per op.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pagellm {

class ThreadPool {
 public:
  // num_threads >= 1 counts the calling thread: ThreadPool(2) starts one worker.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs fn(thread_index, num_threads) once on every thread (the caller is thread 0) and returns
  // when all are done. The work split is the callee's: it must not depend on timing, so that the
  // result is deterministic. Not re-entrant.
  void run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into num_threads contiguous ranges; fn(begin, end) per non-empty range.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

  // Physical-ish core count of this machine (hardware_concurrency, at least 1).
  static int default_num_threads();

 private:
  void worker_loop(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int, int)>* job_ = nullptr;
  uint64_t generation_ = 0;      // guarded by mu_; bumped per run()
  std::atomic<int> pending_{0};  // workers still running the current job
  bool stop_ = false;
};

}  // namespace pagellm

// A fixed pool of worker threads for data-parallel kernels. No thread is created per op.
//
// Dispatch is spin-then-sleep (as ggml's and OpenMP's pools): after a job, a worker polls the
// job counter with kSpinIterations PAUSEs (10-120 us, by the CPU's PAUSE latency: longer than the
// gap between two kernels of a forward pass), then sleeps on a futex (std::atomic::wait). run()
// wakes sleepers only when there are some, so back-to-back kernels cost two atomic operations
// per worker and no system call.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace pagellm {

class ThreadPool {
 public:
  // num_threads >= 1 counts the calling thread: ThreadPool(2) starts one worker. Throws
  // pagellm::Error if the system cannot start that many threads.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs fn(thread_index, num_threads) once on every thread (the caller is thread 0) and returns
  // when all are done. The work split is the callee's: it must not depend on timing, so that the
  // result is deterministic. Not re-entrant; one caller at a time.
  void run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into num_threads contiguous ranges; fn(begin, end) per non-empty range.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

  // Splits [0, n) into contiguous chunks taken in order by whichever thread is free (an atomic
  // counter), guided: a chunk is 1/(2 x num_threads) of what is left, at least min_grain (the
  // last one may be shorter); fn(begin, end) per chunk. Guided self-scheduling (Polychronopoulos
  // & Kuck, IEEE Trans. Computers 36(12), 1987): large chunks first, small ones at the end, so
  // the threads finish together, and a thread whose CPU runs slower (a shared VM) takes fewer
  // chunks. Use where the result does not depend on which thread computes a chunk.
  // head (clamped to [0, n]): the first head indices are dealt before that, one contiguous range
  // per thread (thread t: [head * t / T, head * (t + 1) / T)), and the guided chunks cover
  // [head, n): a memory-bound caller whose per-thread range is one long stream starts fewer
  // streams (matmul.cc's decode split).
  void parallel_for_guided(int64_t n, int64_t min_grain, const std::function<void(int64_t, int64_t)>& fn,
                           int64_t head = 0);

  // Physical-ish core count of this machine (hardware_concurrency, at least 1).
  static int default_num_threads();

  // PAUSE iterations a worker polls for the next job before it sleeps (0 when the pool has more
  // threads than the machine has CPUs).
  static constexpr int kSpinIterations = 1 << 11;

 private:
  void worker_loop(int index);
  void stop_workers();

  int num_threads_;
  int spin_iterations_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;  // published by generation_ (release)
  std::atomic<uint32_t> generation_{0};                 // bumped per run() and at shutdown
  std::atomic<int> sleeping_{0};                        // workers inside generation_.wait
  std::atomic<int> pending_{0};                         // workers still running the current job
  std::atomic<bool> stop_{false};
};

}  // namespace pagellm

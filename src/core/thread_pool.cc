#include "core/thread_pool.h"

#include <algorithm>
#include <string>
#include <system_error>

#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PAGELLM_CPU_RELAX() _mm_pause()
#else
#define PAGELLM_CPU_RELAX() std::this_thread::yield()
#endif

namespace pagellm {

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(std::max(1, num_threads)),
      // More threads than CPUs: a finished worker spinning would take the CPU from one that still
      // has work (measured: 15-23x slower dispatch with 3-64 threads on 2 CPUs), so it sleeps.
      spin_iterations_(num_threads_ <= default_num_threads() ? kSpinIterations : 0) {
  try {
    for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
  } catch (const std::system_error& e) {
    stop_workers();
    throw Error("cannot start " + std::to_string(num_threads_ - 1) + " worker threads (" + e.what() +
                "); use fewer --threads");
  }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
  stop_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

int ThreadPool::default_num_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void ThreadPool::worker_loop(int index) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < spin_iterations_; ++spin) {
      PAGELLM_CPU_RELAX();
      g = generation_.load(std::memory_order_acquire);
    }
    while (g == seen) {
      // Dekker pair with run(): either run() sees sleeping_ > 0 and notifies, or the futex
      // wait sees the new generation and returns at once.
      sleeping_.fetch_add(1, std::memory_order_seq_cst);
      generation_.wait(seen, std::memory_order_seq_cst);
      sleeping_.fetch_sub(1, std::memory_order_seq_cst);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    (*job_)(index, num_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (num_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);  // publishes job_ and pending_
  if (sleeping_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();
  fn(0, num_threads_);
  // The caller's share is about as long as a worker's: poll, and give the core away only if a
  // worker is late (an oversubscribed machine), where spinning would delay it further.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < spin_iterations_) {
      PAGELLM_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  run([&](int t, int nt) {
    const int64_t begin = n * t / nt;
    const int64_t end = n * (t + 1) / nt;
    if (begin < end) fn(begin, end);
  });
}

void ThreadPool::parallel_for_guided(int64_t n, int64_t min_grain, const std::function<void(int64_t, int64_t)>& fn,
                                     int64_t head) {
  if (n <= 0) return;
  head = std::clamp<int64_t>(head, 0, n);
  // The state in one struct, the lambda holding one reference to it: a std::function keeps a
  // capture that small in place, so a decode step's matmuls allocate nothing here.
  struct Guided {
    int64_t n, min_grain, parts, head;
    const std::function<void(int64_t, int64_t)>& fn;
    std::atomic<int64_t> next;
  } g{n, std::max<int64_t>(1, min_grain), 2 * static_cast<int64_t>(num_threads_), head, fn, head};
  run([&g](int t, int nt) {
    const int64_t hb = g.head * t / nt, he = g.head * (t + 1) / nt;
    if (hb < he) g.fn(hb, he);
    int64_t b = g.next.load(std::memory_order_relaxed);
    while (b < g.n) {
      const int64_t c = std::min(g.n - b, std::max(g.min_grain, (g.n - b + g.parts - 1) / g.parts));
      if (g.next.compare_exchange_weak(b, b + c, std::memory_order_relaxed)) {  // else b is reloaded
        g.fn(b, b + c);
        b = g.next.load(std::memory_order_relaxed);
      }
    }
  });
}

}  // namespace pagellm

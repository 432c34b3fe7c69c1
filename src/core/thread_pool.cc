#include "core/thread_pool.h"

#include <algorithm>

#include "core/error.h"

namespace pagellm {

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::default_num_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int, int)>* job = nullptr;
    {
      // Spin briefly before sleeping: kernels are dispatched back to back during a forward pass.
      for (int spin = 0; spin < 20000; ++spin) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (stop_ || generation_ != seen) break;
        }
        std::this_thread::yield();
      }
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    (*job)(index, num_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (num_threads_ == 1) {
    fn(0, 1);
    return;
  }
  pending_.store(num_threads_ - 1, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    ++generation_;
  }
  cv_.notify_all();
  fn(0, num_threads_);
  while (pending_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  run([&](int t, int nt) {
    const int64_t begin = n * t / nt;
    const int64_t end = n * (t + 1) / nt;
    if (begin < end) fn(begin, end);
  });
}

}  // namespace pagellm

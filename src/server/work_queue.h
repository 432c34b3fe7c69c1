// A fixed pool of threads behind a bounded queue: where the server parses request bodies,
// renders chat templates and tokenises prompts, so that this CPU work never runs on the HTTP I/O
// threads (a multi-megabyte body would otherwise stall every connection those threads serve,
// /health included). When the queue is full, try_submit() refuses and the caller answers 429:
// back-pressure of its own, separate from the engine's waiting queue. The bound is both a count
// and the bytes the queued jobs hold (their request bodies), so a burst of small requests gets in
// while a pile of big bodies cannot grow the process without bound.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pagellm::server {

class WorkQueue {
 public:
  // threads >= 1 workers; at most max_queued jobs holding at most max_queued_bytes wait (not
  // counting those running; one job is always admitted into an empty queue whatever its bytes).
  // Throws pagellm::Error if a thread cannot be started.
  WorkQueue(int threads, size_t max_queued, int64_t max_queued_bytes);
  ~WorkQueue();  // shutdown()

  // Refuses new jobs, runs the ones already queued, joins the workers. Idempotent; not from a job.
  void shutdown();

  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Thread-safe. Queues `job`, which holds `bytes` until it runs, and returns true; or returns
  // false (job dropped) when it does not fit the bounds. A job must not throw (an escaping
  // exception is swallowed).
  bool try_submit(std::function<void()> job, int64_t bytes = 0);

  size_t max_queued() const { return max_queued_; }
  int64_t max_queued_bytes() const { return max_queued_bytes_; }
  size_t num_queued() const;     // jobs waiting now (thread-safe; for metrics)
  int64_t num_rejected() const;  // try_submit refusals since start

 private:
  void run();

  const size_t max_queued_;
  const int64_t max_queued_bytes_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Job {
    std::function<void()> fn;
    int64_t bytes;
  };
  std::deque<Job> jobs_;
  int64_t queued_bytes_ = 0;
  bool stopping_ = false;
  int64_t rejected_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace pagellm::server

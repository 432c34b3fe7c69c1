#include "server/work_queue.h"

#include <system_error>

#include "core/error.h"

namespace pagellm::server {

WorkQueue::WorkQueue(int threads, size_t max_queued, int64_t max_queued_bytes)
    : max_queued_(max_queued), max_queued_bytes_(max_queued_bytes) {
  const int n = threads < 1 ? 1 : threads;
  try {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { run(); });
  } catch (const std::system_error& e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    throw Error(std::string("cannot start the request worker threads: ") + e.what());
  }
}

WorkQueue::~WorkQueue() { shutdown(); }

void WorkQueue::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

bool WorkQueue::try_submit(std::function<void()> job, int64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool fits = jobs_.empty() || (jobs_.size() < max_queued_ && queued_bytes_ + bytes <= max_queued_bytes_);
    if (stopping_ || !fits || max_queued_ == 0) {
      ++rejected_;
      return false;
    }
    jobs_.push_back(Job{std::move(job), bytes});
    queued_bytes_ += bytes;
  }
  cv_.notify_one();
  return true;
}

size_t WorkQueue::num_queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

int64_t WorkQueue::num_rejected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rejected_;
}

void WorkQueue::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, nothing left
      job = std::move(jobs_.front().fn);
      queued_bytes_ -= jobs_.front().bytes;
      jobs_.pop_front();
    }
    try {
      job();
    } catch (...) {  // a job reports its own errors; one that escapes must not end the process
    }
  }
}

}  // namespace pagellm::server

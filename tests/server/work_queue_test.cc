#include "server/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <stdexcept>

namespace pagellm::server {
namespace {

// One worker held busy by a job that waits on `release`, so that what follows stays queued.
struct BusyWorker {
  std::promise<void> started, release;
  explicit BusyWorker(WorkQueue& q) {
    auto rel = release.get_future().share();
    EXPECT_TRUE(q.try_submit([this, rel] {
      started.set_value();
      rel.wait();
    }));
    started.get_future().wait();
  }
};

TEST(WorkQueue, BoundsTheQueuedCount) {
  WorkQueue q(1, 2, 1 << 20);
  BusyWorker busy(q);
  std::atomic<int> ran{0};
  EXPECT_TRUE(q.try_submit([&] { ++ran; }));
  EXPECT_TRUE(q.try_submit([&] { ++ran; }));
  EXPECT_FALSE(q.try_submit([&] { ++ran; }));  // two already wait
  EXPECT_EQ(q.num_queued(), 2u);
  EXPECT_EQ(q.num_rejected(), 1);
  busy.release.set_value();
  q.shutdown();
  EXPECT_EQ(ran.load(), 2);
}

TEST(WorkQueue, BoundsTheQueuedBytesButAdmitsOneBigJobIntoAnEmptyQueue) {
  WorkQueue q(1, 100, 1000);
  BusyWorker busy(q);
  std::atomic<int> ran{0};
  EXPECT_TRUE(q.try_submit([&] { ++ran; }, 5000));  // alone in the queue: admitted
  EXPECT_FALSE(q.try_submit([&] { ++ran; }, 1));    // over the bytes bound now
  busy.release.set_value();
  q.shutdown();
  EXPECT_EQ(ran.load(), 1);

  WorkQueue q2(1, 100, 1000);
  BusyWorker busy2(q2);
  EXPECT_TRUE(q2.try_submit([&] { ++ran; }, 600));
  EXPECT_TRUE(q2.try_submit([&] { ++ran; }, 400));
  EXPECT_FALSE(q2.try_submit([&] { ++ran; }, 1));
  busy2.release.set_value();
  q2.shutdown();
  EXPECT_EQ(ran.load(), 3);
}

TEST(WorkQueue, ShutdownRunsWhatIsQueuedAndRefusesTheRest) {
  std::atomic<int> ran{0};
  WorkQueue q(2, 100, 1 << 20);
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(q.try_submit([&] { ++ran; }));
  q.shutdown();
  EXPECT_EQ(ran.load(), 50);
  EXPECT_FALSE(q.try_submit([&] { ++ran; }));
  q.shutdown();  // idempotent
}

TEST(WorkQueue, AThrowingJobDoesNotStopTheWorker) {
  WorkQueue q(1, 10, 1 << 20);
  std::promise<void> done;
  EXPECT_TRUE(q.try_submit([] { throw std::runtime_error("boom"); }));
  EXPECT_TRUE(q.try_submit([&] { done.set_value(); }));
  EXPECT_EQ(done.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
}

}  // namespace
}  // namespace pagellm::server

// A decode step's matmuls allocate nothing once their workspace has grown: matmul_many keeps its
// jobs on the stack and ThreadPool hands its work over without a heap-held std::function. This
// file replaces the global operator new and delete, every form, with ones that count (and
// otherwise do what the defaults do), so any allocation during the measured calls, on any
// thread, shows. It is its own executable, kernels_alloc_tests (CMakeLists.txt: *_alloc_test.cc),
// so the sanitizers' own operator new keeps checking the other tests.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/workspace.h"
#include "kernels_test_util.h"

namespace {
std::atomic<int64_t> g_allocations{0};

void* counted_alloc(std::size_t n, std::size_t align) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p =
      align <= alignof(std::max_align_t) ? std::malloc(n) : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n, alignof(std::max_align_t)); }
void* operator new[](std::size_t n) { return counted_alloc(n, alignof(std::max_align_t)); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<std::size_t>(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n, alignof(std::max_align_t));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n, static_cast<std::size_t>(a));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t& t) noexcept {
  return operator new(n, a, t);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace pagellm::kernels {
namespace {

using testing::make_weights;
using testing::Rng;
using testing::TestWeights;

TEST(Allocation, CountingNewSeesAnAllocation) {
  // The counter works (else the test below would pass for nothing).
  const int64_t before = g_allocations.load();
  auto* v = new std::vector<int>(100);
  EXPECT_GT(g_allocations.load(), before);
  delete v;
}

TEST(Allocation, DecodeMatmulsAllocateNothingOnceWarm) {
  if (cpu_isa() < Isa::kAvx2) GTEST_SKIP() << "repacked tiles need AVX2";
  Rng rng(5);
  ThreadPool pool(2);
  Workspace ws;
  const int64_t cols = 512;
  // A layer's k + v + q (Q4_K, Q4_K, Q6_K), repacked on the best ISA, and a lone F16 weight; one
  // decode token, so x is 1 x cols; enough rows that the work is split across the threads.
  std::vector<TestWeights> tw;
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::F16}) {
    tw.push_back(make_weights(t, 512, cols, rng));
  }
  std::vector<std::vector<uint8_t>> bufs(tw.size());
  std::vector<WeightView> views;
  for (size_t i = 0; i < tw.size(); ++i) {
    WeightView v = tw[i].view();
    v.isa = cpu_isa();
    ASSERT_TRUE(repack_pays(v));
    bufs[i].resize(tw[i].bytes.size());
    views.push_back(repack_weight(v, bufs[i].data(), nullptr));
  }
  const std::vector<float> x = rng.vec(cols);
  std::vector<float> yk(512), yv(512), yq(512), yf(512);
  const MatmulOut outs[] = {{&views[0], yk.data()}, {&views[1], yv.data()}, {&views[2], yq.data()}};
  auto step = [&] {
    matmul_many(outs, x.data(), 1, &pool, ws);
    matmul(views[3], x.data(), 1, yf.data(), &pool, ws);
  };
  step();  // grows the workspace
  const int64_t before = g_allocations.load();
  for (int i = 0; i < 10; ++i) step();
  EXPECT_EQ(g_allocations.load() - before, 0);
}

}  // namespace
}  // namespace pagellm::kernels

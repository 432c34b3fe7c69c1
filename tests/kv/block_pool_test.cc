#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "kv/kv_cache_manager.h"

namespace pagellm {
namespace {

TEST(BlockPool, AllocatesInIdOrderAndRecyclesAtTail) {
  BlockPool pool(4);
  EXPECT_EQ(pool.free_queue(), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(*pool.allocate(), 0);
  EXPECT_EQ(*pool.allocate(), 1);
  EXPECT_EQ(pool.num_free_blocks(), 2);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.5);
  pool.release(0);
  EXPECT_EQ(pool.free_queue(), (std::vector<int32_t>{2, 3, 0}));
  EXPECT_EQ(*pool.allocate(), 2);
  EXPECT_EQ(*pool.allocate(), 3);
  EXPECT_EQ(*pool.allocate(), 0);
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_EQ(pool.num_free_blocks(), 0);
}

TEST(BlockPool, SharedBlockFreedOnlyByLastHolder) {
  BlockPool pool(2);
  const int32_t b = *pool.allocate();
  pool.incref(b);
  EXPECT_EQ(pool.ref_cnt(b), 2);
  pool.release(b);
  EXPECT_EQ(pool.ref_cnt(b), 1);
  EXPECT_EQ(pool.num_free_blocks(), 1);
  pool.release(b);
  EXPECT_EQ(pool.ref_cnt(b), 0);
  EXPECT_EQ(pool.free_queue(), (std::vector<int32_t>{1, 0}));
}

TEST(BlockPoolDeathTest, ReleasingAFreeBlockAborts) {
  BlockPool pool(2);
  EXPECT_DEATH(pool.release(1), "release of free block 1");
  EXPECT_DEATH(pool.incref(0), "incref of free block 0");
}

TEST(KvCacheManager, AllocatesBlocksAsTokensArrive) {
  KvCacheManager m(5, 4);
  ASSERT_TRUE(m.allocate_slots("a", 3));  // 1 block
  EXPECT_EQ(m.block_table("a"), (std::vector<int32_t>{0}));
  ASSERT_TRUE(m.allocate_slots("b", 5));  // 2 blocks
  EXPECT_EQ(m.block_table("b"), (std::vector<int32_t>{1, 2}));
  ASSERT_TRUE(m.allocate_slots("a", 4));  // still 1 block
  EXPECT_EQ(m.block_table("a").size(), 1u);
  ASSERT_TRUE(m.allocate_slots("a", 5));  // second block
  EXPECT_EQ(m.block_table("a"), (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(m.slot("a", 4), 3 * 4 + 0);
  EXPECT_EQ(m.slot("b", 5 - 1), 2 * 4 + 0);
  EXPECT_EQ(m.slot("b", 2), 1 * 4 + 2);
  // Not enough room: nothing changes.
  EXPECT_FALSE(m.allocate_slots("c", 9));
  EXPECT_TRUE(m.block_table("c").empty());
  EXPECT_EQ(m.pool().num_free_blocks(), 1);
  EXPECT_FALSE(m.allocate_slots("a", 13));
  EXPECT_EQ(m.block_table("a").size(), 2u);
  m.free("b");  // released tail first
  EXPECT_EQ(m.pool().free_queue(), (std::vector<int32_t>{4, 2, 1}));
  m.free("a");
  m.free("unknown");
  EXPECT_EQ(m.pool().num_free_blocks(), 5);
  EXPECT_EQ(m.num_requests(), 0);
}

TEST(KvCacheManager, RandomisedNoLeakNoDoubleHold) {
  std::mt19937 rng(7);
  KvCacheManager m(37, 4);
  std::vector<int64_t> lens(10, 0);
  for (int step = 0; step < 5000; ++step) {
    const int r = static_cast<int>(rng() % lens.size());
    const std::string id = "r" + std::to_string(r);
    if (rng() % 5 == 0) {
      m.free(id);
      lens[r] = 0;
    } else {
      const int64_t want = lens[r] + 1 + rng() % 9;
      if (m.allocate_slots(id, want)) lens[r] = want;
    }
    // Invariants: every held block held once, free + held = total.
    std::vector<int> holders(37, 0);
    int held = 0;
    for (size_t i = 0; i < lens.size(); ++i) {
      const auto& t = m.block_table("r" + std::to_string(i));
      EXPECT_EQ(static_cast<int64_t>(t.size()), m.blocks_for(lens[i]));
      for (int32_t b : t) ++holders[b], ++held;
    }
    for (int32_t b = 0; b < 37; ++b) EXPECT_EQ(holders[b], m.pool().ref_cnt(b));
    ASSERT_EQ(held + m.pool().num_free_blocks(), 37);
  }
  for (size_t i = 0; i < lens.size(); ++i) m.free("r" + std::to_string(i));
  EXPECT_EQ(m.pool().num_free_blocks(), 37);
}

TEST(KvCache, SizesAndLayerViews) {
  KvCacheShape s{5, 4, 8, GgmlType::F32, {}};
  EXPECT_EQ(s.bytes_per_token(), 2 * 5 * 4 * 8 * 4);
  KvCache kv(s, 3, 16);
  EXPECT_EQ(kv.bytes(), 3 * 16 * s.bytes_per_token());
  auto l0 = kv.layer(0), l4 = kv.layer(4);
  EXPECT_EQ(static_cast<uint8_t*>(l0.v) - static_cast<uint8_t*>(l0.k), 3 * 16 * 4 * 8 * 4);
  EXPECT_EQ(static_cast<uint8_t*>(l4.v) + 3 * 16 * 4 * 8 * 4 - static_cast<uint8_t*>(l0.k), kv.bytes());
  EXPECT_EQ(l0.num_slots, 48);
  EXPECT_EQ(KvCache::blocks_for_bytes(s, 16, 16 * s.bytes_per_token() * 2 + 5), 2);
  EXPECT_THROW(KvCache(KvCacheShape{1, 1, 8, GgmlType::Q8_0, {}}, 1, 16), Error);
}

}  // namespace
}  // namespace pagellm

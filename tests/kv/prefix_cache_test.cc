// Prefix cache at the pool / manager level: exact block ids, reference counts, hits, eviction order.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "kv/kv_cache_manager.h"

namespace pagellm {
namespace {

std::vector<int32_t> seq(int n, int start = 100) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Allocates and "computes" all tokens of a request (registers its full blocks).
void run(KvCacheManager& m, const std::string& id, const std::vector<int32_t>& tokens, uint64_t root,
         const PrefixHit* hit = nullptr) {
  ASSERT_TRUE(m.allocate_slots(id, static_cast<int64_t>(tokens.size()), hit));
  m.cache_computed_blocks(id, tokens, static_cast<int64_t>(tokens.size()), root);
}

TEST(PrefixCache, HitsTheLongestChainOfFullBlocks) {
  KvCacheManager m(10, 4, true);
  const uint64_t root = KvCacheManager::root_hash("");
  run(m, "a", seq(10), root);  // blocks 0 1 2; full: 0 1
  EXPECT_EQ(m.pool().num_cached_blocks(), 2);
  EXPECT_EQ(m.num_hashed_blocks("a"), 2);
  // Same first 9 tokens, then different: hits blocks 0 and 1 (8 tokens).
  std::vector<int32_t> b = seq(9);
  b.push_back(7);
  b.push_back(8);
  const PrefixHit hit = m.find_cached_prefix(b, root);
  EXPECT_EQ(hit.blocks, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(hit.num_tokens, 8);
  run(m, "b", b, root, &hit);
  EXPECT_EQ(m.block_table("b"), (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(m.pool().ref_cnt(0), 2);
  EXPECT_EQ(m.pool().ref_cnt(1), 2);
  EXPECT_EQ(m.pool().ref_cnt(3), 1);
  // A different first block: no hit at all, even though block 1's tokens match.
  std::vector<int32_t> c = seq(10);
  c[0] = 5;
  EXPECT_TRUE(m.find_cached_prefix(c, root).blocks.empty());
  // Another salt: no sharing.
  EXPECT_TRUE(m.find_cached_prefix(seq(10), KvCacheManager::root_hash("tenant-b")).blocks.empty());
}

TEST(PrefixCache, FullyCachedPromptStillComputesOneToken) {
  KvCacheManager m(10, 4, true);
  const uint64_t root = KvCacheManager::root_hash("");
  run(m, "a", seq(8), root);  // exactly two full blocks
  EXPECT_EQ(m.pool().num_cached_blocks(), 2);
  const PrefixHit hit = m.find_cached_prefix(seq(8), root);
  EXPECT_EQ(hit.num_tokens, 4);  // capped at (8 - 1) / 4 = 1 block: the last token is recomputed
  const PrefixHit hit9 = m.find_cached_prefix(seq(9), root);
  EXPECT_EQ(hit9.num_tokens, 8);
}

TEST(PrefixCache, FreedBlocksStayCachedUntilEvictedLruLeavesFirst) {
  KvCacheManager m(6, 4, true);
  const uint64_t root = KvCacheManager::root_hash("");
  run(m, "a", seq(12), root);  // blocks 0 1 2, all full and cached
  m.free("a");                 // released 2, 1, 0: the leaf first
  EXPECT_EQ(m.pool().free_queue(), (std::vector<int32_t>{3, 4, 5, 2, 1, 0}));
  EXPECT_EQ(m.pool().num_cached_blocks(), 3);
  // A hit revives the cached blocks from the middle of the free queue.
  const PrefixHit hit = m.find_cached_prefix(seq(13), root);
  EXPECT_EQ(hit.blocks, (std::vector<int32_t>{0, 1, 2}));
  run(m, "b", seq(13), root, &hit);
  EXPECT_EQ(m.block_table("b"), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(m.pool().free_queue(), (std::vector<int32_t>{4, 5}));
  m.free("b");
  EXPECT_EQ(m.pool().free_queue(), (std::vector<int32_t>{4, 5, 3, 2, 1, 0}));
  // New unrelated requests take the never-cached blocks, then evict leaves (2) before roots.
  ASSERT_TRUE(m.allocate_slots("x", 12));
  EXPECT_EQ(m.block_table("x"), (std::vector<int32_t>{4, 5, 3}));
  EXPECT_EQ(m.pool().num_cached_blocks(), 3);
  ASSERT_TRUE(m.allocate_slots("y", 4));
  EXPECT_EQ(m.block_table("y"), (std::vector<int32_t>{2}));
  EXPECT_EQ(m.pool().num_cached_blocks(), 2);
  EXPECT_EQ(m.pool().num_evictions(), 1);
  EXPECT_EQ(m.find_cached_prefix(seq(13), root).blocks, (std::vector<int32_t>{0, 1}));
}

TEST(PrefixCache, AllocationCountsRevivedBlocksAgainstTheFreePool) {
  KvCacheManager m(3, 4, true);
  const uint64_t root = KvCacheManager::root_hash("");
  run(m, "a", seq(8), root);
  m.free("a");  // 3 free, 2 of them cached
  const PrefixHit hit = m.find_cached_prefix(seq(16), root);
  ASSERT_EQ(hit.blocks.size(), 2u);
  // 16 tokens: 2 hit blocks (both free: reviving uses 2 free) + 2 new = 4 > 3 blocks.
  EXPECT_FALSE(m.allocate_slots("b", 16, &hit));
  EXPECT_EQ(m.pool().num_free_blocks(), 3);
  EXPECT_EQ(m.pool().num_cached_blocks(), 2);
  EXPECT_TRUE(m.allocate_slots("b", 12, &hit));
  EXPECT_EQ(m.block_table("b"), (std::vector<int32_t>{0, 1, 2}));
}

TEST(PrefixCache, DisabledNeverHits) {
  KvCacheManager m(10, 4, false);
  const uint64_t root = KvCacheManager::root_hash("");
  run(m, "a", seq(12), root);
  EXPECT_EQ(m.pool().num_cached_blocks(), 0);
  EXPECT_TRUE(m.find_cached_prefix(seq(12), root).blocks.empty());
}

// Randomised: shared prefixes, frees and allocations; after every operation ref counts equal the
// number of tables holding each block, and no block is both free and held.
TEST(PrefixCache, RandomisedReferenceCountsStayExact) {
  std::mt19937 rng(11);
  KvCacheManager m(23, 4, true);
  const uint64_t root = KvCacheManager::root_hash("");
  std::vector<std::vector<int32_t>> live(8);
  for (int step = 0; step < 4000; ++step) {
    const int r = static_cast<int>(rng() % live.size());
    const std::string id = "r" + std::to_string(r);
    if (!live[r].empty() && rng() % 3 == 0) {
      m.free(id);
      live[r].clear();
    } else if (live[r].empty()) {
      std::vector<int32_t> t = seq(static_cast<int>(rng() % 8) * 4, 0);  // shared prefix family
      for (int k = 0, n = 1 + static_cast<int>(rng() % 9); k < n; ++k) t.push_back(static_cast<int32_t>(rng() % 50));
      const PrefixHit hit = m.find_cached_prefix(t, root);
      if (m.allocate_slots(id, static_cast<int64_t>(t.size()), &hit)) {
        m.cache_computed_blocks(id, t, static_cast<int64_t>(t.size()), root);
        live[r] = t;
      }
    }
    std::vector<int> holders(23, 0);
    for (size_t i = 0; i < live.size(); ++i) {
      for (int32_t b : m.block_table("r" + std::to_string(i))) ++holders[b];
    }
    int held = 0;
    for (int32_t b = 0; b < 23; ++b) {
      ASSERT_EQ(holders[b], m.pool().ref_cnt(b)) << "block " << b << " step " << step;
      held += holders[b] > 0;
    }
    const auto fq = m.pool().free_queue();
    for (int32_t b : fq) ASSERT_EQ(holders[b], 0) << "block " << b << " free and held";
    ASSERT_EQ(held + static_cast<int>(fq.size()), 23);
  }
  for (size_t i = 0; i < live.size(); ++i) m.free("r" + std::to_string(i));
  EXPECT_EQ(m.pool().num_free_blocks(), 23);
}

}  // namespace
}  // namespace pagellm

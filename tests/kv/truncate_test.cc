// KvCacheManager::truncate (speculative rollback): exact block ids, reference counts, the free
// queue, and what happens to prefix-cache hashes of released and partly rolled-back blocks.
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

// Pool invariants over the tables of `ids`: every block's ref_cnt = the number of tables listing
// it, a block is free iff it has no holder, free + held = num_blocks, and every hashed block is
// what the cache map returns for its hash.
void expect_pool_invariants(const KvCacheManager& m, const std::vector<std::string>& ids) {
  const BlockPool& pool = m.pool();
  std::vector<int> holders(static_cast<size_t>(pool.num_blocks()), 0);
  for (const std::string& id : ids) {
    for (int32_t b : m.block_table(id)) ++holders[b];
  }
  int held = 0;
  for (int32_t b = 0; b < pool.num_blocks(); ++b) {
    EXPECT_EQ(holders[b], pool.ref_cnt(b)) << "block " << b;
    held += holders[b] > 0;
    if (auto h = pool.block_hash(b)) {
      EXPECT_EQ(pool.lookup(*h), b) << "block " << b;
    }
  }
  const std::vector<int32_t> fq = pool.free_queue();
  for (int32_t b : fq) EXPECT_EQ(holders[b], 0) << "block " << b << " free and held";
  EXPECT_EQ(held + static_cast<int>(fq.size()), pool.num_blocks());
  EXPECT_EQ(static_cast<int>(fq.size()), pool.num_free_blocks());
}

TEST(KvTruncate, ToZeroReleasesEveryBlockAndTheTableCanGrowAgain) {
  KvCacheManager m(5, 4);
  ASSERT_TRUE(m.allocate_slots("a", 10));  // blocks 0 1 2
  ASSERT_TRUE(m.allocate_slots("b", 3));   // block 3
  m.truncate("a", 0);
  EXPECT_TRUE(m.block_table("a").empty());
  EXPECT_EQ(m.num_requests(), 2);                                        // a is still known
  EXPECT_EQ(m.pool().free_queue(), (std::vector<int32_t>{4, 2, 1, 0}));  // last block first
  expect_pool_invariants(m, {"a", "b"});
  ASSERT_TRUE(m.allocate_slots("a", 5));
  EXPECT_EQ(m.block_table("a"), (std::vector<int32_t>{4, 2}));
  m.truncate("unknown", 0);  // no-op
  expect_pool_invariants(m, {"a", "b"});
}

TEST(KvTruncate, ToABlockBoundaryAndMidBlock) {
  KvCacheManager m(6, 4);
  ASSERT_TRUE(m.allocate_slots("a", 14));  // blocks 0 1 2 3
  m.truncate("a", 12);                     // boundary: 3 blocks cover 12 tokens
  EXPECT_EQ(m.block_table("a"), (std::vector<int32_t>{0, 1, 2}));
  m.truncate("a", 12);  // idempotent
  EXPECT_EQ(m.block_table("a"), (std::vector<int32_t>{0, 1, 2}));
  m.truncate("a", 5);  // mid-block: token 4 still lives in block 1
  EXPECT_EQ(m.block_table("a"), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(m.pool().free_queue(), (std::vector<int32_t>{4, 5, 3, 2}));
  EXPECT_EQ(m.slot("a", 4), 1 * 4 + 0);
  expect_pool_invariants(m, {"a"});
  // Regrowing takes the head of the free queue.
  ASSERT_TRUE(m.allocate_slots("a", 9));
  EXPECT_EQ(m.block_table("a"), (std::vector<int32_t>{0, 1, 4}));
  expect_pool_invariants(m, {"a"});
}

TEST(KvTruncateDeathTest, PastTheTableAborts) {
  KvCacheManager m(4, 4);
  ASSERT_TRUE(m.allocate_slots("a", 5));
  EXPECT_DEATH(m.truncate("a", 9), "truncate of a to 9 tokens, table holds 2 blocks");
  EXPECT_DEATH(m.truncate("a", -1), "truncate of a");
}

// n > 1: a forked table shares every block; truncating the child only drops its own holds, and
// its next write into the shared block it kept is a copy-on-write.
TEST(KvTruncate, ForkedTableDropsOnlyItsOwnHolds) {
  KvCacheManager m(8, 4);
  ASSERT_TRUE(m.allocate_slots("a", 10));  // 0 1 2
  m.fork("a", "b");
  m.truncate("b", 5);
  EXPECT_EQ(m.block_table("b"), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(m.block_table("a"), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(m.pool().ref_cnt(0), 2);
  EXPECT_EQ(m.pool().ref_cnt(1), 2);
  EXPECT_EQ(m.pool().ref_cnt(2), 1);  // a's alone now, not freed
  EXPECT_EQ(m.pool().num_free_blocks(), 5);
  expect_pool_invariants(m, {"a", "b"});
  std::vector<std::pair<int32_t, int32_t>> copies;
  ASSERT_TRUE(m.allocate_slots_cow("b", 5, 6, copies));
  EXPECT_EQ(copies, (std::vector<std::pair<int32_t, int32_t>>{{1, 3}}));
  EXPECT_EQ(m.block_table("b"), (std::vector<int32_t>{0, 3}));
  expect_pool_invariants(m, {"a", "b"});
  m.truncate("a", 0);
  m.free("b");
  EXPECT_EQ(m.pool().num_free_blocks(), 8);
}

// Cached blocks: a released block at ref_cnt 0 drops its hash, the block that keeps part of its
// tokens drops its hash, blocks before the cut stay cached.
TEST(KvTruncate, AfterCachingRolledBackBlocksLeaveThePrefixCache) {
  KvCacheManager m(6, 4, true);
  const uint64_t root = KvCacheManager::root_hash("");
  const std::vector<int32_t> t = seq(12);
  ASSERT_TRUE(m.allocate_slots("a", 12));
  m.cache_computed_blocks("a", t, 12, root);
  ASSERT_EQ(m.pool().num_cached_blocks(), 3);
  m.truncate("a", 5);
  EXPECT_EQ(m.block_table("a"), (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(m.pool().block_hash(0).has_value());
  EXPECT_FALSE(m.pool().block_hash(1).has_value());  // holds token 4 only now
  EXPECT_FALSE(m.pool().block_hash(2).has_value());  // released, nobody else holds it
  EXPECT_EQ(m.pool().num_cached_blocks(), 1);
  EXPECT_EQ(m.num_hashed_blocks("a"), 1);
  EXPECT_EQ(m.find_cached_prefix(seq(13), root).blocks, (std::vector<int32_t>{0}));
  expect_pool_invariants(m, {"a"});
  // Different tokens after the cut are hashed under their own chain.
  std::vector<int32_t> t2(t.begin(), t.begin() + 5);
  for (int i = 0; i < 7; ++i) t2.push_back(7);
  ASSERT_TRUE(m.allocate_slots("a", 12));
  m.cache_computed_blocks("a", t2, 12, root);
  EXPECT_EQ(m.pool().num_cached_blocks(), 3);
  EXPECT_EQ(m.find_cached_prefix(seq(13), root).blocks, (std::vector<int32_t>{0}));
  std::vector<int32_t> probe = t2;
  probe.push_back(1);
  EXPECT_EQ(m.find_cached_prefix(probe, root).blocks, m.block_table("a"));
}

// A cached chain shared with another request (a prefix hit). The released block stays cached
// for its other holder; the partly kept one is uncached although shared: once the other holder
// leaves, the truncated request writes it in place (ref_cnt 1, no copy-on-write).
TEST(KvTruncate, SharedCachedBlocksKeepHashesOnlyWhenNotRewritten) {
  KvCacheManager m(8, 4, true);
  const uint64_t root = KvCacheManager::root_hash("");
  ASSERT_TRUE(m.allocate_slots("a", 12));
  m.cache_computed_blocks("a", seq(12), 12, root);
  const PrefixHit hit = m.find_cached_prefix(seq(13), root);
  ASSERT_EQ(hit.blocks, (std::vector<int32_t>{0, 1, 2}));
  ASSERT_TRUE(m.allocate_slots("b", 13, &hit));  // 0 1 2 shared, 3 own
  m.truncate("a", 6);
  EXPECT_EQ(m.block_table("a"), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(m.pool().ref_cnt(2), 1);
  EXPECT_TRUE(m.pool().block_hash(2).has_value());   // b still holds it, content final
  EXPECT_FALSE(m.pool().block_hash(1).has_value());  // a will rewrite tokens 6, 7
  EXPECT_TRUE(m.pool().block_hash(0).has_value());
  expect_pool_invariants(m, {"a", "b"});
  m.free("b");
  std::vector<std::pair<int32_t, int32_t>> copies;
  ASSERT_TRUE(m.allocate_slots_cow("a", 6, 8, copies));
  EXPECT_TRUE(copies.empty());  // written in place: safe only because block 1 is uncached
  EXPECT_EQ(m.find_cached_prefix(seq(13), root).blocks, (std::vector<int32_t>{0}));
  expect_pool_invariants(m, {"a"});
}

// Randomised rollback stress on a simulated K/V store: requests grow (copy-on-write applied),
// cache their blocks, fork, truncate and free. After every operation the pool invariants hold,
// every live request's blocks hold its own tokens (nobody overwrote a block it reads), and every
// prefix-cache hit for a live request's tokens holds exactly those tokens.
TEST(KvTruncate, RandomisedRollbackNeverServesStaleContent) {
  constexpr int kBlocks = 24, kBlockSize = 2, kReqs = 6;
  std::mt19937 rng(13);
  KvCacheManager m(kBlocks, kBlockSize, true);
  const uint64_t root = KvCacheManager::root_hash("");
  std::vector<std::vector<int32_t>> content(kBlocks, std::vector<int32_t>(kBlockSize, -1));
  std::vector<std::vector<int32_t>> tokens(kReqs);
  std::vector<bool> live(kReqs, false);
  std::vector<std::string> ids;
  for (int i = 0; i < kReqs; ++i) ids.push_back("r" + std::to_string(i));
  auto write = [&](int r, int64_t from) {
    for (auto p = from; p < static_cast<int64_t>(tokens[r].size()); ++p) {
      content[m.block_table(ids[r])[p / kBlockSize]][p % kBlockSize] = tokens[r][p];
    }
  };
  int num_truncates = 0;
  for (int step = 0; step < 6000; ++step) {
    const int r = static_cast<int>(rng() % kReqs);
    const uint32_t op = rng() % 8;
    if (!live[r]) {
      std::vector<int32_t> t;
      for (int k = 0, n = 1 + static_cast<int>(rng() % 9); k < n; ++k) t.push_back(static_cast<int32_t>(rng() % 2));
      const PrefixHit hit = m.find_cached_prefix(t, root);
      if (!m.allocate_slots(ids[r], static_cast<int64_t>(t.size()), &hit)) continue;
      tokens[r] = t;
      live[r] = true;
      write(r, hit.num_tokens);
      m.cache_computed_blocks(ids[r], t, static_cast<int64_t>(t.size()), root);
    } else if (op < 3) {  // decode or verify 1..3 tokens; cache all, or all but a speculative tail
      const auto from = static_cast<int64_t>(tokens[r].size());
      const auto k = static_cast<int64_t>(1 + rng() % 3);
      std::vector<std::pair<int32_t, int32_t>> copies;
      if (!m.allocate_slots_cow(ids[r], from, from + k, copies)) continue;
      for (const auto& [src, dst] : copies) content[dst] = content[src];
      for (int64_t i = 0; i < k; ++i) tokens[r].push_back(static_cast<int32_t>(rng() % 2));
      write(r, from);
      const int64_t num_spec = static_cast<int64_t>(rng() % 2) * (k - 1);
      m.cache_computed_blocks(ids[r], tokens[r], from + k - num_spec, root);
    } else if (op < 5) {  // reject a tail
      const auto n = static_cast<int64_t>(rng() % (tokens[r].size() + 1));
      tokens[r].resize(static_cast<size_t>(n));
      m.truncate(ids[r], n);
      ++num_truncates;
    } else if (op == 5) {
      const int c = static_cast<int>(rng() % kReqs);
      if (live[c] || tokens[r].empty()) continue;
      m.fork(ids[r], ids[c]);
      tokens[c] = tokens[r];
      live[c] = true;
    } else {
      m.free(ids[r]);
      live[r] = false;
      tokens[r].clear();
    }
    expect_pool_invariants(m, ids);
    for (int i = 0; i < kReqs; ++i) {
      if (!live[i]) continue;
      const auto& table = m.block_table(ids[i]);
      ASSERT_EQ(static_cast<int64_t>(table.size()), m.blocks_for(static_cast<int64_t>(tokens[i].size())));
      for (size_t p = 0; p < tokens[i].size(); ++p) {
        ASSERT_EQ(content[table[p / kBlockSize]][p % kBlockSize], tokens[i][p]) << "step " << step;
      }
      const PrefixHit hit = m.find_cached_prefix(tokens[i], root);
      for (size_t j = 0; j < hit.blocks.size(); ++j) {
        for (int o = 0; o < kBlockSize; ++o) {
          ASSERT_EQ(content[hit.blocks[j]][o], tokens[i][j * kBlockSize + o]) << "stale hit, step " << step;
        }
      }
    }
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(num_truncates, 1000);
  for (const std::string& id : ids) m.free(id);
  EXPECT_EQ(m.pool().num_free_blocks(), kBlocks);
}

}  // namespace
}  // namespace pagellm

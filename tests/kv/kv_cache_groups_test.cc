// KV cache groups (kv/kv_cache_layout.h) and the sliding-window release of
// KvCacheManager::release_out_of_window.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "kv/kv_cache_layout.h"
#include "kv/kv_cache_manager.h"

namespace pagellm {
namespace {

// The worked example of kv_cache_layout.h: Gemma 3 1B, 26 layers, every 6th global.
TEST(KvCacheLayout, Gemma3OneBGroupsAsDocumented) {
  std::vector<int64_t> windows;
  for (int il = 0; il < 26; ++il) windows.push_back(il % 6 == 5 ? 0 : 512);
  const KvCacheLayout l = KvCacheLayout::for_windows(windows);
  EXPECT_EQ(l.num_lanes, 4);
  EXPECT_EQ(l.group_sliding_window, (std::vector<int64_t>{0, 512, 512, 512, 512, 512, 512}));
  const std::vector<std::vector<int>> groups = {{5, 11, 17, 23},  {0, 1, 2, 3},     {4, 6, 7, 8}, {9, 10, 12, 13},
                                                {14, 15, 16, 18}, {19, 20, 21, 22}, {24, 25}};
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].size(); ++i) {
      EXPECT_EQ(l.layer_group[groups[g][i]], static_cast<int32_t>(g)) << "layer " << groups[g][i];
      EXPECT_EQ(l.layer_lane[groups[g][i]], static_cast<int32_t>(i)) << "layer " << groups[g][i];
    }
  }
}

TEST(KvCacheLayout, UniformLayersAreOneGroupWithALanePerLayer) {
  const std::vector<int64_t> windows(7, 0);
  const KvCacheLayout l = KvCacheLayout::for_windows(windows);
  EXPECT_EQ(l.num_lanes, 7);
  EXPECT_EQ(l.num_groups(), 1);
  for (int il = 0; il < 7; ++il) EXPECT_EQ(l.layer_lane[il], il);
  EXPECT_THROW(KvCacheLayout::for_windows(std::vector<int64_t>{}), Error);
  EXPECT_THROW(KvCacheLayout::for_windows(std::vector<int64_t>{0, -1}), Error);
}

TEST(KvCacheLayout, MaxBlocksPerRequestCapsSlidingGroups) {
  const std::vector<int64_t> w{0, 16};
  // 100 tokens in blocks of 4: 25 full; the window group at most ceil((15 + 8) / 4) + 1 = 7.
  EXPECT_EQ(max_blocks_per_request(w, 4, 100, 8), 25 + 7);
  EXPECT_EQ(max_blocks_per_request(w, 4, 10, 8), 3 + 3);  // shorter than the cap
  EXPECT_EQ(max_blocks_per_request(std::vector<int64_t>{0}, 4, 100, 8), 25);
}

// The inverse: the longest request whose blocks fit a pool, counting every group's.
TEST(KvCacheLayout, MaxTokensPerRequestInvertsTheBlockCount) {
  const std::vector<int64_t> w{0, 16};
  // 32 blocks: 25 full + 7 window blocks hold 100 tokens; 101 would need a 26th full block.
  EXPECT_EQ(max_tokens_per_request(w, 4, 32, 1000, 8), 100);
  // 4 blocks: 2 per group (both grow together below the cap): 8 tokens, not 4 x 4 = 16.
  EXPECT_EQ(max_tokens_per_request(w, 4, 4, 1000, 8), 8);
  EXPECT_EQ(max_tokens_per_request(w, 4, 1, 1000, 8), 0);  // a token needs a block in each group
  EXPECT_EQ(max_tokens_per_request(std::vector<int64_t>{0}, 4, 25, 1000, 8), 100);
  EXPECT_EQ(max_tokens_per_request(std::vector<int64_t>{0}, 4, 25, 60, 8), 60);  // the context caps it
  for (int64_t blocks = 1; blocks < 40; ++blocks) {
    const int64_t n = max_tokens_per_request(w, 4, blocks, 1000, 8);
    EXPECT_LE(max_blocks_per_request(w, 4, n, 8), blocks);
    EXPECT_GT(max_blocks_per_request(w, 4, n + 1, 8), blocks) << blocks;
  }
}

// Manager over a full group and a window-6 group, blocks of 4 tokens.
class SlidingGroups : public ::testing::Test {
 protected:
  KvCacheManager m{32, 4, true, {0, 6}};
};

TEST_F(SlidingGroups, EveryGroupGetsItsOwnBlocksFromOnePool) {
  ASSERT_TRUE(m.allocate_slots("a", 9));  // 3 blocks per group
  EXPECT_EQ(m.block_table("a", 0).size(), 3u);
  EXPECT_EQ(m.block_table("a", 1).size(), 3u);
  EXPECT_EQ(m.pool().num_free_blocks(), 32 - 6);
  EXPECT_NE(m.slot("a", 5, 0), m.slot("a", 5, 1));
  // 14 more blocks per group would be 28 > 26 free: refused, nothing changed.
  EXPECT_FALSE(m.allocate_slots("b", 14 * 4));
  EXPECT_EQ(m.pool().num_free_blocks(), 26);
}

// Queries at positions >= c see keys >= c - 5: with c = 13 that is 8 on, so blocks 0 and 1
// (tokens 0..7) leave the window group, and only there.
TEST_F(SlidingGroups, ReleasesTheBlocksThatLeftTheWindow) {
  ASSERT_TRUE(m.allocate_slots("a", 13));
  const std::vector<int32_t> before = m.block_table("a", 1);
  m.release_out_of_window("a", 12);  // sees 7 on: block 0 (0..3) only
  EXPECT_EQ(m.block_table("a", 1)[0], -1);
  EXPECT_EQ(m.block_table("a", 1)[1], before[1]);
  m.release_out_of_window("a", 13);
  EXPECT_EQ(m.block_table("a", 1), (std::vector<int32_t>{-1, -1, before[2], before[3]}));
  EXPECT_EQ(m.block_table("a", 0).size(), 4u);
  for (int32_t b : m.block_table("a", 0)) EXPECT_GE(b, 0);
  EXPECT_EQ(m.pool().ref_cnt(before[0]), 0);
  EXPECT_EQ(m.pool().ref_cnt(before[1]), 0);
  EXPECT_EQ(m.pool().num_free_blocks(), 32 - 8 + 2);
  m.release_out_of_window("a", 13);  // idempotent
  EXPECT_EQ(m.pool().num_free_blocks(), 26);
  // Growing keeps the -1 entries and adds a block to each group.
  ASSERT_TRUE(m.allocate_slots("a", 17));
  EXPECT_EQ(m.block_table("a", 1).size(), 5u);
  EXPECT_EQ(m.pool().num_free_blocks(), 24);
  m.free("a");
  EXPECT_EQ(m.pool().num_free_blocks(), 32);
}

// A fork shares the released state; truncate (rejected speculative tokens) keeps the -1s; a
// table cut below them is refused.
TEST_F(SlidingGroups, ForkAndTruncateRespectReleasedEntries) {
  ASSERT_TRUE(m.allocate_slots("a", 16));
  m.release_out_of_window("a", 14);  // sees 9 on: blocks 0, 1 released
  m.fork("a", "b");
  const int32_t shared = m.block_table("a", 1)[2];
  EXPECT_EQ(m.pool().ref_cnt(shared), 2);
  m.truncate("b", 14);
  EXPECT_EQ(m.block_table("b", 1), m.block_table("a", 1));
  m.free("a");
  EXPECT_EQ(m.pool().ref_cnt(shared), 1);
  EXPECT_DEATH(m.truncate("b", 5), "sliding window released");
  m.free("b");
  EXPECT_EQ(m.pool().num_free_blocks(), 32);
}

// Copy-on-write acts on each group whose block at write_from is shared.
TEST_F(SlidingGroups, CopyOnWriteCopiesEachSharedGroupBlock) {
  ASSERT_TRUE(m.allocate_slots("a", 6));
  m.fork("a", "b");
  std::vector<std::pair<int32_t, int32_t>> copies;
  ASSERT_TRUE(m.allocate_slots_cow("b", 6, 7, copies));
  ASSERT_EQ(copies.size(), 2u);  // block 1 of each group
  EXPECT_EQ(copies[0].first, m.block_table("a", 0)[1]);
  EXPECT_EQ(copies[1].first, m.block_table("a", 1)[1]);
  EXPECT_EQ(copies[0].second, m.block_table("b", 0)[1]);
  EXPECT_EQ(copies[1].second, m.block_table("b", 1)[1]);
}

// A prefix hit needs its blocks in every group; a released window block keeps its hash in the
// free queue and is revived by the hit.
TEST_F(SlidingGroups, PrefixHitsSpanEveryGroup) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 13; ++i) tokens.push_back(100 + i);
  const uint64_t root = KvCacheManager::root_hash("");
  ASSERT_TRUE(m.allocate_slots("a", 13));
  m.cache_computed_blocks("a", tokens, 12, root);
  const std::vector<int32_t> g0 = m.block_table("a", 0), g1 = m.block_table("a", 1);
  m.release_out_of_window("a", 13);
  EXPECT_EQ(m.pool().ref_cnt(g1[0]), 0);
  const PrefixHit hit = m.find_cached_prefix(tokens, root);
  ASSERT_EQ(hit.num_tokens, 12);
  EXPECT_EQ(hit.blocks, (std::vector<int32_t>{g0[0], g0[1], g0[2], g1[0], g1[1], g1[2]}));
  ASSERT_TRUE(m.allocate_slots("b", 13, &hit));
  EXPECT_EQ(m.block_table("b", 1)[0], g1[0]);
  EXPECT_EQ(m.pool().ref_cnt(g1[0]), 1);  // revived
  EXPECT_EQ(m.pool().ref_cnt(g0[0]), 2);
  // A block missing from one group ends the hit there.
  m.pool().uncache(g1[1]);
  EXPECT_EQ(m.find_cached_prefix(tokens, root).num_tokens, 4);
  m.free("a");
  m.free("b");
  EXPECT_EQ(m.pool().num_free_blocks(), 32);
}

}  // namespace
}  // namespace pagellm

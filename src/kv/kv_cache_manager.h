// Per-request block tables over a BlockPool, and the automatic prefix cache.
//
// A request's KV for token position p lives in physical slot
//   block_table[p / block_size] * block_size + p % block_size.
// Worked example, block_size 4, block_table [7, 2]: position 5 -> block 2, offset 1 -> slot 9.
//
// Blocks are allocated as tokens arrive (allocate_slots), never reserved for max_tokens, and
// released when the request ends (free). Waste is at most one partly filled block per request.
//
// Prefix caching (vLLM's automatic prefix caching; Kwon et al. 2023, Zheng et al. 2024 "SGLang"):
// full block i of a token sequence has the hash
//   h_i = XXH3_64(h_{i-1} | token ids of block i),   h_{-1} = XXH3_64("pagellm" | cache_salt)
// so equal hashes mean equal prefixes (up to 64-bit collisions) for the same salt. A block is
// registered under its hash only once all its tokens are final: computed (cache_computed_blocks
// is called after the forward pass, so blocks filled in the same step are never hits before they
// exist) and accepted (speculative tokens still to be verified are excluded by the caller).
//
// KV cache groups (kv/kv_cache_layout.h): a request has one block table per group, all drawing
// on the one pool. Every operation acts on every group; the hash of block i in group g is h_i
// for g = 0 and XXH3_64(h_i | g) otherwise, and a prefix hit needs block i cached in every group.
// A sliding-window group of window W only needs, for queries at positions >= c, the keys at
// positions >= c - W + 1: release_out_of_window returns the blocks entirely before that to the
// pool and leaves -1 (no block) in their table entries, so a long request holds about
// (W + chunk) / block_size blocks in such a group. Its blocks keep their hashes while free, so
// they can still be prefix hits until evicted.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"

namespace pagellm {

struct PrefixHit {
  // Cached full blocks, in order, group by group: [num_groups * n], block i of group g at
  // g * n + i (with one group: the blocks in order).
  std::vector<int32_t> blocks;
  int64_t num_tokens = 0;  // n * block_size
};

class KvCacheManager {
 public:
  // group_sliding_window: [num_groups] each group's window in tokens, 0 = full attention
  // (KvCacheLayout::group_sliding_window; default one full group). Throws pagellm::Error for a
  // non-positive block_size or no group.
  KvCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching = false,
                 std::vector<int64_t> group_sliding_window = {0});

  int32_t block_size() const { return block_size_; }
  int32_t num_groups() const { return static_cast<int32_t>(group_window_.size()); }
  const std::vector<int64_t>& group_sliding_window() const { return group_window_; }
  bool prefix_caching() const { return prefix_caching_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }

  // Blocks needed to hold num_tokens tokens (ceil).
  int32_t blocks_for(int64_t num_tokens) const {
    return static_cast<int32_t>((num_tokens + block_size_ - 1) / block_size_);
  }

  // Hash of the empty prefix for a cache salt ("" = shared by everyone).
  static uint64_t root_hash(const std::string& cache_salt);
  // The longest chain of cached full blocks that prefixes `tokens`, capped so that at least one
  // token is left to compute (a fully cached prompt still needs logits). Changes nothing.
  // Empty when prefix caching is off.
  PrefixHit find_cached_prefix(std::span<const int32_t> tokens, uint64_t root) const;

  // Grows the request's block table so that it holds num_total_tokens tokens. A request without
  // blocks may start from `hit` (its blocks are shared: ref_cnt + 1, revived if free). Returns
  // false and changes nothing when the pool lacks the blocks (the caller decides whether to
  // preempt).
  bool allocate_slots(const std::string& request_id, int64_t num_total_tokens, const PrefixHit* hit = nullptr);
  // Like allocate_slots, for a request about to write positions [write_from, num_total_tokens):
  // if the block holding write_from is shared (ref_cnt > 1: a fork of n > 1), it is first
  // replaced by a private copy (copy-on-write); the (src, dst) pair to copy is appended to
  // `copies` and must be copied before the forward pass. False and no change when the pool lacks
  // the blocks.
  bool allocate_slots_cow(const std::string& request_id, int64_t write_from, int64_t num_total_tokens,
                          std::vector<std::pair<int32_t, int32_t>>& copies);
  // The child shares every block of the parent (ref_cnt + 1 each): parallel sampling (n > 1).
  void fork(const std::string& parent_id, const std::string& child_id);
  // Registers every full block of the request inside [0, num_final_tokens) that is not yet
  // registered. num_final_tokens: tokens whose K/V are computed and that can no longer be rolled
  // back (the scheduler passes num_computed_tokens minus the speculative tokens still to be
  // verified). `tokens` are the request's tokens (at least num_final_tokens of them).
  void cache_computed_blocks(const std::string& request_id, std::span<const int32_t> tokens, int64_t num_final_tokens,
                             uint64_t root);
  // Sliding-window groups: releases the request's blocks that queries at positions >=
  // num_computed_tokens can no longer see (every token of the block < num_computed_tokens -
  // window + 1) and sets their table entries to -1. Call before scheduling the request's next
  // tokens; later rollbacks never go below num_computed_tokens. No-op for full groups or an
  // unknown id.
  void release_out_of_window(const std::string& request_id, int64_t num_computed_tokens);
  // Releases every block of the request, last block first (no-op for an unknown id).
  void free(const std::string& request_id);
  // Rolls the request back to its first num_tokens tokens (rejected speculative tokens): the
  // table keeps blocks_for(num_tokens) blocks and releases the rest, last block first. The
  // request stays known (an empty table for 0). No-op for an unknown id. Precondition:
  // 0 <= num_tokens <= block_table(id).size() * block_size. Prefix cache:
  //   - a released block that another table still holds keeps its hash (its content is final
  //     for that holder); one whose ref_cnt reaches 0 drops its hash: rolled-back tokens are
  //     not offered as a prefix, and the block is an ordinary free block.
  //   - a kept block that loses tokens (num_tokens mid-block) drops its hash even while shared:
  //     the request will write its tail, in place once the other holders are gone (copy-on-write
  //     only protects a block while ref_cnt > 1), so no hash may keep naming it.
  // Sliding groups keep their -1 entries; a num_tokens whose window would reach one is refused
  // (PAGELLM_CHECK), except 0.
  // Example, block_size 4, table [5, 8, 2] all hashed, truncate to 5: block 2 is released,
  // block 8 (holding token 4 only) is uncached, block 5 stays cached; table [5, 8].
  void truncate(const std::string& request_id, int64_t num_tokens);

  // The request's table in `group` (-1 where a sliding group released the block). Empty for an
  // unknown request.
  const std::vector<int32_t>& block_table(const std::string& request_id, int32_t group = 0) const;
  // [num_groups] tables; an empty vector for an unknown request.
  const std::vector<std::vector<int32_t>>& block_tables(const std::string& request_id) const;
  // Physical slot of token `position` of the request in `group`. Precondition: the block is
  // allocated.
  int64_t slot(const std::string& request_id, int64_t position, int32_t group = 0) const;
  int64_t num_requests() const { return static_cast<int64_t>(tables_.size()); }
  // Full blocks of the request already registered in the prefix cache.
  int64_t num_hashed_blocks(const std::string& request_id) const;

 private:
  struct Table {
    std::vector<std::vector<int32_t>> blocks;  // [num_groups][logical blocks], -1 = released
    std::vector<uint64_t> hashes;              // chained hashes of blocks [0, hashes.size())
    std::vector<int64_t> num_released;         // [num_groups] leading entries released
  };
  Table& table_for(const std::string& request_id);
  uint64_t group_hash(uint64_t h, int32_t group) const;
  BlockPool pool_;
  int32_t block_size_;
  bool prefix_caching_;
  std::vector<int64_t> group_window_;  // [num_groups]
  std::unordered_map<std::string, Table> tables_;
};

}  // namespace pagellm

// The pool of physical KV-cache blocks: reference counts, a free queue in eviction order, and the
// prefix-cache map from block content hash to block.
//
// Ownership layers (docs/design.md): BlockPool (physical blocks, ref_cnt, free queue, hash map) <-
// KvCacheManager (per-request block tables, prefix lookup) <- scheduler (decides who gets blocks).
//
// A block whose ref_cnt drops to 0 joins the tail of the free queue but keeps its hash and its
// K/V: until the pool hands it out again it can be revived by a prefix-cache hit (touch), which
// takes it out of the middle of the queue in O(1) (intrusive doubly linked list). allocate()
// always takes the head: the least recently freed block, whose hash is then evicted.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace pagellm {

class BlockPool {
 public:
  // Blocks are numbered [0, num_blocks). All start free, in id order, with no hash.
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_cnt_.size()); }
  // Blocks with ref_cnt 0 (cached or not): what allocate() can hand out.
  int32_t num_free_blocks() const { return num_free_; }
  // Fraction of blocks with ref_cnt > 0, in [0, 1].
  double usage() const;

  // Takes the head of the free queue (evicting its hash, if any) with ref_cnt 1; nullopt if none.
  std::optional<int32_t> allocate();
  // Adds a holder to a held block (sharing: n > 1, copy-on-write sources).
  void incref(int32_t block_id);
  // Adds a holder to a block that may be free (a prefix-cache hit): a free block leaves the
  // free queue.
  void touch(int32_t block_id);
  // Drops one holder; at ref_cnt 0 the block goes to the tail of the free queue, hash kept.
  void release(int32_t block_id);

  // Prefix cache. cache_block registers a held, fully computed block under `hash`; a hash already
  // registered to another block is left as it is (the block stays uncached).
  void cache_block(int32_t block_id, uint64_t hash);
  // Drops the block's prefix-cache entry, if it has one (held or free); no-op otherwise. For a
  // block whose content is about to change or is no longer wanted (KvCacheManager::truncate).
  void uncache(int32_t block_id);
  std::optional<int32_t> lookup(uint64_t hash) const;
  std::optional<uint64_t> block_hash(int32_t block_id) const;
  int32_t num_cached_blocks() const { return static_cast<int32_t>(cached_.size()); }
  int64_t num_evictions() const { return num_evictions_; }

  int32_t ref_cnt(int32_t block_id) const { return ref_cnt_.at(block_id); }
  // Free blocks from head (next to be allocated) to tail. For tests and invariant checks.
  std::vector<int32_t> free_queue() const;

 private:
  void push_tail(int32_t id);
  void unlink(int32_t id);

  std::vector<int32_t> ref_cnt_;                  // [num_blocks]
  std::vector<int32_t> prev_;                     // [num_blocks] free-queue links, -1 = none
  std::vector<int32_t> next_;                     // [num_blocks]
  std::vector<uint8_t> in_free_;                  // [num_blocks] 1 while in the free queue
  std::vector<uint64_t> hash_;                    // [num_blocks] valid where has_hash_
  std::vector<uint8_t> has_hash_;                 // [num_blocks]
  std::unordered_map<uint64_t, int32_t> cached_;  // hash -> block
  int32_t head_ = -1;
  int32_t tail_ = -1;
  int32_t num_free_ = 0;
  int64_t num_evictions_ = 0;
};

}  // namespace pagellm

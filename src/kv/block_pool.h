// The pool of physical KV-cache blocks: reference counts and a free queue.
//
// Ownership layers (docs/design.md): BlockPool (physical blocks, ref_cnt, free queue) <-
// KvCacheManager (per-request block tables) <- scheduler / engine (decides who gets blocks).
//
// The free queue is an intrusive doubly linked list so that a block can leave it from the middle
// in O(1): prefix caching (a later issue) keeps freed blocks with their content hash in this queue,
// in eviction (LRU) order, and revives a cached block on a hit.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace pagellm {

class BlockPool {
 public:
  // Blocks are numbered [0, num_blocks). All start free, in id order.
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_cnt_.size()); }
  int32_t num_free_blocks() const { return num_free_; }
  // Fraction of blocks with ref_cnt > 0, in [0, 1].
  double usage() const;

  // Takes the block at the head of the free queue with ref_cnt 1, or nullopt when none is free.
  std::optional<int32_t> allocate();
  // Adds a holder to a block that is already held (sharing, copy-on-write sources).
  void incref(int32_t block_id);
  // Drops one holder; at ref_cnt 0 the block goes to the tail of the free queue.
  void release(int32_t block_id);

  int32_t ref_cnt(int32_t block_id) const { return ref_cnt_.at(block_id); }
  // Free blocks from head (next to be allocated) to tail. For tests and invariant checks.
  std::vector<int32_t> free_queue() const;

 private:
  void push_tail(int32_t id);
  void unlink(int32_t id);

  std::vector<int32_t> ref_cnt_;  // [num_blocks]
  std::vector<int32_t> prev_;     // [num_blocks] free-queue links, -1 = none
  std::vector<int32_t> next_;     // [num_blocks]
  int32_t head_ = -1;
  int32_t tail_ = -1;
  int32_t num_free_ = 0;
};

}  // namespace pagellm

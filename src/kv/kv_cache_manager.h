// Per-request block tables over a BlockPool.
//
// A request's KV for token position p lives in physical slot
//   block_table[p / block_size] * block_size + p % block_size.
// Worked example, block_size 4, block_table [7, 2]: position 5 -> block 2, offset 1 -> slot 9.
//
// Blocks are allocated as tokens arrive (allocate_slots), never reserved for max_tokens, and
// released when the request ends (free). Waste is at most one partly filled block per request.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"

namespace pagellm {

class KvCacheManager {
 public:
  KvCacheManager(int32_t num_blocks, int32_t block_size);

  int32_t block_size() const { return block_size_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }

  // Blocks needed to hold num_tokens tokens (ceil).
  int32_t blocks_for(int64_t num_tokens) const {
    return static_cast<int32_t>((num_tokens + block_size_ - 1) / block_size_);
  }

  // Grows the request's block table so that it holds num_total_tokens tokens. Returns false and
  // changes nothing when the pool lacks the blocks (the caller decides whether to preempt).
  bool allocate_slots(const std::string& request_id, int64_t num_total_tokens);
  // Releases every block of the request (no-op for an unknown id).
  void free(const std::string& request_id);

  // Empty for an unknown request.
  const std::vector<int32_t>& block_table(const std::string& request_id) const;
  // Physical slot of token `position` of the request. Precondition: the block is allocated.
  int64_t slot(const std::string& request_id, int64_t position) const;
  int64_t num_requests() const { return static_cast<int64_t>(tables_.size()); }

 private:
  BlockPool pool_;
  int32_t block_size_;
  std::unordered_map<std::string, std::vector<int32_t>> tables_;
};

}  // namespace pagellm

#include "kv/block_pool.h"

#include <string>

#include "core/error.h"

namespace pagellm {

BlockPool::BlockPool(int32_t num_blocks)
    : ref_cnt_(static_cast<size_t>(num_blocks), 0),
      prev_(static_cast<size_t>(num_blocks), -1),
      next_(static_cast<size_t>(num_blocks), -1) {
  PAGELLM_CHECK(num_blocks >= 0, "negative block count");
  for (int32_t i = 0; i < num_blocks; ++i) push_tail(i);
}

double BlockPool::usage() const {
  if (ref_cnt_.empty()) return 0.0;
  return static_cast<double>(num_blocks() - num_free_) / num_blocks();
}

void BlockPool::push_tail(int32_t id) {
  prev_[id] = tail_;
  next_[id] = -1;
  if (tail_ >= 0) next_[tail_] = id;
  else head_ = id;
  tail_ = id;
  ++num_free_;
}

void BlockPool::unlink(int32_t id) {
  if (prev_[id] >= 0) next_[prev_[id]] = next_[id];
  else head_ = next_[id];
  if (next_[id] >= 0) prev_[next_[id]] = prev_[id];
  else tail_ = prev_[id];
  prev_[id] = next_[id] = -1;
  --num_free_;
}

std::optional<int32_t> BlockPool::allocate() {
  if (head_ < 0) return std::nullopt;
  const int32_t id = head_;
  unlink(id);
  PAGELLM_CHECK(ref_cnt_[id] == 0, "free block " + std::to_string(id) + " has holders");
  ref_cnt_[id] = 1;
  return id;
}

void BlockPool::incref(int32_t block_id) {
  PAGELLM_CHECK(ref_cnt_.at(block_id) > 0, "incref of free block " + std::to_string(block_id));
  ++ref_cnt_[block_id];
}

void BlockPool::release(int32_t block_id) {
  PAGELLM_CHECK(ref_cnt_.at(block_id) > 0, "release of free block " + std::to_string(block_id));
  if (--ref_cnt_[block_id] == 0) push_tail(block_id);
}

std::vector<int32_t> BlockPool::free_queue() const {
  std::vector<int32_t> out;
  for (int32_t id = head_; id >= 0; id = next_[id]) out.push_back(id);
  return out;
}

}  // namespace pagellm

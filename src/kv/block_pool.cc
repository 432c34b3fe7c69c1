#include "kv/block_pool.h"

#include <string>

#include "core/error.h"

namespace pagellm {

BlockPool::BlockPool(int32_t num_blocks)
    : ref_cnt_(static_cast<size_t>(num_blocks), 0),
      prev_(static_cast<size_t>(num_blocks), -1),
      next_(static_cast<size_t>(num_blocks), -1),
      in_free_(static_cast<size_t>(num_blocks), 0),
      hash_(static_cast<size_t>(num_blocks), 0),
      has_hash_(static_cast<size_t>(num_blocks), 0) {
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
  if (tail_ >= 0)
    next_[tail_] = id;
  else
    head_ = id;
  tail_ = id;
  in_free_[id] = 1;
  ++num_free_;
}

void BlockPool::unlink(int32_t id) {
  if (prev_[id] >= 0)
    next_[prev_[id]] = next_[id];
  else
    head_ = next_[id];
  if (next_[id] >= 0)
    prev_[next_[id]] = prev_[id];
  else
    tail_ = prev_[id];
  prev_[id] = next_[id] = -1;
  in_free_[id] = 0;
  --num_free_;
}

std::optional<int32_t> BlockPool::allocate() {
  if (head_ < 0) return std::nullopt;
  const int32_t id = head_;
  unlink(id);
  PAGELLM_CHECK(ref_cnt_[id] == 0, "free block " + std::to_string(id) + " has holders");
  if (has_hash_[id]) {  // evict: its content is about to be overwritten
    auto it = cached_.find(hash_[id]);
    if (it != cached_.end() && it->second == id) cached_.erase(it);
    has_hash_[id] = 0;
    ++num_evictions_;
  }
  ref_cnt_[id] = 1;
  return id;
}

void BlockPool::incref(int32_t block_id) {
  PAGELLM_CHECK(ref_cnt_.at(block_id) > 0, "incref of free block " + std::to_string(block_id));
  ++ref_cnt_[block_id];
}

void BlockPool::touch(int32_t block_id) {
  if (ref_cnt_.at(block_id) == 0) {
    PAGELLM_CHECK(in_free_[block_id], "free block not in the free queue");
    unlink(block_id);
  }
  ++ref_cnt_[block_id];
}

void BlockPool::release(int32_t block_id) {
  PAGELLM_CHECK(ref_cnt_.at(block_id) > 0, "release of free block " + std::to_string(block_id));
  if (--ref_cnt_[block_id] == 0) push_tail(block_id);
}

void BlockPool::cache_block(int32_t block_id, uint64_t hash) {
  PAGELLM_CHECK(ref_cnt_.at(block_id) > 0, "caching a free block");
  if (has_hash_[block_id]) return;
  if (cached_.count(hash) != 0) return;  // same content already cached in another block
  hash_[block_id] = hash;
  has_hash_[block_id] = 1;
  cached_[hash] = block_id;
}

void BlockPool::uncache(int32_t block_id) {
  if (!has_hash_.at(block_id)) return;
  auto it = cached_.find(hash_[block_id]);
  PAGELLM_CHECK(it != cached_.end() && it->second == block_id, "hashed block missing from the cache map");
  cached_.erase(it);
  has_hash_[block_id] = 0;
}

std::optional<int32_t> BlockPool::lookup(uint64_t hash) const {
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  return it->second;
}

std::optional<uint64_t> BlockPool::block_hash(int32_t block_id) const {
  if (!has_hash_.at(block_id)) return std::nullopt;
  return hash_[block_id];
}

std::vector<int32_t> BlockPool::free_queue() const {
  std::vector<int32_t> out;
  for (int32_t id = head_; id >= 0; id = next_[id]) out.push_back(id);
  return out;
}

}  // namespace pagellm

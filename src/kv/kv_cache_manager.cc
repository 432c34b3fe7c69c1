#include "kv/kv_cache_manager.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace pagellm {
namespace {

uint64_t chain_hash(uint64_t parent, std::span<const int32_t> block_tokens) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, &parent, sizeof(parent));
  XXH3_64bits_update(st, block_tokens.data(), block_tokens.size_bytes());
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

}  // namespace

KvCacheManager::KvCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching)
    : pool_(num_blocks), block_size_(block_size), prefix_caching_(enable_prefix_caching) {
  PAGELLM_CHECK(block_size > 0, "block_size must be positive");
}

uint64_t KvCacheManager::root_hash(const std::string& cache_salt) {
  const std::string seed = "pagellm|" + cache_salt;
  return XXH3_64bits(seed.data(), seed.size());
}

PrefixHit KvCacheManager::find_cached_prefix(std::span<const int32_t> tokens, uint64_t root) const {
  PrefixHit hit;
  if (!prefix_caching_ || tokens.empty()) return hit;
  const int64_t max_blocks = (static_cast<int64_t>(tokens.size()) - 1) / block_size_;
  uint64_t h = root;
  for (int64_t i = 0; i < max_blocks; ++i) {
    h = chain_hash(h, tokens.subspan(i * block_size_, block_size_));
    const auto b = pool_.lookup(h);
    if (!b) break;
    hit.blocks.push_back(*b);
  }
  hit.num_tokens = static_cast<int64_t>(hit.blocks.size()) * block_size_;
  return hit;
}

bool KvCacheManager::allocate_slots(const std::string& request_id, int64_t num_total_tokens, const PrefixHit* hit) {
  auto it = tables_.find(request_id);
  const bool fresh = it == tables_.end() || it->second.blocks.empty();
  const size_t have = fresh ? 0 : it->second.blocks.size();
  int32_t revived = 0;  // hit blocks that are free now: touching them uses up free blocks
  size_t n_hit = 0;
  if (fresh && hit != nullptr) {
    n_hit = hit->blocks.size();
    for (int32_t b : hit->blocks) revived += pool_.ref_cnt(b) == 0;
  }
  const int32_t need = blocks_for(num_total_tokens) - static_cast<int32_t>(have + n_hit);
  if (need + revived > pool_.num_free_blocks()) return false;
  Table& t = tables_[request_id];
  if (fresh && hit != nullptr) {
    for (int32_t b : hit->blocks) {
      pool_.touch(b);
      t.blocks.push_back(b);
      t.hashes.push_back(*pool_.block_hash(b));
    }
  }
  for (int32_t i = 0; i < need; ++i) {
    auto id = pool_.allocate();
    PAGELLM_CHECK(id.has_value(), "free count said a block was free");
    t.blocks.push_back(*id);
  }
  return true;
}

bool KvCacheManager::allocate_slots_cow(const std::string& request_id, int64_t write_from, int64_t num_total_tokens,
                                        std::vector<std::pair<int32_t, int32_t>>& copies) {
  auto it = tables_.find(request_id);
  const int64_t j = write_from / block_size_;
  const bool cow = it != tables_.end() && j < static_cast<int64_t>(it->second.blocks.size()) &&
                   pool_.ref_cnt(it->second.blocks[j]) > 1;
  if (!cow) return allocate_slots(request_id, num_total_tokens);
  Table& t = it->second;
  const int32_t need = blocks_for(num_total_tokens) - static_cast<int32_t>(t.blocks.size());
  if (std::max(need, 0) + 1 > pool_.num_free_blocks()) return false;
  const int32_t src = t.blocks[j];
  const auto dst = pool_.allocate();
  PAGELLM_CHECK(dst.has_value(), "free count said a block was free");
  copies.emplace_back(src, *dst);
  t.blocks[j] = *dst;
  if (j < static_cast<int64_t>(t.hashes.size())) t.hashes.resize(j);  // a written block is no longer the cached one
  pool_.release(src);
  return allocate_slots(request_id, num_total_tokens);
}

void KvCacheManager::fork(const std::string& parent_id, const std::string& child_id) {
  const Table& p = tables_.at(parent_id);
  PAGELLM_CHECK(tables_.count(child_id) == 0, "fork into a live table");
  for (int32_t b : p.blocks) pool_.incref(b);
  tables_[child_id] = p;
}

void KvCacheManager::cache_computed_blocks(const std::string& request_id, std::span<const int32_t> tokens,
                                           int64_t num_final_tokens, uint64_t root) {
  if (!prefix_caching_) return;
  auto it = tables_.find(request_id);
  if (it == tables_.end()) return;
  Table& t = it->second;
  const int64_t full = std::min<int64_t>(num_final_tokens / block_size_, static_cast<int64_t>(t.blocks.size()));
  PAGELLM_CHECK(static_cast<int64_t>(tokens.size()) >= full * block_size_, "too few tokens to hash");
  for (auto i = static_cast<int64_t>(t.hashes.size()); i < full; ++i) {
    const uint64_t parent = i == 0 ? root : t.hashes[i - 1];
    const uint64_t h = chain_hash(parent, tokens.subspan(i * block_size_, block_size_));
    t.hashes.push_back(h);
    pool_.cache_block(t.blocks[i], h);
  }
}

void KvCacheManager::free(const std::string& request_id) {
  auto it = tables_.find(request_id);
  if (it == tables_.end()) return;
  // Last block first: a chain's leaves reach the free queue (and eviction) before its root.
  for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b) pool_.release(*b);
  tables_.erase(it);
}

void KvCacheManager::truncate(const std::string& request_id, int64_t num_tokens) {
  auto it = tables_.find(request_id);
  if (it == tables_.end()) return;
  Table& t = it->second;
  const auto keep = static_cast<size_t>(blocks_for(num_tokens));
  PAGELLM_CHECK(num_tokens >= 0 && keep <= t.blocks.size(), "truncate of " + request_id + " to " +
                                                                std::to_string(num_tokens) + " tokens, table holds " +
                                                                std::to_string(t.blocks.size()) + " blocks");
  while (t.blocks.size() > keep) {
    const int32_t b = t.blocks.back();
    t.blocks.pop_back();
    if (pool_.ref_cnt(b) == 1) pool_.uncache(b);
    pool_.release(b);
  }
  if (num_tokens % block_size_ != 0) pool_.uncache(t.blocks.back());  // partly rolled back
  t.hashes.resize(std::min(t.hashes.size(), static_cast<size_t>(num_tokens / block_size_)));
}

const std::vector<int32_t>& KvCacheManager::block_table(const std::string& request_id) const {
  static const std::vector<int32_t> kEmpty;
  auto it = tables_.find(request_id);
  return it == tables_.end() ? kEmpty : it->second.blocks;
}

int64_t KvCacheManager::num_hashed_blocks(const std::string& request_id) const {
  auto it = tables_.find(request_id);
  return it == tables_.end() ? 0 : static_cast<int64_t>(it->second.hashes.size());
}

int64_t KvCacheManager::slot(const std::string& request_id, int64_t position) const {
  const std::vector<int32_t>& table = block_table(request_id);
  const int64_t logical = position / block_size_;
  PAGELLM_CHECK(logical < static_cast<int64_t>(table.size()),
                "position " + std::to_string(position) + " of " + request_id + " has no block");
  return int64_t{table[logical]} * block_size_ + position % block_size_;
}

}  // namespace pagellm

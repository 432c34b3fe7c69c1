#include "kv/kv_cache_manager.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "kv/kv_cache_layout.h"

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

KvCacheManager::KvCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching,
                               std::vector<int64_t> group_sliding_window)
    : pool_(num_blocks),
      block_size_(block_size),
      prefix_caching_(enable_prefix_caching),
      group_window_(std::move(group_sliding_window)) {
  PAGELLM_CHECK(block_size > 0, "block_size must be positive");
  PAGELLM_CHECK(!group_window_.empty(), "a KV cache manager needs at least one group");
}

uint64_t KvCacheManager::root_hash(const std::string& cache_salt) {
  const std::string seed = "pagellm|" + cache_salt;
  return XXH3_64bits(seed.data(), seed.size());
}

uint64_t KvCacheManager::group_hash(uint64_t h, int32_t group) const {
  if (group == 0) return h;
  const uint64_t key[2] = {h, static_cast<uint64_t>(group)};
  return XXH3_64bits(key, sizeof(key));
}

KvCacheManager::Table& KvCacheManager::table_for(const std::string& request_id) {
  Table& t = tables_[request_id];
  if (t.blocks.empty()) {
    t.blocks.resize(group_window_.size());
    t.num_released.assign(group_window_.size(), 0);
  }
  return t;
}

PrefixHit KvCacheManager::find_cached_prefix(std::span<const int32_t> tokens, uint64_t root) const {
  PrefixHit hit;
  if (!prefix_caching_ || tokens.empty()) return hit;
  const int64_t max_blocks = (static_cast<int64_t>(tokens.size()) - 1) / block_size_;
  std::vector<std::vector<int32_t>> per_group(group_window_.size());
  uint64_t h = root;
  for (int64_t i = 0; i < max_blocks; ++i) {
    h = chain_hash(h, tokens.subspan(i * block_size_, block_size_));
    std::vector<int32_t> found;
    for (int32_t g = 0; g < num_groups(); ++g) {
      const auto b = pool_.lookup(group_hash(h, g));
      if (!b) break;
      found.push_back(*b);
    }
    if (static_cast<int32_t>(found.size()) < num_groups()) break;
    for (int32_t g = 0; g < num_groups(); ++g) per_group[g].push_back(found[g]);
  }
  for (const auto& blocks : per_group) hit.blocks.insert(hit.blocks.end(), blocks.begin(), blocks.end());
  hit.num_tokens = static_cast<int64_t>(per_group[0].size()) * block_size_;
  return hit;
}

bool KvCacheManager::allocate_slots(const std::string& request_id, int64_t num_total_tokens, const PrefixHit* hit) {
  auto it = tables_.find(request_id);
  const bool fresh = it == tables_.end() || it->second.blocks[0].empty();
  const size_t have = fresh ? 0 : it->second.blocks[0].size();
  const auto groups = static_cast<size_t>(num_groups());
  int32_t revived = 0;  // hit blocks that are free now: touching them uses up free blocks
  size_t n_hit = 0;
  if (fresh && hit != nullptr) {
    PAGELLM_CHECK(hit->blocks.size() % groups == 0, "prefix hit of another group count");
    n_hit = hit->blocks.size() / groups;
    for (int32_t b : hit->blocks) revived += pool_.ref_cnt(b) == 0;
  }
  const int32_t need = std::max(blocks_for(num_total_tokens) - static_cast<int32_t>(have + n_hit), 0);
  if (static_cast<int64_t>(need) * num_groups() + revived > pool_.num_free_blocks()) return false;
  Table& t = table_for(request_id);
  if (fresh && hit != nullptr) {
    for (size_t g = 0; g < groups; ++g) {
      for (size_t i = 0; i < n_hit; ++i) {
        const int32_t b = hit->blocks[g * n_hit + i];
        pool_.touch(b);
        t.blocks[g].push_back(b);
      }
    }
    for (size_t i = 0; i < n_hit; ++i) t.hashes.push_back(*pool_.block_hash(hit->blocks[i]));
  }
  for (size_t g = 0; g < groups; ++g) {
    for (int32_t i = 0; i < need; ++i) {
      auto id = pool_.allocate();
      PAGELLM_CHECK(id.has_value(), "free count said a block was free");
      t.blocks[g].push_back(*id);
    }
  }
  return true;
}

bool KvCacheManager::allocate_slots_cow(const std::string& request_id, int64_t write_from, int64_t num_total_tokens,
                                        std::vector<std::pair<int32_t, int32_t>>& copies) {
  auto it = tables_.find(request_id);
  if (it == tables_.end()) return allocate_slots(request_id, num_total_tokens);
  Table& t = it->second;
  const int64_t j = write_from / block_size_;
  std::vector<int32_t> cow_groups;
  for (int32_t g = 0; g < num_groups(); ++g) {
    const std::vector<int32_t>& blocks = t.blocks[g];
    if (j < static_cast<int64_t>(blocks.size()) && blocks[j] >= 0 && pool_.ref_cnt(blocks[j]) > 1) {
      cow_groups.push_back(g);
    }
  }
  if (cow_groups.empty()) return allocate_slots(request_id, num_total_tokens);
  const int64_t grow = std::max(blocks_for(num_total_tokens) - static_cast<int32_t>(t.blocks[0].size()), 0);
  if (grow * num_groups() + static_cast<int64_t>(cow_groups.size()) > pool_.num_free_blocks()) return false;
  for (int32_t g : cow_groups) {
    const int32_t src = t.blocks[g][j];
    const auto dst = pool_.allocate();
    PAGELLM_CHECK(dst.has_value(), "free count said a block was free");
    copies.emplace_back(src, *dst);
    t.blocks[g][j] = *dst;
    pool_.release(src);
  }
  if (j < static_cast<int64_t>(t.hashes.size())) t.hashes.resize(j);  // a written block is no longer the cached one
  return allocate_slots(request_id, num_total_tokens);
}

void KvCacheManager::fork(const std::string& parent_id, const std::string& child_id) {
  const Table& p = tables_.at(parent_id);
  PAGELLM_CHECK(tables_.count(child_id) == 0, "fork into a live table");
  for (const auto& blocks : p.blocks) {
    for (int32_t b : blocks) {
      if (b >= 0) pool_.incref(b);
    }
  }
  tables_[child_id] = p;
}

void KvCacheManager::cache_computed_blocks(const std::string& request_id, std::span<const int32_t> tokens,
                                           int64_t num_final_tokens, uint64_t root) {
  if (!prefix_caching_) return;
  auto it = tables_.find(request_id);
  if (it == tables_.end()) return;
  Table& t = it->second;
  const int64_t full = std::min<int64_t>(num_final_tokens / block_size_, static_cast<int64_t>(t.blocks[0].size()));
  PAGELLM_CHECK(static_cast<int64_t>(tokens.size()) >= full * block_size_, "too few tokens to hash");
  for (auto i = static_cast<int64_t>(t.hashes.size()); i < full; ++i) {
    const uint64_t parent = i == 0 ? root : t.hashes[i - 1];
    const uint64_t h = chain_hash(parent, tokens.subspan(i * block_size_, block_size_));
    t.hashes.push_back(h);
    for (int32_t g = 0; g < num_groups(); ++g) {
      const int32_t b = t.blocks[g][i];
      if (b >= 0) pool_.cache_block(b, group_hash(h, g));  // a released window block stays unhashed
    }
  }
}

void KvCacheManager::release_out_of_window(const std::string& request_id, int64_t num_computed_tokens) {
  auto it = tables_.find(request_id);
  if (it == tables_.end()) return;
  Table& t = it->second;
  for (int32_t g = 0; g < num_groups(); ++g) {
    const int64_t w = group_window_[g];
    if (w == 0) continue;
    const int64_t first_visible = std::max<int64_t>(0, num_computed_tokens - w + 1);
    const int64_t end = std::min<int64_t>(first_visible / block_size_, static_cast<int64_t>(t.blocks[g].size()));
    for (int64_t i = t.num_released[g]; i < end; ++i) {
      if (t.blocks[g][i] >= 0) pool_.release(t.blocks[g][i]);
      t.blocks[g][i] = -1;
    }
    t.num_released[g] = std::max(t.num_released[g], end);
  }
}

void KvCacheManager::free(const std::string& request_id) {
  auto it = tables_.find(request_id);
  if (it == tables_.end()) return;
  // Last block first: a chain's leaves reach the free queue (and eviction) before its root.
  for (const auto& blocks : it->second.blocks) {
    for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) {
      if (*b >= 0) pool_.release(*b);
    }
  }
  tables_.erase(it);
}

void KvCacheManager::truncate(const std::string& request_id, int64_t num_tokens) {
  auto it = tables_.find(request_id);
  if (it == tables_.end()) return;
  Table& t = it->second;
  const auto keep = static_cast<size_t>(blocks_for(num_tokens));
  PAGELLM_CHECK(num_tokens >= 0 && keep <= t.blocks[0].size(),
                "truncate of " + request_id + " to " + std::to_string(num_tokens) + " tokens, table holds " +
                    std::to_string(t.blocks[0].size()) + " blocks");
  for (int32_t g = 0; g < num_groups(); ++g) {
    std::vector<int32_t>& blocks = t.blocks[g];
    // The kept tokens' windows must not reach a released block (rollbacks never go below the
    // num_computed_tokens the blocks were released for).
    PAGELLM_CHECK(
        keep == 0 || t.num_released[g] * block_size_ <= std::max<int64_t>(0, num_tokens - group_window_[g] + 1),
        "truncate of " + request_id + " into blocks its sliding window released");
    while (blocks.size() > keep) {
      const int32_t b = blocks.back();
      blocks.pop_back();
      if (b < 0) continue;
      if (pool_.ref_cnt(b) == 1) pool_.uncache(b);
      pool_.release(b);
    }
    if (num_tokens % block_size_ != 0 && blocks.back() >= 0) pool_.uncache(blocks.back());  // partly rolled back
    t.num_released[g] = std::min(t.num_released[g], static_cast<int64_t>(blocks.size()));
  }
  t.hashes.resize(std::min(t.hashes.size(), static_cast<size_t>(num_tokens / block_size_)));
}

const std::vector<int32_t>& KvCacheManager::block_table(const std::string& request_id, int32_t group) const {
  static const std::vector<int32_t> kEmpty;
  PAGELLM_CHECK(group >= 0 && group < num_groups(), "KV cache group " + std::to_string(group));
  auto it = tables_.find(request_id);
  return it == tables_.end() ? kEmpty : it->second.blocks[group];
}

const std::vector<std::vector<int32_t>>& KvCacheManager::block_tables(const std::string& request_id) const {
  static const std::vector<std::vector<int32_t>> kEmpty;
  auto it = tables_.find(request_id);
  return it == tables_.end() ? kEmpty : it->second.blocks;
}

int64_t KvCacheManager::num_hashed_blocks(const std::string& request_id) const {
  auto it = tables_.find(request_id);
  return it == tables_.end() ? 0 : static_cast<int64_t>(it->second.hashes.size());
}

int64_t KvCacheManager::slot(const std::string& request_id, int64_t position, int32_t group) const {
  const std::vector<int32_t>& table = block_table(request_id, group);
  const int64_t logical = position / block_size_;
  PAGELLM_CHECK(logical < static_cast<int64_t>(table.size()) && table[logical] >= 0,
                "position " + std::to_string(position) + " of " + request_id + " has no block");
  return int64_t{table[logical]} * block_size_ + position % block_size_;
}

}  // namespace pagellm

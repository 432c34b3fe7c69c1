#include "kv/kv_cache_manager.h"

#include "core/error.h"

namespace pagellm {

KvCacheManager::KvCacheManager(int32_t num_blocks, int32_t block_size) : pool_(num_blocks), block_size_(block_size) {
  PAGELLM_CHECK(block_size > 0, "block_size must be positive");
}

bool KvCacheManager::allocate_slots(const std::string& request_id, int64_t num_total_tokens) {
  std::vector<int32_t>& table = tables_[request_id];
  const int32_t need = blocks_for(num_total_tokens) - static_cast<int32_t>(table.size());
  if (need <= 0) return true;
  if (need > pool_.num_free_blocks()) {
    if (table.empty()) tables_.erase(request_id);
    return false;
  }
  for (int32_t i = 0; i < need; ++i) {
    auto id = pool_.allocate();
    PAGELLM_CHECK(id.has_value(), "free count said a block was free");
    table.push_back(*id);
  }
  return true;
}

void KvCacheManager::free(const std::string& request_id) {
  auto it = tables_.find(request_id);
  if (it == tables_.end()) return;
  // Release in reverse so that a request's tail blocks are reused first (they are the least
  // useful to a later prefix-cache lookup).
  for (auto b = it->second.rbegin(); b != it->second.rend(); ++b) pool_.release(*b);
  tables_.erase(it);
}

const std::vector<int32_t>& KvCacheManager::block_table(const std::string& request_id) const {
  static const std::vector<int32_t> kEmpty;
  auto it = tables_.find(request_id);
  return it == tables_.end() ? kEmpty : it->second;
}

int64_t KvCacheManager::slot(const std::string& request_id, int64_t position) const {
  const std::vector<int32_t>& table = block_table(request_id);
  const int64_t logical = position / block_size_;
  PAGELLM_CHECK(logical < static_cast<int64_t>(table.size()),
                "position " + std::to_string(position) + " of " + request_id + " has no block");
  return int64_t{table[logical]} * block_size_ + position % block_size_;
}

}  // namespace pagellm

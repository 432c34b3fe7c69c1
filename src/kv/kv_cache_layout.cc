#include "kv/kv_cache_layout.h"

#include <algorithm>
#include <map>
#include <string>

#include "core/error.h"

namespace pagellm {

KvCacheLayout KvCacheLayout::for_windows(std::span<const int64_t> sliding_window) {
  if (sliding_window.empty()) throw Error("KV cache layout: the model has no layers");
  std::map<int64_t, std::vector<int32_t>> kinds;  // window -> layers, full attention (0) first
  for (size_t il = 0; il < sliding_window.size(); ++il) {
    if (sliding_window[il] < 0) {
      throw Error("KV cache layout: layer " + std::to_string(il) + " has sliding window " +
                  std::to_string(sliding_window[il]));
    }
    kinds[sliding_window[il]].push_back(static_cast<int32_t>(il));
  }
  KvCacheLayout l;
  l.num_lanes = static_cast<int32_t>(sliding_window.size());
  for (const auto& [window, layers] : kinds) l.num_lanes = std::min(l.num_lanes, static_cast<int32_t>(layers.size()));
  l.layer_group.assign(sliding_window.size(), -1);
  l.layer_lane.assign(sliding_window.size(), -1);
  for (const auto& [window, layers] : kinds) {
    for (size_t i = 0; i < layers.size(); ++i) {
      if (i % l.num_lanes == 0) l.group_sliding_window.push_back(window);
      l.layer_group[layers[i]] = l.num_groups() - 1;
      l.layer_lane[layers[i]] = static_cast<int32_t>(i % l.num_lanes);
    }
  }
  return l;
}

int64_t max_blocks_per_request(std::span<const int64_t> group_sliding_window, int32_t block_size, int64_t num_tokens,
                               int64_t max_step_tokens) {
  auto blocks = [block_size](int64_t tokens) { return (tokens + block_size - 1) / block_size; };
  const int64_t full = blocks(num_tokens);
  int64_t total = 0;
  for (int64_t w : group_sliding_window) {
    total += w == 0 ? full : std::min(full, blocks(w - 1 + std::max<int64_t>(max_step_tokens, 1)) + 1);
  }
  return total;
}

int64_t max_tokens_per_request(std::span<const int64_t> group_sliding_window, int32_t block_size, int64_t num_blocks,
                               int64_t max_tokens, int64_t max_step_tokens) {
  // max_blocks_per_request is monotone in the length: a binary search.
  int64_t lo = 0, hi = max_tokens;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (max_blocks_per_request(group_sliding_window, block_size, mid, max_step_tokens) <= num_blocks) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace pagellm

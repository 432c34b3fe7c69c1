// How a model's layers share the paged KV storage: KV cache groups (vLLM's hybrid KV cache
// manager, "KVCacheGroupSpec"; vLLM design doc "Hybrid KV Cache Manager").
//
// A model whose layers all attend the same way (every model but Gemma 3) has one group that
// holds every layer: a block id names block_size token slots in every layer, as before.
//
// A model that mixes full-attention layers with sliding-window layers (Gemma 3: 5 local layers
// to 1 global) cuts each kind into groups of num_lanes layers, num_lanes = the count of the rarer
// kind. Every group has its own block table per request, and all groups draw from ONE block
// pool: a block id held by group g names block_size slots in each of the num_lanes storage
// lanes, and lane i of that block holds layer group_layers[g][i]. A sliding-window group only
// needs the keys of its window, so the blocks that leave it go back to the pool
// (KvCacheManager::release_out_of_window) while the full groups keep theirs.
//
// Example, Gemma 3 1B: 26 layers, global layers 5, 11, 17, 23 (4), local the other 22:
//   num_lanes 4; group 0 = [5, 11, 17, 23] (full); groups 1..6 = [0 1 2 3] [4 6 7 8] [9 10 12 13]
//   [14 15 16 18] [19 20 21 22] [24 25] (window 512; the last group uses 2 of its 4 lanes).
// Storage is 4 lanes instead of 26 layers per block, 6.5x as many blocks per byte; a request
// of L tokens holds ceil(L / block_size) blocks in group 0 and at most about
// ceil((window + chunk) / block_size) + 1 in each local group.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pagellm {

struct KvCacheLayout {
  int32_t num_lanes = 0;                      // storage layers per block
  std::vector<int64_t> group_sliding_window;  // [num_groups] tokens; 0 = full attention
  std::vector<int32_t> layer_group;           // [num_layers] the group of each layer
  std::vector<int32_t> layer_lane;            // [num_layers] its lane within the group

  int32_t num_groups() const { return static_cast<int32_t>(group_sliding_window.size()); }
  int32_t num_layers() const { return static_cast<int32_t>(layer_group.size()); }

  // The layout for layers whose sliding windows are `sliding_window` ([num_layers], 0 = full
  // attention): one group when all are equal, else the grouping above, groups in order of
  // their first layer, full-attention groups first. Throws pagellm::Error for no layers or a
  // negative window.
  static KvCacheLayout for_windows(std::span<const int64_t> sliding_window);
};

// Blocks one request of num_tokens tokens holds at most, summed over groups whose windows are
// group_sliding_window, when each step computes at most max_step_tokens (>= 1) of its tokens: a
// full group holds ceil(num_tokens / block_size); a sliding group of window w at most the
// blocks covering w - 1 visible keys plus one step, ceil((w - 1 + step) / block_size) + 1.
int64_t max_blocks_per_request(std::span<const int64_t> group_sliding_window, int32_t block_size, int64_t num_tokens,
                               int64_t max_step_tokens);

// The inverse: the most tokens (<= max_tokens, e.g. the context length) one request may have when
// its blocks, by max_blocks_per_request, must fit in num_blocks. 0 when not even one token fits.
int64_t max_tokens_per_request(std::span<const int64_t> group_sliding_window, int32_t block_size, int64_t num_blocks,
                               int64_t max_tokens, int64_t max_step_tokens);

}  // namespace pagellm

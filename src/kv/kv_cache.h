// Physical KV-cache storage: for every storage lane (kv/kv_cache_layout.h; one lane per layer
// unless the model mixes full and sliding-window attention), K and V arrays of
// num_blocks * block_size slots.
//   k[lane]: [num_blocks, block_size, num_kv_heads, head_dim] in `dtype` (F32 or F16); same for v.
// Layer il reads and writes lane layout.layer_lane[il], at the block ids of its group's tables.
// Bytes per pool slot = 2 x num_lanes x num_kv_heads x head_dim x sizeof(dtype).
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/huge_pages.h"
#include "kernels/cpu/ops.h"
#include "kv/kv_cache_layout.h"

namespace pagellm {

struct KvCacheShape {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  GgmlType dtype = GgmlType::F32;
  // [num_layers] tokens each layer attends back (0: full attention); empty: all full.
  std::vector<int64_t> sliding_window;

  // KvCacheLayout::for_windows of sliding_window (all full when it is empty).
  KvCacheLayout layout() const;
  // Bytes of one pool slot (a block holds block_size of them): 2 x lanes x kv_heads x head_dim x
  // element bytes. The model's full KV per token is the same with num_layers for lanes.
  int64_t bytes_per_token() const;
};

class KvCache {
 public:
  // Throws pagellm::Error for a dtype other than F32/F16 or a non-positive size.
  KvCache(const KvCacheShape& shape, int32_t num_blocks, int32_t block_size);

  const KvCacheShape& shape() const { return shape_; }
  const KvCacheLayout& layout() const { return layout_; }
  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  int64_t bytes() const { return storage_bytes_; }
  // The storage of model layer `layer` (its lane). Throws (PAGELLM_CHECK) for a bad index.
  kernels::KvLayerView layer(int32_t layer);
  // Copies K and V of block src into block dst in every lane (copy-on-write; right for a block
  // of any group).
  void copy_block(int32_t src, int32_t dst);

  // Number of blocks that fit in `bytes` (at least 0).
  static int32_t blocks_for_bytes(const KvCacheShape& shape, int32_t block_size, int64_t bytes);

 private:
  KvCacheShape shape_;
  KvCacheLayout layout_;
  int32_t num_blocks_;
  int32_t block_size_;
  int64_t layer_bytes_;    // bytes of K (or V) for one lane
  int64_t storage_bytes_;  // 2 x num_lanes x layer_bytes_
  // [num_lanes][2][layer_bytes_], zeroed, in huge pages where Linux gives them (as the repacked
  // weights): a decode step reads every layer's keys and values after the weights have pushed
  // their page-table entries out of the caches. Model 167 Xeon, TinyLlama Q4_0, 256-token decode,
  // 3 alternating runs: write_kv 2.0-2.2 -> 1.0-1.1 us per layer, paged_attention 40.8-47.9 ->
  // 39.4-42.4 us.
  HugePageBuffer storage_;
};

}  // namespace pagellm

// Physical KV-cache storage: for every layer, K and V arrays of num_blocks * block_size slots.
//   k[layer]: [num_blocks, block_size, num_kv_heads, head_dim] in `dtype` (F32 or F16); same for v.
// Bytes per token = 2 x num_layers x num_kv_heads x head_dim x sizeof(dtype).
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/ops.h"

namespace pagellm {

struct KvCacheShape {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  GgmlType dtype = GgmlType::F32;

  // 2 x layers x kv_heads x head_dim x element bytes.
  int64_t bytes_per_token() const;
};

class KvCache {
 public:
  // Throws pagellm::Error for a dtype other than F32/F16 or a non-positive size.
  KvCache(const KvCacheShape& shape, int32_t num_blocks, int32_t block_size);

  const KvCacheShape& shape() const { return shape_; }
  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  int64_t bytes() const { return static_cast<int64_t>(storage_.size()); }
  kernels::KvLayerView layer(int32_t layer);
  // Copies K and V of block src into block dst in every layer (copy-on-write).
  void copy_block(int32_t src, int32_t dst);

  // Number of blocks that fit in `bytes` (at least 0).
  static int32_t blocks_for_bytes(const KvCacheShape& shape, int32_t block_size, int64_t bytes);

 private:
  KvCacheShape shape_;
  int32_t num_blocks_;
  int32_t block_size_;
  int64_t layer_bytes_;           // bytes of K (or V) for one layer
  std::vector<uint8_t> storage_;  // [num_layers][2][layer_bytes_]
};

}  // namespace pagellm

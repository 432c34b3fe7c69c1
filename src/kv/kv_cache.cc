#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"

namespace pagellm {

KvCacheLayout KvCacheShape::layout() const {
  if (sliding_window.empty()) return KvCacheLayout::for_windows(std::vector<int64_t>(std::max(num_layers, 1), 0));
  PAGELLM_CHECK(static_cast<int64_t>(sliding_window.size()) == num_layers, "one sliding window per layer");
  return KvCacheLayout::for_windows(sliding_window);
}

int64_t KvCacheShape::bytes_per_token() const {
  return int64_t{2} * layout().num_lanes * num_kv_heads * head_dim * type_traits(dtype).type_size;
}

KvCache::KvCache(const KvCacheShape& shape, int32_t num_blocks, int32_t block_size)
    : shape_(shape), layout_(shape.layout()), num_blocks_(num_blocks), block_size_(block_size) {
  if (shape.dtype != GgmlType::F32 && shape.dtype != GgmlType::F16) {
    throw Error("KV cache dtype must be f32 or f16, got " + type_name(shape.dtype));
  }
  if (num_blocks <= 0 || block_size <= 0) {
    throw Error("KV cache needs at least one block (num_blocks=" + std::to_string(num_blocks) +
                ", block_size=" + std::to_string(block_size) + ")");
  }
  layer_bytes_ =
      int64_t{num_blocks} * block_size * shape.num_kv_heads * shape.head_dim * type_traits(shape.dtype).type_size;
  storage_bytes_ = layer_bytes_ * 2 * layout_.num_lanes;
  storage_ = allocate_huge_page_buffer(static_cast<size_t>(storage_bytes_));
  std::memset(storage_.get(), 0, static_cast<size_t>(storage_bytes_));
}

kernels::KvLayerView KvCache::layer(int32_t layer) {
  PAGELLM_CHECK(layer >= 0 && layer < shape_.num_layers, "layer index");
  const int64_t lane = layout_.layer_lane[layer];
  kernels::KvLayerView v;
  v.dtype = shape_.dtype;
  v.k = storage_.get() + static_cast<size_t>(layer_bytes_) * (2 * lane);
  v.v = storage_.get() + static_cast<size_t>(layer_bytes_) * (2 * lane + 1);
  v.num_slots = int64_t{num_blocks_} * block_size_;
  v.block_size = block_size_;
  v.num_kv_heads = shape_.num_kv_heads;
  v.head_dim = shape_.head_dim;
  return v;
}

void KvCache::copy_block(int32_t src, int32_t dst) {
  PAGELLM_CHECK(src >= 0 && src < num_blocks_ && dst >= 0 && dst < num_blocks_, "copy_block ids");
  const int64_t block_bytes = layer_bytes_ / num_blocks_;
  for (int64_t half = 0; half < 2 * int64_t{layout_.num_lanes}; ++half) {
    uint8_t* base = storage_.get() + static_cast<size_t>(layer_bytes_) * half;
    std::memcpy(base + dst * block_bytes, base + src * block_bytes, static_cast<size_t>(block_bytes));
  }
}

int32_t KvCache::blocks_for_bytes(const KvCacheShape& shape, int32_t block_size, int64_t bytes) {
  const int64_t per_block = shape.bytes_per_token() * block_size;
  if (per_block <= 0 || bytes <= 0) return 0;
  const int64_t n = bytes / per_block;
  return static_cast<int32_t>(std::min<int64_t>(n, INT32_MAX));
}

}  // namespace pagellm

// Scratch memory of the CPU kernels, owned by their caller and passed to every call that needs
// it: no kernel allocates per call or keeps thread_local state, so two models in one process (a
// draft and a target, say) never share or race on scratch, and the owner can see and bound it.
// ModelRunner owns one per model (docs/design.md, "Who owns what") and LlamaModel::forward hands
// it down; tests and benchmarks make their own.
//
// Each Slot is one 64-byte-aligned buffer that grows to the largest request and is kept, so a
// steady stream of steps allocates nothing. Contents are unspecified between calls: a kernel
// writes what it reads. Not thread-safe: one Workspace per thread that calls kernels (the worker
// threads of a ThreadPool inside one call only get pointers into it).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace pagellm::kernels {

class Workspace {
 public:
  // The buffers kernels use; two slots are live together only where named here.
  enum Slot : int {
    kActivations,  // matmul: x in the weights' vec_dot_types  [num_tokens, row bytes] per format
    kPrepared,     // matmul: x in the tile kernels' layouts    (live with kActivations)
    kRow,          // get_row: one row of a repacked weight, in GGUF layout
    kAttention,    // paged_attention: per-thread tiles, key offsets and token -> sequence map
    kNumSlots,
  };
  // A 64-byte-aligned buffer of at least `bytes` (>= 0) for `slot`, valid until the next get of
  // the same slot. Its bytes are unspecified. Throws std::bad_alloc when memory runs out.
  void* get(Slot slot, int64_t bytes);
  // Bytes held by all slots (for /metrics-style accounting and tests).
  int64_t reserved_bytes() const;

 private:
  std::array<std::vector<uint8_t>, kNumSlots> buffers_;
};

}  // namespace pagellm::kernels

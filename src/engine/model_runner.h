// Flattens the scheduled work of one step into a ForwardBatch (the only place that computes
// slot_mapping and block-table rows), and runs the model.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/forward_batch.h"

namespace pagellm {

// One sequence's share of a step: compute `token_ids` at positions [start_pos, start_pos + n).
struct ScheduledSeq {
  const std::vector<int32_t>* block_table = nullptr;  // physical blocks, covers start_pos + n tokens
  std::span<const int32_t> token_ids;                 // the new tokens, n >= 1
  int64_t start_pos = 0;                              // = num_computed_tokens
  int32_t num_logits_rows = 1;                        // logits of the last num_logits_rows tokens, <= n
};

// Builds token_ids, positions, slot_mapping, query_start_loc, block_tables (padded with -1) and
// logits_indices (the last num_logits_rows tokens of each sequence, in sequence then position
// order).
ForwardBatch build_forward_batch(std::span<const ScheduledSeq> seqs, int32_t block_size);

}  // namespace pagellm

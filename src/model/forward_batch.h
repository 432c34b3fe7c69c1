// The flat input of one forward pass: tokens of several sequences, each sequence's new tokens
// contiguous. Built by the model runner from the scheduler's decisions; the model reads nothing
// else about requests.
//
// Example: sequence A prefills 3 tokens at positions 0..2, sequence B decodes 1 token at
// position 9 (block_size 4, A's table [5], B's table [1, 0, 3]; one KV cache group):
//   token_ids                  [a0 a1 a2 b9]
//   positions                  [0  1  2  9]
//   kv_groups[0].slot_mapping  [20 21 22 13]          (block 3 of B: 3*4 + 9%4 = 13)
//   query_start_loc            [0 3 4]
//   kv_groups[0].block_tables  [[5 -1 -1] [1 0 3]]    (max_blocks_per_seq 3, -1 = unused)
//   logits_indices             [2 3]                   (last token of each sequence)
// With several KV cache groups (kv/kv_cache_layout.h) each group has its own slot_mapping and
// block_tables; a layer uses those of its group. A sliding-window group's table has -1 for the
// blocks that left the window (never read: they hold no key the window sees).
#pragma once

#include <cstdint>
#include <vector>

namespace pagellm {

// One KV cache group's addressing for a batch.
struct KvGroupBatch {
  std::vector<int64_t> slot_mapping;  // [num_tokens] KV slot each token's K/V is written to
  std::vector<int32_t> block_tables;  // [num_seqs, max_blocks_per_seq] row-major, -1 = none
  int64_t max_blocks_per_seq = 0;
};

struct ForwardBatch {
  std::vector<int32_t> token_ids;        // [num_tokens]
  std::vector<int64_t> positions;        // [num_tokens] position of each token in its sequence
  std::vector<int64_t> query_start_loc;  // [num_seqs + 1] half-open token ranges per sequence
  std::vector<KvGroupBatch> kv_groups;   // [num_kv_cache_groups]
  std::vector<int64_t> logits_indices;   // [num_logits] token indices whose logits are returned
  // Decoder layers run: 0 all; L > 0 the first L, then the final norm and the LM head (an early
  // exit: the self-speculative draft of LayerSkip, Elhoushi et al. 2024, arXiv:2404.16710). K/V
  // are written for those layers only.
  int32_t num_layers = 0;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t num_seqs() const { return static_cast<int64_t>(query_start_loc.empty() ? 0 : query_start_loc.size() - 1); }
};

}  // namespace pagellm

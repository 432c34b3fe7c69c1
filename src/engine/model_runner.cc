#include "engine/model_runner.h"

#include <algorithm>

#include "core/error.h"

namespace pagellm {

ForwardBatch build_forward_batch(std::span<const ScheduledSeq> seqs, int32_t block_size) {
  ForwardBatch b;
  b.query_start_loc.push_back(0);
  for (const ScheduledSeq& s : seqs) {
    b.max_blocks_per_seq = std::max<int64_t>(b.max_blocks_per_seq, static_cast<int64_t>(s.block_table->size()));
  }
  b.block_tables.assign(seqs.size() * b.max_blocks_per_seq, -1);
  for (size_t si = 0; si < seqs.size(); ++si) {
    const ScheduledSeq& s = seqs[si];
    PAGELLM_CHECK(!s.token_ids.empty(), "scheduled sequence with no tokens");
    const std::vector<int32_t>& table = *s.block_table;
    std::copy(table.begin(), table.end(), b.block_tables.begin() + static_cast<int64_t>(si) * b.max_blocks_per_seq);
    for (size_t i = 0; i < s.token_ids.size(); ++i) {
      const int64_t pos = s.start_pos + static_cast<int64_t>(i);
      const int64_t logical = pos / block_size;
      PAGELLM_CHECK(logical < static_cast<int64_t>(table.size()), "block table too short for position");
      b.token_ids.push_back(s.token_ids[i]);
      b.positions.push_back(pos);
      b.slot_mapping.push_back(int64_t{table[logical]} * block_size + pos % block_size);
    }
    b.query_start_loc.push_back(b.num_tokens());
    PAGELLM_CHECK(s.num_logits_rows >= 0 && s.num_logits_rows <= static_cast<int64_t>(s.token_ids.size()),
                  "more logits rows than new tokens");
    for (int64_t i = b.num_tokens() - s.num_logits_rows; i < b.num_tokens(); ++i) b.logits_indices.push_back(i);
  }
  return b;
}

}  // namespace pagellm

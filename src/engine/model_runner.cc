#include "engine/model_runner.h"

#include <algorithm>

#include "core/error.h"

namespace pagellm {

ForwardBatch build_forward_batch(std::span<const ScheduledSeq> seqs, int32_t block_size) {
  ForwardBatch b;
  b.query_start_loc.push_back(0);
  const size_t groups = seqs.empty() ? 1 : seqs[0].block_tables.size();
  b.kv_groups.resize(groups);
  for (const ScheduledSeq& s : seqs) {
    PAGELLM_CHECK(s.block_tables.size() == groups && groups > 0, "scheduled sequences disagree on KV cache groups");
    for (size_t g = 0; g < groups; ++g) {
      KvGroupBatch& kg = b.kv_groups[g];
      kg.max_blocks_per_seq = std::max<int64_t>(kg.max_blocks_per_seq, static_cast<int64_t>(s.block_tables[g].size()));
    }
  }
  for (KvGroupBatch& kg : b.kv_groups) kg.block_tables.assign(seqs.size() * kg.max_blocks_per_seq, -1);
  for (size_t si = 0; si < seqs.size(); ++si) {
    const ScheduledSeq& s = seqs[si];
    PAGELLM_CHECK(!s.token_ids.empty(), "scheduled sequence with no tokens");
    PAGELLM_CHECK(s.num_logits_rows >= 0 && s.num_logits_rows <= static_cast<int64_t>(s.token_ids.size()),
                  "scheduled sequence asks for more logits rows than it has tokens");
    for (size_t g = 0; g < groups; ++g) {
      const std::vector<int32_t>& table = s.block_tables[g];
      KvGroupBatch& kg = b.kv_groups[g];
      std::copy(table.begin(), table.end(), kg.block_tables.begin() + static_cast<int64_t>(si) * kg.max_blocks_per_seq);
      for (size_t i = 0; i < s.token_ids.size(); ++i) {
        const int64_t pos = s.start_pos + static_cast<int64_t>(i);
        const int64_t logical = pos / block_size;
        PAGELLM_CHECK(logical < static_cast<int64_t>(table.size()) && table[logical] >= 0,
                      "block table too short for position");
        kg.slot_mapping.push_back(int64_t{table[logical]} * block_size + pos % block_size);
      }
    }
    for (size_t i = 0; i < s.token_ids.size(); ++i) {
      b.token_ids.push_back(s.token_ids[i]);
      b.positions.push_back(s.start_pos + static_cast<int64_t>(i));
    }
    b.query_start_loc.push_back(b.num_tokens());
    for (int64_t i = b.num_tokens() - s.num_logits_rows; i < b.num_tokens(); ++i) b.logits_indices.push_back(i);
  }
  return b;
}

std::span<const float> ModelRunnerOutput::row(size_t seq, int32_t j) const {
  PAGELLM_CHECK(seq < num_rows.size() && j >= 0 && j < num_rows[seq], "logits row out of range");
  return std::span<const float>(logits).subspan(static_cast<size_t>((row_offset[seq] + j) * vocab_size),
                                                static_cast<size_t>(vocab_size));
}

ModelRunner::ModelRunner(std::unique_ptr<ThreadPool> pool, std::unique_ptr<LlamaModel> model, const KvCacheGeometry& kv)
    : pool_(std::move(pool)),
      owned_model_(std::move(model)),
      model_(owned_model_.get()),
      kv_cache_(model_->kv_shape(kv.dtype), kv.num_blocks, kv.block_size) {}

ModelRunner::ModelRunner(LlamaModel& model, const KvCacheGeometry& kv)
    : model_(&model), kv_cache_(model.kv_shape(kv.dtype), kv.num_blocks, kv.block_size) {}

void ModelRunner::copy_blocks(std::span<const std::pair<int32_t, int32_t>> pairs) {
  for (const auto& [src, dst] : pairs) kv_cache_.copy_block(src, dst);
}

const ModelRunnerOutput& ModelRunner::execute(const SchedulerOutput& so, const KvCacheManager& kv) {
  chunks_.resize(so.scheduled.size());
  seqs_.clear();
  for (size_t i = 0; i < so.scheduled.size(); ++i) {
    const ScheduledRequest& s = so.scheduled[i];
    const Request& r = *s.request;
    chunks_[i].clear();
    for (int64_t p = r.num_computed_tokens; p < r.num_computed_tokens + s.num_scheduled_tokens; ++p) {
      chunks_[i].push_back(r.token_at(p));
    }
    seqs_.push_back(ScheduledSeq{kv.block_tables(r.request_id), chunks_[i], r.num_computed_tokens, s.num_logits_rows});
  }
  return execute(seqs_);
}

const ModelRunnerOutput& ModelRunner::execute(std::span<const ScheduledSeq> seqs, int32_t num_layers) {
  output_.vocab_size = model_->config().vocab_size;
  output_.row_offset.clear();
  output_.num_rows.clear();
  int64_t rows = 0;
  for (const ScheduledSeq& s : seqs) {
    output_.row_offset.push_back(rows);
    output_.num_rows.push_back(s.num_logits_rows);
    rows += s.num_logits_rows;
  }
  ForwardBatch batch = build_forward_batch(seqs, kv_cache_.block_size());
  batch.num_layers = num_layers;
  max_batch_tokens_ = std::max(max_batch_tokens_, batch.num_tokens());
  model_->forward(batch, kv_cache_, workspace_, output_.logits);
  return output_;
}

}  // namespace pagellm

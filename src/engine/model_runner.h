// The model runner (vLLM's GPUModelRunner / worker): the one owner of model execution. It owns the
// LlamaModel, the paged KV storage, the logits buffer and the thread pool the kernels run on, and
// turns one step's scheduled work into logits rows. It is the only place that computes
// slot_mapping and block-table rows (build_forward_batch).
//
// Who calls what: EngineCore (the only engine loop) calls copy_blocks then execute once per step;
// tests call execute(std::span<const ScheduledSeq>) to get logits of chosen positions. Nothing
// else touches the model or the KV storage.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/workspace.h"
#include "kv/kv_cache.h"
#include "kv/kv_cache_manager.h"
#include "model/forward_batch.h"
#include "model/llama.h"
#include "sched/scheduler.h"

namespace pagellm {

// One sequence's share of a step: compute `token_ids` at positions [start_pos, start_pos + n).
struct ScheduledSeq {
  // [num_kv_cache_groups] physical blocks per group, each covering start_pos + n tokens
  // (KvCacheManager::block_tables; every sequence of a batch has the same group count).
  std::span<const std::vector<int32_t>> block_tables;
  std::span<const int32_t> token_ids;  // the new tokens, n >= 1
  int64_t start_pos = 0;               // = num_computed_tokens
  // Logits rows wanted: those of the last num_logits_rows new tokens, in position order (0: none;
  // 1: the next-token row of a sampling step; k + 1: a speculative verification). <= n.
  int32_t num_logits_rows = 1;
};

// Builds token_ids, positions, query_start_loc, per KV cache group slot_mapping and
// block_tables (padded with -1), and logits_indices (the last num_logits_rows tokens of each
// sequence, in sequence order). Throws (PAGELLM_CHECK) when a sequence has no tokens, asks for
// more rows than tokens, its tables disagree on the group count, or a table has no block for a
// new position.
ForwardBatch build_forward_batch(std::span<const ScheduledSeq> seqs, int32_t block_size);

// Logits of one step. Sequence i (in the order of SchedulerOutput::scheduled or of the span given
// to execute) owns rows [row_offset[i], row_offset[i] + num_rows[i]) of `logits`.
struct ModelRunnerOutput {
  int64_t vocab_size = 0;
  std::vector<float> logits;        // [num_rows_total, vocab_size] f32
  std::vector<int64_t> row_offset;  // [num_seqs] first row of sequence i
  std::vector<int32_t> num_rows;    // [num_seqs] rows of sequence i (0 when it does not sample)

  // Row j of sequence i: [vocab_size] f32. Precondition (checked): j < num_rows[i].
  std::span<const float> row(size_t seq, int32_t j = 0) const;
};

// Geometry of the KV storage: num_blocks blocks of block_size tokens, each token
// KvCacheShape::bytes_per_token() bytes (engine/engine_config.h plans it).
struct KvCacheGeometry {
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  GgmlType dtype = GgmlType::F32;
};

class ModelRunner {
 public:
  // Takes the pool and the model built on it (the pool must be the one the model was given) and
  // allocates the KV storage. Throws pagellm::Error for a bad geometry (KvCache's checks).
  ModelRunner(std::unique_ptr<ThreadPool> pool, std::unique_ptr<LlamaModel> model, const KvCacheGeometry& kv);
  // Borrows `model` (tests that build their own): it must outlive the runner.
  ModelRunner(LlamaModel& model, const KvCacheGeometry& kv);

  const LlamaConfig& model_config() const { return model_->config(); }
  const LlamaModel& model() const { return *model_; }
  const KvCache& kv_cache() const { return kv_cache_; }
  int32_t num_blocks() const { return kv_cache_.num_blocks(); }
  int32_t block_size() const { return kv_cache_.block_size(); }
  // The pool the kernels run on (nullptr for a borrowed model: its own).
  ThreadPool* pool() { return pool_.get(); }
  // The most tokens one forward pass of this runner has taken so far (what its activation
  // buffers grew to; runner_buffer_bytes bounds it by max_num_batched_tokens).
  int64_t max_batch_tokens() const { return max_batch_tokens_; }

  // Copy-on-write of shared blocks, (src, dst) physical ids, in order; before the step's forward.
  void copy_blocks(std::span<const std::pair<int32_t, int32_t>> pairs);

  // One forward pass for the scheduled requests, their block tables read from `kv`. Each
  // sequence gets ScheduledRequest::num_logits_rows rows (1 when it samples, 0 for a prefill chunk).
  // Precondition: the scheduler allocated the slots (schedule()) and on_step_done was not yet
  // called. The returned reference is valid until the next execute.
  const ModelRunnerOutput& execute(const SchedulerOutput& so, const KvCacheManager& kv);
  // The same for sequences given directly (tests; bench harnesses; the self-speculative draft):
  // rows per num_logits_rows; num_layers > 0 runs only the first num_layers decoder layers
  // (ForwardBatch::num_layers).
  const ModelRunnerOutput& execute(std::span<const ScheduledSeq> seqs, int32_t num_layers = 0);

 private:
  std::unique_ptr<ThreadPool> pool_;  // before model_: the model runs on it
  std::unique_ptr<LlamaModel> owned_model_;
  LlamaModel* model_;
  KvCache kv_cache_;
  kernels::Workspace workspace_;  // the kernels' scratch, passed down through LlamaModel::forward
  ModelRunnerOutput output_;
  std::vector<std::vector<int32_t>> chunks_;  // scratch: new token ids per scheduled request
  std::vector<ScheduledSeq> seqs_;            // scratch
  int64_t max_batch_tokens_ = 0;
};

}  // namespace pagellm

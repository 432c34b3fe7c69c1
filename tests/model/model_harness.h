// Test harness: a client of ModelRunner (the engine's owner of model execution) with its own
// KvCacheManager, for model tests that need logits: one or many sequences per forward pass, any
// prefill chunking, every logit row it asked for (EngineCore samples and returns tokens only).
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/model_runner.h"
#include "kv/kv_cache_manager.h"
#include "model/llama.h"

namespace pagellm::test {

class ModelHarness {
 public:
  ModelHarness(LlamaModel& model, int32_t num_blocks, int32_t block_size, GgmlType kv_dtype = GgmlType::F32)
      : runner_(model, KvCacheGeometry{num_blocks, block_size, kv_dtype}),
        manager_(num_blocks, block_size, false, runner_.kv_cache().layout().group_sliding_window) {}

  // Work of one sequence in one step: append `tokens` to sequence `id` and compute them.
  struct Work {
    std::string id;
    std::vector<int32_t> tokens;
    bool all_logits = false;  // logits for every new token (else only the last)
    int32_t num_logits = -1;  // >= 0: the logits of the last num_logits new tokens (overrides all_logits)
  };

  // One forward pass for all `work`. Returns, per work item, its logit rows ([n][vocab] flattened).
  std::vector<std::vector<float>> step(const std::vector<Work>& work) {
    std::vector<ScheduledSeq> seqs;
    for (const Work& w : work) {
      std::vector<int32_t>& all = tokens_[w.id];
      all.insert(all.end(), w.tokens.begin(), w.tokens.end());
      if (!manager_.allocate_slots(w.id, static_cast<int64_t>(all.size()))) throw Error("harness: KV full");
    }
    for (const Work& w : work) {
      const std::vector<int32_t>& all = tokens_[w.id];
      const int64_t start = static_cast<int64_t>(all.size() - w.tokens.size());
      const auto n = static_cast<int32_t>(w.tokens.size());
      const int32_t rows = w.num_logits >= 0 ? w.num_logits : (w.all_logits ? n : 1);
      seqs.push_back(
          ScheduledSeq{manager_.block_tables(w.id), std::span<const int32_t>(all).subspan(start, n), start, rows});
    }
    const ModelRunnerOutput& mo = runner_.execute(seqs);
    std::vector<std::vector<float>> out;
    for (size_t i = 0; i < work.size(); ++i) {
      const auto begin = mo.logits.begin() + mo.row_offset[i] * mo.vocab_size;
      out.emplace_back(begin, begin + mo.num_rows[i] * mo.vocab_size);
    }
    return out;
  }

  void free(const std::string& id) {
    manager_.free(id);
    tokens_.erase(id);
  }
  KvCacheManager& manager() { return manager_; }

 private:
  ModelRunner runner_;
  KvCacheManager manager_;
  std::map<std::string, std::vector<int32_t>> tokens_;
};

// Greedy: argmax, ties to the lowest id.
inline int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

}  // namespace pagellm::test

// Test harness: drives LlamaModel directly through the paged KV cache, one or many sequences per
// forward pass, with any prefill chunking, and returns every logit row it asked for.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/model_runner.h"
#include "kv/kv_cache.h"
#include "kv/kv_cache_manager.h"
#include "model/llama.h"

namespace pagellm::test {

class ModelHarness {
 public:
  ModelHarness(LlamaModel& model, int32_t num_blocks, int32_t block_size, GgmlType kv_dtype = GgmlType::F32)
      : model_(model), kv_(model.kv_shape(kv_dtype), num_blocks, block_size), manager_(num_blocks, block_size) {}

  // Work of one sequence in one step: append `tokens` to sequence `id` and compute them.
  struct Work {
    std::string id;
    std::vector<int32_t> tokens;
    bool all_logits = false;  // logits for every new token (else only the last)
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
      seqs.push_back(ScheduledSeq{&manager_.block_table(w.id),
                                  std::span<const int32_t>(all).subspan(start, w.tokens.size()), start, true});
    }
    ForwardBatch fb = build_forward_batch(seqs, manager_.block_size());
    // Replace the logits indices: all tokens of items that want them.
    fb.logits_indices.clear();
    std::vector<int64_t> counts;
    for (size_t i = 0; i < work.size(); ++i) {
      const int64_t b = fb.query_start_loc[i], e = fb.query_start_loc[i + 1];
      for (int64_t t = work[i].all_logits ? b : e - 1; t < e; ++t) fb.logits_indices.push_back(t);
      counts.push_back(work[i].all_logits ? e - b : 1);
    }
    std::vector<float> logits;
    model_.forward(fb, kv_, logits);
    const int64_t vocab = model_.config().vocab_size;
    std::vector<std::vector<float>> out;
    int64_t row = 0;
    for (int64_t c : counts) {
      out.emplace_back(logits.begin() + row * vocab, logits.begin() + (row + c) * vocab);
      row += c;
    }
    return out;
  }

  void free(const std::string& id) {
    manager_.free(id);
    tokens_.erase(id);
  }
  KvCacheManager& manager() { return manager_; }

 private:
  LlamaModel& model_;
  KvCache kv_;
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

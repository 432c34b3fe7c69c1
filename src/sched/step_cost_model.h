// The step-time cost model behind the step-time budget (stall-free batching: Agrawal et al.
// 2024, "Taming Throughput-Latency Tradeoff in LLM Inference with Sarathi-Serve", OSDI): a step's
// wall time predicted from what it computes,
//
//   t = c_step + c_token * num_tokens + c_attn * num_attn_pairs / 1024          (seconds)
//
// num_tokens: tokens in the flat batch (decodes, prefill chunks and verify tokens alike);
// num_attn_pairs: (query, key) pairs the attention reads, sum over the step's tokens of the
// positions each one attends (a chunk of n tokens from position p: n p + n (n + 1) / 2). c_step
// is what a step costs whatever it holds (reading every weight once, the per-step overhead),
// c_token the per-token matmul and MLP work, c_attn the per-pair attention work.
//
// Fitted online from measured steps: exponentially weighted least squares (forgetting factor
// kForget per step, so the model follows the load and the context lengths as they change), with
// the coefficients kept non-negative (the best of the 8 subsets of free coefficients, the others
// 0: an exact non-negative least squares for 3 unknowns). Until the steps seen determine the
// coefficients, each term takes an equal share of the time seen, which over-predicts a larger
// prefill chunk (its tokens and attention pairs grow) rather than under-predicts it.
#pragma once

#include <array>
#include <cstdint>

namespace pagellm {

// What one step computes: the model's inputs.
struct StepFeatures {
  int64_t num_tokens = 0;
  int64_t num_attn_pairs = 0;

  // The features of `n` tokens at positions [start, start + n) of one sequence.
  static StepFeatures chunk(int64_t start, int64_t n);
  StepFeatures& operator+=(const StepFeatures& o) {
    num_tokens += o.num_tokens;
    num_attn_pairs += o.num_attn_pairs;
    return *this;
  }
};

class StepCostModel {
 public:
  static constexpr double kForget = 0.98;  // weight of a step 35 steps old: 0.5
  StepCostModel() = default;
  // A model that never learns (tests, and a user who knows the machine): these coefficients.
  static StepCostModel fixed(double c_step, double c_token, double c_attn);

  // Adds one measured step (seconds > 0; a step with no tokens or a non-finite time is ignored)
  // and refits. No effect on a fixed model.
  void observe(const StepFeatures& f, double seconds);
  // Predicted seconds of a step with features f; 0 until a step has been observed.
  double predict(const StepFeatures& f) const;
  // Whether predictions mean anything: fixed, or at least one step observed.
  bool ready() const { return fixed_ || num_observed_ > 0; }

  double c_step() const { return c_[0]; }
  double c_token() const { return c_[1]; }
  double c_attn() const { return c_[2]; }
  int64_t num_observed() const { return num_observed_; }
  // Exponentially weighted mean of |predicted - measured| / measured over the observed steps,
  // each predicted before it was added: how far the budget can be trusted.
  double mean_relative_error() const { return mean_rel_error_; }

 private:
  void refit();

  std::array<double, 3> c_{0, 0, 0};
  std::array<std::array<double, 3>, 3> xx_{};  // sum of w x x^T
  std::array<double, 3> xy_{};                 // sum of w x y
  double yy_ = 0;                              // sum of w y^2
  int64_t num_observed_ = 0;
  double mean_rel_error_ = 0;
  bool fixed_ = false;
};

// The automatic step-time budget (max_step_seconds < 0): while decodes run, kAutoStepFactor x
// the predicted time of a step of those decodes alone, so a step that also carries prefill takes
// at most about that many decode-only steps, whatever the model, machine and batch (a fixed
// budget is either loose for small batches or below the decodes' own time for large ones,
// starving prefill). With no decode running there is no ITL to protect and no time limit. 0: no
// time limit for this step. Below 2, so that p99 ITL can stay under 2x the median step even
// where most steps are decode-only. Chosen from serve sweeps (docs/benchmarks.md, "step-time
// budget"): on the EPYC Zen 5, 1.9 against 3 took p99 ITL from 1.6-3.4x its median to
// 1.2-1.3x at 16 and 64 streams and near saturation, at equal output tokens/s except -15% at 16
// streams; on the AVX2-only EPYC, 1.8 cost 10-17% of the output tokens/s against 3.
inline constexpr double kAutoStepFactor = 1.9;
// auto_factor replaces kAutoStepFactor (EngineConfig::auto_step_factor, > 1).
double step_budget_seconds(const StepCostModel& model, double max_step_seconds, double auto_factor, int64_t num_decodes,
                           const StepFeatures& decodes);

// Predicted seconds until `num_prefill_tokens` queued prompt tokens are all computed, while
// `num_decodes` running decodes take their token every step: steps of the prefill chunk the
// scheduler would grant (by max_num_batched_tokens, and with a step-time budget, fixed or
// automatic, the largest chunk whose step fits it, at least min_prefill_chunk), each costing the
// model's time for the
// decodes plus the chunk. The attention term is a lower bound, each chunk's own causal pairs as
// if it began a prompt (the true one needs each prompt's positions; the decodes' is left out): a
// model fitted from decode steps alone can put all of a step's cost on attention, and without
// that term it priced any queue at 0 s. For
// admission (EngineConfig::max_queue_delay_s): a request whose predicted time to first token
// exceeds it is refused at once. 0 when the model is not ready or nothing is queued.
double predict_prefill_seconds(const StepCostModel& model, double max_step_seconds, double auto_factor,
                               int64_t max_num_batched_tokens, int64_t min_prefill_chunk, int64_t num_prefill_tokens,
                               int64_t num_decodes);

}  // namespace pagellm

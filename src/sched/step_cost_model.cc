#include "sched/step_cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace pagellm {
namespace {

using Vec = std::array<double, 3>;
using Mat = std::array<Vec, 3>;

Vec features(const StepFeatures& f) {
  return {1.0, static_cast<double>(f.num_tokens), static_cast<double>(f.num_attn_pairs) / 1024.0};
}

// Solves a x = b for the n x n leading system (partial pivoting); false when singular.
bool solve(Mat a, Vec b, int n, Vec& x) {
  for (int col = 0; col < n; ++col) {
    int piv = col;
    for (int r = col + 1; r < n; ++r) {
      if (std::abs(a[r][col]) > std::abs(a[piv][col])) piv = r;
    }
    if (a[piv][col] == 0) return false;
    std::swap(a[piv], a[col]);
    std::swap(b[piv], b[col]);
    for (int r = col + 1; r < n; ++r) {
      const double m = a[r][col] / a[col][col];
      for (int k = col; k < n; ++k) a[r][k] -= m * a[col][k];
      b[r] -= m * b[col];
    }
  }
  for (int r = n - 1; r >= 0; --r) {
    double s = b[r];
    for (int k = r + 1; k < n; ++k) s -= a[r][k] * x[k];
    x[r] = s / a[r][r];
  }
  return true;
}

}  // namespace

StepFeatures StepFeatures::chunk(int64_t start, int64_t n) { return StepFeatures{n, n * start + n * (n + 1) / 2}; }

StepCostModel StepCostModel::fixed(double c_step, double c_token, double c_attn) {
  StepCostModel m;
  m.c_ = {c_step, c_token, c_attn};
  m.fixed_ = true;
  return m;
}

double StepCostModel::predict(const StepFeatures& f) const {
  const Vec x = features(f);
  return c_[0] * x[0] + c_[1] * x[1] + c_[2] * x[2];
}

void StepCostModel::observe(const StepFeatures& f, double seconds) {
  if (fixed_ || f.num_tokens <= 0 || !std::isfinite(seconds) || seconds <= 0) return;
  if (ready()) {
    const double e = std::abs(predict(f) - seconds) / seconds;
    mean_rel_error_ = num_observed_ == 1 ? e : 0.9 * mean_rel_error_ + 0.1 * e;
  }
  const Vec x = features(f);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) xx_[i][j] = kForget * xx_[i][j] + x[i] * x[j];
    xy_[i] = kForget * xy_[i] + x[i] * seconds;
  }
  yy_ = kForget * yy_ + seconds * seconds;
  ++num_observed_;
  refit();
}

// Non-negative least squares over the 8 subsets of free coefficients: each subset's ridge
// solution, kept when all its coefficients are >= 0; the smallest weighted squared error wins,
// ties to the subset enumerated first (mask 7, all three coefficients, comes first). The ridge, 1e-9 of each
// diagonal entry (scale-free), only decides undetermined systems: one step seen gives each term
// an equal share of its time.
void StepCostModel::refit() {
  double best = std::numeric_limits<double>::infinity();
  Vec best_c{0, 0, 0};
  for (int mask = 7; mask >= 0; --mask) {
    int idx[3], n = 0;
    for (int i = 0; i < 3; ++i) {
      if (mask & (1 << i)) idx[n++] = i;
    }
    Vec c{0, 0, 0};
    if (n > 0) {
      Mat a{};
      Vec b{}, sol{};
      for (int r = 0; r < n; ++r) {
        for (int k = 0; k < n; ++k) a[r][k] = xx_[idx[r]][idx[k]] * (r == k ? 1 + 1e-9 : 1.0);
        b[r] = xy_[idx[r]];
      }
      if (!solve(a, b, n, sol)) continue;
      bool nonneg = true;
      for (int r = 0; r < n; ++r) nonneg = nonneg && sol[r] >= 0;
      if (!nonneg) continue;
      for (int r = 0; r < n; ++r) c[idx[r]] = sol[r];
    }
    // Weighted squared error: c^T XX c - 2 c^T XY + YY.
    double err = yy_;
    for (int i = 0; i < 3; ++i) {
      err -= 2 * c[i] * xy_[i];
      for (int j = 0; j < 3; ++j) err += c[i] * xx_[i][j] * c[j];
    }
    if (err < best - 1e-9 * yy_) {
      best = err;
      best_c = c;
    }
  }
  c_ = best_c;
}

double step_budget_seconds(const StepCostModel& model, double max_step_seconds, double auto_factor, int64_t num_decodes,
                           const StepFeatures& decodes) {
  if (!model.ready() || max_step_seconds == 0) return 0;
  if (max_step_seconds > 0) return max_step_seconds;
  return num_decodes > 0 ? auto_factor * model.predict(decodes) : 0;
}

double predict_prefill_seconds(const StepCostModel& model, double max_step_seconds, double auto_factor,
                               int64_t max_num_batched_tokens, int64_t min_prefill_chunk, int64_t num_prefill_tokens,
                               int64_t num_decodes) {
  if (!model.ready() || num_prefill_tokens <= 0) return 0;
  int64_t chunk = std::max<int64_t>(1, max_num_batched_tokens - num_decodes);
  const double budget =
      step_budget_seconds(model, max_step_seconds, auto_factor, num_decodes, StepFeatures{num_decodes, 0});
  if (budget > 0 && model.c_token() > 0) {
    const double left = budget - model.c_step() - model.c_token() * static_cast<double>(num_decodes);
    const double by_time = std::floor(left / model.c_token());
    if (by_time < static_cast<double>(chunk)) chunk = static_cast<int64_t>(std::max(0.0, by_time));
    chunk = std::max(chunk, std::max<int64_t>(1, min_prefill_chunk));
    chunk = std::min(chunk, std::max<int64_t>(1, max_num_batched_tokens - num_decodes));  // as granted
  }
  const int64_t steps = (num_prefill_tokens + chunk - 1) / chunk;
  // Each step's attention: at least the chunk's own causal pairs (as if it started a prompt).
  StepFeatures step_features = StepFeatures::chunk(0, std::min(chunk, num_prefill_tokens));
  step_features.num_tokens += num_decodes;
  return static_cast<double>(steps) * model.predict(step_features);
}

}  // namespace pagellm

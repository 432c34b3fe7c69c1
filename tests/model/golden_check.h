// Tolerance checks of a greedy run against llama.cpp's golden outputs (golden_test.cc,
// golden_kquant_test.cc). pagellm computes one arithmetic per weight family (docs/design.md,
// "Kernel table"), not ggml's lane-wise sums, so logits agree with llama.cpp's to a tolerance,
// not bitwise. The rule, for a tolerance tol on |Δlogit|:
//   - every golden logit we can compare (the top-5 of the first 8 steps, and the full step-0
//     vector where the file has it), at the steps reached with the same tokens, is within tol;
//   - the greedy ids equal llama.cpp's at least up to the first step whose golden top-1/top-2
//     margin is below 2 tol (two logits each moved by <= tol cannot swap a larger gap).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/llama.h"
#include "model_harness.h"
#include "test_util.h"

namespace pagellm::test {

struct GreedyRun {
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> logits;  // per step
};

// The prompt in chunks of `chunk` tokens, then n greedy steps (argmax, ties to the lowest id).
inline GreedyRun run_greedy(LlamaModel& model, const std::vector<int32_t>& prompt, int n, int64_t chunk) {
  ModelHarness h(model, 64, 16);
  GreedyRun r;
  std::vector<float> last;
  for (size_t s = 0; s < prompt.size(); s += chunk) {
    const size_t e = std::min(prompt.size(), s + chunk);
    last = h.step({{"seq", std::vector<int32_t>(prompt.begin() + s, prompt.begin() + e)}})[0];
  }
  const int64_t vocab = model.config().vocab_size;
  for (int i = 0; i < n; ++i) {
    r.logits.push_back(last);
    const int32_t tok = argmax(last.data(), vocab);
    r.ids.push_back(tok);
    if (i + 1 < n) last = h.step({{"seq", {tok}}})[0];
  }
  return r;
}

struct Agreement {
  int agreed = 0;         // leading greedy ids equal to llama.cpp's
  int required = 0;       // steps before the first golden margin < 2 tol
  double max_dlogit = 0;  // over the compared logits
};

// res: one golden result (greedy_token_ids, top1_top2_logit_margin, top5_first8_steps and,
// optionally, logits_step0). Checks the rule above with EXPECTs and returns the measurements.
inline Agreement check_against_golden(const GreedyRun& run, const nlohmann::json& res, double tol) {
  Agreement a;
  const auto want = res["greedy_token_ids"].get<std::vector<int32_t>>();
  const auto margins = res["top1_top2_logit_margin"].get<std::vector<double>>();
  const int n = static_cast<int>(std::min(want.size(), run.ids.size()));
  while (a.agreed < n && run.ids[a.agreed] == want[a.agreed]) ++a.agreed;
  while (a.required < n && margins[a.required] >= 2 * tol) ++a.required;
  EXPECT_GE(a.agreed, a.required) << "greedy ids diverge at step " << a.agreed << " (golden margin "
                                  << (a.agreed < n ? margins[a.agreed] : 0.0) << ", tol " << tol << ")";
  // Step s's logits follow the same tokens when the ids agreed before s.
  const nlohmann::json& top5 = res["top5_first8_steps"];
  for (int s = 0; s < static_cast<int>(top5.size()) && s <= a.agreed && s < n; ++s) {
    for (const nlohmann::json& pair : top5[s]) {
      const double d = std::fabs(run.logits[s][pair[0].get<int32_t>()] - pair[1].get<double>());
      a.max_dlogit = std::max(a.max_dlogit, d);
      EXPECT_LE(d, tol) << "step " << s << " token " << pair[0];
    }
  }
  if (res.contains("logits_step0")) {
    const auto l0 = res["logits_step0"].get<std::vector<double>>();
    EXPECT_EQ(l0.size(), run.logits[0].size());
    for (size_t i = 0; i < std::min(l0.size(), run.logits[0].size()); ++i) {
      const double d = std::fabs(run.logits[0][i] - l0[i]);
      a.max_dlogit = std::max(a.max_dlogit, d);
      EXPECT_LE(d, tol) << "step 0 token " << i;
    }
  }
  return a;
}

struct Forced {
  int steps = 0;         // steps whose golden margin is >= 2 tol
  int argmax_agree = 0;  // of those, where our argmax is llama.cpp's token
  double max_gap = 0;    // max over all steps of (our max logit - our logit of llama.cpp's token)
};

// Teacher forcing (the kquant README's suggestion): decodes prompt + llama.cpp's greedy ids; at
// every step whose golden margin is >= 2 tol our argmax must be llama.cpp's token, and at every
// step that token's logit must be within 2 tol of our maximum. So one early flip does not hide
// the agreement of the rest of the run.
inline Forced teacher_force(LlamaModel& model, const std::vector<int32_t>& prompt, const nlohmann::json& res,
                            double tol) {
  Forced f;
  const auto want = res["greedy_token_ids"].get<std::vector<int32_t>>();
  const auto margins = res["top1_top2_logit_margin"].get<std::vector<double>>();
  ModelHarness h(model, 64, 16);
  std::vector<float> logits = h.step({{"seq", prompt}})[0];
  for (size_t k = 0; k < want.size(); ++k) {
    const int32_t top = argmax(logits.data(), static_cast<int64_t>(logits.size()));
    const double gap = logits[top] - logits[want[k]];
    f.max_gap = std::max(f.max_gap, gap);
    EXPECT_LE(gap, 2 * tol) << "forced step " << k;
    if (margins[k] >= 2 * tol) {
      ++f.steps;
      f.argmax_agree += top == want[k];
      EXPECT_EQ(top, want[k]) << "forced step " << k << " (golden margin " << margins[k] << ")";
    }
    if (k + 1 < want.size()) logits = h.step({{"seq", {want[k]}}})[0];
  }
  return f;
}

// The quantized files' rule over several prompts: greedy agreement (check_against_golden), then
// teacher forcing, with the totals printed by the golden tests.
struct QuantTotals {
  int agreed = 0, required = 0, forced_steps = 0, forced_argmax = 0;
  double max_dlogit = 0, max_forced_gap = 0;

  void add(LlamaModel& model, const std::vector<int32_t>& prompt, const nlohmann::json& res, double tol) {
    const Agreement a = check_against_golden(run_greedy(model, prompt, 64, 512), res, tol);
    agreed += a.agreed;
    required += a.required;
    max_dlogit = std::max(max_dlogit, a.max_dlogit);
    const Forced f = teacher_force(model, prompt, res, tol);
    forced_steps += f.steps;
    forced_argmax += f.argmax_agree;
    max_forced_gap = std::max(max_forced_gap, f.max_gap);
  }
};

}  // namespace pagellm::test

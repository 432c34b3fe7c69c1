#include "spec/ngram_proposer.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"

namespace pagellm {
namespace {

using V = std::vector<int32_t>;

TEST(NgramProposer, CopiesWhatFollowedTheLongestMostRecentMatch) {
  // Suffix [7 8]: its 2-gram occurs at 1 and 5; the most recent (5) is followed by 3 4.
  const V t = {1, 7, 8, 9, 9, 7, 8, 3, 4, 5, 7, 8};
  EXPECT_EQ(propose_ngram(t, {1, 4}, 2), (V{3, 4}));
  EXPECT_EQ(propose_ngram(t, {1, 4}, 10), (V{3, 4, 5, 7, 8}));  // stops at the sequence's end
  // A longer match beats a more recent shorter one: [5 6 2] matches at 0, [6 2] alone at 4.
  const V u = {5, 6, 2, 11, 6, 2, 12, 5, 6, 2};
  EXPECT_EQ(propose_ngram(u, {1, 3}, 1), (V{11}));
  EXPECT_EQ(propose_ngram(u, {1, 2}, 1), (V{12}));
}

TEST(NgramProposer, NoMatchNoProposal) {
  EXPECT_TRUE(propose_ngram(V{1, 2, 3, 4}, {1, 4}, 5).empty());
  EXPECT_TRUE(propose_ngram(V{1}, {1, 4}, 5).empty());
  EXPECT_TRUE(propose_ngram(V{}, {1, 4}, 5).empty());
  EXPECT_TRUE(propose_ngram(V{3, 3}, {1, 4}, 0).empty());
  // ngram_min = 2: the single-token match [.. 2 .. 2] is not enough.
  EXPECT_TRUE(propose_ngram(V{2, 9, 2}, {2, 4}, 3).empty());
  EXPECT_EQ(propose_ngram(V{2, 9, 2}, {1, 4}, 3), (V{9, 2}));
}

TEST(NgramProposer, ARepeatingCycleIsContinued) {
  // Overlapping match: the proposal may run into the suffix itself.
  EXPECT_EQ(propose_ngram(V{4, 4, 4}, {1, 4}, 3), (V{4}));
  EXPECT_EQ(propose_ngram(V{1, 2, 1, 2, 1}, {1, 4}, 4), (V{2, 1}));
}

TEST(NgramProposer, BadParamsAreRefused) {
  EXPECT_THROW(propose_ngram(V{1, 1}, {0, 4}, 2), Error);
  EXPECT_THROW(propose_ngram(V{1, 1}, {3, 2}, 2), Error);
}

TEST(NgramProposer, MatchesABruteForceOracleOnRandomSequences) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int len = static_cast<int>(rng() % 40);
    V t(len);
    for (auto& x : t) x = static_cast<int32_t>(rng() % 4);
    const NgramParams p{1 + static_cast<int32_t>(rng() % 3), 0};
    const NgramParams q{p.ngram_min, p.ngram_min + static_cast<int32_t>(rng() % 4)};
    const auto k = static_cast<int32_t>(rng() % 6);
    // Oracle: every (n, s) pair, scored by (n, s), best wins.
    V want;
    int best_n = 0, best_s = -1;
    for (int n = q.ngram_min; n <= q.ngram_max && n < len; ++n) {
      for (int s = 0; s + n < len; ++s) {
        bool eq = true;
        for (int i = 0; i < n; ++i) eq = eq && t[s + i] == t[len - n + i];
        if (eq && (n > best_n || (n == best_n && s > best_s))) best_n = n, best_s = s;
      }
    }
    if (best_n > 0 && k > 0) want.assign(t.begin() + best_s + best_n, t.begin() + std::min(len, best_s + best_n + k));
    ASSERT_EQ(propose_ngram(t, q, k), want) << "trial " << trial;
  }
}

}  // namespace
}  // namespace pagellm

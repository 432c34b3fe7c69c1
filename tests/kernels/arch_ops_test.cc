// The ops of arch_ops.cc: rope_cos_sin_scaled (Llama 3.1 rope_freqs), rope_neox (pairs i, i + n/2)
// and gelu_tanh_mul (GeGLU), against their formulas and against the NORM rope they derive from.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels_test_util.h"

namespace pagellm::kernels {
namespace {

using testing::kEps;
using testing::Rng;

// Without factors: rope_cos_sin's bits. With them: cos/sin of (the same recurrence's theta_i) /
// factor_i, one float division, so exactly cosf/sinf of that quotient.
TEST(RopeCosSinScaled, NoFactorsIsRopeCosSinAndFactorsDivideTheAngle) {
  const int64_t n_dims = 32, pos = 70;
  const float base = 500000.0f;
  std::vector<float> plain(n_dims), same(n_dims), scaled(n_dims);
  rope_cos_sin(n_dims, pos, base, plain.data());
  rope_cos_sin_scaled(n_dims, pos, base, nullptr, same.data());
  EXPECT_EQ(std::memcmp(plain.data(), same.data(), n_dims * 4), 0);
  // The factors of llama3-s11 (Llama 3.2's rope scaling): 8 x 1, one smooth value, 7 x 32.
  std::vector<float> ff(n_dims / 2, 32.0f);
  for (int i = 0; i < 8; ++i) ff[i] = 1.0f;
  ff[8] = 3.29226255f;
  rope_cos_sin_scaled(n_dims, pos, base, ff.data(), scaled.data());
  const float theta_scale = std::pow(base, -2.0f / static_cast<float>(n_dims));
  float theta = static_cast<float>(pos);
  for (int64_t i = 0; i < n_dims / 2; ++i) {
    EXPECT_EQ(scaled[2 * i], std::cos(theta / ff[i])) << i;
    EXPECT_EQ(scaled[2 * i + 1], std::sin(theta / ff[i])) << i;
    if (ff[i] == 1.0f) {
      EXPECT_EQ(scaled[2 * i], plain[2 * i]) << i;
    }
    theta *= theta_scale;
  }
}

// NEOX rotates (x[i], x[i + n/2]) by theta_i: the NORM rope of the vector with those elements made
// adjacent, bit for bit (the same two products and one add per element); dims >= n_dims untouched.
TEST(RopeNeox, IsNormRopeOfThePairedPermutation) {
  Rng rng(31);
  struct Case {
    int64_t heads, head_dim, n_dims, pos;
  };
  for (const Case c : {Case{1, 8, 8, 0}, Case{8, 32, 32, 5}, Case{2, 64, 64, 4000}, Case{3, 128, 64, 17}}) {
    const std::vector<float> x = rng.vec(c.heads * c.head_dim);
    std::vector<float> cos_sin(c.n_dims);
    rope_cos_sin(c.n_dims, c.pos, 1e6f, cos_sin.data());
    std::vector<float> neox = x, perm = x;
    const int64_t half = c.n_dims / 2;
    for (int64_t h = 0; h < c.heads; ++h) {
      for (int64_t i = 0; i < half; ++i) {
        perm[h * c.head_dim + 2 * i] = x[h * c.head_dim + i];
        perm[h * c.head_dim + 2 * i + 1] = x[h * c.head_dim + i + half];
      }
    }
    rope_neox(neox.data(), c.heads, c.head_dim, c.n_dims, cos_sin.data());
    rope(perm.data(), c.heads, c.head_dim, c.n_dims, cos_sin.data());
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t o = h * c.head_dim;
      for (int64_t i = 0; i < half; ++i) {
        EXPECT_EQ(neox[o + i], perm[o + 2 * i]) << "head " << h << " i " << i;
        EXPECT_EQ(neox[o + i + half], perm[o + 2 * i + 1]) << "head " << h << " i " << i;
      }
      for (int64_t i = c.n_dims; i < c.head_dim; ++i) EXPECT_EQ(neox[o + i], x[o + i]);
    }
  }
}

// gelu_tanh in double, rounded once (<= 0.5 ulp of the double value), then times up (one more
// rounding): within 2 eps relative of the double formula; exact limits at 0 and +-large.
TEST(GeluTanhMul, MatchesTheTanhFormula) {
  Rng rng(32);
  const int64_t n = 4096;
  std::vector<float> g = rng.vec(n, -12.0f, 12.0f), u = rng.vec(n);
  g[0] = 0.0f, g[1] = 50.0f, g[2] = -50.0f, g[3] = 1e-30f;
  std::vector<float> out(n), inplace = g;
  gelu_tanh_mul(g.data(), u.data(), n, out.data());
  gelu_tanh_mul(inplace.data(), u.data(), n, inplace.data());
  EXPECT_EQ(std::memcmp(out.data(), inplace.data(), n * 4), 0);
  for (int64_t i = 0; i < n; ++i) {
    const double x = g[i];
    const double e = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))) * u[i];
    EXPECT_NEAR(out[i], e, 2 * kEps * std::fabs(e) + 1e-37) << i << " x " << x;
  }
  EXPECT_EQ(gelu_tanh(0.0f), 0.0f);
  EXPECT_EQ(gelu_tanh(50.0f), 50.0f);
  EXPECT_EQ(gelu_tanh(-50.0f), -0.0f);
  EXPECT_NEAR(gelu_tanh(1.0f), 0.8411920, 1e-6);  // 0.5 (1 + tanh(0.7978846 * 1.044715))
}

}  // namespace
}  // namespace pagellm::kernels

// rms_norm (one row and several), rope, silu_mul, softmax: fast == reference bit for bit (they share arithmetic), and
// the reference against the formulas evaluated independently in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

#include "kernels_test_util.h"

namespace pagellm::kernels {
namespace {

using testing::kEps;
using testing::make_weights;
using testing::Rng;
using testing::TestWeights;

TEST(RmsNorm, MatchesFormulaAndFastIsBitIdentical) {
  Rng rng(11);
  for (int64_t n : {1, 7, 64, 2080}) {
    const std::vector<float> x = rng.vec(n, -3.0f, 3.0f), w = rng.vec(n, 0.5f, 1.5f);
    std::vector<float> ref(n), fast(n), inplace = x;
    rms_norm_ref(x.data(), w.data(), n, 1e-5f, ref.data());
    rms_norm(x.data(), w.data(), n, 1e-5f, fast.data());
    rms_norm(inplace.data(), w.data(), n, 1e-5f, inplace.data());  // out may alias x
    EXPECT_EQ(std::memcmp(ref.data(), fast.data(), n * 4), 0);
    EXPECT_EQ(std::memcmp(ref.data(), inplace.data(), n * 4), 0);
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double scale = 1.0 / std::sqrt(ss / n + 1e-5);
    // float: mean, +eps, sqrt, divide, two multiplies: ~6 roundings.
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(ref[i], x[i] * scale * w[i], 6 * kEps * std::fabs(x[i] * scale * w[i]));
  }
}

// ggml computes theta iteratively in float: theta_0 = pos, theta_{i+1} = theta_i * theta_scale.
// Recompute that sequence here, rotate in double, and compare to within a few roundings of the
// rotation (cos/sin of float theta are correctly rounded to < 1 ulp by libm).
// RMSNorm of several rows (four sums of squares interleaved), fused with the q8_0 quantization,
// gives the bits of the two ops apart, for rows picked out of order and for counts around the
// four-row groups; and those blocks fed to matmul as `xq` give the bits of matmul quantizing x
// itself (every ISA path, repacked and GGUF-layout weights, several token counts).
TEST(RmsNormRows, EqualsNormThenQuantizeAndFeedsMatmulTheSameBits) {
  Rng rng(15);
  ThreadPool pool(2);
  Workspace ws;
  for (int64_t n : {32, 96, 2048}) {
    for (int64_t tokens : {1, 3, 4, 5, 9, 17}) {
      SCOPED_TRACE("n " + std::to_string(n) + " tokens " + std::to_string(tokens));
      const std::vector<float> x = rng.vec(tokens * n, -4.0f, 4.0f), w = rng.vec(n, 0.5f, 1.5f);
      std::vector<float> xn(x.size()), xn_fused(x.size());
      std::vector<BlockQ8_0> want(tokens * n / 32), got(tokens * n / 32);
      for (int64_t t = 0; t < tokens; ++t) rms_norm(&x[t * n], w.data(), n, 1e-5f, &xn[t * n]);
      for (int64_t t = 0; t < tokens; ++t) quantize_row_q8_0_activations(&xn[t * n], n, &want[t * n / 32]);
      rms_norm_rows(x.data(), nullptr, tokens, w.data(), n, 1e-5f, xn_fused.data(), got.data(), default_isa());
      ASSERT_EQ(std::memcmp(xn.data(), xn_fused.data(), xn.size() * 4), 0);
      ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(BlockQ8_0)), 0);
      // Rows by index (reversed, every other one repeated), without the quantization.
      std::vector<int64_t> rows;
      for (int64_t t = tokens - 1; t >= 0; --t) rows.push_back(t);
      for (int64_t t = 0; t < tokens; t += 2) rows.push_back(t);
      std::vector<float> picked(rows.size() * n, -1.0f);
      rms_norm_rows(x.data(), rows.data(), static_cast<int64_t>(rows.size()), w.data(), n, 1e-5f, picked.data(),
                    nullptr, default_isa());
      for (size_t j = 0; j < rows.size(); ++j) {
        ASSERT_EQ(std::memcmp(&picked[j * n], &xn[rows[j] * n], n * 4), 0) << "row " << j;
      }
      for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::F16}) {
        const TestWeights tw = make_weights(type, 48, n, rng);
        std::vector<uint8_t> packed(static_cast<size_t>(48 * tw.view().row_bytes()));
        for (Isa isa : usable_isas()) {
          WeightView gguf = tw.view();
          gguf.isa = isa;
          for (bool repack : {false, true}) {
            if (repack && !repack_pays(gguf)) continue;
            const WeightView v = repack ? repack_weight(gguf, packed.data(), &pool) : gguf;
            std::vector<float> y0(tokens * 48), y1(tokens * 48);
            matmul(v, xn.data(), tokens, y0.data(), &pool, ws);
            matmul(v, xn.data(), tokens, y1.data(), &pool, ws, got.data());
            ASSERT_EQ(std::memcmp(y0.data(), y1.data(), y0.size() * 4), 0)
                << type_name(type) << (repack ? " repacked " : " ") << isa_name(isa);
            // And the blocks are what the quantized matmuls read (all-zero blocks: y = 0), while
            // float weights ignore them.
            const std::vector<BlockQ8_0> zero(got.size(), BlockQ8_0{});
            matmul(v, xn.data(), tokens, y1.data(), &pool, ws, zero.data());
            for (size_t i = 0; i < y1.size(); ++i) {
              ASSERT_EQ(y1[i], type == GgmlType::F16 ? y0[i] : 0.0f) << type_name(type) << " " << i;
            }
          }
        }
      }
    }
  }
}

TEST(Rope, MatchesGgmlThetaRecurrenceAndFastIsBitIdentical) {
  Rng rng(12);
  struct Case {
    int64_t heads, head_dim, n_dims, pos;
    float base;
  };
  for (const Case c : {Case{1, 8, 8, 0, 10000.0f}, Case{3, 64, 64, 17, 10000.0f}, Case{2, 80, 32, 513, 500000.0f},
                       Case{4, 128, 128, 4095, 10000.0f}, Case{2, 128, 64, 3, 1e6f}}) {
    const std::vector<float> x = rng.vec(c.heads * c.head_dim);
    std::vector<float> ref = x, fast = x;
    rope_ref(ref.data(), c.heads, c.head_dim, c.n_dims, c.pos, c.base);
    std::vector<float> cos_sin(c.n_dims);
    rope_cos_sin(c.n_dims, c.pos, c.base, cos_sin.data());
    rope(fast.data(), c.heads, c.head_dim, c.n_dims, cos_sin.data());
    ASSERT_EQ(std::memcmp(ref.data(), fast.data(), ref.size() * 4), 0);
    const float theta_scale = std::pow(c.base, -2.0f / static_cast<float>(c.n_dims));
    for (int64_t h = 0; h < c.heads; ++h) {
      float theta = static_cast<float>(c.pos);
      for (int64_t i = 0; i < c.head_dim; i += 2) {
        const int64_t k = h * c.head_dim + i;
        if (i >= c.n_dims) {  // untouched tail
          EXPECT_EQ(ref[k], x[k]);
          EXPECT_EQ(ref[k + 1], x[k + 1]);
          continue;
        }
        const double cs = std::cos(static_cast<double>(theta)), sn = std::sin(static_cast<double>(theta));
        const double e0 = x[k] * cs - x[k + 1] * sn, e1 = x[k] * sn + x[k + 1] * cs;
        const double tol = 4 * kEps * (std::fabs(x[k]) + std::fabs(x[k + 1]));
        EXPECT_NEAR(ref[k], e0, tol) << "head " << h << " i " << i;
        EXPECT_NEAR(ref[k + 1], e1, tol) << "head " << h << " i " << i;
        theta *= theta_scale;
      }
    }
  }
}

// Against the exact angle pos * base^(-2i/n): the float recurrence drifts by ~i roundings of a
// value <= pos, so at small positions the two agree closely.
TEST(Rope, CloseToExactAngleAtSmallPositions) {
  const int64_t head_dim = 64, pos = 5;
  std::vector<float> x(head_dim);
  for (int64_t i = 0; i < head_dim; i += 2) x[i] = 1.0f, x[i + 1] = 0.0f;  // rotates (1, 0)
  rope_ref(x.data(), 1, head_dim, head_dim, pos, 10000.0f);
  for (int64_t i = 0; i < head_dim; i += 2) {
    const double theta = pos * std::pow(10000.0, -static_cast<double>(i) / head_dim);
    EXPECT_NEAR(x[i], std::cos(theta), 1e-5) << i;
    EXPECT_NEAR(x[i + 1], std::sin(theta), 1e-5) << i;
  }
}

TEST(SiluMul, MatchesFormulaAndEveryIsaIsBitIdentical) {
  Rng rng(13);
  const int64_t n = 2083;  // not a multiple of 8: the AVX2 loop's scalar tail runs too
  std::vector<float> g = rng.vec(n, -20.0f, 20.0f), u = rng.vec(n);
  // Edges: 0, far out on both sides, around exp's limit (-g = 88), and non-finite gates.
  const float edges[] = {0.0f,
                         -100.0f,
                         100.0f,
                         -87.99f,
                         -88.0f,
                         -88.01f,
                         -88.5f,
                         -89.0f,
                         -1e30f,
                         1e30f,
                         -1e-40f,
                         1e-40f,
                         -0.0f,
                         std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN()};
  for (size_t i = 0; i < std::size(edges); ++i) g[i * 9] = edges[i];  // lanes 0, 1, 2, ... of 8
  std::vector<float> ref(n);
  silu_mul_ref(g.data(), u.data(), n, ref.data());
  for (Isa isa : usable_isas()) {
    std::vector<float> fast(n), inplace = g;
    silu_mul(g.data(), u.data(), n, fast.data(), isa);
    silu_mul(inplace.data(), u.data(), n, inplace.data(), isa);
    EXPECT_EQ(std::memcmp(ref.data(), fast.data(), n * 4), 0) << isa_name(isa);
    EXPECT_EQ(std::memcmp(ref.data(), inplace.data(), n * 4), 0) << isa_name(isa);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(g[i])) {
      EXPECT_TRUE(std::isnan(ref[i])) << i;
      continue;
    }
    // The limits: silu(+inf) = +inf, silu(-inf) = 0.
    const double gi = g[i];
    const double e = std::isinf(gi) ? (gi > 0 ? gi : 0.0) * u[i] : gi / (1.0 + std::exp(-gi)) * u[i];
    // exp_f32 ~1 ulp, then add, divide, multiply: 4 roundings (relative); below 1e-30 (the
    // -0 for g < -88, whose true value is < 1e-36) absolute.
    if (std::isinf(e)) {
      EXPECT_EQ(ref[i], e) << i;
    } else {
      EXPECT_NEAR(ref[i], e, 4 * kEps * std::fabs(e) + 1e-30) << i << " g " << g[i];
    }
  }
}

TEST(Softmax, MatchesFormulaAndFastIsBitIdentical) {
  Rng rng(14);
  for (int64_t n : {1, 5, 100, 4096}) {
    std::vector<float> x = rng.vec(n, -30.0f, 30.0f);
    std::vector<float> ref = x, fast = x;
    softmax_ref(ref.data(), n);
    softmax(fast.data(), n);
    ASSERT_EQ(std::memcmp(ref.data(), fast.data(), n * 4), 0);
    double mx = -1e300, sum = 0;
    for (float v : x) mx = std::max(mx, static_cast<double>(v));
    for (float v : x) sum += std::exp(v - mx);
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double e = std::exp(x[i] - mx) / sum;
      // x - max rounds by up to |x - max| eps / 2 absolute, i.e. that much relative after exp;
      // then expf, (float)(1 / sum), multiply: a few more roundings.
      EXPECT_NEAR(ref[i], e, (4 + std::fabs(x[i] - mx)) * kEps * e + 1e-30) << i;
      total += ref[i];
    }
    EXPECT_NEAR(total, 1.0, n * kEps);
  }
}

// The bandwidth probe's sum reads every element exactly once, whatever the ISA, prefetch
// distance and number of streams, and for lengths that leave the AVX2 loop a scalar tail (and
// two streams parts of unequal use). Small integers, so every order of additions gives the exact
// sum (< 2^24) and one element lost or read twice shows.
TEST(StreamSum, SumsEveryElementOnEveryIsaPrefetchDistanceAndStreams) {
  Rng rng(29);
  for (const int64_t n : {0, 1, 31, 63, 64, 65, 127, 1000, 4099}) {
    std::vector<float> x = rng.vec(n, 1.0f, 16.0f);
    double exact = 0;
    for (float& v : x) exact += (v = std::floor(v));
    for (Isa isa : usable_isas()) {
      for (const int64_t ahead : {0, 1024, 8192}) {
        for (const int streams : {1, 2}) {
          EXPECT_EQ(stream_sum(x.data(), n, isa, ahead, streams), exact)
              << "n " << n << " " << isa_name(isa) << " ahead " << ahead << " streams " << streams;
        }
      }
    }
  }
}

}  // namespace
}  // namespace pagellm::kernels

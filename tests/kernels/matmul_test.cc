// matmul: fast vs reference vs an independent double-precision dot, for every weight dtype and
// awkward shapes; scalar fallback; batch and thread-count invariance as bit equality.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/kernels_impl.h"
#include "kernels_test_util.h"

namespace pagellm::kernels {
namespace {

using testing::is_quant;
using testing::kEps;
using testing::make_weights;
using testing::Rng;
using testing::TestWeights;

std::string name_of(GgmlType t) { return type_name(t); }

// Dequantized q8_0 copy of an activation row (what the quantized kernels actually multiply).
std::vector<float> q8_roundtrip(const float* x, int64_t n) {
  std::vector<BlockQ8_0> q(static_cast<size_t>(n / 32));
  quantize_row_q8_0(x, n, q.data());
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(GgmlType::Q8_0, q.data(), n, out.data());
  return out;
}

struct Exact {
  double value;  // sum_c w[r,c] * x'[c] in double (x' = x, or its q8_0 round trip)
  double abs;    // sum_c |w[r,c] * x'[c]|, the scale of every rounding error
};

Exact exact_dot(const TestWeights& w, int64_t r, const float* x) {
  Exact e{0.0, 0.0};
  for (int64_t c = 0; c < w.cols; ++c) {
    const double p = static_cast<double>(w.dequant[r * w.cols + c]) * x[c];
    e.value += p;
    e.abs += std::fabs(p);
  }
  return e;
}

class MatmulTest : public ::testing::TestWithParam<GgmlType> {};

// Tolerances. Float weights: the AVX2 kernel sums each of 8 lanes x 4 accumulators over
// cols / 32 terms, then 3 + 3 reduction adds and a scalar tail of < 32 terms: every term goes
// through at most cols / 32 + 40 float roundings, so |fast - exact| <= (cols / 32 + 40) eps S with
// S = sum |w x|; the double-accumulated reference is within eps |exact| + tiny. Quantized: integer
// block sums are exact in both; the nb scaled block sums are added in float (reference: one chain
// of nb adds; AVX2: 2 accumulators x 8 lanes, then 4 reduction adds), so both are within
// (nb + 16) eps S of the exact sum of the same products.
TEST_P(MatmulTest, FastMatchesReferenceAndExact) {
  const GgmlType type = GetParam();
  Rng rng(1234);
  ThreadPool pool(2);
  std::vector<int64_t> col_sizes = {32, 64, 96, 2080};
  if (!is_quant(type)) col_sizes.insert(col_sizes.end(), {7, 33, 100});
  for (int64_t cols : col_sizes) {
    for (int64_t rows : {1, 7, 33, 100}) {
      const TestWeights w = make_weights(type, rows, cols, rng);
      for (int64_t num_tokens : {1, 3, 17}) {
        SCOPED_TRACE(name_of(type) + " rows " + std::to_string(rows) + " cols " + std::to_string(cols) + " tokens " +
                     std::to_string(num_tokens));
        const std::vector<float> x = rng.vec(num_tokens * cols);
        std::vector<float> y_ref(num_tokens * rows), y_fast(num_tokens * rows), y_fast_st(num_tokens * rows);
        matmul_ref(w.view(), x.data(), num_tokens, y_ref.data());
        matmul(w.view(), x.data(), num_tokens, y_fast.data(), &pool);
        matmul(w.view(), x.data(), num_tokens, y_fast_st.data(), nullptr);
        ASSERT_EQ(std::memcmp(y_fast.data(), y_fast_st.data(), y_fast.size() * 4), 0) << "thread count changed bits";
        const int64_t terms = is_quant(type) ? cols / 32 + 16 : cols / 32 + 40;
        for (int64_t t = 0; t < num_tokens; ++t) {
          std::vector<float> xt = is_quant(type) ? q8_roundtrip(x.data() + t * cols, cols)
                                                 : std::vector<float>(x.begin() + t * cols, x.begin() + (t + 1) * cols);
          // F16 / BF16 weights see activations rounded to their own type (ggml's vec_dot_type).
          for (float& v : xt) {
            if (type == GgmlType::F16) v = fp16_to_fp32(fp32_to_fp16(v));
            if (type == GgmlType::BF16) v = bf16_to_fp32(fp32_to_bf16(v));
          }
          for (int64_t r = 0; r < rows; ++r) {
            const Exact e = exact_dot(w, r, xt.data());
            const double tol = terms * kEps * e.abs + 1e-30;
            const float ref = y_ref[t * rows + r], fast = y_fast[t * rows + r];
            ASSERT_NEAR(ref, e.value, tol) << "t " << t << " r " << r;
            ASSERT_NEAR(fast, e.value, tol) << "t " << t << " r " << r;
            ASSERT_NEAR(fast, ref, 2 * tol) << "t " << t << " r " << r;
          }
        }
      }
    }
  }
}

// Without AVX2 the fast entry point runs the reference dot products: bit-identical.
TEST_P(MatmulTest, ScalarFallbackEqualsReference) {
  const GgmlType type = GetParam();
  Rng rng(99);
  ThreadPool pool(3);
  const int64_t cols = 96, rows = 33, num_tokens = 5;
  const TestWeights w = make_weights(type, rows, cols, rng);
  const std::vector<float> x = rng.vec(num_tokens * cols);
  std::vector<float> y_ref(num_tokens * rows), y(num_tokens * rows);
  matmul_ref(w.view(), x.data(), num_tokens, y_ref.data());
  {
    testing::ScopedNoSimd no_simd;
    matmul(w.view(), x.data(), num_tokens, y.data(), &pool);
  }
  EXPECT_EQ(std::memcmp(y.data(), y_ref.data(), y.size() * 4), 0);
}

// The row of token `t` is bit-identical whether it is computed alone, inside batches of 3, 8 or 17
// with other random rows (at every position of the 4-token tiles), or with 1, 2 or 3 threads.
TEST_P(MatmulTest, BatchAndThreadInvariance) {
  const GgmlType type = GetParam();
  Rng rng(2024);
  ThreadPool pool2(2), pool3(3);
  std::vector<int64_t> col_sizes = {96, 2080};
  if (!is_quant(type)) col_sizes.push_back(100);
  for (int64_t cols : col_sizes) {
    const int64_t rows = 33;
    const TestWeights w = make_weights(type, rows, cols, rng);
    const std::vector<float> probe = rng.vec(cols);
    std::vector<float> solo(rows);
    matmul(w.view(), probe.data(), 1, solo.data(), nullptr);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
      std::vector<float> again(rows);
      matmul(w.view(), probe.data(), 1, again.data(), pool);
      ASSERT_EQ(std::memcmp(again.data(), solo.data(), rows * 4), 0);
      for (int64_t batch : {3, 8, 17}) {
        for (int64_t at = 0; at < batch; at += (batch == 17 ? 5 : 1)) {
          std::vector<float> x = rng.vec(batch * cols, -2.0f, 2.0f);
          std::memcpy(x.data() + at * cols, probe.data(), cols * 4);
          std::vector<float> y(batch * rows);
          matmul(w.view(), x.data(), batch, y.data(), pool);
          ASSERT_EQ(std::memcmp(y.data() + at * rows, solo.data(), rows * 4), 0)
              << name_of(type) << " cols " << cols << " batch " << batch << " at " << at;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTest,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0),
                         [](const ::testing::TestParamInfo<GgmlType>& info) { return type_name(info.param); });

// The AVX-512 VNNI quantized kernels produce exactly the AVX2 kernels' bits (both follow ggml's
// lane structure with exact integer lane sums), for odd and even block counts, every tile size
// 1..8 and 1 or 2 threads.
TEST(Matmul, Avx512VnniEqualsAvx2Bitwise) {
  if (!cpu_has_avx512_vnni()) GTEST_SKIP() << "no AVX-512 VNNI";
  Rng rng(77);
  ThreadPool pool(2);
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0}) {
    for (int64_t cols : {32, 64, 96, 288, 2080}) {
      const int64_t rows = 37;
      const TestWeights w = make_weights(type, rows, cols, rng);
      for (int64_t num_tokens : {1, 2, 5, 8, 9, 19}) {
        SCOPED_TRACE(name_of(type) + " cols " + std::to_string(cols) + " tokens " + std::to_string(num_tokens));
        std::vector<float> x = rng.vec(num_tokens * cols, -3.0f, 3.0f);
        for (int64_t c = 0; c < cols; c += 7) x[c] = 0.0f;  // zero blocks' neighbours, sparse values
        std::vector<float> y512(num_tokens * rows), y2(num_tokens * rows);
        matmul(w.view(), x.data(), num_tokens, y512.data(), &pool);
        set_avx512_enabled(false);
        matmul(w.view(), x.data(), num_tokens, y2.data(), nullptr);
        set_avx512_enabled(true);
        ASSERT_EQ(std::memcmp(y512.data(), y2.data(), y2.size() * 4), 0);
      }
    }
  }
}

// Repacked Q8_0/Q4_0 weights (16-row tiles + GGUF-layout tail rows) give exactly the scalar
// block-sum reference (ref::dot_*_blocksum on the activations quantized as matmul does), for
// every tile size, 1 and 2 threads, on the AVX-512 VNNI tiles (where the CPU has them) and on
// the AVX2 tiles; and stay close to the GGUF-layout kernels.
TEST(Matmul, RepackedEqualsBlockSumReference) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2: the repacked layout is never made";
  Rng rng(78);
  ThreadPool pool(2);
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0}) {
    for (int64_t rows : {16, 37, 64}) {
      for (int64_t cols : {256, 288, 2080}) {
        const TestWeights w = make_weights(type, rows, cols, rng);
        ASSERT_TRUE(repack_pays(w.view()));
        std::vector<uint8_t> packed(static_cast<size_t>(rows * w.view().row_bytes()));
        const WeightView pv = repack_weight(w.view(), packed.data(), &pool);
        ASSERT_EQ(pv.layout, WeightLayout::kRepacked16);
        ASSERT_FALSE(repack_pays(pv));
        const int64_t nb = cols / 32;
        for (int64_t num_tokens : {1, 2, 5, 8, 9, 19}) {
          SCOPED_TRACE(name_of(type) + " rows " + std::to_string(rows) + " cols " + std::to_string(cols) + " tokens " +
                       std::to_string(num_tokens));
          std::vector<float> x = rng.vec(num_tokens * cols, -3.0f, 3.0f);
          std::vector<BlockQ8_0> xq(num_tokens * nb);
          for (int64_t t = 0; t < num_tokens; ++t) quantize_row_q8_0_activations(&x[t * cols], cols, &xq[t * nb]);
          std::vector<float> want(num_tokens * rows), y2(num_tokens * rows), y1(num_tokens * rows), yg(num_tokens * rows);
          const auto* raw = static_cast<const uint8_t*>(w.view().data);
          for (int64_t t = 0; t < num_tokens; ++t) {
            for (int64_t r = 0; r < rows; ++r) {
              const uint8_t* row = raw + r * w.view().row_bytes();
              want[t * rows + r] =
                  type == GgmlType::Q4_0
                      ? ref::dot_q4_0_q8_0_blocksum(reinterpret_cast<const BlockQ4_0*>(row), &xq[t * nb], nb)
                      : ref::dot_q8_0_q8_0_blocksum(reinterpret_cast<const BlockQ8_0*>(row), &xq[t * nb], nb);
            }
          }
          for (bool avx512 : {true, false}) {
            if (avx512 && !cpu_has_avx512_vnni()) continue;
            SCOPED_TRACE(avx512 ? "AVX-512 VNNI tiles" : "AVX2 tiles");
            set_avx512_enabled(avx512);
            matmul(pv, x.data(), num_tokens, y2.data(), &pool);
            matmul(pv, x.data(), num_tokens, y1.data(), nullptr);
            set_avx512_enabled(true);
            ASSERT_EQ(std::memcmp(y2.data(), want.data(), want.size() * 4), 0);
            ASSERT_EQ(std::memcmp(y1.data(), want.data(), want.size() * 4), 0);
          }
          matmul(w.view(), x.data(), num_tokens, yg.data(), nullptr);  // lane-wise arithmetic
          for (size_t i = 0; i < yg.size(); ++i) ASSERT_NEAR(y1[i], yg[i], 1e-4f * (1.0f + std::fabs(yg[i]))) << i;
        }
      }
    }
  }
}

// Repacked F32/F16/BF16 weights give exactly the sequential reference (one FMA chain per output
// over the activations rounded as matmul does) for every token count (so the result is batch
// invariant), 1 and 2 threads, on the AVX-512 tiles (where the CPU has them) and the AVX2 tiles,
// with tail rows in GGUF layout, K chunks, odd column counts, and the f32-converted chunks of
// prefill-sized calls (more than 24 / 30 tokens); and stay close to the GGUF-layout (16-lane)
// kernels.
TEST(Matmul, RepackedFloatEqualsSequentialReference) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2: the repacked layout is never made";
  Rng rng(81);
  ThreadPool pool(2);
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    for (int64_t rows : {16, 37, 80}) {
      for (int64_t cols : {256, 301, 1030}) {
        const TestWeights w = make_weights(type, rows, cols, rng);
        ASSERT_TRUE(repack_pays(w.view()));
        std::vector<uint8_t> packed(static_cast<size_t>(rows * w.view().row_bytes()));
        const WeightView pv = repack_weight(w.view(), packed.data(), &pool);
        ASSERT_EQ(pv.layout, WeightLayout::kRepacked16);
        ASSERT_FALSE(repack_pays(pv));
        for (int64_t num_tokens : {1, 2, 3, 4, 5, 6, 7, 13, 19, 25, 37}) {
          SCOPED_TRACE(name_of(type) + " rows " + std::to_string(rows) + " cols " + std::to_string(cols) + " tokens " +
                       std::to_string(num_tokens));
          std::vector<float> x = rng.vec(num_tokens * cols, -3.0f, 3.0f);
          std::vector<float> xr(cols), want(num_tokens * rows), y2(num_tokens * rows), y1(num_tokens * rows),
              yg(num_tokens * rows);
          const auto* raw = static_cast<const uint8_t*>(w.view().data);
          for (int64_t t = 0; t < num_tokens; ++t) {
            round_activations(type, &x[t * cols], cols, xr.data());
            for (int64_t r = 0; r < rows; ++r) {
              const uint8_t* row = raw + r * w.view().row_bytes();
              want[t * rows + r] =
                  type == GgmlType::F32   ? ref::dot_f32_seq(reinterpret_cast<const float*>(row), 1, xr.data(), cols)
                  : type == GgmlType::F16 ? ref::dot_f16_seq(reinterpret_cast<const uint16_t*>(row), 1, xr.data(), cols)
                                          : ref::dot_bf16_seq(reinterpret_cast<const uint16_t*>(row), 1, xr.data(), cols);
            }
          }
          for (bool avx512 : {true, false}) {
            if (avx512 && !cpu_has_avx512_vnni()) continue;
            SCOPED_TRACE(avx512 ? "AVX-512 tiles" : "AVX2 tiles");
            set_avx512_enabled(avx512);
            matmul(pv, x.data(), num_tokens, y2.data(), &pool);
            matmul(pv, x.data(), num_tokens, y1.data(), nullptr);
            set_avx512_enabled(true);
            ASSERT_EQ(std::memcmp(y2.data(), want.data(), want.size() * 4), 0);
            ASSERT_EQ(std::memcmp(y1.data(), want.data(), want.size() * 4), 0);
          }
          matmul(w.view(), x.data(), num_tokens, yg.data(), nullptr);  // 16-lane arithmetic
          for (size_t i = 0; i < yg.size(); ++i) ASSERT_NEAR(y1[i], yg[i], 1e-4f * (1.0f + std::fabs(yg[i]))) << i;
        }
      }
    }
  }
}

// Layouts that cannot be repacked, or read, stop the program (programming errors, PAGELLM_CHECK).
TEST(Matmul, RepackRefusesOtherTypesAndLayouts) {
  Rng rng(79);
  const TestWeights f16 = make_weights(GgmlType::F16, 4, 256, rng);  // fewer than 16 rows
  EXPECT_FALSE(repack_pays(f16.view()));
  std::vector<uint8_t> buf(4 * 512);
  const WeightView q4_1{GgmlType::Q4_1, 4, 64, buf.data()};
  EXPECT_DEATH(repack_weight(q4_1, buf.data() + 256, nullptr), "has no repacked layout");
  const TestWeights q = make_weights(GgmlType::Q4_0, 4, 64, rng);  // fewer than 16 rows and 256 columns
  EXPECT_FALSE(repack_pays(q.view()));
  EXPECT_FALSE(repack_pays(make_weights(GgmlType::Q4_0, 32, 224, rng).view()));
  if (cpu_has_avx2()) {
    EXPECT_TRUE(repack_pays(make_weights(GgmlType::Q8_0, 16, 256, rng).view()));
    set_repack_enabled(false);
    EXPECT_FALSE(repack_pays(make_weights(GgmlType::Q8_0, 16, 256, rng).view()));
    set_repack_enabled(true);
    EXPECT_TRUE(repack_pays(make_weights(GgmlType::F16, 16, 256, rng).view()));
    EXPECT_FALSE(repack_pays(make_weights(GgmlType::BF16, 16, 255, rng).view()));
    EXPECT_FALSE(repack_pays(make_weights(GgmlType::F32, 15, 256, rng).view()));
  }
  WeightView packed = q.view();
  packed.layout = WeightLayout::kRepacked16;
  EXPECT_DEATH(repack_weight(packed, buf.data(), nullptr), "already repacked");
  std::vector<float> x(64, 1.0f), y(4);
  EXPECT_DEATH(matmul_ref(packed, x.data(), 1, y.data()), "GGUF layout");
}

// F32/F16/BF16 weights on AVX-512 CPUs take 16-lane tiles of up to 4 rows that keep the AVX2
// kernel's accumulators lane for lane: bit-identical, with every tail shape (steps of 32, of 8,
// scalar), every tile size and row remainder.
TEST(Matmul, FloatAvx512EqualsAvx2Bitwise) {
  if (!cpu_has_avx512_vnni()) GTEST_SKIP() << "no AVX-512: the AVX2 float kernels are the only ones";
  Rng rng(80);
  ThreadPool pool(2);
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    for (int64_t cols : {1, 7, 8, 31, 32, 45, 100, 255}) {  // >= 256: the wide arithmetic
      const int64_t rows = 39;
      const TestWeights w = make_weights(type, rows, cols, rng);
      for (int64_t num_tokens : {1, 2, 3, 4, 5, 9}) {
        SCOPED_TRACE(name_of(type) + " cols " + std::to_string(cols) + " tokens " + std::to_string(num_tokens));
        std::vector<float> x = rng.vec(num_tokens * cols, -3.0f, 3.0f);
        std::vector<float> y512(num_tokens * rows), y2(num_tokens * rows);
        matmul(w.view(), x.data(), num_tokens, y512.data(), &pool);
        set_avx512_enabled(false);
        matmul(w.view(), x.data(), num_tokens, y2.data(), nullptr);
        set_avx512_enabled(true);
        ASSERT_EQ(std::memcmp(y512.data(), y2.data(), y2.size() * 4), 0);
      }
    }
  }
}

// F32/F16/BF16 matrices of >= 256 columns: exactly ref::dot_*_wide, on the AVX-512 tiles (where
// the CPU has them) and on the AVX2 tiles, for partial last steps, chunk boundaries, every tile
// size and row remainder, 1 and 2 threads.
TEST(Matmul, WideEqualsWideReference) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2: the wide arithmetic is never used";
  Rng rng(81);
  ThreadPool pool(2);
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    for (int64_t cols : {256, 263, 300, 1040, 2080, 2095}) {
      const int64_t rows = 39;
      const TestWeights w = make_weights(type, rows, cols, rng);
      for (int64_t num_tokens : {1, 2, 5, 6, 7, 13, 25}) {
        SCOPED_TRACE(name_of(type) + " cols " + std::to_string(cols) + " tokens " + std::to_string(num_tokens));
        std::vector<float> x = rng.vec(num_tokens * cols, -3.0f, 3.0f);
        std::vector<float> want(num_tokens * rows), y2(num_tokens * rows), y1(num_tokens * rows), yg(num_tokens * rows);
        std::vector<float> xr(cols);
        const auto* raw = static_cast<const uint8_t*>(w.view().data);
        for (int64_t t = 0; t < num_tokens; ++t) {
          if (type == GgmlType::F32) {
            std::copy(&x[t * cols], &x[t * cols] + cols, xr.begin());
          } else {
            round_activations(type, &x[t * cols], cols, xr.data());
          }
          for (int64_t r = 0; r < rows; ++r) {
            const uint8_t* row = raw + r * w.view().row_bytes();
            want[t * rows + r] = type == GgmlType::F32 ? ref::dot_f32_wide(reinterpret_cast<const float*>(row), xr.data(), cols)
                                 : type == GgmlType::F16
                                     ? ref::dot_f16_wide(reinterpret_cast<const uint16_t*>(row), xr.data(), cols)
                                     : ref::dot_bf16_wide(reinterpret_cast<const uint16_t*>(row), xr.data(), cols);
          }
        }
        matmul(w.view(), x.data(), num_tokens, y2.data(), &pool);
        matmul(w.view(), x.data(), num_tokens, y1.data(), nullptr);
        ASSERT_EQ(std::memcmp(y2.data(), want.data(), want.size() * 4), 0);
        ASSERT_EQ(std::memcmp(y1.data(), want.data(), want.size() * 4), 0);
        set_avx512_enabled(false);  // the AVX2 tiles: the same bits
        matmul(w.view(), x.data(), num_tokens, yg.data(), &pool);
        set_avx512_enabled(true);
        ASSERT_EQ(std::memcmp(yg.data(), want.data(), want.size() * 4), 0) << "AVX2 wide tiles";
      }
    }
  }
}

TEST(Matmul, ReportsSimdAvailability) {
  // Not an assertion: records in the log which path the other tests exercised.
  std::printf("cpu_has_avx2 (avx2+fma+f16c): %d\n", static_cast<int>(cpu_has_avx2()));
  std::printf("cpu_has_avx512_vnni: %d\n", static_cast<int>(cpu_has_avx512_vnni()));
}

}  // namespace
}  // namespace pagellm::kernels

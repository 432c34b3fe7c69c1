// matmul: every ISA and layout vs the scalar oracle (bitwise) vs an independent double-precision
// dot, for every weight dtype and awkward shapes; batch and thread-count invariance as bit
// equality; the repacked layout's refusals and row lookups; the Isa rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/kernel_traits.h"
#include "kernels/cpu/kernels_impl.h"
#include "kernels/cpu/kernels_kq.h"
#include "kernels/cpu/kernels_r16.h"
#include "kernels_test_util.h"

namespace pagellm::kernels {
namespace {

using testing::is_quant;
using testing::kEps;
using testing::make_weights;
using testing::Rng;
using testing::TestWeights;

std::string name_of(GgmlType t) { return type_name(t); }

// Dequantized copy of an activation row in the type the quantized kernels actually multiply
// (q8_0, or q8_K for super-block weights: x = d * q).
std::vector<float> q8_roundtrip(GgmlType weight_type, const float* x, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  if (vec_dot_type(weight_type) == GgmlType::Q8_K) {
    std::vector<BlockQ8_K> q(static_cast<size_t>(n / kQK_K));
    quantize_row_q8_K(x, n, q.data());
    for (int64_t i = 0; i < n; ++i) {
      const BlockQ8_K& b = q[i / kQK_K];
      out[i] = b.d * static_cast<float>(b.qs[i % kQK_K]);
    }
    return out;
  }
  std::vector<BlockQ8_0> q(static_cast<size_t>(n / 32));
  quantize_row_q8_0_activations(x, n, q.data());
  dequantize_row(GgmlType::Q8_0, q.data(), n, out.data());
  return out;
}

// Block size of the weight type's dot product (32, or 256 for the super-block types).
int64_t block_of(GgmlType t) { return type_traits(t).block_size; }

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

// w on `isa`, in GGUF layout or (repack, where repack_pays) repacked into buf.
WeightView on(const TestWeights& w, Isa isa, bool repack, std::vector<uint8_t>& buf) {
  WeightView v = w.view();
  v.isa = isa;
  if (!repack || !repack_pays(v)) return v;
  buf.resize(w.bytes.size());
  return repack_weight(v, buf.data(), nullptr);
}

// Every ISA this CPU has, both layouts, 1 and 2 threads: exactly matmul_ref's bits (one
// arithmetic per weight family, kernel_traits.h), on awkward shapes: rows before, at and after a
// 16-row tile (tail rows in GGUF layout), columns that are not a multiple of a SIMD width, and
// token counts across every token-tile size. matmul_ref itself is within its rounding bound of
// the exact (double) sum of the same products: floats, one chain of cols FMAs, each rounding once
// (<= cols eps S, S = sum |w x|); quantized, exact integer block sums, one rounding of d_w * d_x
// and one FMA per block (<= 2 nb eps S).
TEST_P(MatmulTest, EveryIsaAndLayoutGivesTheOracleBits) {
  const GgmlType type = GetParam();
  Rng rng(1234);
  ThreadPool pool(2);
  Workspace ws;  // one for the whole test: what earlier shapes left in it must not matter
  std::vector<int64_t> col_sizes = {32, 64, 96, 2080};
  // 2080 and 6200: more steps than one K chunk of the float tiles (2048 on AVX-512, 6144 on
  // AVX2; 7 to 31 tokens take the chunked paths), so the chains continue across chunks; at 6200
  // only 31 tokens run 232 rows (several blocks of tiles), to keep the test short.
  if (!is_quant(type)) col_sizes.insert(col_sizes.end(), {7, 33, 100, 172, 6200});
  if (block_of(type) == kQK_K) col_sizes = {256, 512, 2304};
  for (int64_t cols : col_sizes) {
    // 232 rows: 14 tiles (a decode runs them 4 + 4 + 4 + 2 at once on AVX-512) and 8 tail rows;
    // 121: 7 tiles, for F16 and BF16 a group of 4 and one of 3 (tile_place), and 9 tail rows.
    for (int64_t rows : {1, 7, 16, 33, 121, 232}) {
      if (rows == 232 && cols < 2000) continue;
      const TestWeights w = make_weights(type, rows, cols, rng);
      // Float types also 20 and 39 tokens: a last token tile of 2 and 3 tokens, which the float
      // tiles run after each block of weight tiles (1 in 7, 13 and 31).
      for (int64_t num_tokens : {1, 3, 7, 13, 20, 31, 39}) {
        if ((num_tokens == 20 || num_tokens == 39) && is_quant(type)) continue;
        if (rows > 33 && cols > 4000 && num_tokens < 31) continue;
        SCOPED_TRACE(name_of(type) + " rows " + std::to_string(rows) + " cols " + std::to_string(cols) + " tokens " +
                     std::to_string(num_tokens));
        const std::vector<float> x = rng.vec(num_tokens * cols);
        std::vector<float> y_ref(num_tokens * rows), y(num_tokens * rows);
        matmul_ref(w.view(), x.data(), num_tokens, y_ref.data());
        for (Isa isa : usable_isas()) {
          for (bool repack : {false, true}) {
            for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
              std::vector<uint8_t> buf;
              std::fill(y.begin(), y.end(), -1.0f);
              matmul(on(w, isa, repack, buf), x.data(), num_tokens, y.data(), p, ws);
              ASSERT_EQ(std::memcmp(y.data(), y_ref.data(), y.size() * 4), 0)
                  << isa_name(isa) << (repack ? " repacked" : " gguf") << (p ? " 2 threads" : " 1 thread");
            }
          }
        }
        if (num_tokens > 3) continue;
        const int64_t terms = is_quant(type) ? 4 * (cols / block_of(type)) + 4 : cols + 2;
        for (int64_t t = 0; t < num_tokens; ++t) {
          std::vector<float> xt = is_quant(type) ? q8_roundtrip(type, x.data() + t * cols, cols)
                                                 : std::vector<float>(x.begin() + t * cols, x.begin() + (t + 1) * cols);
          // F16 / BF16 weights see activations rounded to their own type (ggml's vec_dot_type).
          for (float& v : xt) {
            if (type == GgmlType::F16) v = fp16_to_fp32(fp32_to_fp16(v));
            if (type == GgmlType::BF16) v = bf16_to_fp32(fp32_to_bf16(v));
          }
          for (int64_t r = 0; r < rows; ++r) {
            const Exact e = exact_dot(w, r, xt.data());
            // Types with mins sum q . x and min . sum(x) apart: each can exceed sum |w x|, by up
            // to max |w| sum |x| (the dequantized values also round once more).
            double abs = e.abs;
            if (type != GgmlType::Q8_0 && type != GgmlType::Q4_0 && is_quant(type)) {
              double wmax = 0, xabs = 0;
              for (int64_t c = 0; c < cols; ++c) {
                wmax = std::max(wmax, std::fabs(static_cast<double>(w.dequant[r * cols + c])));
                xabs += std::fabs(xt[c]);
              }
              abs += 2 * wmax * xabs;
            }
            ASSERT_NEAR(y_ref[t * rows + r], e.value, terms * kEps * abs + 1e-30) << "t " << t << " r " << r;
          }
        }
      }
    }
  }
}

// The row of token `t` is bit-identical whether it is computed alone, inside batches of 3, 8, 17
// or 40 with other random rows (at positions across the token tiles), or with 1, 2 or 3 threads,
// on the best ISA of this CPU, repacked.
TEST_P(MatmulTest, BatchAndThreadInvariance) {
  const GgmlType type = GetParam();
  Rng rng(2024);
  ThreadPool pool2(2), pool3(3);
  std::vector<int64_t> col_sizes = {96, 2080};
  if (!is_quant(type)) col_sizes.push_back(100);
  if (block_of(type) == kQK_K) col_sizes = {256, 2304};
  for (int64_t cols : col_sizes) {
    const int64_t rows = 33;
    const TestWeights tw = make_weights(type, rows, cols, rng);
    std::vector<uint8_t> buf;
    const WeightView w = on(tw, cpu_isa(), true, buf);
    const std::vector<float> probe = rng.vec(cols);
    std::vector<float> solo(rows);
    Workspace ws;
    matmul(w, probe.data(), 1, solo.data(), nullptr, ws);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
      std::vector<float> again(rows);
      matmul(w, probe.data(), 1, again.data(), pool, ws);
      ASSERT_EQ(std::memcmp(again.data(), solo.data(), rows * 4), 0);
      for (int64_t batch : {3, 8, 17, 40}) {
        for (int64_t at = 0; at < batch; at += (batch >= 17 ? 5 : 1)) {
          std::vector<float> x = rng.vec(batch * cols, -2.0f, 2.0f);
          std::memcpy(x.data() + at * cols, probe.data(), cols * 4);
          std::vector<float> y(batch * rows);
          matmul(w, x.data(), batch, y.data(), pool, ws);
          ASSERT_EQ(std::memcmp(y.data() + at * rows, solo.data(), rows * 4), 0)
              << name_of(type) << " cols " << cols << " batch " << batch << " at " << at;
        }
      }
    }
  }
}

// matmul_many: several weights of one input in one parallel region give each weight's
// matmul_ref bits, whatever the mix: repacked K-quants that share their prepared q8_K activations
// (Q4_K 33 and 64 rows), GGUF-layout ones that share theirs (Q4_K 7, IQ4_XS), F16 weights whose
// first has no tail rows and so no use for the f16 activation rows that the second's tail reads,
// q8_0-activation types, tile groups and tail rows, 1 to 30 tokens (30: the activations made in
// parallel chunks), 1, 2 and 3 threads, every ISA, with and without the caller's q8_0
// activations.
TEST(Matmul, ManyWeightsGiveEachWeightsBits) {
  Rng rng(4242);
  ThreadPool pool2(2), pool3(3);
  Workspace ws;
  const int64_t cols = 512;
  struct Shape {
    GgmlType type;
    int64_t rows;
    bool repack;
  };
  const std::vector<Shape> shapes = {
      {GgmlType::Q4_K, 33, true}, {GgmlType::Q6_K, 16, true}, {GgmlType::Q4_K, 7, false}, {GgmlType::F16, 32, true},
      {GgmlType::F16, 40, true},  {GgmlType::Q8_0, 40, true}, {GgmlType::Q4_0, 1, true},  {GgmlType::IQ4_XS, 48, false},
      {GgmlType::Q4_K, 64, true}, {GgmlType::F16, 121, true}};
  std::vector<TestWeights> tw;
  for (const Shape& sh : shapes) tw.push_back(make_weights(sh.type, sh.rows, cols, rng));
  for (int64_t num_tokens : {1, 5, 30}) {
    const std::vector<float> x = rng.vec(num_tokens * cols);
    std::vector<BlockQ8_0> xq(static_cast<size_t>(num_tokens * cols / 32));
    quantize_activations_q8_0(x.data(), num_tokens, cols, xq.data(), Isa::kScalar);
    std::vector<std::vector<float>> ref(tw.size());
    for (size_t i = 0; i < tw.size(); ++i) {
      ref[i].resize(num_tokens * tw[i].rows);
      matmul_ref(tw[i].view(), x.data(), num_tokens, ref[i].data());
    }
    for (Isa isa : usable_isas()) {
      std::vector<std::vector<uint8_t>> bufs(tw.size());
      std::vector<WeightView> views;
      for (size_t i = 0; i < tw.size(); ++i) views.push_back(on(tw[i], isa, shapes[i].repack, bufs[i]));
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
        for (const BlockQ8_0* given :
             {static_cast<const BlockQ8_0*>(nullptr), static_cast<const BlockQ8_0*>(xq.data())}) {
          std::vector<std::vector<float>> y(tw.size());
          std::vector<MatmulOut> outs;
          for (size_t i = 0; i < tw.size(); ++i) {
            y[i].assign(ref[i].size(), -1.0f);
            outs.push_back({&views[i], y[i].data()});
          }
          matmul_many(outs, x.data(), num_tokens, p, ws, given);
          for (size_t i = 0; i < tw.size(); ++i) {
            ASSERT_EQ(std::memcmp(y[i].data(), ref[i].data(), y[i].size() * 4), 0)
                << isa_name(isa) << " weight " << i << " (" << name_of(tw[i].type) << ") tokens " << num_tokens
                << " threads " << (p ? p->num_threads() : 1) << (given ? " given xq" : "");
          }
        }
      }
    }
  }
  // More weights than its fixed job array holds: refused, not written past it.
  std::vector<float> y(64);
  const WeightView w = tw[0].view();
  const std::vector<MatmulOut> too_many(kMaxMatmulOuts + 1, MatmulOut{&w, y.data()});
  const std::vector<float> x = rng.vec(cols);
  EXPECT_DEATH(matmul_many(too_many, x.data(), 1, nullptr, ws), "matmul: bad shape");
}

// One NaN in a token's activations makes every output of that token NaN, on every ISA and layout
// and in the oracle (for the quantized types, the activation block holding it gets d = NaN:
// nan_block), and leaves the other tokens of the batch as they are alone. A model whose hidden
// state went NaN must give NaN logits, which the sampler refuses, rather than finite ones.
TEST_P(MatmulTest, ANanActivationMakesItsTokensOutputsNan) {
  const GgmlType type = GetParam();
  Rng rng(77);
  ThreadPool pool(2);
  Workspace ws;
  const int64_t rows = 33, cols = block_of(type) == kQK_K ? 512 : 64, num_tokens = 3;
  const TestWeights tw = make_weights(type, rows, cols, rng);
  std::vector<float> x = rng.vec(num_tokens * cols);
  x[cols + cols - 3] = NAN;  // token 1, in the last block
  std::vector<float> y_ref(num_tokens * rows), alone(rows);
  matmul_ref(tw.view(), x.data(), num_tokens, y_ref.data());
  for (Isa isa : usable_isas()) {
    for (bool repack : {false, true}) {
      std::vector<uint8_t> buf;
      const WeightView w = on(tw, isa, repack, buf);
      std::vector<float> y(num_tokens * rows);
      matmul(w, x.data(), num_tokens, y.data(), &pool, ws);
      for (int64_t t = 0; t < num_tokens; ++t) {
        matmul(w, x.data() + t * cols, 1, alone.data(), nullptr, ws);
        for (int64_t r = 0; r < rows; ++r) {
          SCOPED_TRACE(std::string(isa_name(isa)) + (repack ? " repacked" : " gguf") + " token " + std::to_string(t) +
                       " row " + std::to_string(r));
          ASSERT_EQ(std::isnan(y[t * rows + r]), t == 1);
          ASSERT_EQ(std::isnan(y_ref[t * rows + r]), t == 1);
          if (t != 1) {
            ASSERT_EQ(std::memcmp(&y[t * rows + r], &alone[r], 4), 0);
          }
        }
      }
    }
  }
}

// Row lookups (embeddings; the tied LM head is repacked) read either layout: every row of a
// repacked matrix, in a tile or in the GGUF-layout tail, dequantizes as the original row.
TEST_P(MatmulTest, GetRowReadsEitherLayout) {
  const GgmlType type = GetParam();
  if (cpu_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2: weights are never repacked";
  Rng rng(5);
  const int64_t cols = std::max<int64_t>(64, block_of(type));
  // 121 rows: 7 tiles (F16 and BF16: groups of 4 and 3, tile_place) and a tail of 9 rows.
  const TestWeights tw = make_weights(type, 121, cols, rng);
  std::vector<uint8_t> buf;
  const WeightView packed = on(tw, Isa::kAvx2, true, buf);
  // Types without tiles stay in GGUF layout (repack_pays is false for them).
  ASSERT_EQ(packed.layout == WeightLayout::kRepacked16, kernel_traits(type)->repack_tile != nullptr);
  std::vector<float> got(cols);
  Workspace ws;
  for (int64_t r = 0; r < tw.rows; ++r) {
    get_row(packed, r, got.data(), ws);
    ASSERT_EQ(std::memcmp(got.data(), tw.dequant.data() + r * cols, cols * 4), 0) << "row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTest,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                                           GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL,
                                           GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K,
                                           GgmlType::Q6_K, GgmlType::IQ4_XS),
                         [](const ::testing::TestParamInfo<GgmlType>& info) { return type_name(info.param); });

// Every ISA's tiles round the activations to F16 / BF16 themselves while packing them, and must
// round as round_activations does: the low bits set to just below, at (ties to even) and just
// above half a unit of the type; and a NaN whose payload lies only in the low mantissa bits stays
// a NaN (a rounding that ignored NaNs would carry it into the exponent: +inf, with these
// non-negative weights). Tokens 1, 13 and 31 take the one-tile, permuted and converted paths of
// the BF16 pair tiles.
TEST(Matmul, FloatTilesRoundTheActivationsAsTheOracle) {
  Workspace ws;
  for (GgmlType type : {GgmlType::F16, GgmlType::BF16}) {
    Rng rng(99);
    const int64_t rows = 32, cols = 70;
    TestWeights tw = make_weights(type, rows, cols, rng);
    for (size_t i = 1; i < tw.bytes.size(); i += 2) tw.bytes[i] &= 0x7f;  // clear each sign bit
    const uint32_t half = type == GgmlType::BF16 ? 0x8000u : 0x1000u;     // f32 bits below the type's ulp
    for (int64_t num_tokens : {1, 13, 31}) {
      std::vector<float> x = rng.vec(num_tokens * cols);
      for (size_t i = 0; i < x.size(); ++i) {
        uint32_t u = 0;
        std::memcpy(&u, &x[i], 4);
        u = (u & ~(2 * half - 1)) | (half - 1 + i % 3);
        const int64_t t = static_cast<int64_t>(i) / cols, c = static_cast<int64_t>(i) % cols;
        if (t % 2 == 1 && c == (t * 7) % cols) u = 0x7f800001u;  // a signalling NaN, payload 1
        std::memcpy(&x[i], &u, 4);
      }
      std::vector<float> y_ref(num_tokens * rows), y(num_tokens * rows);
      matmul_ref(tw.view(), x.data(), num_tokens, y_ref.data());
      for (Isa isa : usable_isas()) {
        std::vector<uint8_t> buf;
        matmul(on(tw, isa, true, buf), x.data(), num_tokens, y.data(), nullptr, ws);
        for (int64_t t = 0; t < num_tokens; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            const float want = y_ref[t * rows + r], got = y[t * rows + r];
            SCOPED_TRACE(name_of(type) + " " + isa_name(isa) + " tokens " + std::to_string(num_tokens) + " token " +
                         std::to_string(t) + " row " + std::to_string(r));
            ASSERT_EQ(std::isnan(want), t % 2 == 1);
            if (t % 2 == 1) {
              ASSERT_TRUE(std::isnan(got)) << got;
            } else {
              ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << got << " vs " << want;
            }
          }
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
  const WeightView q8_1{GgmlType::Q8_1, 4, 64, buf.data()};  // a type matmul does not support
  EXPECT_DEATH(repack_weight(q8_1, buf.data() + 256, nullptr), "has no repacked layout");
  const TestWeights q = make_weights(GgmlType::Q4_0, 4, 64, rng);
  EXPECT_FALSE(repack_pays(q.view()));
  WeightView v = make_weights(GgmlType::Q8_0, 16, 64, rng).view();
  v.isa = Isa::kScalar;  // the scalar oracle runs on the GGUF layout
  EXPECT_FALSE(repack_pays(v));
  v.isa = Isa::kAvx2;
  EXPECT_TRUE(repack_pays(v));
  v.type = GgmlType::F32;
  v.rows = 15;
  EXPECT_FALSE(repack_pays(v));
  WeightView packed = q.view();
  packed.layout = WeightLayout::kRepacked16;
  EXPECT_DEATH(repack_weight(packed, buf.data(), nullptr), "already repacked");
  std::vector<float> x(64, 1.0f), y(4);
  EXPECT_DEATH(matmul_ref(packed, x.data(), 1, y.data()), "GGUF layout");
  packed.isa = Isa::kScalar;
  Workspace ws;
  EXPECT_DEATH(matmul(packed, x.data(), 1, y.data(), nullptr, ws), "ISA with AVX2");
}

// The kernel table names the activation type of each weight type (the model asks it).
TEST(Matmul, VecDotTypeComesFromTheTable) {
  EXPECT_EQ(vec_dot_type(GgmlType::F32), GgmlType::F32);
  EXPECT_EQ(vec_dot_type(GgmlType::F16), GgmlType::F32);
  EXPECT_EQ(vec_dot_type(GgmlType::BF16), GgmlType::F32);
  EXPECT_EQ(vec_dot_type(GgmlType::Q8_0), GgmlType::Q8_0);
  EXPECT_EQ(vec_dot_type(GgmlType::Q4_0), GgmlType::Q8_0);
  EXPECT_EQ(vec_dot_type(GgmlType::Q4_1), GgmlType::Q8_0);
  EXPECT_EQ(vec_dot_type(GgmlType::Q5_0), GgmlType::Q8_0);
  EXPECT_EQ(vec_dot_type(GgmlType::IQ4_NL), GgmlType::Q8_0);
  EXPECT_EQ(vec_dot_type(GgmlType::Q4_K), GgmlType::Q8_K);
  EXPECT_EQ(vec_dot_type(GgmlType::IQ4_XS), GgmlType::Q8_K);
  EXPECT_TRUE(matmul_supports(GgmlType::Q6_K));
  EXPECT_FALSE(matmul_supports(GgmlType::Q8_1));
  EXPECT_DEATH(vec_dot_type(GgmlType::Q8_1), "unsupported weight type");
}

// The Isa is chosen once from the CPU, its vendor and two flags; nothing flips it later.
TEST(Isa, LimitsAndNames) {
  EXPECT_EQ(limit_isa(Isa::kAvx512Vnni, false, false), Isa::kAvx512Vnni);
  EXPECT_EQ(limit_isa(Isa::kAvx512Vnni, false, true), Isa::kAvx2);
  EXPECT_EQ(limit_isa(Isa::kAvx512, true, false), Isa::kScalar);
  EXPECT_EQ(limit_isa(Isa::kScalar, false, true), Isa::kScalar);
  EXPECT_LE(default_isa(), cpu_isa());
  EXPECT_EQ(usable_isas().front(), Isa::kScalar);
  EXPECT_EQ(usable_isas().back(), cpu_isa());
  EXPECT_STREQ(isa_name(Isa::kAvx512), "avx512");
  EXPECT_EQ(limit_isa(Isa::kAvx512Bf16, false, true), Isa::kAvx2);
  // Where VDPBF16PS does not beat the FMA tiles (Intel), the BF16 tiles are left out.
  EXPECT_EQ(limit_isa(Isa::kAvx512Bf16, false, false, false), Isa::kAvx512Vnni);
  EXPECT_EQ(limit_isa(Isa::kAvx512Bf16, false, false, true), Isa::kAvx512Bf16);
  EXPECT_EQ(limit_isa(Isa::kAvx512, false, false, false), Isa::kAvx512);
  EXPECT_STREQ(isa_name(Isa::kAvx512Bf16), "avx512bf16");
  std::printf("cpu_isa: %s, default_isa: %s\n", isa_name(cpu_isa()), isa_name(default_isa()));
}

// The CPUID probe (cpu_features.cc) agrees with the kernel's reading of the same bits, the flags
// of /proc/cpuinfo: each level needs every flag of the levels below it.
TEST(Isa, ProbeAgreesWithProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) {
      flags = line.substr(line.find(':') + 1) + " ";
      break;
    }
  }
  ASSERT_FALSE(flags.empty()) << "no flags line in /proc/cpuinfo";
  auto has = [&](const char* f) { return flags.find(std::string(" ") + f + " ") != std::string::npos; };
  Isa want = Isa::kScalar;
  if (has("avx2") && has("fma") && has("f16c")) {
    want = Isa::kAvx2;
    if (has("avx512f") && has("avx512bw") && has("avx512vl") && has("avx512dq")) {
      want = Isa::kAvx512;
      if (has("avx512_vnni")) want = has("avx512_bf16") ? Isa::kAvx512Bf16 : Isa::kAvx512Vnni;
    }
  }
  EXPECT_EQ(cpu_isa(), want) << isa_name(cpu_isa()) << " vs " << isa_name(want);
  // AMX: the same two flags (the Linux kernel lists them only when it supports the state), unless
  // switched off; then the Q8_0 prompt tests above ran on the AMX tile.
  const char* no_amx = std::getenv("PAGELLM_NO_AMX");
  const char* no_avx512 = std::getenv("PAGELLM_NO_AVX512");
  const bool off = (no_amx != nullptr && std::string(no_amx) != "" && std::string(no_amx) != "0") ||
                   (no_avx512 != nullptr && std::string(no_avx512) != "" && std::string(no_avx512) != "0");
  // Usable only with the flags; with them and not usable, Linux refused the state or the tile
  // self-test faulted (said here, since the AMX tests below then skip).
  const bool listed = want >= Isa::kAvx512Vnni && has("amx_tile") && has("amx_int8");
  EXPECT_LE(amx_int8_usable(), !off && listed);
  if (listed && !off && !amx_int8_usable()) {
    // Refused or faulting is the VM's doing; a self-test that runs and gets its sums wrong is ours.
    const bool runs = run_catching_sigill(+[] {
      r16::amx_self_test();
      return true;
    });
    if (runs) {
      EXPECT_TRUE(r16::amx_self_test()) << "the tile multiply runs, but the self-test rejects its sums";
    }
  }
  std::printf("amx_int8_usable: %d%s\n", amx_int8_usable() ? 1 : 0,
              listed && !off && !amx_int8_usable() ? " (listed in /proc/cpuinfo, but refused or faulting)" : "");
}

// amx_int8_usable()'s guard: a faulting instruction (ud2, SIGILL) makes it false, not a crash,
// and the process's handler is back afterwards.
TEST(Isa, SigillIsCaughtByTheProbeGuard) {
  struct sigaction before = {};
  sigaction(SIGILL, nullptr, &before);
  EXPECT_FALSE(run_catching_sigill(+[]() -> bool { __builtin_trap(); }));
  EXPECT_TRUE(run_catching_sigill(+[] { return true; }));
  EXPECT_FALSE(run_catching_sigill(+[] { return false; }));
  struct sigaction now = {};
  sigaction(SIGILL, nullptr, &now);
  EXPECT_EQ(now.sa_handler, before.sa_handler);
}

// The AMX Q8_0 tiles (16 tokens x up to 3 weight tiles per step) give the VNNI tile's bits, on
// block counts that leave the software pipeline an odd or a single block, 1 to 7 tiles (groups
// of 3 and what is left) and 1 to 3 runs of 16 tokens, with tokens kept apart by a stride.
TEST(Matmul, AmxQ8TilesGiveTheVnniTileBits) {
  if (!amx_int8_usable()) GTEST_SKIP() << "no AMX-INT8 here (or PAGELLM_NO_AMX): the tile never runs";
  Rng rng(77);
  for (int64_t nb : {1, 2, 3, 64, 65}) {
    for (int64_t tiles : {1, 2, 3, 4, 7}) {
      const int64_t cols = 32 * nb, rows = 16 * tiles;
      const TestWeights w = make_weights(GgmlType::Q8_0, rows, cols, rng);
      WeightView v = w.view();
      v.isa = Isa::kAvx512Vnni;
      std::vector<uint8_t> packed(w.bytes.size());
      repack_weight(v, packed.data(), nullptr);
      for (int64_t tokens : {16, 32, 48}) {
        const int64_t tile_bytes = 16 * v.row_bytes(), xs = nb + 3;
        std::vector<float> x = rng.vec(tokens * cols);
        std::vector<BlockQ8_0> xq(static_cast<size_t>(tokens * nb));
        quantize_activations_q8_0(x.data(), tokens, cols, xq.data(), Isa::kScalar);
        std::vector<r16::XBlock> xb(static_cast<size_t>(tokens * xs));
        for (int64_t t = 0; t < tokens; ++t) r16::prepare(GgmlType::Q8_0, xq.data() + t * nb, nb, xb.data() + t * xs);
        const int64_t ys = rows + 5;
        std::vector<float> y_amx(tokens * ys, -1.0f), y_vnni(tokens * ys, -1.0f);
        r16::dot_q8_0_tiles16_amx(packed.data(), tiles, tile_bytes, xb.data(), xs, nb, tokens / 16, y_amx.data(), ys);
        float out[16 * r16::kMaxTileTokens];
        for (int64_t i = 0; i < tiles; ++i) {
          for (int64_t t0 = 0; t0 < tokens; t0 += r16::kMaxTileTokens) {
            r16::dot_q8_0_tile_avx512(packed.data() + i * tile_bytes, xb.data() + t0 * xs, xs, nb, r16::kMaxTileTokens,
                                      out);
            for (int k = 0; k < r16::kMaxTileTokens; ++k) {
              std::memcpy(y_vnni.data() + (t0 + k) * ys + 16 * i, out + 16 * k, 16 * sizeof(float));
            }
          }
        }
        ASSERT_EQ(std::memcmp(y_amx.data(), y_vnni.data(), y_amx.size() * 4), 0)
            << "nb " << nb << " tiles " << tiles << " tokens " << tokens;
      }
    }
  }
}

// Both orders of the AVX2 K-quant tiles (kernels_kq.h's Avx2Order) give the same bits, for one to
// four tokens. dot_tile_avx2 runs one of them on this CPU and MatmulTest checks it against the
// oracle; this checks the other, whichever vendor's CPU runs the test.
template <GgmlType T>
void expect_avx2_orders_agree(Rng& rng) {
  for (int64_t nb : {1, 2, 5}) {
    const int64_t cols = kQK_K * nb;
    const TestWeights w = make_weights(T, kq::kRows, cols, rng);
    std::vector<uint8_t> tile(w.bytes.size());
    kq::repack_tile(T, w.bytes.data(), row_size_bytes(T, cols), cols, tile.data());
    for (int m = 1; m <= kq::kMaxTileTokens; ++m) {
      const std::vector<float> x = rng.vec(m * cols);
      std::vector<BlockQ8_K> xq(static_cast<size_t>(m * nb));
      for (int k = 0; k < m; ++k) quantize_row_q8_K(x.data() + k * cols, cols, xq.data() + k * nb);
      float plain[kq::kRows * kq::kMaxTileTokens], shared[kq::kRows * kq::kMaxTileTokens];
      std::fill(std::begin(plain), std::end(plain), -1.0f);
      std::fill(std::begin(shared), std::end(shared), -2.0f);
      kq::dot_tile_avx2_order<T, kq::Avx2Order::kPlain>(tile.data(), xq.data(), nb, nb, m, plain);
      kq::dot_tile_avx2_order<T, kq::Avx2Order::kShared>(tile.data(), xq.data(), nb, nb, m, shared);
      ASSERT_EQ(std::memcmp(plain, shared, sizeof(float) * kq::kRows * m), 0)
          << name_of(T) << " blocks " << nb << " tokens " << m;
      // Not a zero tile: the rows' dot products are there.
      ASSERT_NE(std::count(plain, plain + kq::kRows * m, 0.0f), kq::kRows * m);
    }
  }
}

TEST(Matmul, Avx2KqOrdersGiveTheSameBits) {
  if (cpu_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2: the AVX2 tiles never run";
  Rng rng(515);
  expect_avx2_orders_agree<GgmlType::Q4_K>(rng);
  expect_avx2_orders_agree<GgmlType::Q5_K>(rng);
  expect_avx2_orders_agree<GgmlType::Q6_K>(rng);
}

// Which tiles each ISA gets: BF16 alone has a set for AVX512_BF16; the other types keep their
// AVX-512 tiles there.
TEST(Isa, OnlyBf16HasAvx512Bf16Tiles) {
  const KernelTraits* bf16 = kernel_traits(GgmlType::BF16);
  EXPECT_EQ(&bf16->tiles_for(Isa::kAvx512Bf16), &bf16->avx512bf16);
  EXPECT_EQ(&bf16->tiles_for(Isa::kAvx512Vnni), &bf16->avx512);
  EXPECT_EQ(&bf16->tiles_for(Isa::kAvx2), &bf16->avx2);
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_K}) {
    EXPECT_EQ(&kernel_traits(t)->tiles_for(Isa::kAvx512Bf16), &kernel_traits(t)->avx512) << type_name(t);
  }
}

}  // namespace
}  // namespace pagellm::kernels

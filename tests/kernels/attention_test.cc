// paged_attention: reference vs a dense causal attention over unpaged K/V (double precision),
// fast vs reference, F32 and F16 caches, GQA, scrambled block tables, n_dims-style odd head
// sizes; write_kv; batch and thread-count invariance as bit equality.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernels_avx512.h"
#include "kernels/cpu/kernels_impl.h"
#include "kernels_test_util.h"

namespace pagellm::kernels {
namespace {

using testing::kEps;
using testing::Rng;

// A paged cache holding `seq_lens[s]` keys per sequence, plus the same K/V unpaged.
struct Fixture {
  GgmlType dtype;
  int64_t num_kv_heads, head_dim, block_size, max_blocks;
  std::vector<int64_t> seq_lens;
  std::vector<uint8_t> k_cache, v_cache;
  std::vector<int32_t> block_tables;                 // [num_seqs, max_blocks]
  std::vector<std::vector<float>> dense_k, dense_v;  // per seq: [len, num_kv_heads, head_dim], as stored
  KvLayerView kv;

  Fixture(GgmlType dt, int64_t nkv, int64_t hd, int64_t bs, std::vector<int64_t> lens, Rng& rng)
      : dtype(dt), num_kv_heads(nkv), head_dim(hd), block_size(bs), seq_lens(std::move(lens)) {
    max_blocks = 0;
    int64_t total_blocks = 0;
    for (int64_t len : seq_lens) {
      max_blocks = std::max(max_blocks, (len + bs - 1) / bs);
      total_blocks += (len + bs - 1) / bs;
    }
    total_blocks += 3;  // spare blocks that no table uses
    std::vector<int32_t> ids(total_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng.gen());
    const int64_t row = nkv * hd, eb = dt == GgmlType::F32 ? 4 : 2;
    k_cache.assign(total_blocks * bs * row * eb, 0xFF);  // garbage (NaN) in unused slots
    v_cache.assign(total_blocks * bs * row * eb, 0xFF);
    kv = KvLayerView{dt, k_cache.data(), v_cache.data(), total_blocks * bs, bs, nkv, hd};
    block_tables.assign(seq_lens.size() * max_blocks, -1);
    size_t next = 0;
    for (size_t s = 0; s < seq_lens.size(); ++s) {
      const int64_t len = seq_lens[s];
      for (int64_t b = 0; b < (len + bs - 1) / bs; ++b) block_tables[s * max_blocks + b] = ids[next++];
      std::vector<float> k = rng.vec(len * row), v = rng.vec(len * row);
      std::vector<int64_t> slots(len);
      for (int64_t j = 0; j < len; ++j) slots[j] = block_tables[s * max_blocks + j / bs] * bs + j % bs;
      write_kv(kv, k.data(), v.data(), slots.data(), len);
      if (dt == GgmlType::F16) {  // the dense copy holds what the cache holds
        for (float& x : k) x = fp16_to_fp32(fp32_to_fp16(x));
        for (float& x : v) x = fp16_to_fp32(fp32_to_fp16(x));
      }
      dense_k.push_back(std::move(k));
      dense_v.push_back(std::move(v));
    }
  }
};

// A batch: for each sequence, the query tokens at positions [first_pos[s], seq_lens[s]).
struct Batch {
  std::vector<int64_t> query_start_loc, positions;
  std::vector<int32_t> seq_of;
  AttentionBatch view(const Fixture& f) const {
    return AttentionBatch{query_start_loc.data(), positions.data(), f.block_tables.data(),
                          static_cast<int64_t>(query_start_loc.size()) - 1, f.max_blocks};
  }
  int64_t num_tokens() const { return query_start_loc.back(); }
};

Batch make_batch(const Fixture& f, const std::vector<int64_t>& first_pos) {
  Batch b;
  b.query_start_loc.push_back(0);
  for (size_t s = 0; s < first_pos.size(); ++s) {
    for (int64_t p = first_pos[s]; p < f.seq_lens[s]; ++p) {
      b.positions.push_back(p);
      b.seq_of.push_back(static_cast<int32_t>(s));
    }
    b.query_start_loc.push_back(static_cast<int64_t>(b.positions.size()));
  }
  return b;
}

// Dense causal attention in double, from the unpaged copies; window > 0: token at position i
// sees keys j with 0 <= i - j < window.
std::vector<double> dense_attention(const Fixture& f, const Batch& b, const float* q, int64_t num_heads, float scale,
                                    int64_t window = 0) {
  const int64_t hd = f.head_dim, group = num_heads / f.num_kv_heads, row = f.num_kv_heads * hd;
  std::vector<double> out(b.num_tokens() * num_heads * hd, 0.0);
  for (int64_t t = 0; t < b.num_tokens(); ++t) {
    const auto& K = f.dense_k[b.seq_of[t]];
    const auto& V = f.dense_v[b.seq_of[t]];
    for (int64_t h = 0; h < num_heads; ++h) {
      const float* qh = q + (t * num_heads + h) * hd;
      const int64_t kvh = h / group, n = b.positions[t] + 1;
      const int64_t lo = window > 0 ? std::max<int64_t>(0, n - window) : 0;
      std::vector<double> s(n, -INFINITY);
      for (int64_t j = lo; j < n; ++j) {
        double d = 0;
        for (int64_t i = 0; i < hd; ++i) d += static_cast<double>(qh[i]) * K[j * row + kvh * hd + i];
        s[j] = d * scale;
      }
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double& v : s) sum += (v = std::exp(v - mx));
      for (int64_t j = lo; j < n; ++j)
        for (int64_t i = 0; i < hd; ++i) out[(t * num_heads + h) * hd + i] += s[j] / sum * V[j * row + kvh * hd + i];
    }
  }
  return out;
}

struct AttnCase {
  GgmlType dtype;
  int64_t num_heads, num_kv_heads, head_dim, block_size;
};

class AttentionTest : public ::testing::TestWithParam<AttnCase> {};

// Tolerance: scores are dots of head_dim terms of size ~1 (|q|,|k| <= 1): error <= head_dim eps
// |q||k|-ish, absolute; scaled by 1/sqrt(hd) they move p by a relative ~ that much; the output is
// a convex combination of |v| <= 1 values summed in float over up to 50 keys. 1e-5 absolute covers
// (hd + keys) eps with margin for hd <= 128 and <= 50 keys.
TEST_P(AttentionTest, RefMatchesDenseAndFastMatchesRef) {
  Workspace ws;
  const AttnCase c = GetParam();
  Rng rng(static_cast<uint32_t>(c.head_dim * 31 + c.num_heads));
  // seq 0: prefill of 17 tokens; seq 1: chunk of 3 tokens after 20 cached; seq 2: one decode token
  // at position 49 (crosses several blocks); seq 3: a single first token.
  Fixture f(c.dtype, c.num_kv_heads, c.head_dim, c.block_size, {17, 23, 50, 1}, rng);
  const Batch b = make_batch(f, {0, 20, 49, 0});
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const std::vector<float> q = rng.vec(b.num_tokens() * c.num_heads * c.head_dim);
  const size_t n_out = q.size();
  std::vector<float> ref(n_out), fast(n_out), fast_mt(n_out);
  paged_attention_ref(q.data(), f.kv, b.view(f), c.num_heads, scale, ref.data());
  paged_attention(q.data(), f.kv, b.view(f), c.num_heads, scale, fast.data(), nullptr, ws);
  ThreadPool pool(3);
  paged_attention(q.data(), f.kv, b.view(f), c.num_heads, scale, fast_mt.data(), &pool, ws);
  EXPECT_EQ(std::memcmp(fast.data(), fast_mt.data(), n_out * 4), 0) << "thread count changed bits";
  const std::vector<double> dense = dense_attention(f, b, q.data(), c.num_heads, scale);
  for (size_t i = 0; i < n_out; ++i) {
    ASSERT_NEAR(ref[i], dense[i], 1e-5) << i;
  }
  // One arithmetic on every ISA: the fast path gives the reference's bits.
  EXPECT_EQ(std::memcmp(fast.data(), ref.data(), n_out * 4), 0) << "fast path differs from the reference";
  {
    KvLayerView kv = f.kv;  // the scalar fallback == reference
    kv.isa = Isa::kScalar;
    std::vector<float> scalar(n_out);
    paged_attention(q.data(), kv, b.view(f), c.num_heads, scale, scalar.data(), &pool, ws);
    EXPECT_EQ(std::memcmp(scalar.data(), ref.data(), n_out * 4), 0);
  }
}

// Token (seq 2, position 30) gives the same bits alone, inside a mixed batch, and with 1-3 threads.
TEST_P(AttentionTest, BatchAndThreadInvariance) {
  Workspace ws;
  const AttnCase c = GetParam();
  Rng rng(77);
  Fixture f(c.dtype, c.num_kv_heads, c.head_dim, c.block_size, {9, 40, 31}, rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const int64_t per_token = c.num_heads * c.head_dim;
  const std::vector<float> probe = rng.vec(per_token);

  Batch solo = make_batch(f, {9, 40, 30});  // only seq 2's last token
  std::vector<float> out_solo(per_token);
  paged_attention(probe.data(), f.kv, solo.view(f), c.num_heads, scale, out_solo.data(), nullptr, ws);

  ThreadPool pool2(2), pool3(3);
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
    for (const std::vector<int64_t>& first : {std::vector<int64_t>{0, 38, 30}, std::vector<int64_t>{5, 0, 27}}) {
      const Batch b = make_batch(f, first);
      std::vector<float> q = rng.vec(b.num_tokens() * per_token);
      const int64_t at = b.num_tokens() - 1;  // seq 2's token at position 30 is the last one
      ASSERT_EQ(b.positions[at], 30);
      std::memcpy(q.data() + at * per_token, probe.data(), per_token * 4);
      std::vector<float> out(q.size());
      paged_attention(q.data(), f.kv, b.view(f), c.num_heads, scale, out.data(), pool, ws);
      ASSERT_EQ(std::memcmp(out.data() + at * per_token, out_solo.data(), per_token * 4), 0)
          << "batch of " << b.num_tokens();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(AttnCase{GgmlType::F32, 4, 4, 8, 4}, AttnCase{GgmlType::F32, 8, 2, 64, 16},
                                           AttnCase{GgmlType::F32, 6, 3, 80, 16},
                                           AttnCase{GgmlType::F32, 4, 1, 128, 16}, AttnCase{GgmlType::F16, 4, 4, 8, 4},
                                           AttnCase{GgmlType::F16, 8, 2, 64, 16}, AttnCase{GgmlType::F16, 6, 3, 80, 16},
                                           AttnCase{GgmlType::F16, 4, 1, 128, 16},
                                           AttnCase{GgmlType::F32, 2, 2, 20, 3}),
                         [](const ::testing::TestParamInfo<AttnCase>& info) {
                           const AttnCase& c = info.param;
                           return type_name(c.dtype) + "_h" + std::to_string(c.num_heads) + "_kv" +
                                  std::to_string(c.num_kv_heads) + "_d" + std::to_string(c.head_dim) + "_bs" +
                                  std::to_string(c.block_size);
                         });

// Contexts longer than one online-softmax tile (64 keys): a 300-key prefill (every tile edge:
// positions 63, 64, 127, 128, ... and a partial last tile) and a 130-key chunk, against dense
// double attention; the token at position 250 gets the same bits alone and inside the batch.
TEST(Attention, LongContextAcrossKeyTilesMatchesDenseAndIsBatchInvariant) {
  Workspace ws;
  for (GgmlType dtype : {GgmlType::F32, GgmlType::F16}) {
    SCOPED_TRACE(type_name(dtype));
    Rng rng(23);
    const int64_t num_heads = 8, nkv = 2, hd = 64;
    Fixture f(dtype, nkv, hd, 16, {300, 130}, rng);
    const Batch b = make_batch(f, {0, 100});
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const int64_t per_token = num_heads * hd;
    // Sharper scores than rng's default (|q| up to 3): later tiles often raise the running max.
    const std::vector<float> q = rng.vec(b.num_tokens() * per_token, -3.0f, 3.0f);
    std::vector<float> ref(q.size()), fast(q.size());
    ThreadPool pool(2);
    paged_attention_ref(q.data(), f.kv, b.view(f), num_heads, scale, ref.data());
    paged_attention(q.data(), f.kv, b.view(f), num_heads, scale, fast.data(), &pool, ws);
    const std::vector<double> dense = dense_attention(f, b, q.data(), num_heads, scale);
    for (size_t i = 0; i < q.size(); ++i) {
      ASSERT_NEAR(ref[i], dense[i], 2e-5) << i;
      ASSERT_NEAR(fast[i], ref[i], 2e-5) << i;
    }
    const Batch solo = make_batch(f, {250, 130});  // only (seq 0, positions 250..299)
    std::vector<float> out_solo(solo.num_tokens() * per_token);
    paged_attention(q.data() + 250 * per_token, f.kv, solo.view(f), num_heads, scale, out_solo.data(), nullptr, ws);
    ASSERT_EQ(std::memcmp(out_solo.data(), fast.data() + 250 * per_token, per_token * 4), 0);
  }
}

// Sliding window (Gemma 3's local layers): token at position i attends to keys (i - w, i] only.
// Windows of 1 key, shorter and longer than a block and than a key tile, against dense double
// attention with the same window; the keys before the window hold NaN in a copy of the cache
// and change nothing (they are never read); a late token alone gets the batch's bits.
TEST(Attention, SlidingWindowSeesOnlyTheLastKeysAndIsBatchInvariant) {
  Workspace ws;
  ThreadPool pool(2);
  for (GgmlType dtype : {GgmlType::F32, GgmlType::F16}) {
    for (int64_t window : {1, 5, 16, 64, 100}) {
      SCOPED_TRACE(type_name(dtype) + " window " + std::to_string(window));
      Rng rng(29);
      const int64_t num_heads = 8, nkv = 2, hd = 64, per_token = num_heads * hd;
      Fixture f(dtype, nkv, hd, 16, {200, 40}, rng);
      const Batch b = make_batch(f, {0, 10});
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      const std::vector<float> q = rng.vec(b.num_tokens() * per_token, -3.0f, 3.0f);
      AttentionBatch ab = b.view(f);
      ab.sliding_window = window;
      std::vector<float> ref(q.size()), fast(q.size());
      paged_attention_ref(q.data(), f.kv, ab, num_heads, scale, ref.data());
      paged_attention(q.data(), f.kv, ab, num_heads, scale, fast.data(), &pool, ws);
      const std::vector<double> dense = dense_attention(f, b, q.data(), num_heads, scale, window);
      for (size_t i = 0; i < q.size(); ++i) {
        ASSERT_NEAR(ref[i], dense[i], 2e-5) << i;
        ASSERT_NEAR(fast[i], ref[i], 2e-5) << i;
      }
      // Token 150 of sequence 0 alone, with every key before its window overwritten by NaN.
      const int64_t t = 150;
      std::vector<float> nan_k(t * nkv * hd, NAN);
      std::vector<int64_t> slots;
      for (int64_t j = 0; j + window <= t; ++j) slots.push_back(f.block_tables[j / 16] * 16 + j % 16);
      std::vector<uint8_t> k_copy = f.k_cache, v_copy = f.v_cache;
      KvLayerView kv = f.kv;
      kv.k = k_copy.data();
      kv.v = v_copy.data();
      write_kv(kv, nan_k.data(), nan_k.data(), slots.data(), static_cast<int64_t>(slots.size()));
      const Batch solo = make_batch(f, {t, 40});  // (seq 0, positions 150..199)
      AttentionBatch sb = solo.view(f);
      sb.sliding_window = window;
      std::vector<float> out_solo(solo.num_tokens() * per_token);
      paged_attention(q.data() + t * per_token, kv, sb, num_heads, scale, out_solo.data(), nullptr, ws);
      ASSERT_EQ(std::memcmp(out_solo.data(), fast.data() + t * per_token, out_solo.size() * 4), 0);
    }
  }
}

// On AVX-512 CPUs two query heads of a group share each key load (4 keys x 2 heads per tile);
// the output equals the one-head-at-a-time AVX2 path bit for bit: odd and even group sizes,
// head sizes with tails, sequences whose blocks are not contiguous (runs of 4 keys broken).
TEST(Attention, HeadPairsEqualOneHeadAtATime) {
  Workspace ws;
  if (cpu_isa() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512: heads are always scored one at a time";
  Rng rng(11);
  for (int64_t group : {1, 2, 3, 8}) {
    for (int64_t hd : {8, 40, 64}) {
      const int64_t nkv = 2, num_heads = group * nkv;
      Fixture f(GgmlType::F32, nkv, hd, 16, {37, 70}, rng);
      const Batch b = make_batch(f, {0, 50});
      const std::vector<float> q = rng.vec(b.num_tokens() * num_heads * hd);
      std::vector<float> paired(q.size()), single(q.size());
      ThreadPool pool(2);
      KvLayerView kv = f.kv;
      kv.isa = Isa::kAvx512;
      paged_attention(q.data(), kv, b.view(f), num_heads, 0.125f, paired.data(), &pool, ws);
      kv.isa = Isa::kAvx2;
      paged_attention(q.data(), kv, b.view(f), num_heads, 0.125f, single.data(), &pool, ws);
      ASSERT_EQ(std::memcmp(paired.data(), single.data(), q.size() * 4), 0) << "group " << group << " hd " << hd;
    }
  }
}

// With AVX2 (F32 or F16 cache, head_dim % 32 == 0, no window) a sequence whose tokens in the batch x the
// query heads per kv head make >= 4 query rows runs in blocks of 16 tokens whose query heads
// share each key tile, transposed (lane = key: 8 keys per vector on AVX2, 16 on AVX-512). The
// output equals the reference bit for bit: head sizes whose p . V is paired on AVX-512 (32, 96)
// and not (256), odd and even groups (1, 3, 4, 8), a 70-token prefill (block and tile edges, a
// partial last block), a 5-token chunk after 60 cached keys (blocked), a 3-token chunk (per token
// with 1 head per kv head, blocked with 3 or more) and a decode token (blocked with 4 or more
// heads per kv head), 1 and 3 threads, shuffled block tables; F32 and F16 caches.
TEST(Attention, QueryBlocksEqualTheReference) {
  Workspace ws;
  if (cpu_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2: every token is attended alone";
  Rng rng(23);
  ThreadPool pool(3);
  for (GgmlType dtype : {GgmlType::F32, GgmlType::F16}) {
    for (int64_t hd : {32, 96, 256}) {
      for (int64_t group : {1, 3, 4, 8}) {  // 8: TinyLlama's and Llama 3's query heads per kv head
        const int64_t nkv = 2, num_heads = group * nkv;
        Fixture f(dtype, nkv, hd, 16, {70, 65, 40, 33}, rng);
        const Batch b = make_batch(f, {0, 60, 37, 32});
        const std::vector<float> q = rng.vec(b.num_tokens() * num_heads * hd);
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        std::vector<float> ref(q.size());
        paged_attention_ref(q.data(), f.kv, b.view(f), num_heads, scale, ref.data());
        for (Isa isa : usable_isas()) {
          if (isa < Isa::kAvx2) continue;
          KvLayerView kv = f.kv;
          kv.isa = isa;
          // 6 blocks (5 of the prefill, 1 of the 5-token chunk), + 1 for the 3-token chunk with 3 or
          // 4 heads per kv head, + 1 for the decode token with 4; x 2 kv heads, >= 2 per thread.
          const int64_t units = 2 * (6 + (group >= 3 ? 1 : 0) + (group >= 4 ? 1 : 0));
          ASSERT_EQ(paged_attention_block_units(kv, b.view(f), num_heads, nullptr), units);
          ASSERT_EQ(paged_attention_block_units(kv, b.view(f), num_heads, &pool), units);
          std::vector<float> one(q.size()), three(q.size());
          paged_attention(q.data(), kv, b.view(f), num_heads, scale, one.data(), nullptr, ws);
          paged_attention(q.data(), kv, b.view(f), num_heads, scale, three.data(), &pool, ws);
          ASSERT_EQ(std::memcmp(one.data(), ref.data(), q.size() * 4), 0)
              << type_name(dtype) << " " << isa_name(isa) << " group " << group << " hd " << hd;
          ASSERT_EQ(std::memcmp(three.data(), ref.data(), q.size() * 4), 0)
              << type_name(dtype) << " " << isa_name(isa) << " group " << group << " hd " << hd;
        }
      }
    }
  }
}

// Too few blocks to keep the threads busy (a 16-token chunk, one kv head, 3 threads: 1 unit)
// falls back to one token at a time; the same bits as the reference either way. Not for a head
// size that is no multiple of 32, with a sliding window, or for a decode token with fewer than 4
// query heads per kv head; an F16 cache as an F32 one.
TEST(Attention, QueryBlocksOnlyWhereTheyPay) {
  Workspace ws;
  if (cpu_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2: every token is attended alone";
  Rng rng(31);
  ThreadPool pool(3);
  Fixture f(GgmlType::F32, 1, 64, 16, {40}, rng);
  const Batch b = make_batch(f, {24});
  EXPECT_EQ(paged_attention_block_units(f.kv, b.view(f), 4, &pool), 0);
  EXPECT_EQ(paged_attention_block_units(f.kv, b.view(f), 4, nullptr), 0);  // 1 unit < 2
  const Batch whole = make_batch(f, {0});  // 3 blocks: enough for one thread, not for three
  EXPECT_EQ(paged_attention_block_units(f.kv, whole.view(f), 4, nullptr), 3);
  EXPECT_EQ(paged_attention_block_units(f.kv, whole.view(f), 4, &pool), 0);
  const std::vector<float> q = rng.vec(b.num_tokens() * 4 * 64);
  std::vector<float> ref(q.size()), fast(q.size());
  paged_attention_ref(q.data(), f.kv, b.view(f), 4, 0.125f, ref.data());
  paged_attention(q.data(), f.kv, b.view(f), 4, 0.125f, fast.data(), &pool, ws);
  EXPECT_EQ(std::memcmp(fast.data(), ref.data(), q.size() * 4), 0);
  Fixture f16(GgmlType::F16, 2, 64, 16, {70}, rng);
  EXPECT_EQ(paged_attention_block_units(f16.kv, make_batch(f16, {0}).view(f16), 4, nullptr), 10);
  Fixture f40(GgmlType::F32, 2, 40, 16, {70}, rng);
  EXPECT_EQ(paged_attention_block_units(f40.kv, make_batch(f40, {0}).view(f40), 4, nullptr), 0);
  Fixture f64(GgmlType::F32, 2, 64, 16, {70}, rng);
  const Batch b64 = make_batch(f64, {0});
  EXPECT_EQ(paged_attention_block_units(f64.kv, b64.view(f64), 4, nullptr), 10);
  AttentionBatch windowed = b64.view(f64);
  windowed.sliding_window = 32;
  EXPECT_EQ(paged_attention_block_units(f64.kv, windowed, 4, nullptr), 0);
  // A decode token (1 query row per head) runs in a block only with >= 4 query heads per kv head:
  // 3 rows share too little to pay for the transposed key tile.
  const Batch decode = make_batch(f64, {69});
  EXPECT_EQ(paged_attention_block_units(f64.kv, decode.view(f64), 6, nullptr), 0);
  EXPECT_EQ(paged_attention_block_units(f64.kv, decode.view(f64), 8, nullptr), 2);
}

// The transposed key tile and its scores: each score equals avx2::dot_f32(key, q) times the scale
// (F16 keys: avx2::dot_f16), bit for bit, with 1 to `lanes` keys (lanes past nk repeat the last
// key) and 1 or 2 queries, 8 lanes (AVX2) and 16 (AVX-512).
TEST(Attention, KeyLaneScoresEqualPerKeyDot) {
  if (cpu_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2";
  Rng rng(29);
  for (int lanes : {8, 16}) {
    if (lanes == 16 && cpu_isa() < Isa::kAvx512) continue;
    for (int64_t hd : {32, 64, 128}) {
      const int64_t row = 3 * hd;
      const std::vector<float> keys = rng.vec(20 * row, -2.0f, 2.0f), q = rng.vec(2 * hd, -2.0f, 2.0f);
      std::vector<uint16_t> keys16(keys.size());
      for (size_t i = 0; i < keys.size(); ++i) keys16[i] = fp32_to_fp16(keys[i]);
      for (int nk : {1, 7, lanes}) {
        for (bool f16 : {false, true}) {
          std::vector<int64_t> off(lanes);
          for (int j = 0; j < lanes; ++j) off[j] = ((j * 7) % 20) * row + hd;  // scattered slots, kv head 1
          alignas(64) float kt[128 * 16];
          if (lanes == 16) {
            f16 ? avx512::transpose_keys16(keys16.data(), off.data(), nk, hd, kt)
                : avx512::transpose_keys16(keys.data(), off.data(), nk, hd, kt);
          } else {
            f16 ? avx2::transpose_keys8(keys16.data(), off.data(), nk, hd, kt)
                : avx2::transpose_keys8(keys.data(), off.data(), nk, hd, kt);
          }
          for (int nq : {1, 2}) {
            float s0[16], s1[16];
            const float* qs[2] = {q.data(), q.data() + hd};
            float* outs[2] = {s0, s1};
            if (lanes == 16) {
              avx512::qk_scores_keys16(kt, hd, qs, nq, 0.3f, outs);
            } else {
              avx2::qk_scores_keys8(kt, hd, qs, nq, 0.3f, outs);
            }
            for (int i = 0; i < nq; ++i) {
              for (int j = 0; j < lanes; ++j) {
                const int64_t o = off[std::min(j, nk - 1)];
                const float want =
                    (f16 ? avx2::dot_f16(keys16.data() + o, qs[i], hd) : avx2::dot_f32(keys.data() + o, qs[i], hd)) *
                    0.3f;
                ASSERT_EQ(std::memcmp(&outs[i][j], &want, 4), 0) << "lanes " << lanes << " hd " << hd << " nk " << nk
                                                                 << " q " << i << " key " << j << " f16 " << f16;
              }
            }
          }
        }
      }
    }
  }
}

// paged_attention scores up to 4 keys in consecutive slots with one AVX2 tile, q as the tile's
// row: each score must equal avx2::dot_f32(key, q) bit for bit (what a key alone gets), for
// head sizes with and without 8- and 32-element tails.
TEST(Attention, QkTileEqualsPerKeyDot) {
  if (cpu_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2: attention uses the scalar dot products";
  Rng rng(5);
  for (int64_t hd : {8, 40, 64, 100, 128}) {
    const int64_t row = 3 * hd;  // 3 kv heads per slot
    const std::vector<float> q = rng.vec(hd, -2.0f, 2.0f), keys = rng.vec(4 * row, -2.0f, 2.0f);
    for (int m = 1; m <= avx2::kMaxTileTokens; ++m) {
      float d[avx2::kMaxTileTokens];
      avx2::dot_f32_tile(q.data(), keys.data() + hd, row, hd, m, d);
      for (int i = 0; i < m; ++i) {
        const float want = avx2::dot_f32(keys.data() + i * row + hd, q.data(), hd);
        ASSERT_EQ(std::memcmp(&d[i], &want, 4), 0) << "hd " << hd << " m " << m << " key " << i;
      }
    }
  }
}

// avx2::pv_merge_f32 (one tile's p . V for 1 or 2 heads, merged into out) equals
// avx2::pv_accumulate_f32 per head, then rescale_add unless it is the first tile, bit for bit:
// head sizes with 8-element remainders past its passes of 4 and 8 vectors, scattered slots.
TEST(Attention, PvMergeEqualsAccumulateThenRescale) {
  if (cpu_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2";
  Rng rng(37);
  for (int64_t hd : {8, 40, 64, 72, 96, 256}) {
    const int64_t row = 2 * hd, n = 37;
    const std::vector<float> v = rng.vec(50 * row, -2.0f, 2.0f);
    std::vector<int64_t> off(n);
    for (int64_t j = 0; j < n; ++j) off[j] = ((j * 13) % 50) * row + hd;  // kv head 1
    const std::vector<float> a0 = rng.vec(n, 0.0f, 1.0f), a1 = rng.vec(n, 0.0f, 1.0f);
    const std::vector<float> old0 = rng.vec(hd), old1 = rng.vec(hd);
    const float c[2] = {0.37f, 0.91f};
    for (int nq : {1, 2}) {
      for (bool first : {true, false}) {
        std::vector<float> got0 = old0, got1 = old1;
        const float* a[2] = {a0.data(), a1.data()};
        float* outs[2] = {got0.data(), got1.data()};
        avx2::pv_merge_f32(v.data(), off.data(), n, a, nq, hd, c, first, outs);
        for (int q = 0; q < nq; ++q) {
          std::vector<float> want(hd), pv(hd);
          avx2::pv_accumulate_f32(v.data(), off.data(), n, a[q], hd, pv.data());
          if (first) {
            want = pv;
          } else {
            want = q == 0 ? old0 : old1;
            avx2::rescale_add(want.data(), c[q], pv.data(), hd);
          }
          ASSERT_EQ(std::memcmp(outs[q], want.data(), hd * 4), 0)
              << "hd " << hd << " nq " << nq << " first " << first << " q " << q;
        }
        if (nq == 1) {
          ASSERT_EQ(got1, old1) << "the second head's output changed";
        }
      }
    }
  }
}

// avx512::pv_accumulate_f32_pair / f16_pair (two heads' p . V sharing the loads of V) equal
// avx2::pv_accumulate_f32 / f16 per head bit for bit: every head size they take, scattered slots.
TEST(Attention, PvPairEqualsOneHeadAtATime) {
  if (cpu_isa() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512";
  Rng rng(41);
  for (int64_t hd : {32, 64, 96, 128}) {
    ASSERT_TRUE(avx512::pv_pair_supported(hd));
    const int64_t row = 2 * hd, n = 37;
    const std::vector<float> v = rng.vec(50 * row, -2.0f, 2.0f);
    std::vector<uint16_t> v16(v.size());
    for (size_t i = 0; i < v.size(); ++i) v16[i] = fp32_to_fp16(v[i]);
    std::vector<int64_t> off(n);
    for (int64_t j = 0; j < n; ++j) off[j] = ((j * 13) % 50) * row + hd;  // kv head 1
    const std::vector<float> a0 = rng.vec(n, 0.0f, 1.0f), a1 = rng.vec(n, 0.0f, 1.0f);
    for (bool f16 : {false, true}) {
      std::vector<float> got0(hd), got1(hd), want0(hd), want1(hd);
      if (f16) {
        avx512::pv_accumulate_f16_pair(v16.data(), off.data(), n, a0.data(), a1.data(), hd, got0.data(), got1.data());
        avx2::pv_accumulate_f16(v16.data(), off.data(), n, a0.data(), hd, want0.data());
        avx2::pv_accumulate_f16(v16.data(), off.data(), n, a1.data(), hd, want1.data());
      } else {
        avx512::pv_accumulate_f32_pair(v.data(), off.data(), n, a0.data(), a1.data(), hd, got0.data(), got1.data());
        avx2::pv_accumulate_f32(v.data(), off.data(), n, a0.data(), hd, want0.data());
        avx2::pv_accumulate_f32(v.data(), off.data(), n, a1.data(), hd, want1.data());
      }
      ASSERT_EQ(std::memcmp(got0.data(), want0.data(), hd * 4), 0) << "hd " << hd << " f16 " << f16;
      ASSERT_EQ(std::memcmp(got1.data(), want1.data(), hd * 4), 0) << "hd " << hd << " f16 " << f16;
    }
  }
}

// exp_f32 against double exp over the range softmax feeds it (x <= 0) and a little above: within
// 2 ulp of the correctly rounded result (Cephes' expf claims about 1); the edges exactly.
TEST(ExpF32, WithinTwoUlpOfDoubleExpAndExactAtTheEdges) {
  float worst = 0.0f;
  for (float x = ref::kExpMin; x <= 10.0f; x = std::nextafter(x, 11.0f) + 1e-4f * std::fabs(x)) {
    const float got = ref::exp_f32(x);
    const auto want = static_cast<float>(std::exp(static_cast<double>(x)));
    const float ulp = std::nextafter(want, INFINITY) - want;
    worst = std::max(worst, std::fabs(got - want) / ulp);
  }
  EXPECT_LE(worst, 2.0f);
  EXPECT_EQ(ref::exp_f32(0.0f), 1.0f);
  EXPECT_EQ(ref::exp_f32(-INFINITY), 0.0f);
  EXPECT_EQ(ref::exp_f32(-100.0f), 0.0f);
  EXPECT_TRUE(std::isnan(ref::exp_f32(NAN)));
  EXPECT_GT(ref::exp_f32(88.0f), 1e38f);
}

// avx2::softmax_tile gives ref::softmax_tile's bits (probabilities, max, sum) for tiles of every
// length 1..70 (8-lane tails), scores spread so that some underflow to 0, and a running max
// above, inside and below the tile's.
TEST(SoftmaxTile, Avx2MatchesRefBitForBit) {
  if (cpu_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2";
  Rng rng(11);
  for (int64_t n = 1; n <= 70; ++n) {
    for (float m_in : {-INFINITY, 0.0f, 50.0f}) {
      std::vector<float> a = rng.vec(n, -60.0f, 40.0f);
      if (n > 3) a[2] = -200.0f;  // underflows
      std::vector<float> b = a;
      double sa = -1, sb = -2;
      const float ma = ref::softmax_tile(a.data(), n, m_in, &sa);
      const float mb = avx2::softmax_tile(b.data(), n, m_in, &sb);
      ASSERT_EQ(ma, mb) << n;
      ASSERT_EQ(std::memcmp(&sa, &sb, sizeof sa), 0) << n << " " << sa << " " << sb;
      ASSERT_EQ(std::memcmp(a.data(), b.data(), n * 4), 0) << n;
      double want = 0;  // the sum is the sum of what was stored
      for (float p : a) want += p;
      ASSERT_NEAR(sa, want, 1e-12 * std::max(1.0, want)) << n;
    }
  }
}

TEST(WriteKv, F16IsRoundToNearestEvenAndSlotsAreExact) {
  Rng rng(5);
  const int64_t nkv = 2, hd = 37, row = nkv * hd, num_slots = 12;
  std::vector<uint16_t> k(num_slots * row, 0), v(num_slots * row, 0);
  KvLayerView kv{GgmlType::F16, k.data(), v.data(), num_slots, 4, nkv, hd};
  std::vector<float> src_k = rng.vec(3 * row, -70000.0f, 70000.0f), src_v = rng.vec(3 * row, -1e-6f, 1e-6f);
  src_k[0] = 65519.0f;  // rounds down to 65504
  src_k[1] = 65520.0f;  // rounds to inf
  const int64_t slots[3] = {11, 0, 5};
  write_kv(kv, src_k.data(), src_v.data(), slots, 3);
  for (int64_t t = 0; t < 3; ++t) {
    for (int64_t i = 0; i < row; ++i) {
      ASSERT_EQ(k[slots[t] * row + i], fp32_to_fp16(src_k[t * row + i])) << t << " " << i;
      ASSERT_EQ(v[slots[t] * row + i], fp32_to_fp16(src_v[t * row + i])) << t << " " << i;  // subnormals
    }
  }
  EXPECT_EQ(k[0 * row + 0], fp32_to_fp16(src_k[row]));
  EXPECT_EQ(fp16_to_fp32(k[11 * row + 0]), 65504.0f);
  EXPECT_TRUE(std::isinf(fp16_to_fp32(k[11 * row + 1])));
  for (int64_t i = 0; i < row; ++i) EXPECT_EQ(k[1 * row + i], 0);  // untouched slot
}

}  // namespace
}  // namespace pagellm::kernels

// write_kv and causal paged attention over a block table (vLLM's PagedAttention, Kwon et al.
// 2023), tiled over the keys with an online softmax (FlashAttention, Dao et al. 2022,
// arXiv:2205.14135, section 3.1; Milakov & Gimelshein 2018, arXiv:1805.02867):
//   for each tile of kKeyTile keys j (positions j0 .. j0 + kKeyTile - 1, clipped to [0, pos]):
//     s_j = (q . k_j) * scale;  m' = max(m, max_j s_j);  c = exp(m - m')  (0 on the first tile)
//     p_j = exp(s_j - m');  l = l * c + sum_j p_j  (double);  acc = acc * c + sum_j p_j v_j
//   (exp is ref::exp_f32 and sum_j a fixed 8-lane tree, ref::softmax_tile, so that the AVX2 path
//   gives the same bits)
//   out = acc * (float)(1 / l).
// Memory per (token, head) is one tile of scores and head_dim accumulators, whatever the context;
// the tile boundaries are key positions, so the result does not depend on the batch, the chunking
// or the threads.
//
// Key j of sequence s lives in slot  block_tables[s, j / block_size] * block_size + j % block_size.
// Example: block_size 16, block table [7, 2]: key 20 -> block 2, offset 4 -> slot 36.
//
// Every (token, head) pair is computed alone, keys in order 0..pos (first..pos with a sliding
// window of w keys, first = max(0, pos - w + 1); tiles start at first); (token, kv head) units are
// dealt to threads round-robin (causal rows differ in length). With AVX2, head_dim % 32 == 0 and
// no sliding window (an F32 or F16 cache), a sequence whose tokens in the batch times the query
// heads per kv head make >= 4 query rows (a prefill or a chunk; with GQA of 4 or more heads per kv
// head, a single decode token too) runs in (block of 16 tokens, kv head) units instead, when there
// are at least 2 of those per thread; their query rows share each key tile (run_query_block): the
// same tiles and arithmetic per (token, head), so the same bits.
#include <xmmintrin.h>  // _mm_prefetch

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/error.h"
#include "kernels/cpu/kernels_avx512.h"
#include "kernels/cpu/kernels_impl.h"
#include "kernels/cpu/ops.h"

namespace pagellm::kernels {
namespace {

void check_kv(const KvLayerView& kv) {
  PAGELLM_CHECK(kv.dtype == GgmlType::F32 || kv.dtype == GgmlType::F16, "kv dtype " + type_name(kv.dtype));
  PAGELLM_CHECK(kv.block_size > 0 && kv.num_kv_heads > 0 && kv.head_dim > 0 && kv.num_slots >= 0,
                "kv shape: block_size " + std::to_string(kv.block_size) + " num_kv_heads " +
                    std::to_string(kv.num_kv_heads) + " head_dim " + std::to_string(kv.head_dim));
  PAGELLM_CHECK(kv.isa <= cpu_isa(), std::string("kv isa ") + isa_name(kv.isa) + " is not on this CPU");
}

int64_t elem_bytes(GgmlType t) { return t == GgmlType::F32 ? 4 : 2; }

constexpr int64_t kKeyTile = 64;  // keys per online-softmax tile (4 blocks of 16)
// run_query_block: a sequence with at least kMinBlockRows query rows (its tokens in the batch x
// the query heads of a kv head) runs in blocks of kQueryBlock tokens, whose query heads share each
// transposed key tile. Below 4 rows the transposition costs more than the shared loads save; a
// decode token of TinyLlama's 8 heads per kv head attends in 0.67x the time of the per-token path
// (AVX2 EPYC, 128-256 keys).
constexpr int64_t kQueryBlock = 16;
constexpr int64_t kMinBlockRows = 4;

// One attention problem: query head `q` against kv head `kvh` of keys [first, pos] of one sequence
// (first = 0, or the start of the sliding window).
struct Problem {
  const float* q;  // [head_dim]
  int64_t first;
  int64_t pos;
  int64_t kvh;
  float* out;  // [head_dim]
};

// Slot of key j; checks the block id against the cache size.
int64_t slot_of(const KvLayerView& kv, const int32_t* table, int64_t j) {
  const int64_t block = table[j / kv.block_size];
  const int64_t slot = block * kv.block_size + j % kv.block_size;
  PAGELLM_CHECK(block >= 0 && slot < kv.num_slots, "block id " + std::to_string(block) + " for key " +
                                                       std::to_string(j) + ", num_slots " +
                                                       std::to_string(kv.num_slots));
  return slot;
}

// offsets[j]: element offset of key j's slot (slot * num_kv_heads * head_dim), shared by every
// head of the token. scores[j - j0] = (q . k_j) * scale for j in [j0, n).
template <bool kSimd>
void qk_scores(const KvLayerView& kv, const Problem& p, float scale, const int64_t* offsets, int64_t j0, int64_t n,
               float* scores) {
  const int64_t hd = kv.head_dim;
  const bool f16 = kv.dtype == GgmlType::F16;
  const auto* k32 = static_cast<const float*>(kv.k) + p.kvh * hd;
  const auto* k16 = static_cast<const uint16_t*>(kv.k) + p.kvh * hd;
  const int64_t row = kv.num_kv_heads * hd;  // elements per slot
  for (int64_t j = j0; j < n;) {
    float d[avx2::kMaxTileTokens];
    int m = 1;
    if constexpr (kSimd) {
      if (f16) {
        d[0] = avx2::dot_f16(k16 + offsets[j], p.q, hd);
      } else {
        // Up to 4 keys in consecutive slots in one tile, q as the tile's "weight" row: each
        // d[i] = avx2::dot_f32(k_{j+i}, q) bit for bit (the same FMAs with operands swapped).
        while (m < avx2::kMaxTileTokens && j + m < n && offsets[j + m] == offsets[j] + m * row) ++m;
        avx2::dot_f32_tile(p.q, k32 + offsets[j], row, hd, m, d);
      }
    } else {
      d[0] = f16 ? ref::dot_f16(k16 + offsets[j], p.q, hd) : ref::dot_f32(k32 + offsets[j], p.q, hd);
    }
    for (int i = 0; i < m; ++i, ++j) scores[j - j0] = d[i] * scale;
  }
}

// The scores of two query heads (q, q + head_dim) sharing kv head kvh, F32 keys, AVX-512: tiles of
// 4 keys in consecutive slots x the 2 queries (avx512::qk_f32_pair_tile), each dot product
// bit-identical to avx2::dot_f32(k, q), so to qk_scores<true>.
void qk_scores_pair_avx512(const KvLayerView& kv, const float* q, int64_t kvh, int64_t j0, int64_t n, float scale,
                           const int64_t* offsets, float* s0, float* s1) {
  const int64_t hd = kv.head_dim, row = kv.num_kv_heads * hd;
  const auto* k32 = static_cast<const float*>(kv.k) + kvh * hd;
  for (int64_t j = j0; j < n;) {
    float d[8];
    const int64_t o = offsets[j];
    const bool run4 =
        j + 4 <= n && offsets[j + 1] == o + row && offsets[j + 2] == o + 2 * row && offsets[j + 3] == o + 3 * row;
    const int r = run4 ? 4 : 1;
    avx512::qk_f32_pair_tile(k32 + o, row, r, q, hd, d);
    for (int i = 0; i < r; ++i, ++j) {
      s0[j - j0] = d[2 * i] * scale;
      s1[j - j0] = d[2 * i + 1] * scale;
    }
  }
}

// Running online-softmax state of one problem; the accumulators are the problem's `out`.
struct OnlineSoftmax {
  float m = -std::numeric_limits<float>::infinity();  // max score so far
  double l = 0.0;                                     // sum of exp(s_j - m) so far
};

// The softmax half of a tile of n keys: scores[0, n) (scaled q . k) are overwritten by
// p_j = exp(s_j - m'), st moves to the tile's end. Returns c = exp(m - m'), the factor of the
// accumulators (unused on the first tile).
template <bool kSimd>
float tile_softmax(float* scores, int64_t n, bool first, OnlineSoftmax& st) {
  double sum = 0.0;
  const float m = kSimd ? avx2::softmax_tile(scores, n, st.m, &sum) : ref::softmax_tile(scores, n, st.m, &sum);
  const float c = first ? 0.0f : ref::exp_f32(st.m - m);
  st.l = first ? sum : st.l * static_cast<double>(c) + sum;
  st.m = m;
  return c;
}

// After a tile that is not the first: out = out * c + pv, pv = sum_j p_j v_j of the tile.
template <bool kSimd>
void tile_merge(float* out, float c, const float* pv, int64_t hd) {
  if constexpr (kSimd) {
    avx2::rescale_add(out, c, pv, hd);
  } else {
    for (int64_t i = 0; i < hd; ++i) out[i] = std::fma(out[i], c, pv[i]);
  }
}

// One tile: keys [j0, j1) with their scaled scores in scores[0, j1 - j0) (overwritten by
// p_j = exp(s_j - m')). tmp: [head_dim] scratch.
template <bool kSimd>
void online_tile(const KvLayerView& kv, const Problem& p, const int64_t* offsets, int64_t j0, int64_t j1, float* scores,
                 OnlineSoftmax& st, float* tmp) {
  const int64_t hd = kv.head_dim;
  const bool f16 = kv.dtype == GgmlType::F16;
  const int64_t n = j1 - j0;
  const bool first = j0 == p.first;
  const float c = tile_softmax<kSimd>(scores, n, first, st);
  if constexpr (kSimd) {
    if (!f16 && hd % 8 == 0) {  // the two steps below in one pass, sum_j p_j v_j in registers
      const float* a[1] = {scores};
      float* outs[1] = {p.out};
      avx2::pv_merge_f32(static_cast<const float*>(kv.v) + p.kvh * hd, offsets + j0, n, a, 1, hd, &c, first, outs);
      return;
    }
  }
  float* pv = first ? p.out : tmp;  // sum_j p_j v_j of this tile
  if constexpr (kSimd) {
    if (f16) {
      avx2::pv_accumulate_f16(static_cast<const uint16_t*>(kv.v) + p.kvh * hd, offsets + j0, n, scores, hd, pv);
    } else {
      avx2::pv_accumulate_f32(static_cast<const float*>(kv.v) + p.kvh * hd, offsets + j0, n, scores, hd, pv);
    }
  } else {
    std::fill(pv, pv + hd, 0.0f);
    for (int64_t j = 0; j < n; ++j) {
      const float a = scores[j];
      for (int64_t i = 0; i < hd; ++i) {
        const int64_t o = offsets[j0 + j] + p.kvh * hd + i;
        const float vi = f16 ? fp16_to_fp32(static_cast<const uint16_t*>(kv.v)[o]) : static_cast<const float*>(kv.v)[o];
        pv[i] = std::fma(a, vi, pv[i]);
      }
    }
  }
  if (!first) tile_merge<kSimd>(p.out, c, tmp, hd);
}

// Two query heads p0, p1 of one kv head, one tile: online_tile for each, the loads of V shared
// (avx512::pv_accumulate_f32_pair / f16_pair with kv.isa >= kAvx512 and a head_dim it supports;
// else for an F32 cache avx2::pv_merge_f32, hd % 8 == 0; the same bits). An F16 cache below
// AVX-512 takes each head's online_tile p . V in turn. tmp: [2 * head_dim].
void online_tile_pair(const KvLayerView& kv, const Problem& p0, const Problem& p1, const int64_t* offsets, int64_t j0,
                      int64_t j1, float* s0, float* s1, OnlineSoftmax& st0, OnlineSoftmax& st1, float* tmp) {
  const int64_t hd = kv.head_dim, n = j1 - j0;
  const bool first = j0 == p0.first;
  const float c[2] = {tile_softmax<true>(s0, n, first, st0), tile_softmax<true>(s1, n, first, st1)};
  const bool paired = kv.isa >= Isa::kAvx512 && avx512::pv_pair_supported(hd);
  if (kv.dtype == GgmlType::F16) {
    const auto* v = static_cast<const uint16_t*>(kv.v) + p0.kvh * hd;
    if (paired) {
      avx512::pv_accumulate_f16_pair(v, offsets + j0, n, s0, s1, hd, first ? p0.out : tmp, first ? p1.out : tmp + hd);
    } else {
      avx2::pv_accumulate_f16(v, offsets + j0, n, s0, hd, first ? p0.out : tmp);
      avx2::pv_accumulate_f16(v, offsets + j0, n, s1, hd, first ? p1.out : tmp + hd);
    }
  } else {
    const auto* v = static_cast<const float*>(kv.v) + p0.kvh * hd;
    if (!paired) {
      const float* a[2] = {s0, s1};
      float* outs[2] = {p0.out, p1.out};
      avx2::pv_merge_f32(v, offsets + j0, n, a, 2, hd, c, first, outs);
      return;
    }
    avx512::pv_accumulate_f32_pair(v, offsets + j0, n, s0, s1, hd, first ? p0.out : tmp, first ? p1.out : tmp + hd);
  }
  if (!first) {
    tile_merge<true>(p0.out, c[0], tmp, hd);
    tile_merge<true>(p1.out, c[1], tmp + hd, hd);
  }
}

// out = acc / l.
void online_finish(const Problem& p, int64_t hd, const OnlineSoftmax& st) {
  const float inv = static_cast<float>(1.0 / st.l);
  for (int64_t i = 0; i < hd; ++i) p.out[i] *= inv;
}

// Prefetches the rows of kv head g's keys and values of keys [j0, j1) into L2 (prefetcht1), or
// only the keys into L1 (kKeysL1, prefetcht0). run_query_block takes the next key tile's rows into
// L2 with each chunk of keys it transposes, and the next chunk's keys into L1: a decode's key rows
// of one kv head are head_dim floats a slot row apart (4 kv heads: 256 bytes of every KiB), which
// the hardware prefetchers fetch late. Model 167 Xeon, TinyLlama Q4_0 decode after a 2048-token
// prompt, 2 threads, one process switching every token (per-token A/B, docs/benchmarks.md):
//   next tile into L2: a token 1.040-1.044x faster spread over the chunks, 1.031-1.039x in one
//   burst per tile, 1.029 / 1.022 with the burst two / three tiles ahead, 1.028 / 1.033 with the
//   burst into L1; with PAGELLM_NO_AVX512=1 (8-key chunks) 1.078-1.084x;
//   then the next chunk's keys into L1: 1.041-1.044x more (two chunks ahead 1.039-1.043x), with
//   PAGELLM_NO_AVX512=1 1.097-1.103x; the values of the tile's chunk into L1 as well: 0.993x.
// k, v: kv head g's first element in the cache; eb: bytes per element.
template <bool kKeysL1>
void prefetch_kv_rows(const uint8_t* k, const uint8_t* v, int64_t eb, const int64_t* offsets, int64_t j0, int64_t j1,
                      int64_t hd) {
  for (int64_t j = j0; j < j1; ++j) {
    for (int64_t e = 0; e < hd * eb; e += 64) {  // one cache line
      if constexpr (kKeysL1) {
        _mm_prefetch(reinterpret_cast<const char*>(k + offsets[j] * eb + e), _MM_HINT_T0);
      } else {
        _mm_prefetch(reinterpret_cast<const char*>(k + offsets[j] * eb + e), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(v + offsets[j] * eb + e), _MM_HINT_T1);
      }
    }
  }
}

// The keys j < nk at k + off[j] transposed into kt (avx512::transpose_keys16 when wide, else
// avx2::transpose_keys8). T: float or uint16_t (F16 cache).
template <class T>
void transpose_keys(const T* k, bool wide, const int64_t* off, int nk, int64_t hd, float* kt) {
  if (wide) {
    avx512::transpose_keys16(k, off, nk, hd, kt);
  } else {
    avx2::transpose_keys8(k, off, nk, hd, kt);
  }
}

// Per-thread scratch of run_query_block: the key tile transposed (lane = key) and the softmax
// state of every (token, head) of a block.
struct BlockScratch {
  float* kt;          // [kKeyTile / lanes][head_dim][lanes], 64-byte aligned
  OnlineSoftmax* st;  // [kQueryBlock * group]
};

// Tokens [ta, tb) of one sequence (no sliding window, so every token's tiles start at key 0) x
// the query heads of kv head g, head_dim % 32 == 0: for each key tile, its keys are transposed
// once (an F16 cache's converted to f32), `lanes` keys per vector (16 on AVX-512, 8 on AVX2), and
// scored against every query of the block (qk_scores_keys16 / 8: the bits of avx2::dot_f32, or
// dot_f16, per key, as the per-token path), then each (token, head) takes the tile exactly as the
// per-token path does (online_tile, or online_tile_pair for two heads; same order of tiles): the
// same bits, with each key loaded once per block instead of once per token and head (pair).
// offsets: [max position + 1] scratch; scores: [2 * kKeyTile]; tmp: [2 * head_dim].
void run_query_block(const float* q, const KvLayerView& kv, const AttentionBatch& b, const int32_t* table, int64_t ta,
                     int64_t tb, int64_t g, int64_t num_heads, float scale, float* out, int64_t* offsets, float* scores,
                     float* tmp, const BlockScratch& bs) {
  const int64_t hd = kv.head_dim, row = kv.num_kv_heads * hd, group = num_heads / kv.num_kv_heads;
  const bool wide = kv.isa >= Isa::kAvx512;
  const int64_t lanes = wide ? 16 : 8;
  // (hd % 32 == 0 here, so every ISA but AVX2 with an F16 cache shares the loads of V between a
  // pair of heads: online_tile_pair)
  const int64_t eb = elem_bytes(kv.dtype);
  const uint8_t* const kg = static_cast<const uint8_t*>(kv.k) + g * hd * eb;  // kv head g's keys, values
  const uint8_t* const vg = static_cast<const uint8_t*>(kv.v) + g * hd * eb;
  int64_t max_n = 0;
  for (int64_t t = ta; t < tb; ++t) max_n = std::max(max_n, b.positions[t] + 1);
  for (int64_t j = 0; j < max_n; ++j) offsets[j] = slot_of(kv, table, j) * row;
  for (int64_t i = 0; i < (tb - ta) * group; ++i) bs.st[i] = OnlineSoftmax{};
  auto problem = [&](int64_t t, int64_t h) {
    return Problem{q + (t * num_heads + h) * hd, 0, b.positions[t], g, out + (t * num_heads + h) * hd};
  };
  for (int64_t j0 = 0; j0 < max_n; j0 += kKeyTile) {
    const int64_t j1 = std::min(max_n, j0 + kKeyTile);
    for (int64_t c = 0; j0 + lanes * c < j1; ++c) {
      const int nk = static_cast<int>(std::min(lanes, j1 - j0 - lanes * c));
      float* kt = bs.kt + c * lanes * hd;
      const int64_t ahead = std::min(max_n, j0 + kKeyTile + lanes * c);  // chunk c of the next tile
      prefetch_kv_rows<false>(kg, vg, eb, offsets, ahead, std::min(max_n, ahead + lanes), hd);
      const int64_t next = std::min(max_n, j0 + lanes * (c + 1));  // the next chunk
      prefetch_kv_rows<true>(kg, vg, eb, offsets, next, std::min(max_n, next + lanes), hd);
      const int64_t* off = offsets + j0 + lanes * c;
      if (kv.dtype == GgmlType::F16) {
        transpose_keys(reinterpret_cast<const uint16_t*>(kg), wide, off, nk, hd, kt);
      } else {
        transpose_keys(reinterpret_cast<const float*>(kg), wide, off, nk, hd, kt);
      }
    }
    for (int64_t t = ta; t < tb; ++t) {
      const int64_t e = std::min(b.positions[t] + 1, j1);  // this token's keys of the tile: [j0, e)
      if (e <= j0) continue;
      for (int64_t h = g * group; h < (g + 1) * group;) {
        const bool pair = h + 1 < (g + 1) * group;
        const Problem p0 = problem(t, h);
        const float* qs[2] = {p0.q, p0.q + hd};
        for (int64_t c = 0; j0 + lanes * c < e; ++c) {
          float* outs[2] = {scores + lanes * c, scores + kKeyTile + lanes * c};
          const float* kt = bs.kt + c * lanes * hd;
          if (wide) {
            avx512::qk_scores_keys16(kt, hd, qs, pair ? 2 : 1, scale, outs);
          } else {
            avx2::qk_scores_keys8(kt, hd, qs, pair ? 2 : 1, scale, outs);
          }
        }
        OnlineSoftmax& st0 = bs.st[(t - ta) * group + (h - g * group)];
        if (!pair) {
          online_tile<true>(kv, p0, offsets, j0, e, scores, st0, tmp);
          h += 1;
          continue;
        }
        const Problem p1 = problem(t, h + 1);
        OnlineSoftmax& st1 = (&st0)[1];
        online_tile_pair(kv, p0, p1, offsets, j0, e, scores, scores + kKeyTile, st0, st1, tmp);
        h += 2;
      }
    }
  }
  for (int64_t t = ta; t < tb; ++t) {
    for (int64_t h = g * group; h < (g + 1) * group; ++h)
      online_finish(problem(t, h), hd, bs.st[(t - ta) * group + (h - g * group)]);
  }
}

// The (block, kv head) units of run_query_block for this batch on `max_threads` threads: the
// sequences with >= kMinBlockRows query rows here (tokens x `group` heads per kv head), in blocks
// of kQueryBlock, on AVX2 or wider kernels (an F32 or F16 cache), head_dim % 32 == 0 and no
// sliding window (every token's tiles start at key 0); 0 unless there are at least 2 units per
// thread (a short chunk of a model with one kv head would be a single unit, one busy thread). The
// batch is checked already.
int64_t query_block_units(const KvLayerView& kv, const AttentionBatch& b, int64_t group, int max_threads) {
  if (kv.isa < Isa::kAvx2 || kv.head_dim % 32 != 0 || b.sliding_window != 0) return 0;
  int64_t blocks = 0;
  for (int64_t s = 0; s < b.num_seqs; ++s) {
    const int64_t len = b.query_start_loc[s + 1] - b.query_start_loc[s];
    if (len * group >= kMinBlockRows) blocks += (len + kQueryBlock - 1) / kQueryBlock;
  }
  const int64_t units = blocks * kv.num_kv_heads;
  return units >= 2 * int64_t{max_threads} ? units : 0;
}

// The shape checks of the batch; returns the number of tokens and sets *max_keys to the longest
// key range (position + 1) of any token.
int64_t check_batch(const KvLayerView& kv, const AttentionBatch& b, int64_t* max_keys) {
  PAGELLM_CHECK(b.num_seqs >= 0 && b.query_start_loc[0] == 0, "query_start_loc[0] must be 0");
  PAGELLM_CHECK(b.sliding_window >= 0, "sliding_window " + std::to_string(b.sliding_window));
  *max_keys = 0;
  for (int64_t s = 0; s < b.num_seqs; ++s) {
    PAGELLM_CHECK(b.query_start_loc[s] <= b.query_start_loc[s + 1],
                  "query_start_loc not ascending at " + std::to_string(s));
    for (int64_t t = b.query_start_loc[s]; t < b.query_start_loc[s + 1]; ++t) {
      PAGELLM_CHECK(b.positions[t] >= 0 && b.positions[t] < b.max_blocks_per_seq * kv.block_size,
                    "position " + std::to_string(b.positions[t]) + " of token " + std::to_string(t));
      *max_keys = std::max(*max_keys, b.positions[t] + 1);
    }
  }
  return b.query_start_loc[b.num_seqs];
}

// The first key token t sees: 0, or the start of its sliding window.
int64_t first_key(const AttentionBatch& b, int64_t t) {
  return b.sliding_window > 0 ? std::max<int64_t>(0, b.positions[t] - b.sliding_window + 1) : 0;
}

constexpr int64_t round64(int64_t bytes) { return (bytes + 63) / 64 * 64; }

template <bool kSimd>
void attention_impl(const float* q, const KvLayerView& kv, const AttentionBatch& b, int64_t num_heads, float scale,
                    float* out, ThreadPool* pool, Workspace& ws) {
  check_kv(kv);
  PAGELLM_CHECK(num_heads > 0 && num_heads % kv.num_kv_heads == 0,
                "num_heads " + std::to_string(num_heads) + " num_kv_heads " + std::to_string(kv.num_kv_heads));
  int64_t max_keys = 0;
  const int64_t num_tokens = check_batch(kv, b, &max_keys);
  const int64_t group = num_heads / kv.num_kv_heads;
  const int64_t hd = kv.head_dim;
  const int64_t row = kv.num_kv_heads * hd;  // elements per slot
  // Pairs of query heads share each key load on AVX-512 CPUs (F32 KV cache; same bits).
  const bool pair512 = kSimd && kv.dtype == GgmlType::F32 && kv.isa >= Isa::kAvx512;
  const bool pv_pair = pair512 && avx512::pv_pair_supported(hd);
  const int max_threads = pool != nullptr ? pool->num_threads() : 1;
  // Query blocks (run_query_block) for this batch?
  const bool use_blocks = kSimd && query_block_units(kv, b, group, max_threads) > 0;
  // Scratch in ws: seq [num_tokens] (sequence of each token; -1 - s for a token of a block
  // sequence), block_start [num_tokens] (the first token of each block), then per
  // thread tmp [2, head_dim] f32, offsets [max_keys] (key offsets of the thread's current token or
  // block) and, with blocks, BlockScratch's arrays.
  const int64_t seq_bytes = round64(num_tokens * int64_t{sizeof(int32_t)});
  const int64_t start_bytes = use_blocks ? round64(num_tokens * int64_t{sizeof(int64_t)}) : 0;
  const int64_t tmp_bytes = round64(2 * hd * int64_t{sizeof(float)});
  const int64_t offsets_bytes = round64(max_keys * int64_t{sizeof(int64_t)});
  const int64_t kt_bytes = use_blocks ? round64(kKeyTile * hd * int64_t{sizeof(float)}) : 0;
  const int64_t st_bytes = use_blocks ? round64(kQueryBlock * group * int64_t{sizeof(OnlineSoftmax)}) : 0;
  const int64_t thread_bytes = tmp_bytes + offsets_bytes + kt_bytes + st_bytes;
  auto* scratch =
      static_cast<uint8_t*>(ws.get(Workspace::kAttention, seq_bytes + start_bytes + max_threads * thread_bytes));
  auto* seq = reinterpret_cast<int32_t*>(scratch);
  auto* block_start = reinterpret_cast<int64_t*>(scratch + seq_bytes);
  int64_t num_blocks = 0;
  for (int64_t s = 0; s < b.num_seqs; ++s) {
    const int64_t q0 = b.query_start_loc[s], q1 = b.query_start_loc[s + 1];
    const bool blocked = use_blocks && (q1 - q0) * group >= kMinBlockRows;
    for (int64_t t = q0; t < q1; ++t) seq[t] = static_cast<int32_t>(blocked ? -1 - s : s);
    if (blocked) {
      for (int64_t t = q0; t < q1; t += kQueryBlock) block_start[num_blocks++] = t;
    }
  }
  // Units of (block, kv head), taken by whichever thread is free, the last blocks (the longest
  // key ranges) first; then units of (token, kv head) for the other sequences' tokens, dealt
  // round-robin: their key offsets are computed once per unit and serve the `group` query heads
  // that share the kv head. No unit's result depends on the thread that runs it.
  const int64_t num_units = num_tokens * kv.num_kv_heads;
  const int64_t num_block_units = num_blocks * kv.num_kv_heads;
  std::atomic<int64_t> next_block_unit{0};
  auto work = [&](int thread, int num_threads) {
    float scores[2 * kKeyTile];  // one tile of scores for each of two heads
    uint8_t* mine = scratch + seq_bytes + start_bytes + thread * thread_bytes;
    auto* tmp = reinterpret_cast<float*>(mine);
    auto* offsets = reinterpret_cast<int64_t*>(mine + tmp_bytes);
    const BlockScratch bs{reinterpret_cast<float*>(mine + tmp_bytes + offsets_bytes),
                          reinterpret_cast<OnlineSoftmax*>(mine + tmp_bytes + offsets_bytes + kt_bytes)};
    for (int64_t i; (i = next_block_unit.fetch_add(1, std::memory_order_relaxed)) < num_block_units;) {
      const int64_t u = num_block_units - 1 - i;
      const int64_t blk = u / kv.num_kv_heads, g = u % kv.num_kv_heads;
      const int64_t ta = block_start[blk], s = -1 - seq[ta];
      const int64_t tb = std::min(ta + kQueryBlock, b.query_start_loc[s + 1]);
      run_query_block(q, kv, b, b.block_tables + s * b.max_blocks_per_seq, ta, tb, g, num_heads, scale, out, offsets,
                      scores, tmp, bs);
    }
    int64_t offsets_token = -1;
    for (int64_t u = thread; u < num_units; u += num_threads) {
      const int64_t t = u / kv.num_kv_heads, g = u % kv.num_kv_heads;
      if (seq[t] < 0) continue;  // in a block
      const int32_t* table = b.block_tables + seq[t] * b.max_blocks_per_seq;
      if (offsets_token != t) {
        for (int64_t j = first_key(b, t); j <= b.positions[t]; ++j) offsets[j] = slot_of(kv, table, j) * row;
        offsets_token = t;
      }
      const int64_t j_first = first_key(b, t), n = b.positions[t] + 1;
      for (int64_t h = g * group; h < (g + 1) * group;) {
        const Problem p{q + (t * num_heads + h) * hd, j_first, b.positions[t], g, out + (t * num_heads + h) * hd};
        if (pair512 && h + 1 < (g + 1) * group) {
          const Problem p1{p.q + hd, p.first, p.pos, g, p.out + hd};
          OnlineSoftmax st0, st1;
          for (int64_t j0 = j_first; j0 < n; j0 += kKeyTile) {
            const int64_t j1 = std::min(n, j0 + kKeyTile);
            qk_scores_pair_avx512(kv, p.q, g, j0, j1, scale, offsets, scores, scores + kKeyTile);
            if (pv_pair) {
              online_tile_pair(kv, p, p1, offsets, j0, j1, scores, scores + kKeyTile, st0, st1, tmp);
            } else {
              online_tile<kSimd>(kv, p, offsets, j0, j1, scores, st0, tmp);
              online_tile<kSimd>(kv, p1, offsets, j0, j1, scores + kKeyTile, st1, tmp);
            }
          }
          online_finish(p, hd, st0);
          online_finish(p1, hd, st1);
          h += 2;
        } else {
          OnlineSoftmax st;
          for (int64_t j0 = j_first; j0 < n; j0 += kKeyTile) {
            const int64_t j1 = std::min(n, j0 + kKeyTile);
            qk_scores<kSimd>(kv, p, scale, offsets, j0, j1, scores);
            online_tile<kSimd>(kv, p, offsets, j0, j1, scores, st, tmp);
          }
          online_finish(p, hd, st);
          h += 1;
        }
      }
    }
  };
  // Small batches run on the calling thread (same results; see matmul.cc).
  int64_t macs = 0;
  for (int64_t t = 0; t < num_tokens; ++t) macs += (b.positions[t] + 1 - first_key(b, t)) * num_heads * hd * 2;
  if (pool == nullptr || pool->num_threads() == 1 || num_units < 2 || macs < (int64_t{1} << 18)) {
    work(0, 1);
  } else {
    pool->run(work);
  }
}

}  // namespace

void write_kv(const KvLayerView& kv, const float* k, const float* v, const int64_t* slot_mapping, int64_t num_tokens) {
  check_kv(kv);
  const int64_t row = kv.num_kv_heads * kv.head_dim;
  const int64_t eb = elem_bytes(kv.dtype);
  const bool simd = kv.isa >= Isa::kAvx2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    PAGELLM_CHECK(slot >= 0 && slot < kv.num_slots, "slot " + std::to_string(slot) + " of token " + std::to_string(t) +
                                                        ", num_slots " + std::to_string(kv.num_slots));
    for (int which = 0; which < 2; ++which) {
      const float* src = (which == 0 ? k : v) + t * row;
      uint8_t* dst = static_cast<uint8_t*>(which == 0 ? kv.k : kv.v) + slot * row * eb;
      if (kv.dtype == GgmlType::F32) {
        std::memcpy(dst, src, static_cast<size_t>(row) * sizeof(float));
      } else if (simd) {
        avx2::convert_f32_to_f16(src, reinterpret_cast<uint16_t*>(dst), row);
      } else {
        auto* h = reinterpret_cast<uint16_t*>(dst);
        for (int64_t i = 0; i < row; ++i) h[i] = fp32_to_fp16(src[i]);
      }
    }
  }
}

void paged_attention(const float* q, const KvLayerView& kv, const AttentionBatch& batch, int64_t num_heads, float scale,
                     float* out, ThreadPool* pool, Workspace& ws) {
  if (kv.isa >= Isa::kAvx2) {
    attention_impl<true>(q, kv, batch, num_heads, scale, out, pool, ws);
  } else {
    attention_impl<false>(q, kv, batch, num_heads, scale, out, pool, ws);
  }
}

namespace ref {

float softmax_tile(float* s, int64_t n, float m_in, double* sum) {
  float m = m_in;
  for (int64_t j = 0; j < n; ++j) m = s[j] > m ? s[j] : m;
  double lane[8] = {};
  for (int64_t j = 0; j < n; ++j) {
    s[j] = exp_f32(s[j] - m);
    lane[j % 8] += static_cast<double>(s[j]);
  }
  *sum = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
  return m;
}

}  // namespace ref

int64_t paged_attention_block_units(const KvLayerView& kv, const AttentionBatch& batch, int64_t num_heads,
                                    const ThreadPool* pool) {
  check_kv(kv);
  PAGELLM_CHECK(num_heads > 0 && num_heads % kv.num_kv_heads == 0,
                "num_heads " + std::to_string(num_heads) + " num_kv_heads " + std::to_string(kv.num_kv_heads));
  int64_t max_keys = 0;
  check_batch(kv, batch, &max_keys);
  return query_block_units(kv, batch, num_heads / kv.num_kv_heads, pool != nullptr ? pool->num_threads() : 1);
}

void paged_attention_ref(const float* q, const KvLayerView& kv, const AttentionBatch& batch, int64_t num_heads,
                         float scale, float* out) {
  Workspace ws;  // the oracle's own: tests only
  attention_impl<false>(q, kv, batch, num_heads, scale, out, nullptr, ws);
}

}  // namespace pagellm::kernels

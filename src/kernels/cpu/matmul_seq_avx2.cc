// The "sequential" F32/F16/BF16 arithmetic of repacked float weights (WeightLayout::kRepacked16,
// ops.h; oracle ref::dot_*_seq) on AVX2 CPUs (AVX-512 ones: matmul_seq_avx512.cc, the same bits;
// pack_seq serves both): every output is one chain
// s = fma(w[r, k], x[t, k], s), k = 0, 1, ..., n - 1 from s = 0, so the vector lanes hold 16
// different rows, never parts of one sum, and the bits do not depend on the ISA or the batch.
//
// Layout: a tile of 16 rows keeps element (r, k) at k * 16 + r (F32), or at k * 16 g + r within
// a group of g tiles side by side (F16, BF16: tile_place, kernel_traits.h), so one step k loads
// the 16 rows' weights as two ymm and multiplies them by a broadcast activation (a GEMM micro-kernel in the
// BLIS style: Van Zee & van de Geijn 2015, "BLIS: A Framework for Rapidly Instantiating BLAS
// Functionality"). Register budget (16 ymm): 1 tile x 6 tokens = 12 accumulators + 2 weights +
// 1 broadcast: per step 2 weight loads, 6 broadcasts, 12 FMAs. Several tiles share a step when
// there are fewer tokens, so a decode GEMV still has 8 independent FMA chains (and, for F16 and
// BF16, one weight stream: the 4 tiles of a group).
//
// Blocking for many tokens (prefill): K in equal chunks of at most kSeqChunk steps; for each
// chunk, each tile of a block of kSeqBlockTiles tiles runs every token tile with its chunk of
// weights in L2 (16 x 6144 x 4 bytes at most once converted to f32). Accumulators are parked in y
// between chunks and reloaded: the chain of each output continues exactly where it stopped. Those
// reloads cost more than streaming long chunks from L2 (y's rows are far apart, so the parked
// sums come back from L3): an F16 pp512 on a Zen 5 VM (AVX2 kernels) ran 256 -> 512 -> 2048 steps
// at about 83, 87, 90 tokens/s (interleaved runs), and one chunk for ffn_down's 5632 columns
// instead of three +1.6 to +6.6% again (its BM_Matmul at 512 tokens, one thread, 73-80 -> 95-96
// GFLOP/s).
//
// Compiled with -O3 (CMakeLists.txt): at -O2 GCC 12 keeps the accumulator arrays on the stack.
#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dispatch_m.h"
#include "kernels/cpu/kernel_traits.h"
#include "kernels/cpu/kernels_impl.h"
#include "kernels/cpu/simd_avx2.h"

namespace pagellm::kernels::avx2 {
namespace {

constexpr int64_t kSeqChunk = 6144;  // wf: 384 KiB of stack
constexpr int64_t kSeqBlockTiles = 4;
constexpr int64_t kPrefetchBytes = 8192;
// The one-token decode tiles' distance on Intel (kDramNear, kDramToL2; more tokens keep
// kPrefetchBytes: AVX2 F16 batch-4 decode read 0.82x at 2 KiB): Xeon model 167, 2 threads, 64-token
// decodes alternating with 8 KiB (3 rounds F16, 2 BF16 and F32): AVX-512 F16 12.8-13.1 ->
// 14.2-14.3 tokens/s, BF16 12.6-12.9 -> 13.7-13.8, F32 7.1-7.3 -> 7.9-8.0; AVX2 F16 11.6-11.9 ->
// 13.6-13.9, BF16 11.6-11.7 -> 12.8-13.9, F32 6.9 -> 7.8. 1 KiB read less than 2 (F16 13.1).
constexpr int64_t kDecodeAhead = 2048;
// Prefetch distances of the token tiles that read a chunk's weights from L2 (Fetch::kL2), bytes.
constexpr int64_t kL2WeightsAhead = 4096;
constexpr int64_t kL2TokensAhead = 2048;
constexpr int64_t kConvertTiles = 6;

// The 16 rows of one step as two ymm (L: simd_avx2.h).
template <typename L>
struct Seq : L {
  static void load16(const typename L::T* p, __m256& a, __m256& b) {
    a = L::load8(p);
    b = L::load8(p + 8);
  }
};
using F32S = Seq<simd::F32Load>;
using F16S = Seq<simd::F16Load>;
using BF16S = Seq<simd::BF16Load>;

// What seq_kernel prefetches (into L1) as it goes:
//   kDram: the weights come from DRAM (one pass): them, kPrefetchBytes ahead.
//   kL2: the weights are a chunk in L2 (converted, or read by an earlier token tile) and the
//     packed tokens stream from L3 or DRAM: the weights kL2WeightsAhead and the tokens
//     kL2TokensAhead ahead. The hardware prefetchers alone left ffn_down (2048 x 5632, 512 tokens)
//     behind the other shapes: BM_Matmul/1/512/2/1/1 (AVX2, 2 threads, Zen 5 VM) 175-201 ->
//     197-205 GFLOP/s; F16 pp512 (AVX2) median of 11 interleaved runs 97.8 -> 99.9 tokens/s.
//   kDramNear: as kDram, kDecodeAhead ahead for one token: decode_fetch().
//   kDramToL2: as kDramNear, into L2 (prefetcht1): decode_fetch().
enum class Fetch { kNone, kDram, kL2, kDramNear, kDramToL2 };

// The decode tiles' prefetch. AMD: into L1, 8 KiB ahead (kDram). Intel: kDecodeAhead ahead, F32
// into L1 (kDramNear), F16 and BF16 into L2 (kDramToL2).
// F16 and BF16 into L2 rather than L1 (both 8 KiB ahead): Intel Xeon "model 167", AVX2,
// BM_MatmulFromDram into L2 / into L1 (4 alternating rounds): F16 1.24x one thread, 1.15x two;
// BF16 1.40x, 1.34x. On the AMD EPYC Zen 5 the AVX-512 F16 decode tile read 0.91x into L2
// (docs/benchmarks.md).
template <typename L>
Fetch decode_fetch() {
  static const Fetch fetch = cpu_is_amd()              ? Fetch::kDram
                             : std::is_same_v<L, F32S> ? Fetch::kDramNear
                                                       : Fetch::kDramToL2;
  return fetch;
}

// R consecutive tiles x M tokens, steps [k0, k1): step k of tile i at w + i * ts + k * ss (ts =
// 16 n, ss = 16 for tiles one after the other, as F32's; ts = 16, ss = 16 g within a group of g
// tiles, as F16's and BF16's: tile_place, kernel_traits.h). xp: the token tile packed by pack_seq
// (element (k, t) at k * M + t). y: token t, row 16 i + r at
// y[t * ys + 16 i + r]; `first`: the chains start at 0, else they continue from y.
// kStage (R = 1): also store the step's weights, converted to f32 (exact), at
// staged + (k - k0) * 16, for the tile's other token tiles.
template <typename L, int R, int M, bool kStage = false>
__attribute__((noinline)) void seq_kernel(const typename L::T* w, int64_t ts, int64_t ss, int64_t k0, int64_t k1,
                                          const float* xp, float* y, int64_t ys, bool first, Fetch fetch,
                                          float* staged = nullptr) {
  __m256 lo[R][M], hi[R][M];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < M; ++t) {
      if (first) {
        lo[r][t] = hi[r][t] = _mm256_setzero_ps();
      } else {
        lo[r][t] = _mm256_loadu_ps(y + t * ys + 16 * r);
        hi[r][t] = _mm256_loadu_ps(y + t * ys + 16 * r + 8);
      }
    }
  }
  auto step = [&](int64_t k) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      __m256 w0, w1;
      L::load16(w + r * ts + k * ss, w0, w1);
      if constexpr (kStage) {
        _mm256_store_ps(staged + (k - k0) * 16, w0);
        _mm256_store_ps(staged + (k - k0) * 16 + 8, w1);
      }
#pragma GCC unroll 6
      for (int t = 0; t < M; ++t) {
        const __m256 b = _mm256_broadcast_ss(xp + k * M + t);
        lo[r][t] = _mm256_fmadd_ps(w0, b, lo[r][t]);
        hi[r][t] = _mm256_fmadd_ps(w1, b, hi[r][t]);
      }
    }
  };
  // Prefetches once per kLine steps (a 64-byte line of a tile).
  constexpr int64_t kLine = 64 / (16 * sizeof(typename L::T));
  int64_t k = k0;
  if (fetch != Fetch::kNone) {
    const int64_t w_ahead = fetch == Fetch::kL2              ? kL2WeightsAhead
                            : fetch == Fetch::kDram || M > 1 ? kPrefetchBytes
                                                             : kDecodeAhead;
    const bool to_l2 = fetch == Fetch::kDramToL2;
    for (; k + kLine <= k1; k += kLine) {
      // The level as a template argument: a run-time hint made GCC drop prefetches.
      if (to_l2) {
        simd::prefetch_tile_steps<!std::is_same_v<L, F32S>, R, kLine, _MM_HINT_T1>(w, ts, ss, k, w_ahead);
      } else {
        simd::prefetch_tile_steps<!std::is_same_v<L, F32S>, R, kLine, _MM_HINT_T0>(w, ts, ss, k, w_ahead);
      }
      // M * 4 <= 24 bytes of tokens a step: a 64-byte line every 2 steps covers every line.
      if (fetch == Fetch::kL2 && k % 2 == 0)
        _mm_prefetch(reinterpret_cast<const char*>(xp + k * M) + kL2TokensAhead, _MM_HINT_T0);
#pragma GCC unroll 2
      for (int64_t s = 0; s < kLine; ++s) step(k + s);
    }
  } else {
    for (; k + 2 <= k1; k += 2) {
      step(k);
      step(k + 1);
    }
  }
  for (; k < k1; ++k) step(k);
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < M; ++t) {
      _mm256_storeu_ps(y + t * ys + 16 * r, lo[r][t]);
      _mm256_storeu_ps(y + t * ys + 16 * r + 8, hi[r][t]);
    }
  }
}

template <typename L, int R>
void seq_kernel_m(int m, const typename L::T* w, int64_t ts, int64_t ss, int64_t k0, int64_t k1, const float* xp,
                  float* y, int64_t ys, bool first, Fetch fetch) {
  with_m<kSeqTileTokens>(m, [&](auto mc) { seq_kernel<L, R, mc.value>(w, ts, ss, k0, k1, xp, y, ys, first, fetch); });
}

template <typename L>
void seq_tiles_many(const typename L::T* w, int64_t tiles, const float* xp, int64_t n, int64_t num_tokens, float* y,
                    int64_t ys);

// One token tile of m tokens (xp, y) x `tiles` tiles (from a group's start), steps [k0, k1), the
// weights read (and converted) as they go: several tiles at once for m <= 3, so that 8 to 12 FMA
// chains are in flight instead of the latency of 2 m. F16 and BF16 tiles lie in groups of
// kFloatTileGroup (tile_place): each group is one stream, run on its own.
template <typename L>
void seq_one_token_tile(int m, const typename L::T* w, int64_t tiles, int64_t n, int64_t k0, int64_t k1,
                        const float* xp, float* y, int64_t ys) {
  const int64_t tile_elems = 16 * n;
  const bool first = k0 == 0;
  // F32 keeps L1: into L2 its decode (4 streams, tiles one after the other) read 0.97x.
  const Fetch fetch = decode_fetch<L>();
  constexpr bool kGrouped = !std::is_same_v<L, F32S>;
  const int64_t block = kGrouped ? kFloatTileGroup : tiles;
  for (int64_t b0 = 0; b0 < tiles; b0 += block) {
    const int64_t b1 = std::min(tiles, b0 + block);
    const int64_t ts = kGrouped ? kTileRows : tile_elems, ss = kGrouped ? kTileRows * (b1 - b0) : kTileRows;
    auto at = [&](int64_t i) { return w + b0 * tile_elems + (i - b0) * ts; };
    auto yi = [&](int64_t i) { return y + 16 * i; };
    int64_t i = b0;
    if (m == 1) {
      for (; i + 4 <= b1; i += 4) seq_kernel<L, 4, 1>(at(i), ts, ss, k0, k1, xp, yi(i), ys, first, fetch);
      if (i + 2 <= b1) {  // the leftover tiles: 4 chains in flight rather than 2
        seq_kernel<L, 2, 1>(at(i), ts, ss, k0, k1, xp, yi(i), ys, first, fetch);
        i += 2;
      }
    } else if (m == 2) {  // 3 tiles at once, 2 where 3 would leave one alone (4 = 2 + 2)
      for (; b1 - i >= 3 && b1 - i != 4; i += 3)
        seq_kernel<L, 3, 2>(at(i), ts, ss, k0, k1, xp, yi(i), ys, first, fetch);
      for (; b1 - i >= 2; i += 2) seq_kernel<L, 2, 2>(at(i), ts, ss, k0, k1, xp, yi(i), ys, first, fetch);
    } else if (m == 3) {
      for (; i + 2 <= b1; i += 2) seq_kernel<L, 2, 3>(at(i), ts, ss, k0, k1, xp, yi(i), ys, first, fetch);
    }
    for (; i < b1; ++i) seq_kernel_m<L, 1>(m, at(i), ts, ss, k0, k1, xp, yi(i), ys, first, fetch);
  }
}

template <typename L>
void seq_tiles_t(const typename L::T* w, int64_t tiles, const float* xp, int64_t n, int64_t num_tokens, float* y,
                 int64_t ys) {
  if (num_tokens <= kSeqTileTokens) {
    // One token tile (decode): all of K in one pass per group of tiles, weights streamed once.
    seq_one_token_tile<L>(static_cast<int>(num_tokens), w, tiles, n, 0, n, xp, y, ys);
    return;
  }
  seq_tiles_many<L>(w, tiles, xp, n, num_tokens, y, ys);
}

// More than one token tile. Its own frame (noinline), so a decode does not reserve wf's 384 KiB.
template <typename L>
__attribute__((noinline)) void seq_tiles_many(const typename L::T* w, int64_t tiles, const float* xp, int64_t n,
                                              int64_t num_tokens, float* y, int64_t ys) {
  const int64_t tile_elems = 16 * n;
  // From kConvertTiles token tiles on (prefill), each chunk of weights is first converted to f32
  // (exact, into wf: L2), so the token tiles' inner loops load floats instead of converting every
  // step. Fewer tokens: the first token tile (which reads the weights from DRAM, converting them
  // as it goes) leaves the f32 chunk in wf for the others (a separate pass costs more here).
  const bool convert = !std::is_same_v<L, F32S> && num_tokens > (kConvertTiles - 1) * kSeqTileTokens;
  const bool stage = !std::is_same_v<L, F32S> && !convert;
  alignas(64) float wf[16 * kSeqChunk];
  const int64_t chunks = (n + kSeqChunk - 1) / kSeqChunk, chunk = (n + chunks - 1) / chunks;
  // A last token tile of 1 to 3 tokens runs after the block's tiles, for all of them at once
  // (seq_one_token_tile): alone, its 2 to 6 FMA chains ran at the latency of one (the 2 tokens
  // left by 512 = 85 x 6 + 2 took 0.6% of an F16 pp512).
  const int tail = static_cast<int>(num_tokens % kSeqTileTokens);
  const int64_t main_tokens = tail >= 1 && tail <= 3 ? num_tokens - tail : num_tokens;
  // Blocks of kSeqBlockTiles tiles: a group of F16 or BF16 (tile_place).
  constexpr bool kGrouped = !std::is_same_v<L, F32S>;
  static_assert(!kGrouped || kSeqBlockTiles == kFloatTileGroup);
  for (int64_t b0 = 0; b0 < tiles; b0 += kSeqBlockTiles) {
    const int64_t b1 = std::min(tiles, b0 + kSeqBlockTiles);
    const int64_t ts = kGrouped ? kTileRows : tile_elems, ss = kGrouped ? kTileRows * (b1 - b0) : kTileRows;
    for (int64_t k0 = 0; k0 < n; k0 += chunk) {
      const int64_t k1 = std::min(n, k0 + chunk);
      for (int64_t i = b0; i < b1; ++i) {
        const typename L::T* wi = w + b0 * tile_elems + (i - b0) * ts;
        if (convert) {
          for (int64_t k = k0; k < k1; ++k) {
            // A line per step in a group (16 x 2 bytes a step, 64-byte lines ss * 2 apart), else
            // per 2 steps.
            if (kGrouped || k % 2 == 0)
              _mm_prefetch(reinterpret_cast<const char*>(wi + k * ss) + kPrefetchBytes, _MM_HINT_T0);
            __m256 a, b;
            L::load16(wi + k * ss, a, b);
            _mm256_store_ps(wf + (k - k0) * 16, a);
            _mm256_store_ps(wf + (k - k0) * 16 + 8, b);
          }
        }
        for (int64_t t0 = 0; t0 < main_tokens; t0 += kSeqTileTokens) {
          const int m = static_cast<int>(std::min<int64_t>(kSeqTileTokens, main_tokens - t0));
          float* yc = y + t0 * ys + 16 * i;
          if (convert || (stage && t0 > 0)) {
            // The chunk's f32 copy (made above, or staged by the first token tile): the kernel
            // reads step k at w + k * 16, re-based to step 0 through the activations' offset.
            seq_kernel_m<F32S, 1>(m, wf, 0, 16, 0, k1 - k0, xp + t0 * n + k0 * m, yc, ys, k0 == 0, Fetch::kL2);
          } else if (stage) {  // (m == kSeqTileTokens: there is more than one token tile)
            seq_kernel<L, 1, kSeqTileTokens, true>(wi, ts, ss, k0, k1, xp + t0 * n, yc, ys, k0 == 0, Fetch::kDram, wf);
          } else {
            // F32: the first token tile prefetches the tile's next chunk (8 KiB ahead: the weights
            // come from DRAM once and the other tiles of the block run in between); the others
            // read the chunk from L2 (BM_Matmul/0/512/2/1/1: 165-178 -> 173-197 GFLOP/s).
            seq_kernel_m<L, 1>(m, wi, ts, ss, k0, k1, xp + t0 * n, yc, ys, k0 == 0,
                               t0 == 0 ? Fetch::kDram : Fetch::kL2);
          }
        }
      }
      if (main_tokens < num_tokens) {
        seq_one_token_tile<L>(tail, w + b0 * tile_elems, b1 - b0, n, k0, k1, xp + main_tokens * n,
                              y + main_tokens * ys + 16 * b0, ys);
      }
    }
  }
}

// Tokens x[t * n .. t * n + n), t < m, rounded to T (exact for F32) into tile[k * m + t]. F32 and
// F16: 8 steps x up to 8 tokens at a time, transposed in registers, so the tile is written in
// order (packing one token at a time swept 96-270 KiB of strided stores per token: 3.4% of an F16
// pp512 on Zen 5). The F16 rounding is round1's, 8 lanes at a time (vcvtps2ph / vcvtph2ps).
template <GgmlType T>
float round1(float v) {
  if constexpr (T == GgmlType::F16) return _cvtsh_ss(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT));
  if constexpr (T == GgmlType::BF16) return bf16_to_fp32(fp32_to_bf16(v));
  return v;
}

template <GgmlType T>
void pack_tile(const float* x, int m, int64_t n, float* tile) {
  int64_t k = 0;
  if constexpr (T != GgmlType::BF16) {
    for (; k + 8 <= n; k += 8) {
      for (int t0 = 0; t0 < m; t0 += 8) {
        const int g = std::min(8, m - t0);
        __m256 r[8];
        for (int i = 0; i < 8; ++i) {
          r[i] = i < g ? _mm256_loadu_ps(x + (t0 + i) * n + k) : _mm256_setzero_ps();
          if constexpr (T == GgmlType::F16) r[i] = _mm256_cvtph_ps(_mm256_cvtps_ph(r[i], _MM_FROUND_TO_NEAREST_INT));
        }
        simd::transpose8(r);
        if (g == 8) {
          for (int j = 0; j < 8; ++j) _mm256_storeu_ps(tile + (k + j) * m + t0, r[j]);
        } else {
          const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(g), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
          for (int j = 0; j < 8; ++j) _mm256_maskstore_ps(tile + (k + j) * m + t0, keep, r[j]);
        }
      }
    }
  }
  for (; k < n; ++k) {
    for (int t = 0; t < m; ++t) tile[k * m + t] = round1<T>(x[t * n + k]);
  }
}

}  // namespace

void pack_seq(GgmlType type, const float* x, int64_t num_tokens, int64_t n, int tile_tokens, float* out) {
  for (int64_t t0 = 0; t0 < num_tokens; t0 += tile_tokens) {
    const int m = static_cast<int>(std::min<int64_t>(tile_tokens, num_tokens - t0));
    if (type == GgmlType::F16) {
      pack_tile<GgmlType::F16>(x + t0 * n, m, n, out + t0 * n);
    } else if (type == GgmlType::BF16) {
      pack_tile<GgmlType::BF16>(x + t0 * n, m, n, out + t0 * n);
    } else {
      pack_tile<GgmlType::F32>(x + t0 * n, m, n, out + t0 * n);
    }
  }
}

template <GgmlType T>
void seq_tiles(const void* w, int64_t tiles, const float* xp, int64_t n, int64_t num_tokens, float* y,
               int64_t y_stride) {
  using L = std::conditional_t<T == GgmlType::F32, F32S, std::conditional_t<T == GgmlType::F16, F16S, BF16S>>;
  seq_tiles_t<L>(static_cast<const typename L::T*>(w), tiles, xp, n, num_tokens, y, y_stride);
}
template void seq_tiles<GgmlType::F32>(const void*, int64_t, const float*, int64_t, int64_t, float*, int64_t);
template void seq_tiles<GgmlType::F16>(const void*, int64_t, const float*, int64_t, int64_t, float*, int64_t);
template void seq_tiles<GgmlType::BF16>(const void*, int64_t, const float*, int64_t, int64_t, float*, int64_t);

}  // namespace pagellm::kernels::avx2

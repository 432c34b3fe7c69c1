// The "sequential" F32/F16/BF16 arithmetic of repacked float weights (ref::dot_*_seq; layout and
// blocking as matmul_seq_avx2.cc) with AVX-512: one zmm holds the 16 rows of a tile, so a step
// is one weight load per tile and one broadcast per token. Every output is the same FMA chain as
// on AVX2 (lanes are rows, never parts of one sum): the two files give the same bits.
//
// Register budget (32 zmm): 2 tiles x 12 tokens = 24 accumulators + 2 weights + 1 broadcast; per
// step 2 weight loads, 12 broadcasts, 24 FMAs. Decode (one token) runs 4 tiles at once: 4
// independent FMA chains, for F32 4 streams (8 read 25-35% less from DRAM on an AMD EPYC with
// AVX-512, BM_MatmulFromDram; 2 streams 10-15% less than 4); for F16 and BF16 two groups of 4
// tiles (tile_place, kernel_traits.h; a group's tiles lie side by side), 8 chains and 2 streams
// (seq_decode_two_groups).
// Entered only with an Isa >= kAvx512 (kernels_avx512.h).
// Compiled with -O3 (CMakeLists.txt): at -O2 GCC 12 keeps the accumulator arrays on the stack.
// (GCC 12 reports its own avx512fintrin.h helpers as maybe-uninitialized in the BF16 loads.)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernel_traits.h"
#include "kernels/cpu/kernels_avx512.h"
#include "kernels/cpu/simd_avx2.h"

namespace pagellm::kernels::avx512 {
namespace {

// Steps per K chunk: the accumulators of every output are parked in y and reloaded once per
// chunk, which cost more than streaming a long chunk of weights from L2: on a Zen 5 VM an F16
// pp512 ran 256 -> 512 -> 1024 -> 2048 steps at about 148, 157, 157, 165 tokens/s (interleaved
// runs). Its f32 copy (wf) is 2 tiles x 16 x 2048 x 4 B = 256 KiB of stack.
constexpr int64_t kSeqChunk = 2048;
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
constexpr int64_t kConvertTiles = 3;  // token tiles of 12 from which chunks are converted to f32

struct F32S {
  using T = float;
  static __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
};
struct F16S {
  using T = uint16_t;
  static __m512 load16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
};
struct BF16S {
  using T = uint16_t;
  static __m512 load16(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};

// What seq_kernel prefetches (into L1) as it goes, as in matmul_seq_avx2.cc:
//   kDram: the weights come from DRAM (one pass): them, kPrefetchBytes ahead.
//   kL2: the weights are a chunk in L2 and the packed tokens stream from L3 or DRAM: the weights
//     kL2WeightsAhead and the tokens kL2TokensAhead ahead. Without it ffn_down (2048 x 5632,
//     512 tokens) ran at 3/4 of the other shapes' speed: BM_Matmul/1/512/2/3/1 (2 threads, Zen 5
//     VM) 284-314 -> 340-378 GFLOP/s, F16 pp512 165.7-171.2 -> 170.8-177.2 tokens/s (5
//     interleaved runs each).
//   kDramNear: as kDram, kDecodeAhead ahead for one token: decode_fetch().
//   kDramToL2: as kDramNear, into L2 (prefetcht1): decode_fetch().
enum class Fetch { kNone, kDram, kL2, kDramNear, kDramToL2 };

// The decode tiles' prefetch. AMD: into L1, 8 KiB ahead (kDram). Intel: kDecodeAhead ahead, F32
// into L1 (kDramNear), F16 and BF16 into L2 (kDramToL2).
// F16 and BF16 into L2 rather than L1 (both 8 KiB ahead): Intel Xeon "model 167",
// BM_MatmulFromDram into L2 / into L1 (4 alternating rounds): F16 1.75x one thread, 1.65x two;
// BF16 1.77x, 1.77x (16 or 32 KiB ahead, or prefetcht2: the same). On the AMD EPYC Zen 5 this
// tile's F16 decode read 0.91x into L2 (docs/benchmarks.md).
template <typename L>
Fetch decode_fetch() {
  static const Fetch fetch = cpu_is_amd()              ? Fetch::kDram
                             : std::is_same_v<L, F32S> ? Fetch::kDramNear
                                                       : Fetch::kDramToL2;
  return fetch;
}

// R consecutive tiles x M tokens, steps [0, nk) (w and xp offset to the chunk's first step):
// step k of tile i at w + i * ts + k * ss (ts = 16 n, ss = 16 for tiles one after the other, as
// F32's; ts = 16, ss = 16 g within a group of g tiles, as F16's and BF16's: tile_place,
// kernel_traits.h); xp: element (k, t) at k * M + t. y: token t, row 16 i + r at
// y[t * ys + 16 i + r]. `first`: chains start at 0, else continue from y.
template <typename L, int R, int M>
void seq_kernel(const typename L::T* w, int64_t ts, int64_t ss, int64_t nk, const float* xp, float* y, int64_t ys,
                bool first, Fetch fetch) {
  __m512 acc[R][M];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < M; ++t) acc[r][t] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + t * ys + 16 * r);
  }
  auto step = [&](int64_t k) {
    __m512 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = L::load16(w + r * ts + k * ss);
#pragma GCC unroll 12
    for (int t = 0; t < M; ++t) {
      const __m512 b = _mm512_set1_ps(xp[k * M + t]);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], b, acc[r][t]);
    }
  };
  constexpr int64_t kLine = 64 / (16 * sizeof(typename L::T));  // steps per 64-byte line of a tile
  int64_t k = 0;
  if (fetch != Fetch::kNone) {
    const int64_t ahead = fetch == Fetch::kL2              ? kL2WeightsAhead
                          : fetch == Fetch::kDram || M > 1 ? kPrefetchBytes
                                                           : kDecodeAhead;
    const int64_t w_ahead = ahead * (M > 3 ? ss / 16 : 1);
    const bool to_l2 = fetch == Fetch::kDramToL2;
    for (; k + kLine <= nk; k += kLine) {
      // The level as a template argument: a run-time hint made GCC drop prefetches.
      if (to_l2) {
        simd::prefetch_tile_steps<!std::is_same_v<L, F32S>, R, kLine, _MM_HINT_T1>(w, ts, ss, k, w_ahead);
      } else {
        simd::prefetch_tile_steps<!std::is_same_v<L, F32S>, R, kLine, _MM_HINT_T0>(w, ts, ss, k, w_ahead);
      }
      // Up to 48 bytes of tokens a step (kLine is 1 for f32 weights): every line is covered.
      if (fetch == Fetch::kL2) _mm_prefetch(reinterpret_cast<const char*>(xp + k * M) + kL2TokensAhead, _MM_HINT_T0);
#pragma GCC unroll 1
      for (int64_t s = 0; s < kLine; ++s) step(k + s);
    }
  }
  // (Not unrolled: two interleaved steps of the 2 x 12 tile need more than 32 registers.)
#pragma GCC unroll 1
  for (; k < nk; ++k) step(k);
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < M; ++t) _mm512_storeu_ps(y + t * ys + 16 * r, acc[r][t]);
  }
}

// One token on two groups of kFloatTileGroup tiles (F16, BF16: tile_place), wa and wb, anywhere
// in the weights (seq_tiles_t pairs group g of a range with group g + half): a thread reads two
// DRAM streams, each prefetched kTwoGroupsAhead bytes ahead into L1, which DRAM serves faster
// than one (as the Q4_0 tiles' pairs, matmul_r16_avx512vnni.cc). Xeon model 167, F16 TinyLlama
// decode, 2 threads, 2 alternating rounds: one group at a time (one stream, 2 KiB ahead into
// L2) 12.4-12.8 tokens/s, two groups 1 KiB ahead into L1 14.0-14.3; 2 KiB into L2 13.7-14.5,
// 512 bytes 14.3-14.7, and in 4 more rounds 512 bytes 14.5-15.3 against 1 KiB 14.9-15.6.
// ya, yb: the groups' 64 outputs. Each row's chain is seq_kernel<L, 4, 1>'s (from 0, the steps
// in order): the same bits.
constexpr int64_t kTwoGroupsAhead = 1024;
template <typename L>
void seq_decode_two_groups(const typename L::T* wa, const typename L::T* wb, int64_t n, const float* xp, float* ya,
                           float* yb) {
  using T = typename L::T;
  constexpr int64_t kSs = 16 * kFloatTileGroup;                                   // elements of a group's step
  constexpr int64_t kLine = 64 / (16 * sizeof(T));                                // steps per line of a tile
  constexpr int64_t kLines = kLine * kSs * static_cast<int64_t>(sizeof(T)) / 64;  // lines per kLine steps
  const T* const w[2] = {wa, wb};
  __m512 acc[2][kFloatTileGroup];
  for (auto& g : acc) {
    for (auto& a : g) a = _mm512_setzero_ps();
  }
  auto step = [&](int64_t k) {
    const __m512 b = _mm512_set1_ps(xp[k]);
#pragma GCC unroll 2
    for (int g = 0; g < 2; ++g) {
#pragma GCC unroll 4
      for (int r = 0; r < kFloatTileGroup; ++r)
        acc[g][r] = _mm512_fmadd_ps(L::load16(w[g] + k * kSs + 16 * r), b, acc[g][r]);
    }
  };
  int64_t k = 0;
  for (; k + kLine <= n; k += kLine) {
#pragma GCC unroll 2
    for (int g = 0; g < 2; ++g) {
      const char* line = reinterpret_cast<const char*>(w[g] + k * kSs) + kTwoGroupsAhead;
#pragma GCC unroll 4
      for (int64_t q = 0; q < kLines; ++q) _mm_prefetch(line + 64 * q, _MM_HINT_T0);
    }
#pragma GCC unroll 2
    for (int64_t s = 0; s < kLine; ++s) step(k + s);
  }
  for (; k < n; ++k) step(k);
  for (int r = 0; r < kFloatTileGroup; ++r) {
    _mm512_storeu_ps(ya + 16 * r, acc[0][r]);
    _mm512_storeu_ps(yb + 16 * r, acc[1][r]);
  }
}

using KernelFn = void (*)(const void*, int64_t, int64_t, int64_t, const float*, float*, int64_t, bool, Fetch);

template <typename L, int R, int M>
void kernel_fn(const void* w, int64_t ts, int64_t ss, int64_t nk, const float* xp, float* y, int64_t ys, bool first,
               Fetch fetch) {
  seq_kernel<L, R, M>(static_cast<const typename L::T*>(w), ts, ss, nk, xp, y, ys, first, fetch);
}

// Kernels by token count m (1..12): R tiles at a time with R * m accumulators, and the 1-tile
// kernel for the tiles left over.
template <typename L>
struct Kernels {
  static constexpr KernelFn one[12] = {kernel_fn<L, 1, 1>,  kernel_fn<L, 1, 2>,  kernel_fn<L, 1, 3>,
                                       kernel_fn<L, 1, 4>,  kernel_fn<L, 1, 5>,  kernel_fn<L, 1, 6>,
                                       kernel_fn<L, 1, 7>,  kernel_fn<L, 1, 8>,  kernel_fn<L, 1, 9>,
                                       kernel_fn<L, 1, 10>, kernel_fn<L, 1, 11>, kernel_fn<L, 1, 12>};
  static constexpr KernelFn many[12] = {kernel_fn<L, 4, 1>,  kernel_fn<L, 4, 2>,  kernel_fn<L, 4, 3>,
                                        kernel_fn<L, 2, 4>,  kernel_fn<L, 2, 5>,  kernel_fn<L, 2, 6>,
                                        kernel_fn<L, 2, 7>,  kernel_fn<L, 2, 8>,  kernel_fn<L, 2, 9>,
                                        kernel_fn<L, 2, 10>, kernel_fn<L, 2, 11>, kernel_fn<L, 2, 12>};
  static constexpr int many_tiles[12] = {4, 4, 4, 2, 2, 2, 2, 2, 2, 2, 2, 2};
  // For the tiles left after the groups of many_tiles (a thread's chunk of tiles is rarely a
  // multiple of 4): 2 tiles at once for m <= 3, so a decode keeps 2 FMA chains in flight
  // instead of the latency of one.
  static constexpr KernelFn two[3] = {kernel_fn<L, 2, 1>, kernel_fn<L, 2, 2>, kernel_fn<L, 2, 3>};
};

template <typename L>
void seq_tiles_t(const typename L::T* w, int64_t tiles, const float* xp, int64_t n, int64_t num_tokens, float* y,
                 int64_t ys) {
  const int64_t tile_elems = 16 * n;
  // F16 and BF16 tiles lie in groups of kFloatTileGroup (tile_place), F32's one after the other.
  constexpr bool kGrouped = !std::is_same_v<L, F32S>;
  // The tile stride ts and step stride ss in the block of tiles [b0, b1) (a group if kGrouped).
  const int64_t ts = kGrouped ? kTileRows : tile_elems;
  auto steps = [&](int64_t b0, int64_t b1) { return kGrouped ? kTileRows * (b1 - b0) : kTileRows; };
  auto at = [&](int64_t b0, int64_t i) { return w + b0 * tile_elems + (i - b0) * ts; };
  if (num_tokens <= kSeqTileTokens) {
    // One token tile (decode, small batches): all of K per group of tiles, weights streamed once.
    const int m = static_cast<int>(num_tokens);
    // F32 keeps L1: into L2 its decode (4 streams, tiles one after the other) read 0.97x.
    const Fetch fetch = decode_fetch<L>();
    const int rt = Kernels<L>::many_tiles[m - 1];
    const int64_t block = kGrouped ? kFloatTileGroup : tiles;
    int64_t paired = 0;  // tiles of the groups run two at once
    if (kGrouped && m == 1) {
      const int64_t h = tiles / kFloatTileGroup / 2;  // pairs of full groups
      for (int64_t g = 0; g < h; ++g) {
        const int64_t a = g * kFloatTileGroup, b = (g + h) * kFloatTileGroup;
        seq_decode_two_groups<L>(w + a * tile_elems, w + b * tile_elems, n, xp, y + 16 * a, y + 16 * b);
      }
      paired = 2 * h * kFloatTileGroup;
    }
    for (int64_t b0 = paired; b0 < tiles; b0 += block) {
      const int64_t b1 = std::min(tiles, b0 + block), ss = steps(b0, b1);
      int64_t i = b0;
      for (; i + rt <= b1; i += rt) Kernels<L>::many[m - 1](at(b0, i), ts, ss, n, xp, y + 16 * i, ys, true, fetch);
      if (m <= 3 && i + 2 <= b1) {
        Kernels<L>::two[m - 1](at(b0, i), ts, ss, n, xp, y + 16 * i, ys, true, fetch);
        i += 2;
      }
      for (; i < b1; ++i) Kernels<L>::one[m - 1](at(b0, i), ts, ss, n, xp, y + 16 * i, ys, true, fetch);
    }
    return;
  }
  // Blocks of kSeqBlockTiles tiles (a group of F16 or BF16), K in chunks: a chunk of 2 tiles'
  // weights stays in L2 while every token tile runs over it, and so does a token tile's chunk of
  // activations. From kConvertTiles token tiles on (prefill) the chunk is first converted to f32
  // (exact), so the inner loops load floats instead of converting every step.
  static_assert(!kGrouped || kSeqBlockTiles == kFloatTileGroup);
  const bool convert = !std::is_same_v<L, F32S> && num_tokens > (kConvertTiles - 1) * kSeqTileTokens;
  alignas(64) float wf[2 * 16 * kSeqChunk];
  for (int64_t b0 = 0; b0 < tiles; b0 += kSeqBlockTiles) {
    const int64_t b1 = std::min(tiles, b0 + kSeqBlockTiles), ss = steps(b0, b1);
    for (int64_t k0 = 0; k0 < n; k0 += kSeqChunk) {
      const int64_t nk = std::min(n, k0 + kSeqChunk) - k0;
      for (int64_t i = b0; i < b1;) {
        const bool pair = i + 2 <= b1;
        const int64_t nt = pair ? 2 : 1;
        const typename L::T* wc = at(b0, i) + k0 * ss;
        if (convert) {
          // One line per step of a grouped pair (2 x 16 x 2 bytes), else one per 2 steps.
          const int64_t every = ts == kTileRows ? 1 : 2;
          for (int64_t j = 0; j < nt; ++j) {
            for (int64_t k = 0; k < nk; ++k) {
              if (k % every == 0)
                _mm_prefetch(reinterpret_cast<const char*>(wc + j * ts + k * ss) + kPrefetchBytes, _MM_HINT_T0);
              _mm512_store_ps(wf + j * 16 * kSeqChunk + k * 16, L::load16(wc + j * ts + k * ss));
            }
          }
        }
        for (int64_t t0 = 0; t0 < num_tokens; t0 += kSeqTileTokens) {
          const int m = static_cast<int>(std::min<int64_t>(kSeqTileTokens, num_tokens - t0));
          const float* xc = xp + t0 * n + k0 * m;
          float* yc = y + t0 * ys + 16 * i;
          if (convert) {
            if (pair && m >= 4) {
              Kernels<F32S>::many[m - 1](wf, 16 * kSeqChunk, 16, nk, xc, yc, ys, k0 == 0, Fetch::kL2);
            } else {
              for (int64_t j = 0; j < nt; ++j)
                Kernels<F32S>::one[m - 1](wf + j * 16 * kSeqChunk, 0, 16, nk, xc, yc + 16 * j, ys, k0 == 0, Fetch::kL2);
            }
          } else {
            // The first token tile prefetches the tiles' next chunk (the weights come from DRAM
            // once); the others read it from L2 (F32), or are few (F16, BF16 below kConvertTiles).
            const Fetch f = t0 == 0 ? Fetch::kDram : std::is_same_v<L, F32S> ? Fetch::kL2 : Fetch::kNone;
            if (pair && m >= 4) {
              Kernels<L>::many[m - 1](wc, ts, ss, nk, xc, yc, ys, k0 == 0, f);
            } else {
              for (int64_t j = 0; j < nt; ++j)
                Kernels<L>::one[m - 1](wc + j * ts, ts, ss, nk, xc, yc + 16 * j, ys, k0 == 0, f);
            }
          }
        }
        i += nt;
      }
    }
  }
}

}  // namespace

template <GgmlType T>
void seq_tiles(const void* w, int64_t tiles, const float* xp, int64_t n, int64_t num_tokens, float* y,
               int64_t y_stride) {
  using L = std::conditional_t<T == GgmlType::F32, F32S, std::conditional_t<T == GgmlType::F16, F16S, BF16S>>;
  seq_tiles_t<L>(static_cast<const typename L::T*>(w), tiles, xp, n, num_tokens, y, y_stride);
}
template void seq_tiles<GgmlType::F32>(const void*, int64_t, const float*, int64_t, int64_t, float*, int64_t);
template void seq_tiles<GgmlType::F16>(const void*, int64_t, const float*, int64_t, int64_t, float*, int64_t);
template void seq_tiles<GgmlType::BF16>(const void*, int64_t, const float*, int64_t, int64_t, float*, int64_t);

}  // namespace pagellm::kernels::avx512

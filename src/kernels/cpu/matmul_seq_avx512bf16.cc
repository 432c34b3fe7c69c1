// BF16 weights on VDPBF16PS (AVX512_BF16): the "sequential" arithmetic of ref::dot_bf16_seq, two
// steps of every chain per instruction, with the same bits as the FMA tiles of the other ISAs.
//
// VDPBF16PS (Intel SDM vol. 2C, "VDPBF16PS"; AMD64 APM vol. 4) computes, per f32 lane i,
//   acc += a[2i + 1] * b[2i + 1];  acc += a[2i] * b[2i]
// the odd pair first, each product of two bf16 exact in f32, each addition rounded once to
// nearest even: two links s = fma(w, x, s) of a chain, once w[k] sits in the odd (high) half and
// w[k + 1] in the even (low) half of a dword, and so does x. (Checked on an AMD Zen 5 against
// fmaf on 3.2 million random lanes, and by tests/kernels/matmul_test.cc.) One exception: the
// instruction treats subnormal inputs as zero and flushes subnormal results (whatever MXCSR
// says), where the FMA chain keeps them, so a weight, activation or partial sum below 1.2e-38 in
// magnitude can give other bits than the other ISAs (docs/design.md, "Kernel table").
//
// Weights stay in WeightLayout::kRepacked16 (step k of a tile: 16 rows of bf16, in groups of 4
// tiles side by side, tile_place): steps 2p and 2p + 1 are two 32-byte loads into one zmm, and one
// VPERMW makes the 16 pairs w[2p] << 16 | w[2p + 1]. A prefill from
// kConvertTiles token tiles on permutes each K chunk of two weight tiles once into an L2 buffer (as
// matmul_seq_avx512.cc converts to f32, at half the bytes); fewer tokens permute every load.
// Activations: pack_bf16_pairs, token tiles of kSeqTileTokens, dword (p, t) at p * m + t.
//
// Register budget (32 zmm): 2 tiles x 12 tokens = 24 accumulators + 2 weights + 1 broadcast (+ the
// permutation index); per pair of steps 2 weight loads, 12 broadcasts, 24 VDPBF16PS. Decode and
// batches of up to 3 tokens run 4 tiles at once, 4 to 12 tokens 2 tiles. Entered only with
// Isa::kAvx512Bf16.
// Compiled with -O3 (CMakeLists.txt), as the other tile files.
// (GCC 12 reports its own avx512fintrin.h helpers as maybe-uninitialized in _mm512_set1_epi32.)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <bit>

#include "kernels/cpu/kernel_traits.h"
#include "kernels/cpu/kernels_avx512.h"
#include "kernels/cpu/simd_avx2.h"

namespace pagellm::kernels::avx512 {
namespace {

constexpr int64_t kSeqChunk = 2048;  // steps per K chunk (1024 pairs), as matmul_seq_avx512.cc
constexpr int64_t kSeqBlockTiles = 4;
constexpr int64_t kPrefetchBytes = 8192;
constexpr int64_t kL2WeightsAhead = 4096;
constexpr int64_t kL2TokensAhead = 2048;
constexpr int64_t kConvertTiles = 3;

// The VPERMW index that turns the 32 bf16 of steps 2p (words 0-15, rows 0-15) and 2p + 1 (words
// 16-31) into 16 dwords: low word = row r of step 2p + 1, high word = row r of step 2p.
__m512i pair_index() {
  alignas(64) uint16_t idx[32];
  for (int r = 0; r < 16; ++r) {
    idx[2 * r] = static_cast<uint16_t>(16 + r);
    idx[2 * r + 1] = static_cast<uint16_t>(r);
  }
  return _mm512_load_si512(idx);
}

// What the kernel prefetches into L1, as in matmul_seq_avx512.cc: kDram, the weights (one pass
// from DRAM) kPrefetchBytes ahead; kL2, a permuted chunk kL2WeightsAhead ahead and the tokens
// kL2TokensAhead ahead.
enum class Fetch { kNone, kDram, kL2 };

// R consecutive tiles x M tokens, pairs [0, np) (w and xp offset to the chunk's first pair); xp:
// dword (p, t) at p * M + t. kPermute: weights in the repacked layout, step k of tile i (16 bf16)
// at w + i * ts + k * ss (ts = 16, ss = 16 g in a group of g tiles: tile_place, kernel_traits.h),
// permuted per load; else already in pairs, pair p of tile i at w + i * ts + 32 p (ss = 16). y:
// token t, row 16 i + r at y[t * ys + 16 i + r]. `first`: chains start at 0, else continue from y.
template <bool kPermute, int R, int M>
void dp_kernel(const uint16_t* w, int64_t ts, int64_t ss, int64_t np, const uint32_t* xp, float* y, int64_t ys,
               bool first, Fetch fetch) {
  const __m512i idx = pair_index();
  __m512 acc[R][M];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < M; ++t) acc[r][t] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + t * ys + 16 * r);
  }
  const int64_t w_ahead = fetch == Fetch::kDram ? kPrefetchBytes : kL2WeightsAhead;
#pragma GCC unroll 1
  for (int64_t p = 0; p < np; ++p) {
    if (fetch != Fetch::kNone) simd::prefetch_tile_steps<kPermute, R, 2>(w, ts, ss, 2 * p, w_ahead);
    __m512bh wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const uint16_t* wp = w + r * ts + 2 * p * ss;
      __m512i v;
      if constexpr (kPermute) {
        // Steps 2p and 2p + 1 (apart in a group) as words 0-15 and 16-31, then into pairs.
        v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp))),
                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + ss)), 1);
        v = _mm512_permutexvar_epi16(idx, v);
      } else {
        v = _mm512_loadu_si512(wp);
      }
      wv[r] = std::bit_cast<__m512bh>(v);
    }
    if (fetch == Fetch::kL2) _mm_prefetch(reinterpret_cast<const char*>(xp + p * M) + kL2TokensAhead, _MM_HINT_T0);
#pragma GCC unroll 12
    for (int t = 0; t < M; ++t) {
      const __m512bh b = std::bit_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(xp[p * M + t])));
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv[r], b);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < M; ++t) _mm512_storeu_ps(y + t * ys + 16 * r, acc[r][t]);
  }
}

using KernelFn = void (*)(const uint16_t*, int64_t, int64_t, int64_t, const uint32_t*, float*, int64_t, bool, Fetch);

// Kernels by token count m (1..12), as in matmul_seq_avx512.cc: `many` runs R tiles at a time
// (4 for m <= 3, else 2), `two` 2 tiles for m <= 3, `one` a single tile.
template <bool kPermute>
struct Kernels {
  static constexpr KernelFn one[12] = {
      dp_kernel<kPermute, 1, 1>, dp_kernel<kPermute, 1, 2>,  dp_kernel<kPermute, 1, 3>,  dp_kernel<kPermute, 1, 4>,
      dp_kernel<kPermute, 1, 5>, dp_kernel<kPermute, 1, 6>,  dp_kernel<kPermute, 1, 7>,  dp_kernel<kPermute, 1, 8>,
      dp_kernel<kPermute, 1, 9>, dp_kernel<kPermute, 1, 10>, dp_kernel<kPermute, 1, 11>, dp_kernel<kPermute, 1, 12>};
  static constexpr KernelFn many[12] = {
      dp_kernel<kPermute, 4, 1>, dp_kernel<kPermute, 4, 2>,  dp_kernel<kPermute, 4, 3>,  dp_kernel<kPermute, 2, 4>,
      dp_kernel<kPermute, 2, 5>, dp_kernel<kPermute, 2, 6>,  dp_kernel<kPermute, 2, 7>,  dp_kernel<kPermute, 2, 8>,
      dp_kernel<kPermute, 2, 9>, dp_kernel<kPermute, 2, 10>, dp_kernel<kPermute, 2, 11>, dp_kernel<kPermute, 2, 12>};
  static constexpr int many_tiles[12] = {4, 4, 4, 2, 2, 2, 2, 2, 2, 2, 2, 2};
  static constexpr KernelFn two[3] = {dp_kernel<kPermute, 2, 1>, dp_kernel<kPermute, 2, 2>, dp_kernel<kPermute, 2, 3>};
};

// ggml's fp32 -> bf16 rounding (core/dtype.h fp32_to_bf16: round to nearest even, NaN kept quiet),
// left in the high half of each f32 lane.
__m512i round_bf16_high(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i bias =
      _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1)));
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(_mm512_add_epi32(x, bias), nan, x, _mm512_set1_epi32(0x40 << 16));
}

}  // namespace

void pack_bf16_pairs(const float* x, int64_t num_tokens, int64_t n, uint32_t* out) {
  const int64_t np = n / 2;
  // The high words of 32 rounded floats (words 1, 3, 5, ... of a and b) as 16 pairs: low word =
  // element 2j + 1, high word = element 2j.
  alignas(64) uint16_t idx_words[32];
  for (int j = 0; j < 16; ++j) {
    const int lane = 2 * j;  // element 2j of the 32 (a holds 0-15, b 16-31)
    idx_words[2 * j] = static_cast<uint16_t>(2 * (lane + 1) + 1);
    idx_words[2 * j + 1] = static_cast<uint16_t>(2 * lane + 1);
  }
  const __m512i idx = _mm512_load_si512(idx_words);
  for (int64_t t0 = 0; t0 < num_tokens; t0 += kSeqTileTokens) {
    const int m = static_cast<int>(std::min<int64_t>(kSeqTileTokens, num_tokens - t0));
    uint32_t* tile = out + t0 * np;
    for (int t = 0; t < m; ++t) {
      const float* xt = x + (t0 + t) * n;
      int64_t p = 0;
      for (; p + 16 <= np; p += 16) {
        const __m512i a = round_bf16_high(_mm512_loadu_ps(xt + 2 * p));
        const __m512i b = round_bf16_high(_mm512_loadu_ps(xt + 2 * p + 16));
        alignas(64) uint32_t pairs[16];
        _mm512_store_si512(pairs, _mm512_permutex2var_epi16(a, idx, b));
        for (int j = 0; j < 16; ++j) tile[(p + j) * m + t] = pairs[j];
      }
      for (; p < np; ++p) {
        tile[p * m + t] = static_cast<uint32_t>(fp32_to_bf16(xt[2 * p])) << 16 | fp32_to_bf16(xt[2 * p + 1]);
      }
    }
  }
}

void seq_tiles_bf16_pairs(const void* wv, int64_t tiles, const uint32_t* xp, int64_t n, int64_t num_tokens, float* y,
                          int64_t ys) {
  const auto* w = static_cast<const uint16_t*>(wv);
  const int64_t tile_elems = 16 * n, np = n / 2;
  // Tiles lie in groups of kFloatTileGroup (tile_place): tile i of the group [b0, b1) at
  // w + b0 * tile_elems + 16 (i - b0), its steps 16 (b1 - b0) bf16 apart.
  static_assert(kSeqBlockTiles == kFloatTileGroup);
  auto at = [&](int64_t b0, int64_t i) { return w + b0 * tile_elems + kTileRows * (i - b0); };
  if (num_tokens <= kSeqTileTokens) {
    // One token tile (decode, small batches): all of K per group of tiles, weights streamed once.
    const int m = static_cast<int>(num_tokens);
    const int rt = Kernels<true>::many_tiles[m - 1];
    for (int64_t b0 = 0; b0 < tiles; b0 += kFloatTileGroup) {
      const int64_t b1 = std::min(tiles, b0 + kFloatTileGroup), ss = kTileRows * (b1 - b0);
      int64_t i = b0;
      for (; i + rt <= b1; i += rt)
        Kernels<true>::many[m - 1](at(b0, i), kTileRows, ss, np, xp, y + 16 * i, ys, true, Fetch::kDram);
      if (m <= 3 && i + 2 <= b1) {
        Kernels<true>::two[m - 1](at(b0, i), kTileRows, ss, np, xp, y + 16 * i, ys, true, Fetch::kDram);
        i += 2;
      }
      for (; i < b1; ++i)
        Kernels<true>::one[m - 1](at(b0, i), kTileRows, ss, np, xp, y + 16 * i, ys, true, Fetch::kDram);
    }
    return;
  }
  // Blocks of kSeqBlockTiles tiles (a group), K in chunks, as matmul_seq_avx512.cc; from
  // kConvertTiles token tiles on, each chunk of a pair of tiles is permuted once into wb (2 x 16 x
  // 2048 x 2 B = 128 KiB of stack), which every token tile then reads from L2.
  const bool convert = num_tokens > (kConvertTiles - 1) * kSeqTileTokens;
  const __m512i idx = pair_index();
  alignas(64) uint16_t wb[2 * 16 * kSeqChunk];
  for (int64_t b0 = 0; b0 < tiles; b0 += kSeqBlockTiles) {
    const int64_t b1 = std::min(tiles, b0 + kSeqBlockTiles), ss = kTileRows * (b1 - b0);
    for (int64_t k0 = 0; k0 < n; k0 += kSeqChunk) {
      const int64_t nk = std::min(n, k0 + kSeqChunk) - k0, npc = nk / 2;
      for (int64_t i = b0; i < b1;) {
        const bool pair = i + 2 <= b1;
        const int64_t nt = pair ? 2 : 1;
        const uint16_t* wc = at(b0, i) + k0 * ss;
        if (convert) {
          for (int64_t j = 0; j < nt; ++j) {
            for (int64_t p = 0; p < npc; ++p) {
              const uint16_t* src = wc + j * kTileRows + 2 * p * ss;
              _mm_prefetch(reinterpret_cast<const char*>(src) + kPrefetchBytes, _MM_HINT_T0);
              _mm_prefetch(reinterpret_cast<const char*>(src + ss) + kPrefetchBytes, _MM_HINT_T0);
              const __m512i v =
                  _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src))),
                                     _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + ss)), 1);
              _mm512_store_si512(wb + j * 16 * kSeqChunk + p * 32, _mm512_permutexvar_epi16(idx, v));
            }
          }
        }
        for (int64_t t0 = 0; t0 < num_tokens; t0 += kSeqTileTokens) {
          const int m = static_cast<int>(std::min<int64_t>(kSeqTileTokens, num_tokens - t0));
          const uint32_t* xc = xp + t0 * np + (k0 / 2) * m;
          float* yc = y + t0 * ys + 16 * i;
          if (convert) {
            if (pair && m >= 4) {
              Kernels<false>::many[m - 1](wb, 16 * kSeqChunk, 16, npc, xc, yc, ys, k0 == 0, Fetch::kL2);
            } else {
              for (int64_t j = 0; j < nt; ++j)
                Kernels<false>::one[m - 1](wb + j * 16 * kSeqChunk, 0, 16, npc, xc, yc + 16 * j, ys, k0 == 0,
                                           Fetch::kL2);
            }
          } else {
            // The first token tile prefetches the tiles' chunk from DRAM; the second reads it
            // from L2.
            const Fetch f = t0 == 0 ? Fetch::kDram : Fetch::kNone;
            if (pair && m >= 4) {
              Kernels<true>::many[m - 1](wc, kTileRows, ss, npc, xc, yc, ys, k0 == 0, f);
            } else {
              for (int64_t j = 0; j < nt; ++j)
                Kernels<true>::one[m - 1](wc + j * kTileRows, kTileRows, ss, npc, xc, yc + 16 * j, ys, k0 == 0, f);
            }
          }
        }
        i += nt;
      }
    }
  }
}

}  // namespace pagellm::kernels::avx512

// AMX-INT8 tiles for prompts on repacked Q8_0 weights (layout and arithmetic: kernels_r16.h):
// 16 tokens x three 16-row weight tiles per step. Entered only when amx_int8_usable() and the Isa
// is kAvx512Vnni or above (the epilogue is AVX-512).
//
// Sources: Intel 64 and IA-32 Architectures Software Developer's Manual, vol. 2 (LDTILECFG,
// TILELOADD, TDPBSUD, TILESTORED) and the Intel Optimization Reference Manual, chapter "Intel
// AMX". A repacked block group is already the B operand's layout: 8 rows of 64 bytes, row c =
// bytes 4c .. 4c + 3 of the 16 weight rows (VNNI's 4 bytes per lane). One TDPBSUD multiplies the
// 16 tokens' signed activation bytes (A: 16 rows of 32 bytes, read in place from the XBlocks) by
// the unsigned weight bytes: the exact int32 block sums minus the offset, for 16 x 16 outputs. The
// float work per block, token and row is the VNNI tile's (matmul_r16_avx512vnni.cc): isum +
// init, convert, d_w x d_x, FMA, blocks in order. So the bits are every other tile's, for every
// batch (tests/kernels/matmul_test.cc).
//
// Q8_0 only: Q4_0's weights would have to be unpacked to bytes for every block, and on the model
// 207 Xeon that made its prompts 5-6% slower than the VNNI tile (docs/benchmarks.md).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "kernels/cpu/kernels_r16.h"

namespace pagellm::kernels::r16 {
namespace {

constexpr int kTokens = 16;  // tokens per tile multiply (A and C rows)

// LDTILECFG's 64-byte operand, palette 1 (SDM vol. 2, "LDTILECFG").
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles: 0 .. 2 = C (16 tokens x 16 int32), one per weight tile; 4 = A (16 tokens x 32 bytes),
// shared by them; 5 .. 7 = B (8 x 64 bytes). The tile registers are not renamed and a multiply's
// latency is several times its issue interval: in a standalone loop on the model 207 Xeon, one
// weight tile per A load took 36-39 ns per block and tile, three per A load 15-27 ns.
constexpr int kMaxTiles = kAmxTiles;
TileConfig make_config() {
  TileConfig c;
  for (int t = 0; t < kMaxTiles; ++t) {
    c.rows[t] = kTokens;
    c.colsb[t] = 64;
    c.rows[5 + t] = 8;
    c.colsb[5 + t] = 64;
  }
  c.rows[4] = kTokens;
  c.colsb[4] = 32;
  return c;
}

// Bytes of one block group of a tile: 16 f16 scales, then the B operand.
constexpr int64_t kGroupBytes = kRows * static_cast<int64_t>(sizeof(BlockQ8_0));

// Weight tile j's block sums with the A tile loaded: C = j, B = 5 + j, stored to c. (The tile
// intrinsics take tile numbers as literal text, hence the macro.)
#define PAGELLM_AMX_TILE(C, B)       \
  _tile_zero(C);                     \
  _tile_loadd(B, g + 2 * kRows, 64); \
  _tile_dpbsud(C, 4, B);             \
  _tile_stored(C, c, 64)
template <int kJ>
[[gnu::always_inline]] inline void multiply(const uint8_t* g, int32_t* c) {
  if constexpr (kJ == 0) {
    PAGELLM_AMX_TILE(0, 5);
  } else if constexpr (kJ == 1) {
    PAGELLM_AMX_TILE(1, 6);
  } else {
    PAGELLM_AMX_TILE(2, 7);
  }
}
#undef PAGELLM_AMX_TILE

// acc[j][k] += block b of weight tile j . token k (c[j]: its 16 x 16 int32 sums, token-major).
// The accumulators live in memory: 16 tokens x kNt tiles do not fit the registers.
template <int kNt>
[[gnu::always_inline]] inline void epilogue(const uint8_t* const* g, const XBlock* x, int64_t xs, int64_t b,
                                            const int32_t (*c)[kTokens * 16], float (*acc)[kTokens * 16]) {
  __m512 dw[kNt];
  for (int j = 0; j < kNt; ++j) dw[j] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g[j])));
#pragma GCC unroll 4
  for (int k = 0; k < kTokens; ++k) {
    const XBlock& xb = x[k * xs + b];
    const __m512i init = _mm512_set1_epi32(xb.init);
    const __m512 d = _mm512_set1_ps(xb.d);
    for (int j = 0; j < kNt; ++j) {
      const __m512i isum = _mm512_add_epi32(_mm512_load_si512(c[j] + 16 * k), init);
      const __m512 s = _mm512_mul_ps(dw[j], d);
      float* a = acc[j] + 16 * k;
      _mm512_store_ps(a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), s, _mm512_load_ps(a)));
    }
  }
}

// kNt weight tiles (tile j at tile + j * tile_bytes) x 16 tokens -> y[k * ys + 16 j + r].
// Software pipeline: the tile unit multiplies block b into one set of buffers while the vector
// units run block b - 1's epilogue from the other.
template <int kNt>
void run16(const uint8_t* tile, int64_t tile_bytes, const XBlock* x, int64_t xs, int64_t nb, float* y, int64_t ys) {
  alignas(64) int32_t c[2][kMaxTiles][kTokens * 16];
  alignas(64) float acc[kMaxTiles][kTokens * 16] = {};
  const int64_t a_stride = xs * static_cast<int64_t>(sizeof(XBlock));
  const uint8_t* g[kMaxTiles];
  const uint8_t* g_prev[kMaxTiles];
  if (nb == 0) {  // no blocks: zeros, as the VNNI tile gives
    for (int k = 0; k < kTokens; ++k) std::memset(y + k * ys, 0, 16 * kNt * sizeof(float));
    return;
  }
  for (int64_t b = 0; b < nb; ++b) {
    for (int j = 0; j < kNt; ++j) g[j] = tile + j * tile_bytes + b * kGroupBytes;
    _tile_loadd(4, x[b].qs, a_stride);
    multiply<0>(g[0], c[b % 2][0]);
    if constexpr (kNt > 1) multiply<1>(g[1], c[b % 2][1]);
    if constexpr (kNt > 2) multiply<2>(g[2], c[b % 2][2]);
    if (b > 0) epilogue<kNt>(g_prev, x, xs, b - 1, c[(b - 1) % 2], acc);
    for (int j = 0; j < kNt; ++j) g_prev[j] = g[j];
  }
  epilogue<kNt>(g_prev, x, xs, nb - 1, c[(nb - 1) % 2], acc);
  for (int k = 0; k < kTokens; ++k) {
    for (int j = 0; j < kNt; ++j) std::memcpy(y + k * ys + 16 * j, acc[j] + 16 * k, 16 * sizeof(float));
  }
}

void tiles16(const void* w, int64_t tiles, int64_t tile_bytes, const XBlock* x, int64_t xs, int64_t nb, int64_t runs,
             float* y, int64_t ys) {
  static const TileConfig config = make_config();
  _tile_loadconfig(&config);
  const auto* t = static_cast<const uint8_t*>(w);
  for (int64_t i = 0; i < tiles; i += kMaxTiles) {
    const uint8_t* ti = t + i * tile_bytes;
    for (int64_t r = 0; r < runs; ++r) {
      const XBlock* xr = x + r * kTokens * xs;
      float* yr = y + r * kTokens * ys + i * kRows;
      switch (std::min<int64_t>(kMaxTiles, tiles - i)) {
        case 1: run16<1>(ti, tile_bytes, xr, xs, nb, yr, ys); break;
        case 2: run16<2>(ti, tile_bytes, xr, xs, nb, yr, ys); break;
        default: run16<3>(ti, tile_bytes, xr, xs, nb, yr, ys); break;
      }
    }
  }
  _tile_release();
}

}  // namespace

bool amx_self_test() {
  // 16 tokens x one 8-row block of weights: a[k][i] = k - i, w[n][i] = n + 2 i (unsigned), so
  // sum_i (k - i) (n + 2 i) for i in 0 .. 31.
  alignas(64) int8_t a[kTokens][32];
  alignas(64) uint8_t w[8][64];
  alignas(64) int32_t c[kTokens * 16];
  for (int k = 0; k < kTokens; ++k) {
    for (int i = 0; i < 32; ++i) a[k][i] = static_cast<int8_t>(k - i);
  }
  for (int n = 0; n < 16; ++n) {
    for (int i = 0; i < 32; ++i) w[i / 4][4 * n + i % 4] = static_cast<uint8_t>(n + 2 * i);
  }
  static const TileConfig config = make_config();
  _tile_loadconfig(&config);
  // GCC 12's TILELOADD asm names no memory input: the stores above must happen first.
  asm volatile("" ::: "memory");
  _tile_zero(0);
  _tile_loadd(4, a, 32);
  _tile_loadd(5, w, 64);
  _tile_dpbsud(0, 4, 5);
  _tile_stored(0, c, 64);
  _tile_release();
  for (int k = 0; k < kTokens; ++k) {
    for (int n = 0; n < 16; ++n) {
      int32_t want = 0;
      for (int i = 0; i < 32; ++i) want += (k - i) * (n + 2 * i);
      if (c[k * 16 + n] != want) return false;
    }
  }
  return true;
}

void dot_q8_0_tiles16_amx(const void* w, int64_t tiles, int64_t tile_bytes, const XBlock* x, int64_t xs, int64_t nb,
                          int64_t runs, float* y, int64_t ys) {
  tiles16(w, tiles, tile_bytes, x, xs, nb, runs, y, ys);
}

}  // namespace pagellm::kernels::r16

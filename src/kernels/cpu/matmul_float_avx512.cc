// AVX-512 tiles for F32 / F16 / BF16 weights (entered only when use_avx512_vnni(); contracts in
// kernels_avx512.h). Two arithmetics:
//   - matrices of >= kMinWideCols columns: the "wide" tiles below (one 16-lane accumulator per
//     output, ref::dot_*_wide, bit-identical to matmul_wide_avx2.cc), with the blocking described
//     at wide_rows;
//   - narrower matrices: dot_float_tile, bit-identical to avx2::dot_*_tile (ggml's arithmetic):
//
// The AVX2 kernel keeps 4 accumulators of 8 lanes per output (elements i + 8a + l of each step of
// 32 go to accumulator a, lane l), then 8-element steps into accumulator 0, then
// hsum((a0 + a1) + (a2 + a3)) and a scalar FMA tail. Here a zmm holds two of them, [a0 | a1] and
// [a2 | a3]: elements i .. i + 15 of a step land in exactly those lanes, each lane sees the same
// FMA sequence, and the reduction takes the halves apart in the same order. What changes is the
// register budget (32 zmm): a tile of R rows x M tokens keeps 2 R M accumulators in registers,
// where the AVX2 tile of 1 x 4 already spills.
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/kernels_avx512.h"

namespace pagellm::kernels::avx512 {
namespace {

constexpr int64_t kPrefetchBytes = 8192;  // weight rows stream from DRAM (matmul_avx512.cc)

struct F32W {
  using T = float;
  static __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 load8(const float* p) { return _mm512_castps256_ps512(_mm256_loadu_ps(p)); }
  static float scalar(const float* p) { return *p; }
};
struct F16W {
  using T = uint16_t;
  static __m512 load16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 load8(const uint16_t* p) {
    return _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static float scalar(const uint16_t* p) { return _cvtsh_ss(*p); }
};
struct BF16W {
  using T = uint16_t;
  static __m512 load16(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static __m512 load8(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm512_castps256_ps512(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
  }
  static float scalar(const uint16_t* p) { return bf16_to_fp32(*p); }
};

// Sum of 8 lanes in the order of avx2::hsum.
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// R rows (row r at w + r * ws elements) x M tokens (token k at x + k * xs): out[r * M + k].
template <typename L, int R, int M>
void float_tile(const typename L::T* w, int64_t ws, const float* x, int64_t xs, int64_t n, float* out) {
  __m512 a01[R][M], a23[R][M];
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < M; ++k) a01[r][k] = a23[r][k] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 w01[R], w23[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const typename L::T* wr = w + r * ws + i;
      _mm_prefetch(reinterpret_cast<const char*>(wr) + kPrefetchBytes, _MM_HINT_T0);
      if constexpr (sizeof(typename L::T) == 4) {
        _mm_prefetch(reinterpret_cast<const char*>(wr) + kPrefetchBytes + 64, _MM_HINT_T0);
      }
      w01[r] = L::load16(wr);
      w23[r] = L::load16(wr + 16);
    }
#pragma GCC unroll 8
    for (int k = 0; k < M; ++k) {
      const __m512 x01 = _mm512_loadu_ps(x + k * xs + i), x23 = _mm512_loadu_ps(x + k * xs + i + 16);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        a01[r][k] = _mm512_fmadd_ps(w01[r], x01, a01[r][k]);
        a23[r][k] = _mm512_fmadd_ps(w23[r], x23, a23[r][k]);
      }
    }
  }
  for (; i + 8 <= n; i += 8) {  // into accumulator 0 = lanes 0..7 of a01
    for (int r = 0; r < R; ++r) {
      const __m512 w0 = L::load8(w + r * ws + i);
      for (int k = 0; k < M; ++k) {
        const __m512 xv = _mm512_castps256_ps512(_mm256_loadu_ps(x + k * xs + i));
        a01[r][k] = _mm512_mask3_fmadd_ps(w0, xv, a01[r][k], 0x00FF);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int k = 0; k < M; ++k) {
      const __m256 a0 = _mm512_castps512_ps256(a01[r][k]), a1 = _mm512_extractf32x8_ps(a01[r][k], 1);
      const __m256 a2 = _mm512_castps512_ps256(a23[r][k]), a3 = _mm512_extractf32x8_ps(a23[r][k], 1);
      float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
      for (int64_t j = i; j < n; ++j) s = std::fma(L::scalar(w + r * ws + j), x[k * xs + j], s);
      out[r * M + k] = s;
    }
  }
}

template <typename L>
void dispatch(const typename L::T* w, int64_t ws, int r, const float* x, int64_t xs, int64_t n, int m, float* out) {
  if (r == 4 && m == 1) return float_tile<L, 4, 1>(w, ws, x, xs, n, out);
  if (r == 4 && m == 2) return float_tile<L, 4, 2>(w, ws, x, xs, n, out);
  PAGELLM_CHECK(r == 1, "float tile: unsupported shape");
  switch (m) {
    case 1: return float_tile<L, 1, 1>(w, ws, x, xs, n, out);
    case 2: return float_tile<L, 1, 2>(w, ws, x, xs, n, out);
    case 3: return float_tile<L, 1, 3>(w, ws, x, xs, n, out);
    case 4: return float_tile<L, 1, 4>(w, ws, x, xs, n, out);
  }
  __builtin_unreachable();
}

// ---- "wide" arithmetic: one 16-lane accumulator per output ----------------------------------
// Elements i + l of each step of 16 go to lane l (a last partial step only to its lanes), then
// the 16 lanes are summed as hsum8(lo + hi). ref::dot_*_wide emulates it.
//
// Blocking: the activations of a tile of M tokens are packed step by step (pack_wide: the M
// vectors of one step of 16 elements are adjacent, so a chunk of K is one contiguous run that
// stays in L1 without cache-set conflicts), a block of rows is computed in chunks of K
// (kWideChunk elements) while every 4-row tile of a sub-block of kWideSubRows rows runs over the
// chunk, and a tile's accumulators are parked in memory between chunks. Each lane still sees its
// elements in ascending order, so the bits do not depend on the blocking.

// Where a wide tile reads its R weight rows: in the file's layout (RowsAt), or from a sub-block
// converted to f32 and packed step by step (Packed: the R vectors of one step of 16 elements are
// adjacent, zero past n). Both give the same values, so the same bits.
template <typename L>
struct RowsAt {
  using T = typename L::T;
  static constexpr bool kPacked = false;
  const T* w;
  int64_t ws;
  // Elements i .. i + 15 of row r, with p = at(i).
  const T* at(int64_t i) const { return w + i; }
  static constexpr int64_t kStep = 16;  // elements of p per step
  __m512 load(const T* p, int r) const { return L::load16(p + r * ws); }
  const char* addr(const T* p, int r) const { return reinterpret_cast<const char*>(p + r * ws); }
  __m512 tail(int r, int64_t i1, int64_t n) const {
    alignas(64) float wt[16] = {};
    for (int64_t j = i1; j < n; ++j) wt[j - i1] = L::scalar(w + r * ws + j);
    return _mm512_load_ps(wt);
  }
};
template <int R>
struct Packed {
  using T = float;
  static constexpr bool kPacked = true;
  const float* ap;  // the tile's rows: step j, row r at ap + (j * R + r) * 16
  const float* at(int64_t i) const { return ap + i * R; }
  static constexpr int64_t kStep = 16 * R;
  __m512 load(const float* p, int r) const { return _mm512_load_ps(p + r * 16); }
  const char* addr(const float*, int) const { return nullptr; }
  __m512 tail(int r, int64_t i1, int64_t) const { return load(at(i1), r); }
};

// Steps [i0, i1) (multiples of 16) of R rows x M tokens into acc; then, if `last`, the partial
// step [i1, n) and the reduction into y[k * y_stride + r]. xp: the tile's packed activations.
// `stream`: the rows come from DRAM now (prefetch ahead in each row); pf: prefetch pf_lines
// lines from there into L2, one per step.
template <typename A, int R, int M, bool kStream, bool kPf>
inline void wide_steps(const A& a, const typename A::T*& wp, const float*& xs, int64_t steps, const char*& pf,
                       __m512 (&acc)[R][M]) {
  for (int64_t st = 0; st < steps; ++st) {
    if constexpr (kPf) {
      _mm_prefetch(pf, _MM_HINT_T1);
      pf += 64;
    }
    __m512 wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      if constexpr (kStream) {
        if (st % (64 / (16 * sizeof(typename A::T))) == 0) _mm_prefetch(a.addr(wp, r) + kPrefetchBytes, _MM_HINT_T0);
      }
      wv[r] = a.load(wp, r);
    }
#pragma GCC unroll 8
    for (int k = 0; k < M; ++k) {
      const __m512 xv = _mm512_load_ps(xs + k * 16);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][k] = _mm512_fmadd_ps(wv[r], xv, acc[r][k]);
    }
    wp += A::kStep;
    xs += M * 16;
  }
}

template <typename A, int R, int M>
void wide_chunk(const A& a, const float* xp, int64_t i0, int64_t i1, int64_t n, bool first, bool last, __m512* park,
                float* y, int64_t y_stride, bool stream, const char* pf, int64_t pf_lines) {
  __m512 acc[R][M];
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < M; ++k) acc[r][k] = first ? _mm512_setzero_ps() : _mm512_load_ps(park + r * M + k);
  const typename A::T* wp = a.at(i0);
  const float* xs = xp + i0 * M;
  const int64_t steps = (i1 - i0) / 16, pf_steps = std::min(pf_lines, steps);
  if (!A::kPacked && stream) {
    wide_steps<A, R, M, !A::kPacked, false>(a, wp, xs, steps, pf, acc);
  } else {
    wide_steps<A, R, M, false, true>(a, wp, xs, pf_steps, pf, acc);
    wide_steps<A, R, M, false, false>(a, wp, xs, steps - pf_steps, pf, acc);
  }
  if (!last) {
    for (int r = 0; r < R; ++r)
      for (int k = 0; k < M; ++k) _mm512_store_ps(park + r * M + k, acc[r][k]);
    return;
  }
  if (i1 < n) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i1)) - 1);
    for (int r = 0; r < R; ++r) {
      const __m512 wv = a.tail(r, i1, n);
      for (int k = 0; k < M; ++k) {
        acc[r][k] = _mm512_mask3_fmadd_ps(wv, _mm512_load_ps(xp + i1 * M + k * 16), acc[r][k], mask);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int k = 0; k < M; ++k) {
      const __m256 lo = _mm512_castps512_ps256(acc[r][k]), hi = _mm512_extractf32x8_ps(acc[r][k], 1);
      y[k * y_stride + r] = hsum8(_mm256_add_ps(lo, hi));
    }
  }
}

// Rows [r, r + R) of a sub-block: a tile of 4 rows when 4 remain, else of 1.
inline int tile_rows_at(int64_t r, int64_t sub) { return r + 4 <= sub ? 4 : 1; }

// The sub-block's rows (sub x n, file layout) -> ap: f32, tile by tile (tile_rows_at), each tile
// step by step (Packed), a tile starting at row r at ap + r * steps * 16.
template <typename L>
void pack_rows(const typename L::T* w, int64_t ws, int64_t sub, int64_t n, float* ap) {
  const int64_t steps = (n + 15) / 16;
  for (int64_t r0 = 0; r0 < sub;) {
    const int rt = tile_rows_at(r0, sub);
    float* tile = ap + r0 * steps * 16;
    for (int r = 0; r < rt; ++r) {
      const typename L::T* wr = w + (r0 + r) * ws;
      int64_t j = 0;
      for (; 16 * j + 16 <= n; ++j) _mm512_store_ps(tile + (j * rt + r) * 16, L::load16(wr + 16 * j));
      if (16 * j < n) {
        alignas(64) float wt[16] = {};
        for (int64_t e = 16 * j; e < n; ++e) wt[e - 16 * j] = L::scalar(wr + e);
        _mm512_store_ps(tile + (j * rt + r) * 16, _mm512_load_ps(wt));
      }
    }
    r0 += rt;
  }
}

// One sub-block (sub <= kWideSubRows rows, from `w` or, when ap != nullptr, packed there) x one
// packed tile of M tokens.
template <typename L, int M>
void wide_sub(const typename L::T* w, int64_t ws, const float* ap, int64_t sub, const float* xp, int64_t n, float* y,
              int64_t y_stride, bool stream, const char*& pf, int64_t& pf_lines) {
  const int64_t n16 = n - n % 16, steps = (n + 15) / 16;
  // One token: nothing to keep in L1, the weights stream once (decode).
  const int64_t chunk = M == 1 ? std::max<int64_t>(n16, 16) : kWideChunk;
  alignas(64) __m512 park[kWideSubRows * M];
  for (int64_t i0 = 0; i0 == 0 || i0 < n16; i0 += chunk) {
    const int64_t i1 = std::min(n16, i0 + chunk);
    const bool first = i0 == 0, last = i1 == n16;
    for (int64_t r = 0; r < sub;) {
      const int64_t lines = std::min(pf_lines, (i1 - i0) / 16);
      const int rt = tile_rows_at(r, sub);
      __m512* pk = park + r * M;
      float* yr = y + r;
      if (ap != nullptr && rt == 4) {
        wide_chunk<Packed<4>, 4, M>({ap + r * steps * 16}, xp, i0, i1, n, first, last, pk, yr, y_stride, stream, pf, lines);
      } else if (ap != nullptr) {
        wide_chunk<Packed<1>, 1, M>({ap + r * steps * 16}, xp, i0, i1, n, first, last, pk, yr, y_stride, stream, pf, lines);
      } else if (rt == 4) {
        wide_chunk<RowsAt<L>, 4, M>({w + r * ws, ws}, xp, i0, i1, n, first, last, pk, yr, y_stride, stream, pf, lines);
      } else {
        wide_chunk<RowsAt<L>, 1, M>({w + r * ws, ws}, xp, i0, i1, n, first, last, pk, yr, y_stride, stream, pf, lines);
      }
      r += rt;
      pf += lines * 64;
      pf_lines -= lines;
    }
  }
}


template <typename L>
void wide_rows(const typename L::T* w, int64_t ws, int64_t rows, const float* xp, int64_t n, int64_t num_tokens,
               float* y, int64_t y_stride) {
  const int64_t steps = (n + 15) / 16;
  const int64_t tiles = (num_tokens + kWideTileTokens - 1) / kWideTileTokens;
  thread_local std::vector<float> abuf;
  float* ap = nullptr;
  // Several token tiles: a block of up to kWideBlockRows rows (converted and packed once by
  // pack_rows when there are at least kWidePackTiles tiles) stays in L2; each token tile's
  // activations are read from L3 once per block and then from L2 by every 16-row sub-block of it
  // (TinyLlama F16 pp512: blocks of 16 rows 52-60 tokens/s, 32 70-75, 64 63-75, 96 66-67,
  // 128 64-73).
  const int64_t block_rows = tiles > 1 ? kWideBlockRows : kWideSubRows;
  // Converting a block costs a pass over it; with 3 tiles (16 decode streams) reading f16 and
  // converting in the loop is faster (TinyLlama F16, 16 streams: 42-46 packed, 55-67 tokens/s not).
  if (tiles >= kWidePackTiles) {
    abuf.resize(static_cast<size_t>(block_rows * steps * 16 + 16));
    ap = abuf.data() + (16 - reinterpret_cast<uintptr_t>(abuf.data()) / 4 % 16) % 16;  // 64-byte aligned
  }
  for (int64_t s = 0; s < rows; s += block_rows) {
    const int64_t blk = std::min<int64_t>(block_rows, rows - s);
    // Meanwhile the next block is prefetched into L2. With one tile the rows stream (prefetch
    // ahead in the row).
    const char* pf = reinterpret_cast<const char*>(w + (s + blk) * ws);
    const int64_t next_rows = std::min<int64_t>(block_rows, rows - s - blk);
    int64_t pf_lines = tiles > 1 ? (next_rows * ws * static_cast<int64_t>(sizeof(typename L::T)) + 63) / 64 : 0;
    const bool stream = tiles == 1 || s == 0;
    if (ap != nullptr) pack_rows<L>(w + s * ws, ws, blk, n, ap);
    for (int64_t t0 = 0; t0 < num_tokens; t0 += kWideTileTokens) {
      const int m = static_cast<int>(std::min<int64_t>(kWideTileTokens, num_tokens - t0));
      const float* xt = xp + t0 * steps * 16;
      for (int64_t s1 = 0; s1 < blk; s1 += kWideSubRows) {
        const int64_t sub = std::min<int64_t>(kWideSubRows, blk - s1);
        const typename L::T* ws0 = w + (s + s1) * ws;
        const float* aps = ap != nullptr ? ap + s1 * steps * 16 : nullptr;
        float* yt = y + t0 * y_stride + s + s1;
        switch (m) {
          case 1: wide_sub<L, 1>(ws0, ws, aps, sub, xt, n, yt, y_stride, stream, pf, pf_lines); break;
          case 2: wide_sub<L, 2>(ws0, ws, aps, sub, xt, n, yt, y_stride, stream, pf, pf_lines); break;
          case 3: wide_sub<L, 3>(ws0, ws, aps, sub, xt, n, yt, y_stride, stream, pf, pf_lines); break;
          case 4: wide_sub<L, 4>(ws0, ws, aps, sub, xt, n, yt, y_stride, stream, pf, pf_lines); break;
          case 5: wide_sub<L, 5>(ws0, ws, aps, sub, xt, n, yt, y_stride, stream, pf, pf_lines); break;
          default: wide_sub<L, 6>(ws0, ws, aps, sub, xt, n, yt, y_stride, stream, pf, pf_lines); break;
        }
      }
    }
  }
}

}  // namespace

void pack_wide(GgmlType type, const float* x, int64_t num_tokens, int64_t n, float* out) {
  const int64_t steps = (n + 15) / 16;
  for (int64_t t0 = 0; t0 < num_tokens; t0 += kWideTileTokens) {
    const int m = static_cast<int>(std::min<int64_t>(kWideTileTokens, num_tokens - t0));
    float* tile = out + t0 * steps * 16;
    for (int k = 0; k < m; ++k) {
      const float* xk = x + (t0 + k) * n;
      for (int64_t j = 0; j < steps; ++j) {
        const int64_t len = std::min<int64_t>(16, n - 16 * j);
        const __mmask16 mask = static_cast<__mmask16>((1u << len) - 1);
        __m512 v = _mm512_maskz_loadu_ps(mask, xk + 16 * j);
        if (type == GgmlType::F16) {  // F16C rounds to nearest even, as fp32_to_fp16
          v = _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        } else if (type == GgmlType::BF16) {
          alignas(64) float lanes[16];
          _mm512_store_ps(lanes, v);
          for (float& f : lanes) f = bf16_to_fp32(fp32_to_bf16(f));
          v = _mm512_load_ps(lanes);
        }
        _mm512_store_ps(tile + (j * m + k) * 16, v);
      }
    }
  }
}

void dot_wide_rows(GgmlType type, const void* w, int64_t w_stride, int64_t rows, const float* xp, int64_t n,
                   int64_t num_tokens, float* y, int64_t y_stride) {
  switch (type) {
    case GgmlType::F32:
      return wide_rows<F32W>(static_cast<const float*>(w), w_stride, rows, xp, n, num_tokens, y, y_stride);
    case GgmlType::F16:
      return wide_rows<F16W>(static_cast<const uint16_t*>(w), w_stride, rows, xp, n, num_tokens, y, y_stride);
    case GgmlType::BF16:
      return wide_rows<BF16W>(static_cast<const uint16_t*>(w), w_stride, rows, xp, n, num_tokens, y, y_stride);
    default: break;
  }
  PAGELLM_CHECK(false, "dot_wide_rows: " + type_name(type));
}

int float_tile_rows(int m) { return m <= 2 ? 4 : 1; }

void dot_float_tile(GgmlType type, const void* w, int64_t w_stride, int r, const float* x, int64_t x_stride,
                    int64_t n, int m, float* out) {
  switch (type) {
    case GgmlType::F32: return dispatch<F32W>(static_cast<const float*>(w), w_stride, r, x, x_stride, n, m, out);
    case GgmlType::F16: return dispatch<F16W>(static_cast<const uint16_t*>(w), w_stride, r, x, x_stride, n, m, out);
    case GgmlType::BF16: return dispatch<BF16W>(static_cast<const uint16_t*>(w), w_stride, r, x, x_stride, n, m, out);
    default: break;
  }
  PAGELLM_CHECK(false, "dot_float_tile: " + type_name(type));
}

}  // namespace pagellm::kernels::avx512

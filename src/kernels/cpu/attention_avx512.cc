// AVX-512 q . k tiles and paired p . V for paged attention with an F32 KV cache (compiled for AVX-512 F/BW/VL/DQ,
// CMakeLists.txt; entered only when the KvLayerView's isa >= kAvx512; contract in
// kernels_avx512.h).
//
// avx2::dot_f32 (attention_avx2.cc) keeps 4 accumulators of 8 lanes per output (elements
// i + 8a + l of each step of 32 go to accumulator a, lane l), then 8-element steps into
// accumulator 0, then hsum8((a0 + a1) + (a2 + a3)) and a scalar FMA tail. Here a zmm holds two of
// them, [a0 | a1] and [a2 | a3]: each lane sees the same FMA sequence, and the reduction takes the
// halves apart in the same order, so the bits are the same; a tile of R keys x 2 query heads keeps
// 4 R accumulators in registers and loads each key vector once for both heads. A tile of 4 keys
// reduces its 8 outputs together (reduce_4x2: the same additions, 8 outputs per instruction).
// p . V for two heads shares each load of a V row (pv_pair: per lane the FMA chain of
// avx2::pv_accumulate_f32). An F16 cache's keys and values become f32 as they are loaded (exactly),
// so its transposed key tiles and paired p . V give avx2::dot_f16's and pv_accumulate_f16's bits.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "kernels/cpu/kernels_avx512.h"
#include "kernels/cpu/simd_avx2.h"

namespace pagellm::kernels::avx512 {
namespace {

constexpr int64_t kPrefetchBytes = 8192;

// The reduction of qk_tile<4> (no scalar tail) for all 8 outputs at once, transposed: the same
// additions as hsum8((a0 + a1) + (a2 + a3)) per output, 8 outputs per instruction.
// out[r * 2 + j] from a01[r][j] = [a0 | a1], a23[r][j] = [a2 | a3].
inline void reduce_4x2(const __m512 (&a01)[4][2], const __m512 (&a23)[4][2], float* out) {
  __m512 v[4];  // v[r] = [v of (r, 0) | v of (r, 1)], v = (a0 + a1) + (a2 + a3), 8 lanes each
  for (int r = 0; r < 4; ++r) {
    const __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(a01[r][0], a01[r][1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(a01[r][0], a01[r][1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 w = _mm512_add_ps(_mm512_shuffle_f32x4(a23[r][0], a23[r][1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(a23[r][0], a23[r][1], _MM_SHUFFLE(3, 2, 3, 2)));
    v[r] = _mm512_add_ps(u, w);
  }
  // s4 = v[0:4] + v[4:8]: lane group g of s01 is output g (outputs 0-3), of s23 output 4 + g.
  const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(v[0], v[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(v[2], v[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(v[2], v[3], _MM_SHUFFLE(3, 1, 3, 1)));
  // Per group g: [s4[0] + s4[2], s4[1] + s4[3]] of output g, then of output 4 + g; then their sums.
  const __m512 t = _mm512_add_ps(_mm512_shuffle_ps(s01, s23, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(s01, s23, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 e =
      _mm512_add_ps(_mm512_shuffle_ps(t, t, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(t, t, _MM_SHUFFLE(3, 1, 3, 1)));
  // e[4 g] = output g, e[4 g + 1] = output 4 + g.
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  _mm256_storeu_ps(out, _mm512_castps512_ps256(_mm512_permutexvar_ps(idx, e)));
}

// R keys (key r at k + r * ks) x 2 queries (at q, q + n): out[r * 2 + j].
template <int R>
void qk_tile(const float* k, int64_t ks, const float* q, int64_t n, float* out) {
  constexpr int M = 2;
  __m512 a01[R][M], a23[R][M];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < M; ++j) a01[r][j] = a23[r][j] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 w01[R], w23[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const char* kr = reinterpret_cast<const char*>(k + r * ks + i);
      _mm_prefetch(kr + kPrefetchBytes, _MM_HINT_T0);  // (the keys of later slots)
      _mm_prefetch(kr + kPrefetchBytes + 64, _MM_HINT_T0);
      w01[r] = _mm512_loadu_ps(k + r * ks + i);
      w23[r] = _mm512_loadu_ps(k + r * ks + i + 16);
    }
#pragma GCC unroll 2
    for (int j = 0; j < M; ++j) {
      const __m512 x01 = _mm512_loadu_ps(q + j * n + i), x23 = _mm512_loadu_ps(q + j * n + i + 16);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        a01[r][j] = _mm512_fmadd_ps(w01[r], x01, a01[r][j]);
        a23[r][j] = _mm512_fmadd_ps(w23[r], x23, a23[r][j]);
      }
    }
  }
  for (; i + 8 <= n; i += 8) {  // into accumulator 0 = lanes 0..7 of a01
    for (int r = 0; r < R; ++r) {
      const __m512 w0 = _mm512_castps256_ps512(_mm256_loadu_ps(k + r * ks + i));
      for (int j = 0; j < M; ++j) {
        const __m512 xv = _mm512_castps256_ps512(_mm256_loadu_ps(q + j * n + i));
        a01[r][j] = _mm512_mask3_fmadd_ps(w0, xv, a01[r][j], 0x00FF);
      }
    }
  }
  if constexpr (R == 4) {
    if (i == n) return reduce_4x2(a01, a23, out);
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < M; ++j) {
      const __m256 a0 = _mm512_castps512_ps256(a01[r][j]), a1 = _mm512_extractf32x8_ps(a01[r][j], 1);
      const __m256 a2 = _mm512_castps512_ps256(a23[r][j]), a3 = _mm512_extractf32x8_ps(a23[r][j], 1);
      float s = simd::hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
      for (int64_t e = i; e < n; ++e) s = std::fma(k[r * ks + e], q[j * n + e], s);
      out[r * M + j] = s;
    }
  }
}

// 16 elements of a row as f32 (an F16 cache's halves converted exactly).
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Lanes of zmm i hold elements 16 i .. 16 i + 15: each lane runs avx2::pv_regs' FMA sequence.
template <int kVec, class T>
void pv_pair(const T* v, const int64_t* off, int64_t n, const float* a0, const float* a1, float* out0, float* out1) {
  __m512 acc0[kVec], acc1[kVec];
  for (int i = 0; i < kVec; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const __m512 va0 = _mm512_set1_ps(a0[j]), va1 = _mm512_set1_ps(a1[j]);
    const T* vj = v + off[j];
#pragma GCC unroll 8
    for (int i = 0; i < kVec; ++i) {
      const __m512 x = load16(vj + 16 * i);
      acc0[i] = _mm512_fmadd_ps(va0, x, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(va1, x, acc1[i]);
    }
  }
  for (int i = 0; i < kVec; ++i) {
    _mm512_storeu_ps(out0 + 16 * i, acc0[i]);
    _mm512_storeu_ps(out1 + 16 * i, acc1[i]);
  }
}

// The 16 x 16 block of rows r (16 elements each) transposed in registers: out[e] = element e of
// rows 0..15 (unpack pairs, then 4-float shuffles, then a 4 x 4 transpose of the 128-bit lanes).
inline void transpose16(__m512 (&r)[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4 i + m], 128-bit lane L: element 4 L + m of rows 4 i .. 4 i + 3.
  for (int i = 0; i < 4; ++i) {
    u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int m = 0; m < 4; ++m) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[m], u[4 + m], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 v1 = _mm512_shuffle_f32x4(u[m], u[4 + m], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], _MM_SHUFFLE(3, 2, 3, 2));
    r[m] = _mm512_shuffle_f32x4(v0, v2, _MM_SHUFFLE(2, 0, 2, 0));
    r[4 + m] = _mm512_shuffle_f32x4(v0, v2, _MM_SHUFFLE(3, 1, 3, 1));
    r[8 + m] = _mm512_shuffle_f32x4(v1, v3, _MM_SHUFFLE(2, 0, 2, 0));
    r[12 + m] = _mm512_shuffle_f32x4(v1, v3, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

// NQ queries x the 16 transposed keys of kt: avx2::dot_f32's chains with lane = key. Chain c of
// a step of 32 (c = 8 a + l: accumulator a, lane l there) is C_c = fma over the steps s of
// kt[32 s + c] x q[32 s + c], from 0; then v_l = (C_l + C_{8+l}) + (C_{16+l} + C_{24+l}) and
// hsum8's tree over l: ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)). Each key vector is
// loaded once for the NQ queries; q elements are broadcast from memory.
template <int NQ>
void qk_keys16(const float* kt, int64_t hd, const float* const* q, float scale, float* const* out) {
  const int64_t steps = hd / 32;
  auto chain = [&](int c, __m512(&acc)[NQ]) {
    for (int i = 0; i < NQ; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t e = 32 * s + c;
      const __m512 k = _mm512_load_ps(kt + e * 16);
#pragma GCC unroll 4
      for (int i = 0; i < NQ; ++i) acc[i] = _mm512_fmadd_ps(k, _mm512_set1_ps(q[i][e]), acc[i]);
    }
  };
  auto lane_sum = [&](int l, __m512(&v)[NQ]) {  // v_l
    __m512 c0[NQ], c1[NQ], c2[NQ], c3[NQ];
    chain(l, c0);
    chain(8 + l, c1);
    chain(16 + l, c2);
    chain(24 + l, c3);
    for (int i = 0; i < NQ; ++i) v[i] = _mm512_add_ps(_mm512_add_ps(c0[i], c1[i]), _mm512_add_ps(c2[i], c3[i]));
  };
  __m512 s4[4][NQ];
  for (int l = 0; l < 4; ++l) {
    __m512 a[NQ], b[NQ];
    lane_sum(l, a);
    lane_sum(4 + l, b);
    for (int i = 0; i < NQ; ++i) s4[l][i] = _mm512_add_ps(a[i], b[i]);
  }
  const __m512 sc = _mm512_set1_ps(scale);
  for (int i = 0; i < NQ; ++i) {
    const __m512 d = _mm512_add_ps(_mm512_add_ps(s4[0][i], s4[2][i]), _mm512_add_ps(s4[1][i], s4[3][i]));
    _mm512_storeu_ps(out[i], _mm512_mul_ps(d, sc));
  }
}

template <class T>
void transpose_keys(const T* k, const int64_t* off, int nk, int64_t hd, float* kt) {
  for (int64_t e0 = 0; e0 < hd; e0 += 16) {
    __m512 r[16];
    for (int j = 0; j < 16; ++j) r[j] = load16(k + off[j < nk ? j : nk - 1] + e0);
    transpose16(r);
    for (int e = 0; e < 16; ++e) _mm512_store_ps(kt + (e0 + e) * 16, r[e]);
  }
}

template <class T>
void pv_pairs(const T* v, const int64_t* off, int64_t n, const float* a0, const float* a1, int64_t hd, float* out0,
              float* out1) {
  switch (hd) {
    case 32: return pv_pair<2>(v, off, n, a0, a1, out0, out1);
    case 64: return pv_pair<4>(v, off, n, a0, a1, out0, out1);
    case 96: return pv_pair<6>(v, off, n, a0, a1, out0, out1);
    case 128: return pv_pair<8>(v, off, n, a0, a1, out0, out1);
    default: PAGELLM_CHECK(false, "pv_accumulate pair: head_dim " + std::to_string(hd));
  }
}

}  // namespace

void transpose_keys16(const float* k, const int64_t* off, int nk, int64_t hd, float* kt) {
  transpose_keys(k, off, nk, hd, kt);
}
void transpose_keys16(const uint16_t* k, const int64_t* off, int nk, int64_t hd, float* kt) {
  transpose_keys(k, off, nk, hd, kt);
}

void qk_scores_keys16(const float* kt, int64_t hd, const float* const* q, int nq, float scale, float* const* out) {
  PAGELLM_CHECK(hd % 32 == 0 && (nq == 1 || nq == 2), "qk_scores_keys16: hd " + std::to_string(hd));
  if (nq == 2) return qk_keys16<2>(kt, hd, q, scale, out);
  qk_keys16<1>(kt, hd, q, scale, out);
}

bool pv_pair_supported(int64_t hd) { return hd == 32 || hd == 64 || hd == 96 || hd == 128; }

void pv_accumulate_f32_pair(const float* v, const int64_t* off, int64_t n, const float* a0, const float* a1, int64_t hd,
                            float* out0, float* out1) {
  pv_pairs(v, off, n, a0, a1, hd, out0, out1);
}
void pv_accumulate_f16_pair(const uint16_t* v, const int64_t* off, int64_t n, const float* a0, const float* a1,
                            int64_t hd, float* out0, float* out1) {
  pv_pairs(v, off, n, a0, a1, hd, out0, out1);
}

void qk_f32_pair_tile(const float* k, int64_t k_stride, int r, const float* q, int64_t n, float* out) {
  if (r == 4) return qk_tile<4>(k, k_stride, q, n, out);
  PAGELLM_CHECK(r == 1, "qk_f32_pair_tile: r " + std::to_string(r));
  qk_tile<1>(k, k_stride, q, n, out);
}

}  // namespace pagellm::kernels::avx512

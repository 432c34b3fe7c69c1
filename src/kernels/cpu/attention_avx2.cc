// AVX2/FMA/F16C helpers for paged attention and the KV cache (compiled with -mavx2 -mfma -mf16c;
// entered only when the KvLayerView's isa >= kAvx2).
#include <immintrin.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "kernels/cpu/dispatch_m.h"
#include "kernels/cpu/kernels_impl.h"
#include "kernels/cpu/simd_avx2.h"

namespace pagellm::kernels::avx2 {

void axpy_f32(float a, const float* v, float* acc, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(v + i), _mm256_loadu_ps(acc + i)));
  }
  for (; i < n; ++i) acc[i] = std::fma(a, v[i], acc[i]);
}

void axpy_f16(float a, const uint16_t* v, float* acc, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i)));
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(va, vv, _mm256_loadu_ps(acc + i)));
  }
  for (; i < n; ++i) acc[i] = std::fma(a, _cvtsh_ss(v[i]), acc[i]);
}

namespace {

inline __m256 load_v(const float* p) { return simd::F32Load::load8(p); }
inline __m256 load_v(const uint16_t* p) { return simd::F16Load::load8(p); }

// q . k for M keys (key k at x + k * xs, or M = 1 with f16 keys at w): 4 accumulators of 8 lanes
// over steps of 32, then steps of 8 into accumulator 0, then hsum8((a0 + a1) + (a2 + a3)), then
// a scalar FMA tail in element order (ggml's ggml_vec_dot_f32 on AVX2).
template <typename L, int M>
void dot_tile(const typename L::T* w, const float* x, int64_t xs, int64_t n, float* out) {
  __m256 acc[M][4];
  for (int k = 0; k < M; ++k)
    for (int a = 0; a < 4; ++a) acc[k][a] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256 w0 = L::load8(w + i), w1 = L::load8(w + i + 8), w2 = L::load8(w + i + 16), w3 = L::load8(w + i + 24);
#pragma GCC unroll 4
    for (int k = 0; k < M; ++k) {
      const float* xk = x + k * xs + i;
      acc[k][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xk), acc[k][0]);
      acc[k][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xk + 8), acc[k][1]);
      acc[k][2] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xk + 16), acc[k][2]);
      acc[k][3] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xk + 24), acc[k][3]);
    }
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 w0 = L::load8(w + i);
#pragma GCC unroll 4
    for (int k = 0; k < M; ++k) acc[k][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + k * xs + i), acc[k][0]);
  }
  for (int k = 0; k < M; ++k) {
    float s = simd::hsum8(_mm256_add_ps(_mm256_add_ps(acc[k][0], acc[k][1]), _mm256_add_ps(acc[k][2], acc[k][3])));
    for (int64_t j = i; j < n; ++j) s = std::fma(L::scalar(w + j), x[k * xs + j], s);
    out[k] = s;
  }
}

// out[i] = sum_j a[j] * v[off[j] + i], j ascending from 0, one FMA per element and key: the
// sequence of axpy_*. kVec vectors of 8 stay in registers across all keys.
template <int kVec, typename T>
void pv_regs(const T* v, const int64_t* off, int64_t n, const float* a, float* out) {
  __m256 acc[kVec];
  for (int i = 0; i < kVec; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const __m256 va = _mm256_set1_ps(a[j]);
    const T* vj = v + off[j];
#pragma GCC unroll 16
    for (int i = 0; i < kVec; ++i) acc[i] = _mm256_fmadd_ps(va, load_v(vj + 8 * i), acc[i]);
  }
  for (int i = 0; i < kVec; ++i) _mm256_storeu_ps(out + 8 * i, acc[i]);
}

template <typename T>
void pv(const T* v, const int64_t* off, int64_t n, const float* a, int64_t hd, float* out) {
  switch (hd) {
    case 32: return pv_regs<4>(v, off, n, a, out);
    case 64: return pv_regs<8>(v, off, n, a, out);
    case 96: return pv_regs<12>(v, off, n, a, out);
    case 128: return pv_regs<16>(v, off, n, a, out);
    default: break;
  }
  for (int64_t i = 0; i < hd; ++i) out[i] = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    if constexpr (sizeof(T) == 4) {
      axpy_f32(a[j], reinterpret_cast<const float*>(v + off[j]), out, hd);
    } else {
      axpy_f16(a[j], reinterpret_cast<const uint16_t*>(v + off[j]), out, hd);
    }
  }
}

// pv_merge_f32 for elements [e0, e0 + 8 kVec) of NQ queries: per key one load of each v vector,
// shared by the NQ queries (NQ * kVec accumulators + NQ broadcasts + 1 load within 16 ymm).
template <int NQ, int kVec>
void pv_merge_pass(const float* v, const int64_t* off, int64_t n, const float* const* a, int64_t e0, const float* c,
                   bool first, float* const* out) {
  __m256 acc[NQ][kVec];
  for (int q = 0; q < NQ; ++q)
    for (int i = 0; i < kVec; ++i) acc[q][i] = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    __m256 va[NQ];
    for (int q = 0; q < NQ; ++q) va[q] = _mm256_set1_ps(a[q][j]);
    const float* vj = v + off[j] + e0;
#pragma GCC unroll 8
    for (int i = 0; i < kVec; ++i) {
      const __m256 vv = _mm256_loadu_ps(vj + 8 * i);
      for (int q = 0; q < NQ; ++q) acc[q][i] = _mm256_fmadd_ps(va[q], vv, acc[q][i]);
    }
  }
  for (int q = 0; q < NQ; ++q) {
    float* o = out[q] + e0;
    const __m256 vc = _mm256_set1_ps(first ? 0.0f : c[q]);
    for (int i = 0; i < kVec; ++i) {
      const __m256 r = first ? acc[q][i] : _mm256_fmadd_ps(_mm256_loadu_ps(o + 8 * i), vc, acc[q][i]);
      _mm256_storeu_ps(o + 8 * i, r);
    }
  }
}

template <int NQ>
void pv_merge(const float* v, const int64_t* off, int64_t n, const float* const* a, int64_t hd, const float* c,
              bool first, float* const* out) {
  constexpr int kVec = NQ == 1 ? 8 : 4;
  int64_t e0 = 0;
  for (; e0 + 8 * kVec <= hd; e0 += 8 * kVec) pv_merge_pass<NQ, kVec>(v, off, n, a, e0, c, first, out);
  if (e0 < hd) {
    with_m<kVec>(static_cast<int>((hd - e0) / 8),
                 [&](auto m) { pv_merge_pass<NQ, m.value>(v, off, n, a, e0, c, first, out); });
  }
}

}  // namespace

void pv_merge_f32(const float* v, const int64_t* off, int64_t n, const float* const* a, int nq, int64_t hd,
                  const float* c, bool first, float* const* out) {
  PAGELLM_CHECK(hd % 8 == 0 && (nq == 1 || nq == 2), "pv_merge_f32: hd " + std::to_string(hd));
  if (nq == 2) return pv_merge<2>(v, off, n, a, hd, c, first, out);
  pv_merge<1>(v, off, n, a, hd, c, first, out);
}

float dot_f32(const float* w, const float* x, int64_t n) {
  float r;
  dot_tile<simd::F32Load, 1>(w, x, 0, n, &r);
  return r;
}
float dot_f16(const uint16_t* w, const float* x, int64_t n) {
  float r;
  dot_tile<simd::F16Load, 1>(w, x, 0, n, &r);
  return r;
}
void dot_f32_tile(const float* w, const float* x, int64_t xs, int64_t n, int m, float* out) {
  with_m<kMaxTileTokens>(m, [&](auto mc) { dot_tile<simd::F32Load, mc.value>(w, x, xs, n, out); });
}

void pv_accumulate_f32(const float* v, const int64_t* off, int64_t n, const float* a, int64_t hd, float* out) {
  pv(v, off, n, a, hd, out);
}
void pv_accumulate_f16(const uint16_t* v, const int64_t* off, int64_t n, const float* a, int64_t hd, float* out) {
  pv(v, off, n, a, hd, out);
}

float softmax_tile(float* s, int64_t n, float m_in, double* sum) {
  __m256 mv = _mm256_set1_ps(m_in);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) mv = _mm256_max_ps(_mm256_loadu_ps(s + j), mv);  // s > m ? s : m
  float lanes[8];
  _mm256_storeu_ps(lanes, mv);
  float m = m_in;
  for (float l : lanes) m = l > m ? l : m;
  for (; j < n; ++j) m = s[j] > m ? s[j] : m;
  const __m256 mb = _mm256_set1_ps(m);
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();  // lanes 0-3, 4-7
  j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 p = simd::exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mb));
    _mm256_storeu_ps(s + j, p);
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(p)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)));
  }
  if (j < n) {  // the tail, padded with zeros (adding +0.0 to a sum of non-negative terms is exact)
    float t[8] = {};
    for (int64_t i = j; i < n; ++i) t[i - j] = s[i];
    const __m256 p = simd::exp8(_mm256_sub_ps(_mm256_loadu_ps(t), mb));
    _mm256_storeu_ps(t, p);
    for (int64_t i = j; i < n; ++i) s[i] = t[i - j];
    const __m256 pz = _mm256_loadu_ps(t);
    const __m256 keep = _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - j)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
    const __m256 pm = _mm256_and_ps(pz, keep);
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(pm)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(pm, 1)));
  }
  const __m256d c = _mm256_add_pd(lo, hi);  // l0 + l4, l1 + l5, l2 + l6, l3 + l7
  const __m128d d = _mm_add_pd(_mm256_castpd256_pd128(c), _mm256_extractf128_pd(c, 1));
  *sum = _mm_cvtsd_f64(d) + _mm_cvtsd_f64(_mm_unpackhi_pd(d, d));
  return m;
}

void rescale_add(float* acc, float c, const float* x, int64_t n) {
  const __m256 vc = _mm256_set1_ps(c);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(_mm256_loadu_ps(acc + i), vc, _mm256_loadu_ps(x + i)));
  }
  for (; i < n; ++i) acc[i] = std::fma(acc[i], c, x[i]);
}

void convert_f32_to_f16(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

namespace {

// NQ queries x the 8 transposed keys of kt: dot_tile's chains with lane = key. Chain c of a step of
// 32 (c = 8 a + l: accumulator a, lane l there) is C_c = fma over the steps s of
// kt[32 s + c] x q[32 s + c], from 0; then v_l = (C_l + C_{8+l}) + (C_{16+l} + C_{24+l}) and
// hsum8's tree over l: ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)).
// kSteps = hd / 32, a constant for the common head sizes: the chains are a few FMAs long, so
// loops with a run-time count and out-of-line helpers cost more than the arithmetic (the first
// version took 5.2% of an F16 pp512 for 1.2% of its multiply-adds).
template <int NQ>
__attribute__((always_inline)) inline void qk_chain8(const float* kt, const float* const (&q)[NQ], int64_t steps, int c,
                                                     __m256 (&acc)[NQ]) {
  for (int i = 0; i < NQ; ++i) acc[i] = _mm256_setzero_ps();
#pragma GCC unroll 8
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t e = 32 * s + c;
    const __m256 k = _mm256_load_ps(kt + e * 8);
    for (int i = 0; i < NQ; ++i) acc[i] = _mm256_fmadd_ps(k, _mm256_broadcast_ss(q[i] + e), acc[i]);
  }
}

template <int NQ>
__attribute__((always_inline)) inline void qk_lane8(const float* kt, const float* const (&q)[NQ], int64_t steps, int l,
                                                    __m256 (&v)[NQ]) {  // v_l
  __m256 c0[NQ], c1[NQ], c2[NQ], c3[NQ];
  qk_chain8<NQ>(kt, q, steps, l, c0);
  qk_chain8<NQ>(kt, q, steps, 8 + l, c1);
  qk_chain8<NQ>(kt, q, steps, 16 + l, c2);
  qk_chain8<NQ>(kt, q, steps, 24 + l, c3);
  for (int i = 0; i < NQ; ++i) v[i] = _mm256_add_ps(_mm256_add_ps(c0[i], c1[i]), _mm256_add_ps(c2[i], c3[i]));
}

template <int NQ, int kSteps>
void qk_keys8(const float* kt, int64_t hd, const float* const* qp, float scale, float* const* out) {
  const int64_t steps = kSteps > 0 ? kSteps : hd / 32;
  const float* q[NQ];
  for (int i = 0; i < NQ; ++i) q[i] = qp[i];
  // One lane at a time, its v_l parked in L1: unrolled, GCC started all 32 * NQ chains first and
  // spilled every result (as many stack stores and reloads as FMAs).
  __m256 v[8][NQ];
#pragma GCC unroll 1
  for (int l = 0; l < 8; ++l) qk_lane8<NQ>(kt, q, steps, l, v[l]);
  __m256 s4[4][NQ];
  for (int l = 0; l < 4; ++l)
    for (int i = 0; i < NQ; ++i) s4[l][i] = _mm256_add_ps(v[l][i], v[4 + l][i]);
  const __m256 sc = _mm256_set1_ps(scale);
  for (int i = 0; i < NQ; ++i) {
    const __m256 d = _mm256_add_ps(_mm256_add_ps(s4[0][i], s4[2][i]), _mm256_add_ps(s4[1][i], s4[3][i]));
    _mm256_storeu_ps(out[i], _mm256_mul_ps(d, sc));
  }
}

template <int NQ>
void qk_keys8_hd(const float* kt, int64_t hd, const float* const* q, float scale, float* const* out) {
  switch (hd) {
    case 64: return qk_keys8<NQ, 2>(kt, hd, q, scale, out);
    case 128: return qk_keys8<NQ, 4>(kt, hd, q, scale, out);
    default: return qk_keys8<NQ, 0>(kt, hd, q, scale, out);
  }
}

template <class Load>
void transpose_keys8_impl(const typename Load::T* k, const int64_t* off, int nk, int64_t hd, float* kt) {
  for (int64_t e0 = 0; e0 < hd; e0 += 8) {
    __m256 r[8];
    for (int j = 0; j < 8; ++j) r[j] = Load::load8(k + off[j < nk ? j : nk - 1] + e0);
    simd::transpose8(r);
    for (int e = 0; e < 8; ++e) _mm256_store_ps(kt + (e0 + e) * 8, r[e]);
  }
}

}  // namespace

void transpose_keys8(const float* k, const int64_t* off, int nk, int64_t hd, float* kt) {
  transpose_keys8_impl<simd::F32Load>(k, off, nk, hd, kt);
}
void transpose_keys8(const uint16_t* k, const int64_t* off, int nk, int64_t hd, float* kt) {
  transpose_keys8_impl<simd::F16Load>(k, off, nk, hd, kt);
}

void qk_scores_keys8(const float* kt, int64_t hd, const float* const* q, int nq, float scale, float* const* out) {
  PAGELLM_CHECK(hd % 32 == 0 && (nq == 1 || nq == 2), "qk_scores_keys8: hd " + std::to_string(hd));
  if (nq == 2) return qk_keys8_hd<2>(kt, hd, q, scale, out);
  qk_keys8_hd<1>(kt, hd, q, scale, out);
}

}  // namespace pagellm::kernels::avx2

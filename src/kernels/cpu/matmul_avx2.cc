// AVX2/FMA/F16C dot products for matmul (compiled with -mavx2 -mfma -mf16c; entered only when
// use_avx2()). Every kernel is a template over the token count M of a tile: token k's
// accumulators see exactly the same instruction sequence for every M, so the tile results are
// bit-identical to the single-token results (batch invariance), and weight loads are shared.
//
// Quantized kernels follow ggml's x86 ggml_vec_dot_q8_0_q8_0 / q4_0_q8_0: |w| (u8) times
// sign-adjusted activations (s8) with _mm256_maddubs_epi16, pairs widened with _mm256_madd_epi16,
// 8 int32 partial sums converted to float and accumulated with d_w * d_x by FMA.
#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/kernels_impl.h"

namespace pagellm::kernels::avx2 {
namespace {

// Sum of the 8 lanes in a fixed order.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p, bool is_bf16) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (!is_bf16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

struct F32W {
  static __m256 load(const float* p) { return load8(p); }
  static float scalar(const float* p) { return *p; }
};
struct F16W {
  static __m256 load(const uint16_t* p) { return load8(p, false); }
  static float scalar(const uint16_t* p) { return half_to_float(*p); }
};
struct BF16W {
  static __m256 load(const uint16_t* p) { return load8(p, true); }
  static float scalar(const uint16_t* p) { return bf16_to_fp32(*p); }
};

// Software prefetch distance for weight rows (see matmul_avx512.cc): decode streams every weight
// once from DRAM and the hardware prefetcher alone does not keep a thread's stream full.
constexpr int64_t kPrefetchBytes = 8192;
inline void prefetch(const void* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) {
    _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes + o, _MM_HINT_T0);
  }
}

// Float-weight dot: 4 accumulators of 8 lanes over steps of 32, then steps of 8 into acc 0,
// then (a0 + a1) + (a2 + a3) reduced by hsum, then a scalar FMA tail in element order.
template <typename L, int M, typename T>
void float_tile(const T* w, const float* x, int64_t xs, int64_t n, float* out) {
  __m256 acc[M][4];
#pragma GCC unroll 4
  for (int k = 0; k < M; ++k)
    for (int a = 0; a < 4; ++a) acc[k][a] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch(w + i, 32 * static_cast<int64_t>(sizeof(T)));
    const __m256 w0 = L::load(w + i), w1 = L::load(w + i + 8), w2 = L::load(w + i + 16), w3 = L::load(w + i + 24);
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
    const __m256 w0 = L::load(w + i);
#pragma GCC unroll 4
    for (int k = 0; k < M; ++k) acc[k][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + k * xs + i), acc[k][0]);
  }
#pragma GCC unroll 4
  for (int k = 0; k < M; ++k) {
    float s = hsum(_mm256_add_ps(_mm256_add_ps(acc[k][0], acc[k][1]), _mm256_add_ps(acc[k][2], acc[k][3])));
    for (int64_t j = i; j < n; ++j) s = std::fma(L::scalar(w + j), x[k * xs + j], s);
    out[k] = s;
  }
}

template <typename L, typename T>
void float_tile_dispatch(const T* w, const float* x, int64_t xs, int64_t n, int m, float* out) {
  switch (m) {
    case 1: return float_tile<L, 1>(w, x, xs, n, out);
    case 2: return float_tile<L, 2>(w, x, xs, n, out);
    case 3: return float_tile<L, 3>(w, x, xs, n, out);
    case 4: return float_tile<L, 4>(w, x, xs, n, out);
  }
  __builtin_unreachable();
}

// Signed 8-bit dot of 32 pairs as 8 float lanes (exact integers): ax = |w|, sy = x * sign(w).
inline __m256 i8_dot(__m256i ax, __m256i w, __m256i x) {
  const __m256i sy = _mm256_sign_epi8(x, w);
  const __m256i dot16 = _mm256_maddubs_epi16(ax, sy);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(dot16, _mm256_set1_epi16(1)));
}

inline __m256i load_q8(const BlockQ8_0& b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)); }

// 32 nibbles -> 32 signed bytes in [-8, 7]: element j from the low nibble of qs[j] (lane 0..15),
// element j + 16 from the high nibble (lanes 16..31).
inline __m256i load_q4(const BlockQ4_0& b) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}

struct Q8W {
  using Block = BlockQ8_0;
  static __m256i load(const Block& b) { return load_q8(b); }
};
struct Q4W {
  using Block = BlockQ4_0;
  static __m256i load(const Block& b) { return load_q4(b); }
};

// Quantized dot: blocks 2i go to accumulator 0, blocks 2i+1 to accumulator 1 (the last odd
// block to accumulator 0); result hsum(acc0 + acc1).
template <typename L, int M>
void quant_tile(const typename L::Block* w, const BlockQ8_0* x, int64_t xs, int64_t nb, float* out) {
  __m256 acc[M][2];
#pragma GCC unroll 4
  for (int k = 0; k < M; ++k) acc[k][0] = acc[k][1] = _mm256_setzero_ps();
  auto block = [&](int64_t b, int a) {
    const __m256i wq = L::load(w[b]);
    const __m256i ax = _mm256_sign_epi8(wq, wq);
    const float dw = half_to_float(w[b].d);
#pragma GCC unroll 4
    for (int k = 0; k < M; ++k) {
      const BlockQ8_0& xb = x[k * xs + b];
      const __m256 q = i8_dot(ax, wq, load_q8(xb));
      acc[k][a] = _mm256_fmadd_ps(_mm256_set1_ps(dw * half_to_float(xb.d)), q, acc[k][a]);
    }
  };
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    prefetch(w + b, 2 * static_cast<int64_t>(sizeof(typename L::Block)));
    block(b, 0);
    block(b + 1, 1);
  }
  if (b < nb) block(b, 0);
#pragma GCC unroll 4
  for (int k = 0; k < M; ++k) out[k] = hsum(_mm256_add_ps(acc[k][0], acc[k][1]));
}

template <typename L>
void quant_tile_dispatch(const typename L::Block* w, const BlockQ8_0* x, int64_t xs, int64_t nb, int m, float* out) {
  switch (m) {
    case 1: return quant_tile<L, 1>(w, x, xs, nb, out);
    case 2: return quant_tile<L, 2>(w, x, xs, nb, out);
    case 3: return quant_tile<L, 3>(w, x, xs, nb, out);
    case 4: return quant_tile<L, 4>(w, x, xs, nb, out);
  }
  __builtin_unreachable();
}

}  // namespace

void dot_f32_tile(const float* w, const float* x, int64_t xs, int64_t n, int m, float* out) {
  float_tile_dispatch<F32W>(w, x, xs, n, m, out);
}
void dot_f16_tile(const uint16_t* w, const float* x, int64_t xs, int64_t n, int m, float* out) {
  float_tile_dispatch<F16W>(w, x, xs, n, m, out);
}
void dot_bf16_tile(const uint16_t* w, const float* x, int64_t xs, int64_t n, int m, float* out) {
  float_tile_dispatch<BF16W>(w, x, xs, n, m, out);
}
void dot_q8_0_q8_0_tile(const BlockQ8_0* w, const BlockQ8_0* x, int64_t xs, int64_t nb, int m, float* out) {
  quant_tile_dispatch<Q8W>(w, x, xs, nb, m, out);
}
void dot_q4_0_q8_0_tile(const BlockQ4_0* w, const BlockQ8_0* x, int64_t xs, int64_t nb, int m, float* out) {
  quant_tile_dispatch<Q4W>(w, x, xs, nb, m, out);
}

float dot_f32(const float* w, const float* x, int64_t n) {
  float r;
  float_tile<F32W, 1>(w, x, 0, n, &r);
  return r;
}
float dot_f16(const uint16_t* w, const float* x, int64_t n) {
  float r;
  float_tile<F16W, 1>(w, x, 0, n, &r);
  return r;
}
float dot_bf16(const uint16_t* w, const float* x, int64_t n) {
  float r;
  float_tile<BF16W, 1>(w, x, 0, n, &r);
  return r;
}
float dot_q8_0_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb) {
  float r;
  quant_tile<Q8W, 1>(w, x, 0, nb, &r);
  return r;
}
float dot_q4_0_q8_0(const BlockQ4_0* w, const BlockQ8_0* x, int64_t nb) {
  float r;
  quant_tile<Q4W, 1>(w, x, 0, nb, &r);
  return r;
}

// As quantize_row_q8_0_activations (bit-identical): amax over the block, id = 127 / amax, and
// round half to even (cvtps2dq in the default MXCSR mode, as std::nearbyint); |x * id| <= 127,
// so the saturating packs to int8 change nothing.
void quantize_q8_0_activations(const float* x, int64_t n, BlockQ8_0* y) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float* xb = x + b * kQK8_0;
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(xb + 8 * i);
    const __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                                   _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float amax = _mm_cvtss_f32(h);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[b].d = fp32_to_fp16(amax / 127.0f);
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], vid));
    // packs work per 128-bit lane: 0 1 | 2 3 -> int16 (0a 1a 0b 1b), then int8 (0a 1a 2a 3a 0b 1b 2b 3b)
    const __m256i p01 = _mm256_packs_epi32(q[0], q[1]), p23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i p = _mm256_packs_epi16(p01, p23);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs), _mm256_permutevar8x32_epi32(p, order));
  }
}

}  // namespace pagellm::kernels::avx2

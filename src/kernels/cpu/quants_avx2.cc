// The q8_0 and q8_K activation quantizers on AVX2 (compiled with -mavx2 -mfma -mf16c; entered only when the
// caller's isa >= kAvx2).
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/kernels_impl.h"

namespace pagellm::kernels::avx2 {

namespace {

// Whether any of v[0 .. n) is a NaN (an unordered compare with itself).
bool any_nan(const __m256* v, int n) {
  __m256 u = _mm256_cmp_ps(v[0], v[0], _CMP_UNORD_Q);
  for (int i = 1; i < n; ++i) u = _mm256_or_ps(u, _mm256_cmp_ps(v[i], v[i], _CMP_UNORD_Q));
  return _mm256_movemask_ps(u) != 0;
}

}  // namespace

// As quantize_row_q8_0_activations (bit-identical): a block holding a NaN is nan_block; else
// amax over the block, id = 127 / amax, and round half to even (cvtps2dq in the default MXCSR
// mode, as std::nearbyint); |x * id| <= 127, so the saturating packs to int8 change nothing.
void quantize_q8_0_activations(const float* x, int64_t n, BlockQ8_0* y) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float* xb = x + b * kQK8_0;
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(xb + 8 * i);
    if (any_nan(v, 4)) {
      nan_block(y[b]);
      continue;
    }
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

// As quantize_row_q8_K (bit-identical, inf and NaN included): a block holding a NaN is
// nan_block; else amax = max |x|, vmax = the first element with |x| == amax,
// q = round_half_even(iscale * x) clamped to [-128, 127] with a NaN product (of an inf) -> 127 (the clamp comes first
// here, in float: min_ps returns its second operand for a NaN, and rounding commutes with clamping to integers; then
// cvtps2dq in the default MXCSR mode), bsums by sum of absolute differences on q ^ 0x80 (= q + 128) minus 16 * 128.
void quantize_q8_K_activations(const float* x, int64_t n, BlockQ8_K* y) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    __m256 m = _mm256_setzero_ps(), unordered = _mm256_setzero_ps();
    for (int i = 0; i < kQK_K; i += 8) {
      const __m256 v = _mm256_loadu_ps(xb + i);
      m = _mm256_max_ps(_mm256_andnot_ps(sign, v), m);
      unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    if (_mm256_movemask_ps(unordered) != 0) {
      nan_block(y[b]);
      continue;
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float amax = _mm_cvtss_f32(h);
    if (amax == 0.0f) {
      std::memset(&y[b], 0, sizeof(BlockQ8_K));
      continue;
    }
    int j = 0;
    while (j + 1 < kQK_K && std::fabs(xb[j]) != amax) ++j;
    const float iscale = -127.0f / xb[j];
    const __m256 vs = _mm256_set1_ps(iscale);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256 hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-128.0f);
    for (int i = 0; i < kQK_K; i += 32) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) {
        const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(xb + i + 8 * k), vs);
        q[k] = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(p, hi), lo));
      }
      const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      const __m256i qs = _mm256_permutevar8x32_epi32(p, order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs + i), qs);
      // 4 sums of 8 (q + 128) -> the 2 bsums of these 32 quants.
      const __m256i sad =
          _mm256_sad_epu8(_mm256_xor_si256(qs, _mm256_set1_epi8(static_cast<char>(0x80))), _mm256_setzero_si256());
      alignas(32) int64_t s[4];
      _mm256_store_si256(reinterpret_cast<__m256i*>(s), sad);
      y[b].bsums[i / 16] = static_cast<int16_t>(s[0] + s[1] - 16 * 128);
      y[b].bsums[i / 16 + 1] = static_cast<int16_t>(s[2] + s[3] - 16 * 128);
    }
    y[b].d = 1.0f / iscale;
  }
}

}  // namespace pagellm::kernels::avx2

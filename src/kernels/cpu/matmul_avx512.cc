// AVX-512 VNNI dot products for Q8_0 / Q4_0 weights (entered only when use_avx512_vnni()).
//
// Bit-identical to the AVX2 kernels (matmul_avx2.cc) and so to ggml's x86 vec_dot: the only
// integer quantities that reach float are the 8 int32 lanes per block, lane i = sum of the
// products of elements 4i..4i+3, and those are exact in every method. ggml turns them into
// float lanes and accumulates block 2p into acc0, block 2p+1 into acc1 (a last odd block into
// acc0), then hsum(acc0 + acc1). Here one zmm holds both accumulators, so one instruction does a
// pair of blocks, and VPDPBUSD replaces ggml's sign/maddubs/madd triple:
//
//   pair layout "P" of 16 int32/float lanes (b = block 2p, b1 = block 2p+1):
//     zmm lanes  0..3  = b  lanes 0..3  (acc0)     elements b[0..16)
//     zmm lanes  4..7  = b1 lanes 0..3  (acc1)     elements b1[0..16)
//     zmm lanes  8..11 = b  lanes 4..7  (acc0)     elements b[16..32)
//     zmm lanes 12..15 = b1 lanes 4..7  (acc1)     elements b1[16..32)
//   (this is where Q4_0's low and high nibbles land without a byte shuffle.)
//
// VPDPBUSD multiplies unsigned by signed bytes, so:
//   Q4_0: q in [0, 16) unsigned times x signed, plus bias = -8 * (sum of x's 4 bytes) per lane.
//   Q8_0: (x + 128) unsigned times w signed, minus 128 * (sum of w's 4 bytes) per lane.
// Both equal sum (w - offset) * x exactly (|lane| < 2^17).
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
// GCC 12's cast intrinsics (_mm512_cast*256/128) read a deliberately undefined register.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <type_traits>

#include "kernels/cpu/kernels_avx512.h"

namespace pagellm::kernels::avx512 {
namespace {

inline __m512 scale_pair(uint16_t d0, uint16_t d1) {
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(d0) | (static_cast<int>(d1) << 16)));
  const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f));
}

// Sum of the 8 lanes in the order of avx2::hsum.
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// hsum(acc0 + acc1) from a P-layout accumulator.
inline float reduce_pair(__m512 z) {
  const __m256 lo = _mm512_castps512_ps256(z), hi = _mm512_extractf32x8_ps(z, 1);
  const __m128 a = _mm_add_ps(_mm256_castps256_ps128(lo), _mm256_extractf128_ps(lo, 1));  // acc0+acc1 lanes 0..3
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(hi), _mm256_extractf128_ps(hi, 1));  // lanes 4..7
  return hsum8(_mm256_set_m128(b, a));
}

// Weight pair p in P layout, unsigned nibbles; `single`: only block b exists.
struct Q4W {
  using Block = BlockQ4_0;
  static __m512i load(const Block* w, bool single) {
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[0].qs));
    const __m128i q1 = single ? _mm_setzero_si128() : _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[1].qs));
    const __m256i lo = _mm256_set_m128i(q1, q0);
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_srli_epi16(lo, 4), 1);
    return _mm512_and_si512(both, _mm512_set1_epi8(0x0F));
  }
  static __m512i bias(__m512i) { return _mm512_setzero_si512(); }
};

struct Q8W {
  using Block = BlockQ8_0;
  static __m512i load(const Block* w, bool single) {
    const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[0].qs));
    const __m256i q1 = single ? _mm256_setzero_si256() : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[1].qs));
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
  }
  // -128 * (sum of 4 weight bytes) per lane.
  static __m512i bias(__m512i wq) {
    return _mm512_sub_epi32(_mm512_setzero_si512(),
                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(static_cast<char>(0x80)), wq));
  }
};

// Adds the pairs of raw (GGUF-layout) blocks w[0, nb) against x[0, (nb + 1) / 2) to acc[M].
template <typename L, int M>
inline void raw_pairs(const typename L::Block* w, const PairQ8* x, int64_t xs, int64_t nb, __m512* acc) {
  const int64_t np = (nb + 1) / 2;
  for (int64_t p = 0; p < np; ++p) {
    const bool single = 2 * p + 1 == nb;
    const typename L::Block* wb = w + 2 * p;
    const __m512i wq = L::load(wb, single);
    const __m512i wbias = L::bias(wq);
    const __m512 wd = scale_pair(wb[0].d, single ? 0 : wb[1].d);
    const __mmask16 mask = single ? 0x0F0F : 0xFFFF;
#pragma GCC unroll 8
    for (int k = 0; k < M; ++k) {
      const PairQ8& xp = x[k * xs + p];
      __m512i isum;
      if constexpr (std::is_same_v<L, Q4W>) {
        isum = _mm512_dpbusd_epi32(_mm512_load_si512(xp.bias), wq, _mm512_load_si512(xp.qs));
      } else {
        isum = _mm512_dpbusd_epi32(wbias, _mm512_load_si512(xp.qs), wq);
      }
      const __m512 s = _mm512_mul_ps(wd, _mm512_load_ps(xp.d));
      acc[k] = _mm512_mask3_fmadd_ps(s, _mm512_cvtepi32_ps(isum), acc[k], mask);
    }
  }
}

template <typename L, int M>
void quant_tile(const typename L::Block* w, const PairQ8* x, int64_t xs, int64_t nb, float* out) {
  __m512 acc[M];
  for (int k = 0; k < M; ++k) acc[k] = _mm512_setzero_ps();
  raw_pairs<L, M>(w, x, xs, nb, acc);
  for (int k = 0; k < M; ++k) out[k] = reduce_pair(acc[k]);
}

template <typename L>
void dispatch(const typename L::Block* w, const PairQ8* x, int64_t xs, int64_t nb, int m, float* out) {
  switch (m) {
    case 1: return quant_tile<L, 1>(w, x, xs, nb, out);
    case 2: return quant_tile<L, 2>(w, x, xs, nb, out);
    case 3: return quant_tile<L, 3>(w, x, xs, nb, out);
    case 4: return quant_tile<L, 4>(w, x, xs, nb, out);
    case 5: return quant_tile<L, 5>(w, x, xs, nb, out);
    case 6: return quant_tile<L, 6>(w, x, xs, nb, out);
    case 7: return quant_tile<L, 7>(w, x, xs, nb, out);
    case 8: return quant_tile<L, 8>(w, x, xs, nb, out);
  }
  __builtin_unreachable();
}

}  // namespace

void prepare_pairs(GgmlType weight_type, const BlockQ8_0* xq, int64_t nb, PairQ8* out) {
  const bool q4 = weight_type == GgmlType::Q4_0;
  for (int64_t p = 0; p < (nb + 1) / 2; ++p) {
    const BlockQ8_0* b0 = xq + 2 * p;
    const bool single = 2 * p + 1 == nb;
    PairQ8& o = out[p];
    const float d0 = _cvtsh_ss(b0[0].d), d1 = single ? 0.0f : _cvtsh_ss(b0[1].d);
    for (int h = 0; h < 2; ++h) {      // element halves [0, 16), [16, 32)
      for (int s = 0; s < 2; ++s) {    // block b, b1
        for (int j = 0; j < 16; ++j) {
          const int8_t v = (s == 1 && single) ? 0 : b0[s].qs[16 * h + j];
          o.qs[32 * h + 16 * s + j] = q4 ? v : static_cast<int8_t>(static_cast<uint8_t>(v) ^ 0x80);
        }
        for (int l = 0; l < 4; ++l) {
          const int lane = 8 * h + 4 * s + l;
          const int8_t* q = &o.qs[4 * lane];
          o.bias[lane] = q4 ? -8 * (q[0] + q[1] + q[2] + q[3]) : 0;
          o.d[lane] = s == 0 ? d0 : d1;
        }
      }
    }
  }
}

void dot_q8_0_tile(const BlockQ8_0* w, const PairQ8* x, int64_t xs, int64_t nb, int m, float* out) {
  dispatch<Q8W>(w, x, xs, nb, m, out);
}
void dot_q4_0_tile(const BlockQ4_0* w, const PairQ8* x, int64_t xs, int64_t nb, int m, float* out) {
  dispatch<Q4W>(w, x, xs, nb, m, out);
}
void quantize_q8_0_activations(const float* x, int64_t n, BlockQ8_0* y) {
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float* xb = x + b * kQK8_0;
    const __m512 lo = _mm512_loadu_ps(xb), hi = _mm512_loadu_ps(xb + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[b].d = fp32_to_fp16(amax / 127.0f);
    const __m512 vid = _mm512_set1_ps(id);
    // cvtps2dq rounds to nearest even (the default MXCSR mode), as std::nearbyint.
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(lo, vid))));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs + 16),
                     _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(hi, vid))));
  }
}

}  // namespace pagellm::kernels::avx512

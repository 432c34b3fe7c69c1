// Internal to src/kernels/cpu: the per-row building blocks shared by the ops, in two flavours.
//   ref::   plain C++, the test oracles and the fallback on CPUs without AVX2 (dot_ref.cc).
//   avx2::  defined only in *_avx2.cc; call only with an Isa >= kAvx2 (cpu_features.h).
// No intrinsic types appear here, so this header is safe for baseline translation units.
//
// Batch invariance: every function computes each output from its own inputs with a fixed
// instruction sequence; none depends on neighbouring rows, tokens or threads.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace pagellm::kernels {

// The activation quantizers' block for input holding a NaN: d = NaN and zero quants and bsums,
// so that every dot product with it is NaN (the sampler then refuses the logits: "not finite").
// ggml's amax skips a NaN, which turned such a block into finite quants or zeros, and a NaN in
// the hidden state into plausible-looking logits (all 0 for an all-NaN row).
inline void nan_block(BlockQ8_0& b) {
  std::memset(&b, 0, sizeof(b));
  b.d = fp32_to_fp16(NAN);
}
inline void nan_block(BlockQ8_K& b) {
  std::memset(&b, 0, sizeof(b));
  b.d = NAN;
}

namespace ref {
// Attention's scalar q . k (paged_attention_ref, and attention without AVX2): avx2::dot_f32's
// order emulated in scalar code (4 x 8 lanes over steps of 32, then steps of 8, the lanes summed
// in simd::hsum8's order, then an FMA tail), so every ISA gives the same bits; n = elements.
float dot_f32(const float* w, const float* x, int64_t n);
float dot_f16(const uint16_t* w, const float* x, int64_t n);
// "Block sums", the arithmetic of Q8_0/Q4_0 weights against q8_0 activations (nb = n / 32
// blocks): per block the exact int32 sum, then s = fma(float(isum), d_w * d_x, s), blocks in
// order from s = 0.
float dot_q8_0_q8_0_blocksum(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb);
float dot_q4_0_q8_0_blocksum(const BlockQ4_0* w, const BlockQ8_0* x, int64_t nb);
// "Sequential" arithmetic of F32/F16/BF16 weights: s = 0, then s = fma(w[i * w_stride], x[i], s)
// for i = 0 .. n - 1. x is already rounded to the weight's type (round_activations); w_stride in
// elements (1 for a GGUF row, 16 for a row of a repacked tile).
float dot_f32_seq(const float* w, int64_t w_stride, const float* x, int64_t n);
float dot_f16_seq(const uint16_t* w, int64_t w_stride, const float* x, int64_t n);
float dot_bf16_seq(const uint16_t* w, int64_t w_stride, const float* x, int64_t n);
// The "unpacked block" arithmetic of T in {Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K .. Q6_K, IQ4_XS}
// (quant_unpack.h): one GGUF row w of cols elements . one activation row xa in T's vec_dot_type
// (q8_0 blocks for 32-element formats, q8_K for super-blocks).
template <GgmlType T>
float dot_unpacked(const void* w, const void* xa, int64_t cols);

// e^x in f32 by a fixed sequence that avx2::softmax_tile repeats lane by lane (same bits on every
// ISA): n = round(x log2 e) (the 1.5 * 2^23 rounding trick), r = x - n ln2 in two parts,
// e^r = 1 + r + r^2 P(r) with Cephes' expf minimax P of degree 5 (S. Moshier, Cephes Math
// Library, expf.c; about 1 ulp on |r| <= ln2 / 2), times 2^n by building its exponent bits.
// 0 for x < kExpMin (the smallest normal result) and for -inf; NaN for NaN; valid for x <= 88.
constexpr float kExpMin = -87.33654f;
constexpr float kExpLog2e = 1.44269504088896341f;
constexpr float kExpRound = 12582912.0f;  // 1.5 * 2^23
constexpr float kExpLn2Hi = 0.693359375f;
constexpr float kExpLn2Lo = -2.12194440e-4f;
constexpr float kExpP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                            4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
inline float exp_f32(float x) {
  if (std::isnan(x)) return x;
  if (x < kExpMin) return 0.0f;
  const float n = std::fma(x, kExpLog2e, kExpRound) - kExpRound;
  const float r = std::fma(n, -kExpLn2Lo, std::fma(n, -kExpLn2Hi, x));
  float p = kExpP[0];
  for (int i = 1; i < 6; ++i) p = std::fma(p, r, kExpP[i]);
  const float y = std::fma(p, r * r, r) + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return y * scale;
}

// silu(g) = g / (1 + e^-g) with e^-g = exp_f32(-g), rounded as written (ggml_silu_f32's formula on
// our exp; Elfwing et al. 2018, arXiv:1702.03118). -0 where -g > kSiluExpMax, beyond exp_f32's
// range: the true value is below 1e-36 in magnitude there. avx2::silu_mul repeats it lane by lane.
constexpr float kSiluExpMax = 88.0f;
inline float silu_f32(float g) {
  const float x = -g;
  if (x > kSiluExpMax) return -0.0f;
  return g / (1.0f + exp_f32(x));
}

// One online-softmax tile of attention (attention.cc): m = max(m_in, s[0 .. n)) (a score
// s[j] replaces m when s[j] > m), then s[j] = exp_f32(s[j] - m) and *sum = their sum in double,
// key j into lane j % 8 and the lanes added as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
// Returns m. s: [n] f32 scores, n >= 1.
float softmax_tile(float* s, int64_t n, float m_in, double* sum);
}  // namespace ref

namespace avx2 {
// ref::dot_*_seq (w_stride 1) and ref::dot_*_blocksum compiled with FMA (dot_ref_avx2.cc): the
// same bits, for the rows matmul runs outside the tiles.
float dot_f32_seq(const float* w, const float* x, int64_t n);
float dot_f16_seq(const uint16_t* w, const float* x, int64_t n);
float dot_bf16_seq(const uint16_t* w, const float* x, int64_t n);
float dot_q8_0_q8_0_blocksum(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb);
float dot_q4_0_q8_0_blocksum(const BlockQ4_0* w, const BlockQ8_0* x, int64_t nb);
template <GgmlType T>
float dot_unpacked(const void* w, const void* xa, int64_t cols);
// Attention's q . k on AVX2 (attention_avx2.cc): ggml's ggml_vec_dot_f32 order (4 x 8 lanes over
// steps of 32, then steps of 8, hsum, scalar tail); ref::dot_f32 / dot_f16's bits.
float dot_f32(const float* w, const float* x, int64_t n);
float dot_f16(const uint16_t* w, const float* x, int64_t n);
// One row w against m rows (1 <= m <= kMaxTileTokens, row k at x + k * x_stride):
// out[k] is bit-identical to dot_f32(w, row k), the loads of w shared.
constexpr int kMaxTileTokens = 4;
void dot_f32_tile(const float* w, const float* x, int64_t x_stride, int64_t n, int m, float* out);

// "Sequential" arithmetic (ref::dot_*_seq) on repacked F32/F16/BF16 tiles (matmul_seq_avx2.cc).
// pack_seq: x [num_tokens, n] f32 -> out [num_tokens * n]: token tiles of tile_tokens (the last
// may be smaller, m tokens), tile t0 at out + t0 * n holding token t's element k at k * m + t,
// rounded as round_activations(type). (kSeqTileTokens here, avx512::kSeqTileTokens there.)
// seq_tiles: `tiles` consecutive 16-row tiles from w (repacked, n columns) x every token:
// y[t * y_stride + 16 * i + r] = ref::dot_*_seq(tile i row r, token t).
constexpr int kSeqTileTokens = 6;
void pack_seq(GgmlType type, const float* x, int64_t num_tokens, int64_t n, int tile_tokens, float* out);
// (T: F32, F16 or BF16, instantiated in the .cc file)
template <GgmlType T>
void seq_tiles(const void* w, int64_t tiles, const float* xp, int64_t n, int64_t num_tokens, float* y,
               int64_t y_stride);

// As quantize_row_q8_0_activations (ops.h), bit-identical; n % 32 == 0 (quants_avx2.cc).
void quantize_q8_0_activations(const float* x, int64_t n, BlockQ8_0* y);
// As quantize_row_q8_K (ops.h), bit-identical; n % 256 == 0 (quants_avx2.cc).
void quantize_q8_K_activations(const float* x, int64_t n, BlockQ8_K* y);

// Attention helpers. v rows are f32 or f16.
// acc[i] += a * v[i], i in [0, n), one fused multiply-add per element.
void axpy_f32(float a, const float* v, float* acc, int64_t n);
void axpy_f16(float a, const uint16_t* v, float* acc, int64_t n);
// out[i] = sum_j a[j] * v[off[j] + i] for i in [0, hd), j ascending: bit-identical to out = 0
// followed by axpy_*(a[j], v + off[j], out, hd) for each j (off in elements).
void pv_accumulate_f32(const float* v, const int64_t* off, int64_t n, const float* a, int64_t hd, float* out);
void pv_accumulate_f16(const uint16_t* v, const int64_t* off, int64_t n, const float* a, int64_t hd, float* out);
// One online-softmax tile of nq in {1, 2} query heads sharing the loads of v (f32): for each q,
// P = pv_accumulate_f32(v, off, n, a[q], hd), then out[q] = P if `first`, else
// rescale_add(out[q], c[q], P): those calls' bits, without P in memory. hd % 8 == 0.
void pv_merge_f32(const float* v, const int64_t* off, int64_t n, const float* const* a, int nq, int64_t hd,
                  const float* c, bool first, float* const* out);
// Attention scores with lane = key (prefill; avx512::transpose_keys16 / qk_scores_keys16 with 8
// lanes): transpose_keys8 puts keys j < nk (1 <= nk <= 8, row j at k + off[j]; hd % 8 == 0) into
// kt [hd, 8] f32 (32-byte aligned), lanes j >= nk repeating key nk - 1; qk_scores_keys8 gives
// out[i][j] = (q_i . key j) * scale for nq in {1, 2} queries and j < 8, each dot bit-identical
// to dot_f32(key j, q_i, hd); hd % 32 == 0. An F16 cache (uint16_t keys): kt holds them
// converted to f32, each score dot_f16's bits.
void transpose_keys8(const float* k, const int64_t* off, int nk, int64_t hd, float* kt);
void transpose_keys8(const uint16_t* k, const int64_t* off, int nk, int64_t hd, float* kt);
void qk_scores_keys8(const float* kt, int64_t hd, const float* const* q, int nq, float scale, float* const* out);
// ref::softmax_tile, bit for bit (attention_avx2.cc).
float softmax_tile(float* s, int64_t n, float m_in, double* sum);
// acc[i] = fma(acc[i], c, x[i]) for i in [0, n): the online-softmax rescale.
void rescale_add(float* acc, float c, const float* x, int64_t n);
// out[i] = half(x[i]), round to nearest even (bit-identical to fp32_to_fp16).
void convert_f32_to_f16(const float* x, uint16_t* out, int64_t n);

// out[i] = ref::silu_f32(gate[i]) * up[i], bit for bit (activations_avx2.cc). out may alias gate.
void silu_mul(const float* gate, const float* up, int64_t n, float* out);

// stream_sum (ops.h) on AVX2 (stream_avx2.cc).
float stream_sum(const float* p, int64_t n, int64_t prefetch_bytes, int streams);
}  // namespace avx2

}  // namespace pagellm::kernels

// Internal to src/kernels/cpu: the AVX-512 kernels (files *_avx512.cc, compiled for AVX-512
// F/BW/VL/DQ; call only with an Isa >= kAvx512, cpu_features.h). No intrinsic types appear here.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace pagellm::kernels::avx512 {

// The "sequential" arithmetic (ref::dot_*_seq) on repacked F32/F16/BF16 tiles, as
// avx2::seq_tiles (kernels_impl.h) with token tiles of kSeqTileTokens: activations packed by
// avx2::pack_seq(..., kSeqTileTokens, ...). The same bits as avx2::seq_tiles
// (matmul_seq_avx512.cc).
constexpr int kSeqTileTokens = 12;
// (T: F32, F16 or BF16, instantiated in the .cc file)
template <GgmlType T>
void seq_tiles(const void* w, int64_t tiles, const float* xp, int64_t n, int64_t num_tokens, float* y,
               int64_t y_stride);

// BF16 on VDPBF16PS (matmul_seq_avx512bf16.cc; only with Isa::kAvx512Bf16, n even): the same
// chains as seq_tiles<BF16>, two steps per instruction (the same bits, but for subnormals, which
// the instruction flushes). pack_bf16_pairs: x [num_tokens, n] f32 -> out: token tiles of
// kSeqTileTokens (the last may be shorter), tile t0 at out + t0 * n / 2, holding for pair p and
// token t the dword bf16(x[t, 2p]) << 16 | bf16(x[t, 2p + 1]) at p * m + t (rounded as
// round_activations(BF16)). seq_tiles_bf16_pairs: as seq_tiles<BF16>, reading those pairs.
void pack_bf16_pairs(const float* x, int64_t num_tokens, int64_t n, uint32_t* out);
void seq_tiles_bf16_pairs(const void* w, int64_t tiles, const uint32_t* xp, int64_t n, int64_t num_tokens, float* y,
                          int64_t y_stride);

// Attention (attention_avx512.cc): r in {1, 4} keys (key i at k + i * k_stride) x the 2 query
// heads at q and q + n, n elements each: out[i * 2 + j] = q_j . key i, bit-identical to
// avx2::dot_f32(q_j, key i).
void qk_f32_pair_tile(const float* k, int64_t k_stride, int r, const float* q, int64_t n, float* out);
// Attention scores with lane = key, for many queries against the same keys (prefill).
// transpose_keys16: keys j < nk (1 <= nk <= 16, row j at k + off[j], hd elements; hd % 16 == 0)
// into kt [hd, 16] f32 (64-byte aligned): kt[e * 16 + j] = element e of key j; lanes j >= nk
// repeat key nk - 1. qk_scores_keys16: out[i][j] = (q_i . key j) * scale for the nq in {1, 2}
// query rows q[i] (hd elements; hd % 32 == 0) and j < 16, each dot bit-identical to
// avx2::dot_f32(key j, q_i, hd).
// An F16 cache (uint16_t keys): kt holds them converted to f32, the scores avx2::dot_f16's bits.
void transpose_keys16(const float* k, const int64_t* off, int nk, int64_t hd, float* kt);
void transpose_keys16(const uint16_t* k, const int64_t* off, int nk, int64_t hd, float* kt);
void qk_scores_keys16(const float* kt, int64_t hd, const float* const* q, int nq, float scale, float* const* out);
// Two heads' avx2::pv_accumulate_f32 sharing the loads of V: out0 from weights a0, out1 from a1,
// each bit-identical to avx2::pv_accumulate_f32(v, off, n, a_h, hd, out_h). hd in {32, 64, 96,
// 128} (pv_pair_supported); v, off as there.
bool pv_pair_supported(int64_t hd);
void pv_accumulate_f32_pair(const float* v, const int64_t* off, int64_t n, const float* a0, const float* a1, int64_t hd,
                            float* out0, float* out1);
// The same for an F16 cache: out_h bit-identical to avx2::pv_accumulate_f16(v, off, n, a_h, hd, out_h).
void pv_accumulate_f16_pair(const uint16_t* v, const int64_t* off, int64_t n, const float* a0, const float* a1,
                            int64_t hd, float* out0, float* out1);

}  // namespace pagellm::kernels::avx512

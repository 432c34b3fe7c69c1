// CPU kernels used by the model forward pass. Every op has a plain scalar reference (`*_ref`,
// the test oracle) and a fast version that runs on the Isa (cpu_features.h) it is given: a
// WeightView's or KvLayerView's `isa`, chosen once when the model is loaded. Model code calls
// only the functions in this header.
//
// Batch invariance (docs/design.md): the result for one token never depends on how many other
// tokens are in the call, on their values, or on the thread count. Reductions run in a fixed order
// per output element.
#pragma once

#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/workspace.h"

namespace pagellm::kernels {

// A weight matrix in GGUF layout: `rows` rows of `cols` elements; each row is contiguous and
// stored in `type` (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL: blocks of 32;
// Q2_K .. Q6_K, IQ4_XS: super-blocks of 256; matmul_supports says which).
// In ggml terms: ne[0] = cols, ne[1] = rows.
// layout kRepacked16 (made by repack_weight): the same bytes, rows interleaved in tiles of 16;
// Q8_0/Q4_0 block by block for the block-sum kernels (kernels_r16.h), F32/F16/BF16 element by
// element (element (r, k) of a tile at k * 16 + r; F16 and BF16 tiles side by side in groups of
// 4, element (r, k) of tile j of a group of g at k * 16 g + 16 j + r: kernel_traits.h) for the
// sequential kernels (matmul_seq_avx2.cc); only matmul and get_row read it.
// isa: the kernels matmul runs this weight on (chosen with the layout, at load); any value up to
// cpu_isa() gives the same bits.
enum class WeightLayout : uint8_t { kGguf, kRepacked16 };
struct WeightView {
  GgmlType type = GgmlType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  WeightLayout layout = WeightLayout::kGguf;
  Isa isa = default_isa();
  int64_t row_bytes() const { return row_size_bytes(type, cols); }
};

// ---- weight repacking (load time) ---------------------------------------------------------
// True when matmul runs repack_weight(w) on tiles: a type of the kernel table with tiles (Q8_0/
// Q4_0/F32/F16/BF16) in GGUF layout with at least 16 rows, and w.isa >= kAvx2. The bits are the same
// either way (one arithmetic per weight family, kernel_traits.h): repacking is only for speed.
bool repack_pays(const WeightView& w);
// Writes w's rows in WeightLayout::kRepacked16 into out (w.rows * w.row_bytes() bytes, any
// alignment, not overlapping w) and returns the view of out. Precondition (PAGELLM_CHECK, aborts):
// w is Q8_0/Q4_0/F32/F16/BF16 in GGUF layout. pool may be nullptr.
WeightView repack_weight(const WeightView& w, void* out, ThreadPool* pool);
// Row r of w (either layout) as f32: out [w.cols] (an embedding lookup; dequantize_row of the
// row's GGUF bytes). A repacked row is first unpacked into ws (slot kRow). Aborts (PAGELLM_CHECK)
// when r is out of range.
void get_row(const WeightView& w, int64_t r, float* out, Workspace& ws);

// ---- dequantization (block formulas of ggml-common.h) -------------------------------------
// q4_0: x[j] = d * ((qs[j] & 0xF) - 8), x[j+16] = d * ((qs[j] >> 4) - 8), j in [0,16).
// q8_0: x[j] = d * qs[j]. The others: core/quant_blocks.h, one formula per struct.
// out: [cols] f32. Aborts (PAGELLM_CHECK) for a type matmul_supports rejects or a cols that is
// not a multiple of the block size.
void dequantize_row(GgmlType type, const void* row, int64_t cols, float* out);
// Reference quantizers (round to nearest, as ggml's quantize_row_*_ref): n % 32 == 0.
void quantize_row_q8_0(const float* x, int64_t n, void* out);
void quantize_row_q4_0(const float* x, int64_t n, void* out);
// The K-quant activation quantizer (ggml's quantize_row_q8_K_ref, the arithmetic written from its
// description): per 256 values, iscale = -127 / (the signed value of largest magnitude),
// q = min(127, round_half_even(iscale * x)), d = 1 / iscale, bsums per 16. n % 256 == 0.
// Unlike ggml, 256 values holding a NaN give d = NaN (zero quants): the NaN reaches the logits.
void quantize_row_q8_K(const float* x, int64_t n, void* out);
// Activation quantizer of the quantized matmuls: the arithmetic of ggml's x86 quantize_row_q8_0
// (id = 127 / amax, round half to even), so that Q8_0/Q4_0 logits track llama.cpp's on x86.
// It differs from quantize_row_q8_0 (weights: id = 1 / d, round half away from zero) in the last
// bit of a few quants. 32 values holding a NaN give d = NaN (zero quants), as quantize_row_q8_K.
// The activation type a weight type multiplies (the kernel table's vec_dot_type): F32 for
// F32/F16/BF16 (rounded to the weight's type inside matmul), Q8_0 for Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/
// IQ4_NL, Q8_K for the K-quants and IQ4_XS. Aborts (PAGELLM_CHECK) for a type matmul does not
// support.
GgmlType vec_dot_type(GgmlType weight_type);
// True when matmul (and dequantize_row, get_row) compute with weights of this type.
bool matmul_supports(GgmlType weight_type);
void quantize_row_q8_0_activations(const float* x, int64_t n, void* out);
// x: [num_tokens, cols] f32 (cols % 32 == 0) -> out: [num_tokens, cols / 32] q8_0 blocks, each row
// quantized by quantize_row_q8_0_activations (vectorised on AVX2 / AVX-512 CPUs, the same bits):
// what matmul does to x for weights whose vec_dot_type is Q8_0. For an x that feeds several
// quantized matmuls (q, k, v; gate, up): quantize once, pass the blocks to each matmul as `xq`.
// isa: the vectorised version to use (the same bits on every one).
void quantize_activations_q8_0(const float* x, int64_t num_tokens, int64_t cols, BlockQ8_0* out, Isa isa);

// ---- matmul ------------------------------------------------------------------------------
// y[t, r] = sum_c w[r, c] * x[t, c].
//   x: [num_tokens, w.cols] f32, row-major.   y: [num_tokens, w.rows] f32, row-major.
// pool may be nullptr (single-threaded). ws: the caller's scratch (slots kActivations and
// kPrepared); its contents never change the result. Aborts (PAGELLM_CHECK) for an unsupported
// type, a bad shape, or repacked weights whose isa this CPU lacks.
// Numerics (kernel_traits.h): F32/F16/BF16 weights multiply x rounded to the weight's type
// (round_activations, ggml's vec_dot_type for those types) with one sequential FMA chain per
// output; Q8_0/Q4_0 weights multiply x quantized to q8_0 by quantize_row_q8_0_activations (as
// ggml's vec_dot_type), an exact integer sum per block, blocks chained by FMA. matmul_ref is the
// scalar oracle of the same arithmetic: matmul gives its bits, on every ISA and layout.
// xq: optional, [num_tokens, w.cols / 32] blocks equal to quantize_activations_q8_0(x) (from
// rms_norm_rows, or shared by several matmuls); used only when vec_dot_type(w.type) is Q8_0,
// which then skips quantizing x. The result is the same bits either way.
void matmul(const WeightView& w, const float* x, int64_t num_tokens, float* y, ThreadPool* pool, Workspace& ws,
            const BlockQ8_0* xq = nullptr);
// Several weights of the same input x ([num_tokens, cols] f32, cols == every w.cols): for each
// out, out.y = matmul(*out.w, x) ([num_tokens, out.w->rows] f32), the same bits, in one parallel
// region (a decode step's k, v and q projections, or gate and up: one hand-off to the threads
// instead of one per weight, and no thread idles at one weight's end while another finishes).
// Weights of one layout whose kernels take the same activations (q8_K for Q4_K and Q6_K, ...)
// share them, made once. Aborts as matmul; 1 <= outs.size() <= kMaxMatmulOuts (the jobs live on
// the stack: a decode step allocates nothing here).
struct MatmulOut {
  const WeightView* w = nullptr;
  float* y = nullptr;
};
inline constexpr size_t kMaxMatmulOuts = 16;
void matmul_many(std::span<const MatmulOut> outs, const float* x, int64_t num_tokens, ThreadPool* pool, Workspace& ws,
                 const BlockQ8_0* xq = nullptr);
void matmul_ref(const WeightView& w, const float* x, int64_t num_tokens, float* y);
// F16 / BF16 weights multiply activations rounded to the weight's type (ggml's vec_dot_type for
// those types), accumulating in f32: out[i] = float(half(x[i])) or float(bf16(x[i])), i in [0, n).
// This keeps logits on F16 files close to llama.cpp's (tests/model/golden_test.cc).
void round_activations(GgmlType type, const float* x, int64_t n, float* out);

// ---- element-wise / row ops --------------------------------------------------------------
// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i], i in [0, n). out may alias x.
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out);
void rms_norm_ref(const float* x, const float* weight, int64_t n, float eps, float* out);
// RMSNorm of several rows, optionally fused with the activation quantization of the matmuls that
// follow it. Row j of out ([num_rows, n] f32, not aliasing x) = rms_norm(x + r * n), r = rows[j]
// (rows == nullptr: r = j); if out_q8 != nullptr ([num_rows, n / 32], n % 32 == 0), its row j =
// the q8_0 blocks of out row j (quantize_activations_q8_0), made while that row is in L1. The
// same bits as rms_norm and the quantizer apart: four rows' sums of squares run as four
// interleaved chains (the one-row sum is a serial chain of double adds, latency-bound), each in
// rms_norm's order.
void rms_norm_rows(const float* x, const int64_t* rows, int64_t num_rows, const float* weight, int64_t n, float eps,
                   float* out, BlockQ8_0* out_q8, Isa isa);

// RoPE as ggml applies it to llama tensors (GGML_ROPE_TYPE_NORM, adjacent pairs), in place.
//   x: [num_heads, head_dim] for one token at position `pos`.
//   For i in [0, n_dims/2): theta_i = pos * freq_base^(-2i/n_dims);
//   (x[2i], x[2i+1]) <- (x[2i] cos - x[2i+1] sin, x[2i] sin + x[2i+1] cos). Dims >= n_dims untouched.
// Source: Su et al. 2021 (RoFormer), ggml/src/ggml-cpu/ops.cpp rope_f32.
// Split in two so that a forward pass computes the angles of a position once, for q and k of
// every layer: rope_cos_sin fills cos_sin [n_dims] = (cos theta_0, sin theta_0, cos theta_1, ...)
// (theta_i by repeated multiplication, as ggml), and rope rotates x with such a table. Together
// they give rope_ref's bits. Both check head_dim and n_dims (even, n_dims <= head_dim; aborts).
void rope_cos_sin(int64_t n_dims, int64_t pos, float freq_base, float* cos_sin);
void rope(float* x, int64_t num_heads, int64_t head_dim, int64_t n_dims, const float* cos_sin);
void rope_ref(float* x, int64_t num_heads, int64_t head_dim, int64_t n_dims, int64_t pos, float freq_base);

// RoPE variants of the architectures in src/model (arch_ops.cc).
// rope_cos_sin_scaled: rope_cos_sin with theta_i divided by freq_factors[i], i in [0, n_dims/2)
// (Llama 3.1/3.2 `rope_freqs.weight`, ggml's freq_factors; nullptr: none, rope_cos_sin's bits).
// rope_neox: x as in rope, but pair i is (x[i], x[i + n_dims/2]) (GGML_ROPE_TYPE_NEOX, Hugging
// Face's rotate_half), with the same cos_sin table: (x[i], x[i+h]) <- (x[i] cos - x[i+h] sin,
// x[i] sin + x[i+h] cos), h = n_dims/2, theta of pair i as above. Checks n_dims (aborts).
void rope_cos_sin_scaled(int64_t n_dims, int64_t pos, float freq_base, const float* freq_factors, float* cos_sin);
void rope_neox(float* x, int64_t num_heads, int64_t head_dim, int64_t n_dims, const float* cos_sin);

// GeGLU gate: out[i] = gelu_tanh(gate[i]) * up[i], gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi)
// (x + 0.044715 x^3))) evaluated in double and rounded once (the exact function; ggml-cpu uses an
// fp16 lookup table instead, tests/model/golden_archs_test.cc). out may alias gate.
float gelu_tanh(float x);
void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out);

// SwiGLU gate: out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + exp(-x)) with our f32 exp
// (ref::silu_f32, kernels_impl.h: Cephes' polynomial, ~1 ulp; -0 for x < -88). The same bits on
// every isa (AVX2 from kAvx2 up). out may alias gate.
void silu_mul(const float* gate, const float* up, int64_t n, float* out, Isa isa);
void silu_mul_ref(const float* gate, const float* up, int64_t n, float* out);

// In-place numerically stable softmax over x[0, n).
void softmax(float* x, int64_t n);
void softmax_ref(float* x, int64_t n);

// Sum of p[0, n) read once, as fast as memory streams (the read-bandwidth probe of bench
// latency): AVX2 when isa >= kAvx2, as `streams` (1 or 2, else aborts) equal parts read side by
// side (then the tail), each 256-byte step prefetching (prefetcht0) the lines prefetch_bytes
// ahead in each part (0: none); else a plain loop without prefetch. The value only keeps the
// reads alive (its order of additions depends on isa and streams).
float stream_sum(const float* p, int64_t n, Isa isa, int64_t prefetch_bytes, int streams = 1);

// ---- paged attention ---------------------------------------------------------------------
// One layer of the paged KV cache. Token slot s (= block_id * block_size + offset) holds
//   k: [num_kv_heads, head_dim] at k + s * num_kv_heads * head_dim (elements of `dtype`), same for v.
// dtype is F32 or F16.
struct KvLayerView {
  GgmlType dtype = GgmlType::F32;
  void* k = nullptr;
  void* v = nullptr;
  int64_t num_slots = 0;  // num_blocks * block_size
  int64_t block_size = 16;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  Isa isa = default_isa();  // the kernels paged_attention / write_kv run on
};

// Writes k, v ([num_tokens, num_kv_heads * head_dim] f32) into the slots slot_mapping[num_tokens].
// Precondition: every slot < num_slots (asserted).
void write_kv(const KvLayerView& kv, const float* k, const float* v, const int64_t* slot_mapping, int64_t num_tokens);

// Causal attention through block tables, for a flat batch of num_seqs sequences.
//   q:               [num_tokens, num_heads, head_dim] f32 (RoPE applied)
//   query_start_loc: [num_seqs + 1], query_start_loc[0] == 0, non-decreasing; tokens of sequence s
//                    are [query_start_loc[s], query_start_loc[s+1]), num_tokens = query_start_loc[num_seqs]
//   positions:       [num_tokens]; token i attends to positions [0, positions[i]] of its sequence
//                    (with a sliding window w: [max(0, positions[i] - w + 1), positions[i]]),
//                    whose K/V must already be in the cache (write_kv first)
//   block_tables:    [num_seqs, max_blocks_per_seq] physical block ids, row-major
//   out:             [num_tokens, num_heads, head_dim] f32
// GQA: query head h reads kv head h / (num_heads / num_kv_heads). scale is usually 1/sqrt(head_dim).
// Keys in tiles of 64 positions with an online softmax (FlashAttention, Dao et al. 2022; math in
// attention.cc): scratch per thread is one tile of scores plus head_dim floats and the key offsets
// of one token (or of a block of a prefill's tokens, with the block's transposed key tile,
// 64 x head_dim floats, and softmax states), in ws (slot kAttention). Reduction order over key positions is 0..pos for
// every token, independent of the batch.
struct AttentionBatch {
  const int64_t* query_start_loc = nullptr;
  const int64_t* positions = nullptr;
  const int32_t* block_tables = nullptr;
  int64_t num_seqs = 0;
  int64_t max_blocks_per_seq = 0;
  // > 0: sliding-window attention (Gemma 3's local layers): token i sees only the keys j with
  // 0 <= positions[i] - j < sliding_window (their K/V must be cached; older ones are not read).
  int64_t sliding_window = 0;
};
void paged_attention(const float* q, const KvLayerView& kv, const AttentionBatch& batch, int64_t num_heads, float scale,
                     float* out, ThreadPool* pool, Workspace& ws);
void paged_attention_ref(const float* q, const KvLayerView& kv, const AttentionBatch& batch, int64_t num_heads,
                         float scale, float* out);
// How many (block of 16 tokens, kv head) units paged_attention runs for this batch with num_heads
// query heads on `pool`: the path whose query heads share each key tile (attention.cc,
// run_query_block: sequences whose tokens here x query heads per kv head are >= 4, so a prefill,
// or a decode token with >= 4 query heads per kv head); 0 when every token is attended alone. The same bits either way;
// for tests and tuning. Checks as paged_attention (aborts).
int64_t paged_attention_block_units(const KvLayerView& kv, const AttentionBatch& batch, int64_t num_heads,
                                    const ThreadPool* pool);

}  // namespace pagellm::kernels

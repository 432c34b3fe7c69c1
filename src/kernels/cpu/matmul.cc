// matmul(): shape checks, activation preparation, threading, and dispatch through the kernel
// table (kernel_traits.h). One arithmetic per weight family on every ISA: the rows of w.type's
// table row decide everything, no per-type or per-CPU branch is written here.
//
//   WeightLayout::kRepacked16 (w.isa >= kAvx2): 16-row tiles run on row.tiles_for(w.isa); the
//     rows after the last full tile (GGUF layout) run on the oracle's arithmetic compiled for
//     the ISA (IsaKernels::row_dot).
//   WeightLayout::kGguf (no AVX2, or fewer than 16 rows): every row on row.vec_dot, or row_dot
//     with AVX2.
// All give the oracle's bits (matmul_ref), so the result depends on neither the ISA nor the
// layout; the one exception is BF16 on kAvx512Bf16, whose tiles flush subnormals (VDPBF16PS).
//
// Work split (batch invariance): threads take contiguous chunks of units (a 16-row tile, or the
// leftover rows; rows, in GGUF layout) from a shared counter, guided: chunks shrink as the units
// run out (run() below). Each y[t, r] is one call-independent dot product, so neither
// num_tokens, nor the other rows of x, nor the thread count or chunking changes a single bit.
// matmul_many: the units of several weights of one input, one weight's after another's, in one
// such run (matmul is matmul_many of one weight).
#include <algorithm>
#include <array>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/kernel_traits.h"
#include "kernels/cpu/kernels_avx512.h"
#include "kernels/cpu/kernels_impl.h"
#include "kernels/cpu/ops.h"

namespace pagellm::kernels {
namespace {

// Tokens per chunk of activation preparation: a multiple of every kernel's token tile (seq: 6 on
// AVX2, 12 on AVX-512; the integer kernels prepare each token alone), so the prepared layout of a
// chunk is the layout of the whole at that offset.
constexpr int64_t kPrepareTokens = 24;
static_assert(kPrepareTokens % avx2::kSeqTileTokens == 0 && kPrepareTokens % avx512::kSeqTileTokens == 0);

// Below this many multiply-adds a matmul is not split across threads.
constexpr int64_t kMinParallelMacs = int64_t{1} << 18;

// Work split: ThreadPool::parallel_for_guided (a free thread takes 1/(2 x threads) of the units
// still left, at least min_grain). Large chunks first (few chunk starts, where the weight
// stream's prefetch is cold), small ones at the end, so the threads finish together: with ~8
// equal chunks per thread the last chunk kept one thread streaming alone for up to 1/16 of a
// decode matmul. Measured on the model 207 Xeon (Q4_0 TinyLlama decode, 2 threads, 20 alternating
// pairs): 33.0-33.3 against 31.1-31.5 tokens/s (median).
// One token (decode): the first 7/8 of the units are dealt first, one contiguous range per thread
// (ThreadPool's head), and only the last 1/8 guided: a thread's range is then one pair of long
// weight streams (r16_tiles pairs tile i with i + half of a range) instead of ~8 chunks, each
// starting two cold streams. Model 167 Xeon, TinyLlama decode, 2 threads, one process switching
// split every token (even positions guided, odd ones the head; 3 runs of 256 tokens each, median
// over token pairs of the time ratio): Q4_0 1.012-1.014x, Q8_0 1.006-1.011x, F16 1.007-1.008x;
// all static (head = all units) 1.011-1.013x on Q4_0, the same splitting with the head off
// 0.999-1.004x. The guided 1/8 still lets a thread on a slower vCPU take less.
// min_grain: 2 tiles for a prefill: the AVX-512 float kernels run 2 tiles x a token tile at once
// (a single tile's kernel loads a weight vector per 12 FMAs instead of per 24); the other
// kernels take a tile at a time, where the grain changes nothing but the chunking. (For F16 and
// BF16 the units are groups of 4 tiles, tile_place: 1 unit.)

using RowDot = float (*)(const void* w, const void* xa, int64_t cols);

// The oracle's arithmetic for single rows on w.isa: vec_dot, or its FMA build with AVX2.
RowDot row_dot_for(const KernelTraits& tt, Isa isa) {
  return isa >= Isa::kAvx2 ? tt.tiles_for(isa).row_dot : tt.vec_dot;
}

// Rows [r0, r1) of w in GGUF layout x every token, on dot (the oracle's bits). xa: [num_tokens]
// activation rows in vec_dot_type, xa_rb bytes apart.
void oracle_rows(RowDot dot, const WeightView& w, int64_t r0, int64_t r1, const uint8_t* xa, int64_t xa_rb,
                 int64_t num_tokens, float* y) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t rb = w.row_bytes();
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t t = 0; t < num_tokens; ++t) y[t * w.rows + r] = dot(base + r * rb, xa + t * xa_rb, w.cols);
  }
}

constexpr int64_t kDecodeHeadEighths = 7;  // of a one-token matmul's units, dealt first

void run(int64_t units, int64_t macs, int64_t num_tokens, ThreadPool* pool, int64_t min_grain,
         const std::function<void(int64_t, int64_t)>& fn) {
  if (pool == nullptr || pool->num_threads() == 1 || units < 2 || macs < kMinParallelMacs) {
    fn(0, units);
    return;
  }
  const int64_t head = num_tokens == 1 ? units * kDecodeHeadEighths / 8 : 0;
  pool->parallel_for_guided(units, min_grain, fn, head);
}

}  // namespace

bool matmul_supports(GgmlType weight_type) { return kernel_traits(weight_type) != nullptr; }

GgmlType vec_dot_type(GgmlType weight_type) {
  const KernelTraits* tt = kernel_traits(weight_type);
  PAGELLM_CHECK(tt != nullptr, "vec_dot_type: unsupported weight type " + type_name(weight_type));
  return tt->vec_dot_type;
}

void quantize_activations_q8_0(const float* x, int64_t num_tokens, int64_t cols, BlockQ8_0* out, Isa isa) {
  PAGELLM_CHECK(cols % kQK8_0 == 0, "quantize_activations_q8_0: cols " + std::to_string(cols));
  const int64_t nb = cols / kQK8_0;
  for (int64_t t = 0; t < num_tokens; ++t) {
    if (isa >= Isa::kAvx2) {
      avx2::quantize_q8_0_activations(x + t * cols, cols, out + t * nb);
    } else {
      quantize_row_q8_0_activations(x + t * cols, cols, out + t * nb);
    }
  }
}

namespace {

// One weight of a matmul_many call: its table row and kernels, its activations (xa: vec_dot_type
// rows, xa_rb bytes apart; xp: the tiles' layout) and its units of work.
struct Job {
  const WeightView* w = nullptr;
  float* y = nullptr;
  const KernelTraits* tt = nullptr;
  const IsaKernels* k = nullptr;  // tiles; nullptr: GGUF layout
  int64_t xa_rb = 0;
  const uint8_t* xa = nullptr;
  uint8_t* xa_make = nullptr;  // xa, made here (else given, or not needed)
  uint8_t* xp = nullptr;
  Job* same_input = nullptr;  // an earlier job whose activations this one reads
  int64_t tiles = 0, groups = 0, units = 0, unit0 = 0;
  bool oracle = false;  // some rows run on row_dot in GGUF layout
  // xa is read: by the oracle rows, or by the integer tiles' prepare (for a job that others
  // share: if any of them reads it)
  bool need_xa = false;
};

// Checks w and fills the job's shape (not its activations).
Job plan(const MatmulOut& o, int64_t cols) {
  Job j;
  j.w = o.w;
  j.y = o.y;
  const WeightView& w = *o.w;
  j.tt = kernel_traits(w.type);
  PAGELLM_CHECK(j.tt != nullptr, "matmul: unsupported weight type " + type_name(w.type));
  const bool repacked = w.layout == WeightLayout::kRepacked16;
  PAGELLM_CHECK(!repacked || (w.isa >= Isa::kAvx2 && cpu_isa() >= w.isa),
                "matmul: repacked weights need an ISA with AVX2 that this CPU has");
  PAGELLM_CHECK(w.rows >= 0 && w.cols > 0 && w.cols == cols, "matmul: bad shape");
  PAGELLM_CHECK(w.cols % j.tt->block_size == 0, "matmul: cols not a multiple of the block size");
  j.k = repacked ? &j.tt->tiles_for(w.isa) : nullptr;
  j.xa_rb = j.tt->vec_dot_row_bytes(cols);
  j.tiles = repacked ? w.rows / kTileRows : 0;
  j.oracle = j.tiles * kTileRows < w.rows;
  j.need_xa = j.oracle || j.tt->vec_dot_type != GgmlType::F32;
  if (repacked) {
    // Units of work: groups of tt.tile_group tiles (tile_place), then the oracle rows.
    j.groups = (j.tiles + j.tt->tile_group - 1) / j.tt->tile_group;
    j.units = j.groups + (j.oracle ? 1 : 0);
  } else {
    j.units = w.rows;  // one row each
  }
  return j;
}

// Units [u0, u1) of job j (local unit numbers) x every token.
void run_units(const Job& j, int64_t u0, int64_t u1, int64_t num_tokens) {
  const WeightView& w = *j.w;
  if (j.k == nullptr) return oracle_rows(row_dot_for(*j.tt, w.isa), w, u0, u1, j.xa, j.xa_rb, num_tokens, j.y);
  const int64_t g = j.tt->tile_group;
  const int64_t t0 = u0 * g, t1 = std::min(u1 * g, j.tiles);
  const int64_t tile_bytes = kTileRows * w.row_bytes();
  if (t0 < t1) {
    j.k->tiles(static_cast<const uint8_t*>(w.data) + t0 * tile_bytes, t1 - t0, j.xp, w.cols, num_tokens,
               j.y + t0 * kTileRows, w.rows);
  }
  if (u1 > j.groups) oracle_rows(j.k->row_dot, w, j.tiles * kTileRows, w.rows, j.xa, j.xa_rb, num_tokens, j.y);
}

}  // namespace

void matmul(const WeightView& w, const float* x, int64_t num_tokens, float* y, ThreadPool* pool, Workspace& ws,
            const BlockQ8_0* xq_given) {
  const MatmulOut out{&w, y};
  matmul_many(std::span<const MatmulOut>(&out, 1), x, num_tokens, pool, ws, xq_given);
}

void matmul_many(std::span<const MatmulOut> outs, const float* x, int64_t num_tokens, ThreadPool* pool, Workspace& ws,
                 const BlockQ8_0* xq_given) {
  PAGELLM_CHECK(!outs.empty() && outs.size() <= kMaxMatmulOuts && num_tokens >= 0, "matmul: bad shape");
  const int64_t cols = outs[0].w->cols;
  std::array<Job, kMaxMatmulOuts> job_array;
  const std::span<Job> jobs(job_array.data(), outs.size());
  int64_t units = 0, macs = 0, min_grain = 1;
  for (size_t i = 0; i < outs.size(); ++i) {
    const MatmulOut& o = outs[i];
    Job& j = jobs[i];
    j = plan(o, cols);
    j.unit0 = units;
    units += j.units;
    macs += o.w->rows * cols * num_tokens;
    // 2 tiles for a prefill (the AVX-512 float kernels run 2 tiles x a token tile at once); in
    // groups of tile_group tiles, 1 unit.
    if (j.k != nullptr && num_tokens > kPrepareTokens) {
      min_grain = std::max(min_grain, std::max<int64_t>(1, 2 / j.tt->tile_group));
    }
  }
  if (num_tokens == 0 || units == 0) return;

  // Activations in vec_dot_type: what the oracle rows read, and the integer tiles' input; then
  // what the tiles read (prepare). Made once per input format: a job of the same layout whose
  // from_float and prepare are an earlier job's reads that job's (a GGUF-layout weight and a
  // repacked one each make their own). (In the caller's workspace, each slot carved into one area
  // per format; the workers see them through the pointers.) Per token, so a long prompt's are
  // made in parallel, kPrepareTokens at a time.
  for (Job& j : jobs) {
    for (Job& e : jobs) {
      if (&e == &j) break;
      if (e.same_input == nullptr && e.tt->from_float == j.tt->from_float && e.w->isa == j.w->isa &&
          (e.k == nullptr) == (j.k == nullptr) && (j.k == nullptr || e.k->prepare == j.k->prepare)) {
        j.same_input = &e;
        e.need_xa |= j.need_xa;  // (a float weight's tail rows read xa; its tiles do not)
        break;
      }
    }
  }
  auto xa_size = [&](const Job& j) { return (num_tokens * j.xa_rb + 63) / 64 * 64; };
  auto xp_size = [&](const Job& j) { return (j.k->prepared_bytes(num_tokens, cols) + 63) / 64 * 64; };
  auto makes_xa = [&](const Job& j) {
    return j.need_xa && !(xq_given != nullptr && j.tt->vec_dot_type == GgmlType::Q8_0);
  };
  int64_t xa_bytes = 0, xp_bytes = 0;
  for (const Job& j : jobs) {
    if (j.same_input != nullptr) continue;
    if (makes_xa(j)) xa_bytes += xa_size(j);
    if (j.k != nullptr) xp_bytes += xp_size(j);
  }
  auto* xa_buf = static_cast<uint8_t*>(ws.get(Workspace::kActivations, xa_bytes));
  auto* xp_buf = static_cast<uint8_t*>(ws.get(Workspace::kPrepared, xp_bytes));
  for (Job& j : jobs) {
    if (j.same_input != nullptr) {
      j.xa = j.same_input->xa;
      j.xp = j.same_input->xp;
      continue;
    }
    if (xq_given != nullptr && j.tt->vec_dot_type == GgmlType::Q8_0) {
      j.xa = reinterpret_cast<const uint8_t*>(xq_given);
    } else if (makes_xa(j)) {
      j.xa_make = xa_buf;
      j.xa = xa_buf;
      xa_buf += xa_size(j);
    }
    if (j.k != nullptr) {
      j.xp = xp_buf;
      xp_buf += xp_size(j);
    }
  }
  auto make = [&](int64_t t0, int64_t t1) {  // tokens [t0, t1), t0 a multiple of kPrepareTokens
    for (const Job& j : jobs) {
      if (j.same_input != nullptr) continue;
      if (j.xa_make != nullptr) {
        for (int64_t t = t0; t < t1; ++t) j.tt->from_float(j.w->isa, x + t * cols, cols, j.xa_make + t * j.xa_rb);
      }
      if (j.k != nullptr) {
        j.k->prepare(x + t0 * cols, j.xa == nullptr ? nullptr : j.xa + t0 * j.xa_rb, t1 - t0, cols,
                     j.xp + j.k->prepared_bytes(t0, cols));
      }
    }
  };
  const int64_t chunks = (num_tokens + kPrepareTokens - 1) / kPrepareTokens;
  if (pool != nullptr && pool->num_threads() > 1 && chunks >= 2) {
    pool->parallel_for(
        chunks, [&](int64_t c0, int64_t c1) { make(c0 * kPrepareTokens, std::min(num_tokens, c1 * kPrepareTokens)); });
  } else {
    make(0, num_tokens);
  }
  // The jobs' units one after another, in one parallel region: a chunk may span two weights.
  run(units, macs, num_tokens, pool, min_grain, [&](int64_t u0, int64_t u1) {
    for (const Job& j : jobs) {
      const int64_t a = std::max(u0, j.unit0), b = std::min(u1, j.unit0 + j.units);
      if (a < b) run_units(j, a - j.unit0, b - j.unit0, num_tokens);
    }
  });
}

void matmul_ref(const WeightView& w, const float* x, int64_t num_tokens, float* y) {
  PAGELLM_CHECK(w.layout == WeightLayout::kGguf, "matmul_ref: weights must be in GGUF layout");
  const KernelTraits* tt = kernel_traits(w.type);
  PAGELLM_CHECK(tt != nullptr, "matmul_ref: unsupported weight type " + type_name(w.type));
  const int64_t xa_rb = tt->vec_dot_row_bytes(w.cols);
  std::vector<uint8_t> xa(static_cast<size_t>(xa_rb));
  for (int64_t t = 0; t < num_tokens; ++t) {
    tt->from_float(Isa::kScalar, x + t * w.cols, w.cols, xa.data());
    oracle_rows(tt->vec_dot, w, 0, w.rows, xa.data(), 0, 1, y + t * w.rows);
  }
}

}  // namespace pagellm::kernels

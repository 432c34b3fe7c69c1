// Repacking of Q8_0 / Q4_0 weight rows into WeightLayout::kRepackedX8 (layout: kernels_avx512.h).
// Plain byte moves: baseline code, no intrinsics.
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernels_avx512.h"
#include "kernels/cpu/ops.h"

namespace pagellm::kernels {
namespace {

// P layout of pair (b, b1), 64 bytes: [b[0..16) b1[0..16) b[16..32) b1[16..32)], element e of a
// block = quant e (Q8_0), or the low nibble of qs[e] (e < 16) / high nibble of qs[e - 16] (Q4_0).
void repack_group_q8_0(const BlockQ8_0* blocks, uint8_t* qd) {
  for (int p = 0; p < avx512::kX8Group / 2; ++p)
    for (int h = 0; h < 2; ++h)
      for (int s = 0; s < 2; ++s) std::memcpy(qd + 64 * p + 32 * h + 16 * s, blocks[2 * p + s].qs + 16 * h, 16);
}

// Byte k of vector v = P(pair 2v)[k] | P(pair 2v + 1)[k] << 4.
void repack_group_q4_0(const BlockQ4_0* blocks, uint8_t* qd) {
  for (int v = 0; v < avx512::kX8Group / 4; ++v) {
    for (int h = 0; h < 2; ++h) {
      for (int s = 0; s < 2; ++s) {
        const uint8_t* a = blocks[4 * v + s].qs;      // pair 2v
        const uint8_t* b = blocks[4 * v + 2 + s].qs;  // pair 2v + 1
        uint8_t* o = qd + 64 * v + 32 * h + 16 * s;
        if (h == 0) {
          for (int j = 0; j < 16; ++j) o[j] = static_cast<uint8_t>((a[j] & 0x0F) | ((b[j] & 0x0F) << 4));
        } else {
          for (int j = 0; j < 16; ++j) o[j] = static_cast<uint8_t>((a[j] >> 4) | (b[j] & 0xF0));
        }
      }
    }
  }
}

void repack_row(GgmlType type, const uint8_t* src, int64_t nb, uint8_t* dst) {
  const int64_t ng = nb / avx512::kX8Group;
  const size_t bs = type == GgmlType::Q4_0 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  for (int64_t g = 0; g < ng; ++g) {
    const uint8_t* gs = src + g * avx512::kX8Group * bs;
    uint8_t* gd = dst + g * avx512::kX8Group * bs;
    for (int i = 0; i < avx512::kX8Group; ++i) std::memcpy(gd + 2 * i, gs + i * bs, 2);  // d (f16)
    uint8_t* qd = gd + 2 * avx512::kX8Group;
    if (type == GgmlType::Q8_0) {
      repack_group_q8_0(reinterpret_cast<const BlockQ8_0*>(gs), qd);
    } else {
      repack_group_q4_0(reinterpret_cast<const BlockQ4_0*>(gs), qd);
    }
  }
  const int64_t done = ng * avx512::kX8Group * static_cast<int64_t>(bs);
  std::memcpy(dst + done, src + done, static_cast<size_t>(nb * static_cast<int64_t>(bs) - done));
}

}  // namespace

bool repack_pays(const WeightView& w) {
  return (w.type == GgmlType::Q8_0 || w.type == GgmlType::Q4_0) && w.layout == WeightLayout::kGguf &&
         use_avx512_vnni() && w.cols / kQK8_0 >= avx512::kX8Group;
}

WeightView repack_weight(const WeightView& w, void* out, ThreadPool* pool) {
  PAGELLM_CHECK(w.type == GgmlType::Q8_0 || w.type == GgmlType::Q4_0,
                "repack_weight: " + type_name(w.type) + " has no repacked layout");
  PAGELLM_CHECK(w.layout == WeightLayout::kGguf, "repack_weight: already repacked");
  PAGELLM_CHECK(w.cols % kQK8_0 == 0 && w.rows >= 0, "repack_weight: bad shape");
  const int64_t rb = w.row_bytes(), nb = w.cols / kQK8_0;
  const auto* src = static_cast<const uint8_t*>(w.data);
  auto* dst = static_cast<uint8_t*>(out);
  auto rows = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) repack_row(w.type, src + r * rb, nb, dst + r * rb);
  };
  if (pool != nullptr) {
    pool->parallel_for(w.rows, rows);
  } else {
    rows(0, w.rows);
  }
  WeightView v = w;
  v.data = out;
  v.layout = WeightLayout::kRepackedX8;
  return v;
}

}  // namespace pagellm::kernels

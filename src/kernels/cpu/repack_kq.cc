// The tiled layout of the K-quant super-block types (kernels_kq.h): field tables and the byte
// moves between GGUF rows and tiles. Baseline code, no intrinsics.
#include <cstddef>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/kernels_kq.h"

namespace pagellm::kernels::kq {
namespace {

constexpr Field kQ2K[] = {{offsetof(BlockQ2_K, scales), 16, 1},
                          {offsetof(BlockQ2_K, qs), 64, 4},
                          {offsetof(BlockQ2_K, d), 2, 2},
                          {offsetof(BlockQ2_K, dmin), 2, 2}};
constexpr Field kQ3K[] = {{offsetof(BlockQ3_K, hmask), 32, 4},
                          {offsetof(BlockQ3_K, qs), 64, 4},
                          {offsetof(BlockQ3_K, scales), 12, 1},
                          {offsetof(BlockQ3_K, d), 2, 2}};
constexpr Field kQ4K[] = {{offsetof(BlockQ4_K, d), 2, 2},
                          {offsetof(BlockQ4_K, dmin), 2, 2},
                          {offsetof(BlockQ4_K, scales), 12, 1},
                          {offsetof(BlockQ4_K, qs), 128, 4}};
constexpr Field kQ5K[] = {{offsetof(BlockQ5_K, d), 2, 2},
                          {offsetof(BlockQ5_K, dmin), 2, 2},
                          {offsetof(BlockQ5_K, scales), 12, 1},
                          {offsetof(BlockQ5_K, qh), 32, 4},
                          {offsetof(BlockQ5_K, qs), 128, 4}};
constexpr Field kQ6K[] = {{offsetof(BlockQ6_K, ql), 128, 4},
                          {offsetof(BlockQ6_K, qh), 64, 4},
                          {offsetof(BlockQ6_K, scales), 16, 1},
                          {offsetof(BlockQ6_K, d), 2, 2}};
constexpr Field kIQ4XS[] = {{offsetof(BlockIQ4_XS, d), 2, 2},
                            {offsetof(BlockIQ4_XS, scales_h), 2, 2},
                            {offsetof(BlockIQ4_XS, scales_l), 4, 1},
                            {offsetof(BlockIQ4_XS, qs), 128, 4}};

constexpr Field kQ41[] = {
    {offsetof(BlockQ4_1, d), 2, 2}, {offsetof(BlockQ4_1, m), 2, 2}, {offsetof(BlockQ4_1, qs), 16, 4}};
constexpr Field kQ50[] = {
    {offsetof(BlockQ5_0, d), 2, 2}, {offsetof(BlockQ5_0, qh), 4, 4}, {offsetof(BlockQ5_0, qs), 16, 4}};
constexpr Field kQ51[] = {{offsetof(BlockQ5_1, d), 2, 2},
                          {offsetof(BlockQ5_1, m), 2, 2},
                          {offsetof(BlockQ5_1, qh), 4, 4},
                          {offsetof(BlockQ5_1, qs), 16, 4}};
constexpr Field kIQ4NL[] = {{offsetof(BlockIQ4_NL, d), 2, 2}, {offsetof(BlockIQ4_NL, qs), 16, 4}};

template <size_t N>
const Field* table(const Field (&t)[N], int* n) {
  *n = static_cast<int>(N);
  return t;
}

// Every lane c of row r's fields (block bytes offset + c * lane .. + lane) between the row's
// block and its place in the group: block -> group when to_tile, else back.
void move_block(const Field* fs, int nf, const uint8_t* from, uint8_t* to, int r, bool to_tile) {
  for (int f = 0; f < nf; ++f) {
    const Field& fd = fs[f];
    for (int c = 0; c < fd.size / fd.lane; ++c) {
      const int64_t in_tile = int64_t{16} * fd.offset + (int64_t{c} * kRows + r) * fd.lane;
      const int64_t in_block = fd.offset + int64_t{c} * fd.lane;
      std::memcpy(to + (to_tile ? in_tile : in_block), from + (to_tile ? in_block : in_tile),
                  static_cast<size_t>(fd.lane));
    }
  }
}

}  // namespace

const Field* fields_of(GgmlType type, int* n) {
  switch (type) {
    case GgmlType::Q2_K: return table(kQ2K, n);
    case GgmlType::Q3_K: return table(kQ3K, n);
    case GgmlType::Q4_K: return table(kQ4K, n);
    case GgmlType::Q5_K: return table(kQ5K, n);
    case GgmlType::Q6_K: return table(kQ6K, n);
    case GgmlType::IQ4_XS: return table(kIQ4XS, n);
    case GgmlType::Q4_1: return table(kQ41, n);
    case GgmlType::Q5_0: return table(kQ50, n);
    case GgmlType::Q5_1: return table(kQ51, n);
    case GgmlType::IQ4_NL: return table(kIQ4NL, n);
    default: *n = 0; return nullptr;
  }
}

void repack_tile(GgmlType type, const uint8_t* src, int64_t rb, int64_t cols, uint8_t* dst) {
  int nf = 0;
  const Field* fs = fields_of(type, &nf);
  PAGELLM_CHECK(fs != nullptr, "kq::repack_tile: " + type_name(type));
  const int64_t bb = type_traits(type).type_size;
  for (int64_t b = 0; b < cols / type_traits(type).block_size; ++b) {
    uint8_t* g = dst + b * kRows * bb;
    for (int r = 0; r < kRows; ++r) move_block(fs, nf, src + r * rb + b * bb, g, r, true);
  }
}

void unpack_row(GgmlType type, const uint8_t* tile, int r, int64_t cols, uint8_t* row) {
  int nf = 0;
  const Field* fs = fields_of(type, &nf);
  PAGELLM_CHECK(fs != nullptr, "kq::unpack_row: " + type_name(type));
  const int64_t bb = type_traits(type).type_size;
  for (int64_t b = 0; b < cols / type_traits(type).block_size; ++b) {
    move_block(fs, nf, tile + b * kRows * bb, row + b * bb, r, false);
  }
}

void prepare32(const BlockQ8_0* xq, int64_t nb, XBlock32* out) {
  for (int64_t b = 0; b < nb; ++b) {
    std::memcpy(out[b].qs, xq[b].qs, 32);
    int32_t sum = 0;
    for (int j = 0; j < 32; ++j) sum += xq[b].qs[j];
    out[b].sum = sum;
    out[b].d = fp16_to_fp32(xq[b].d);
  }
}

}  // namespace pagellm::kernels::kq

// Run-time CPU feature dispatch for the kernels in this folder.
//
// Files named *_avx2.cc are compiled with -mavx2 -mfma -mf16c (CMakeLists.txt); everything else
// targets baseline x86-64. A fast op enters an *_avx2.cc function only when use_avx2() is true.
// The PAGELLM_NO_* variables count when set to anything but "" or "0".
#pragma once

namespace pagellm::kernels {

// True when this CPU has AVX2, FMA and F16C (probed once).
bool cpu_has_avx2();

// cpu_has_avx2() unless SIMD was switched off with set_simd_enabled(false) (tests use this to
// exercise the scalar fallbacks) or the environment variable PAGELLM_NO_AVX2 is set at start-up.
bool use_avx2();
void set_simd_enabled(bool enabled);

// True when this CPU also has AVX-512 F/BW/VL/DQ and VNNI (probed once). use_avx512_vnni() adds
// use_avx2() and the absence of PAGELLM_NO_AVX512 at start-up (or set_avx512_enabled(false)):
// the quantized matmuls then take the bit-identical VNNI kernels (matmul_avx512.cc).
bool cpu_has_avx512_vnni();
bool use_avx512_vnni();
void set_avx512_enabled(bool enabled);

// use_avx2() unless PAGELLM_NO_REPACK is set at start-up (or set_repack_enabled(false)): large
// weights are then repacked at load (ops.h, repack_pays): Q8_0/Q4_0 for the block-sum kernels
// (kernels_r16.h), F32/F16/BF16 for the sequential ones (matmul_seq_*.cc); AVX-512 or AVX2
// tiles, the same bits. Off: quantized matmuls keep ggml's lane-wise arithmetic, float ones the
// 16-lane "wide" arithmetic.
bool use_repacking();
void set_repack_enabled(bool enabled);

}  // namespace pagellm::kernels

// The instruction set the kernels run on, chosen once (docs/design.md, "Kernel table").
//
// Files named *_avx2.cc are compiled for AVX2/FMA/F16C, *_avx512.cc for AVX-512 F/BW/VL/DQ,
// *_avx512vnni.cc for those plus VNNI, *_avx512bf16.cc plus AVX512_BF16 and *_amx.cc VNNI plus
// AMX-TILE/AMX-INT8 (entered only when amx_int8_usable()) (CMakeLists.txt);
// everything else targets baseline x86-64.
// A kernel enters a file compiled for an ISA only when the Isa value it was given allows it:
// nothing here is global state that changes after start-up, so a test can run every ISA the CPU
// has, side by side, by passing each value explicitly. The one exception is AMX
// (amx_int8_usable(), probed once): where it is usable, Q8_0 prompts on kAvx512Vnni and above
// run its tile, with the same bits; only PAGELLM_NO_AMX, read once, turns it off.
#pragma once

#include <cstdint>
#include <vector>

namespace pagellm::kernels {

// Ordered: each level implies the ones below it.
//   kScalar      baseline x86-64 (the scalar oracles, also the fallback)
//   kAvx2        AVX2 + FMA + F16C
//   kAvx512      also AVX-512 F/BW/VL/DQ (the float tiles need no more)
//   kAvx512Vnni  also AVX-512 VNNI (the integer tiles of Q8_0/Q4_0)
//   kAvx512Bf16  also AVX512_BF16 (VDPBF16PS: the BF16 tiles)
enum class Isa : uint8_t { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Vnni = 3, kAvx512Bf16 = 4 };

const char* isa_name(Isa isa);

// The best Isa this CPU supports (probed once).
Isa cpu_isa();

// cpu_isa() limited by the environment, read once, at the first call: PAGELLM_NO_AVX512 (set to
// anything but "" or "0") caps it at kAvx2, PAGELLM_NO_AVX2 at kScalar. kAvx512Bf16 only on
// AMD CPUs: on the Intel one measured (Emerald Rapids) VDPBF16PS ran slower than the FMA tiles,
// so on Intel it stops at kAvx512Vnni (usable_isas() still lists kAvx512Bf16 for tests and
// benchmarks). What a model uses when the caller does not choose (LlamaModel's constructor).
Isa default_isa();

// min(cpu, the caps of the two flags, and kAvx512Vnni unless bf16_dot_pays): the rule of
// default_isa(), as a pure function.
Isa limit_isa(Isa cpu, bool no_avx2, bool no_avx512, bool bf16_dot_pays = true);

// AMX-TILE and AMX-INT8 (CPUID leaf 7, sub-leaf 0, EDX bits 24 and 25) with the tile data state
// granted to this process by Linux (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, the kernel's
// Documentation/arch/x86/xstate.rst), a tile multiply that runs and gives the right sums, and neither PAGELLM_NO_AMX
// nor PAGELLM_NO_AVX512 set; probed once. Not an Isa level: it adds one tile (the Q8_0 prompt tile, 16 tokens at once,
// matmul_r16_amx.cc) to kAvx512Vnni and above, with the bits of the tile it replaces.
bool amx_int8_usable();

// f() with SIGILL caught: f's result, or false if an instruction in it faulted. The process's
// SIGILL handler is replaced meanwhile (one call at a time); a SIGILL of another thread in that
// window restores it and faults again into it. amx_int8_usable()'s last check, which LlamaModel
// runs at load, on the loading thread, so that no matmul worker swaps the handler.
bool run_catching_sigill(bool (*f)());

// Whether the CPU's vendor is AMD (CPUID leaf 0 spells "AuthenticAMD"); probed once. Picks the
// tile variants that measured faster on one vendor only (default_isa(), kq::dot_tile_avx2).
bool cpu_is_amd();

// Every Isa from kScalar up to cpu_isa(), ascending: what a test may run here.
std::vector<Isa> usable_isas();

}  // namespace pagellm::kernels

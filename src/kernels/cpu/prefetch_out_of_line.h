// Internal to src/kernels/cpu, included by the K-quant tiles (matmul_kq_avx512vnni.cc,
// matmul_kq_avx2.cc): their software prefetch of the weight stream.
#pragma once

namespace pagellm::kernels {

// Prefetches the cache line at p into L1 (prefetcht0; kL2: into L2, prefetcht1) from an
// instruction outside the loop's code: the loop jumps to it in .text.unlikely, and it jumps
// straight back. No fault, no result.
//
// Pinned: the asm claims to update `order`, a register of the calling quant step (the
// instruction leaves it as it is), so the compiler keeps the prefetch between that step's
// neighbours. An _mm_prefetch has no result, and after unrolling GCC gathered them into bursts
// (up to 13 in a row in the Q6_K tile) that wait on L1's miss buffers.
//
// Out of line: measured, not understood. On the EPYC Zen 5 VM (2 threads, one token, weights
// streamed from DRAM; paired runs, docs/benchmarks.md "Out-of-line prefetch") the tiles read
// faster with it than with the inline prefetch it replaced (pinned, prefetcht1 but for Q4_K, on
// AVX-512; an _mm_prefetch on AVX2): AVX-512 Q4_K 1.19x, Q5_K 1.15x, Q6_K 1.22x, IQ4_XS 1.19x,
// Q3_K 1.00x; AVX2 Q4_K 1.16x, Q5_K 1.17x, Q6_K 1.22x. An inline jump over nothing, or four
// nops, beside the inline prefetch gained nothing, and the plain streaming loop of the bandwidth
// probe and the Q4_0/Q8_0 tiles (a burst of 5 lines per block) read no faster with it, so only
// these tiles use it. The Intel Xeon VMs have not been measured against the inline prefetch.
//
// kL2: prefetcht1 (into L2 only) instead. The AVX-512 tiles use it below a full token tile
// (kq::kMaxTileTokens = 4 tokens; decode). Model 207 Xeon, alternating bench latency decode runs against T0 everywhere
// (medians of per-round ratios): Q4_K_M 1.13x over 8 rounds (none slower; 1.00x in 5 more),
// Q6_K 1.10x over 5; 512-token prefill (its 4-token tiles keep T0) 1.01x with the order of the
// runs swapped. T1 at every token count as well: decode Q4_K_M 1.04x, Q6_K 1.04x, prefill 0.96x;
// AVX2 decode 0.99x, so the AVX2 tiles keep T0. On Zen 5 T0 and T1 out of line measured the
// same (docs/benchmarks.md).
template <bool kL2 = false, class V>
__attribute__((always_inline)) inline void prefetch_out_of_line(const void* p, V& order) {
  asm volatile(
      "jmp 3f\n"
      "4:\n"
      ".pushsection .text.unlikely,\"ax\",@progbits\n"
      "3:\tprefetcht%c2 %1\n"  // prefetcht0 or prefetcht1
      "\tjmp 4b\n"
      ".popsection"
      : "+v"(order)
      : "m"(*static_cast<const char*>(p)), "i"(kL2 ? 1 : 0));
}

}  // namespace pagellm::kernels

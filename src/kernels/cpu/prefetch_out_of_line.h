// Internal to src/kernels/cpu, included by the K-quant tiles (matmul_kq_avx512vnni.cc,
// matmul_kq_avx2.cc): their software prefetch of the weight stream.
#pragma once

namespace pagellm::kernels {

// Prefetches the cache line at p into L1 (prefetcht0) from an instruction outside the loop's
// code: the loop jumps to it in .text.unlikely, and it jumps straight back. No fault, no result.
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
// these tiles use it. The Intel Xeon VMs have not been measured with it.
template <class V>
__attribute__((always_inline)) inline void prefetch_out_of_line(const void* p, V& order) {
  asm volatile(
      "jmp 3f\n"
      "4:\n"
      ".pushsection .text.unlikely,\"ax\",@progbits\n"
      "3:\tprefetcht0 %1\n"
      "\tjmp 4b\n"
      ".popsection"
      : "+v"(order)
      : "m"(*static_cast<const char*>(p)));
}

}  // namespace pagellm::kernels

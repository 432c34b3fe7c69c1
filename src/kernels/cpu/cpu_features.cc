#include "kernels/cpu/cpu_features.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <csetjmp>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "kernels/cpu/kernels_r16.h"
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace pagellm::kernels {
namespace {

Isa probe() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // F16C: CPUID leaf 1, ECX bit 29 (Intel SDM vol. 2A), read directly like VNNI below because not
  // every compiler's __builtin_cpu_supports knows the name (clang 14 knows neither).
  unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c)) return Isa::kScalar;
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq"))) {
    return Isa::kAvx2;
  }
  // AVX512_VNNI: CPUID leaf 7, sub-leaf 0, ECX bit 11. The OS saves the AVX-512 state, or
  // avx512f above would have failed.
  const bool vnni = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 11)) != 0;
  if (!vnni) return Isa::kAvx512;
  // AVX512_BF16: CPUID leaf 7, sub-leaf 1, EAX bit 5 (Intel SDM vol. 2A, table 3-8). Every CPU
  // that has it also has VNNI (Cooper Lake, Sapphire Rapids and later; AMD Zen 4 and later).
  const bool bf16 = __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 5)) != 0;
  return bf16 ? Isa::kAvx512Bf16 : Isa::kAvx512Vnni;
#else
  return Isa::kScalar;
#endif
}

// The vendor string of CPUID leaf 0 (EBX, EDX, ECX spell it) is "AuthenticAMD".
bool vendor_is_amd() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return std::strcmp(vendor, "AuthenticAMD") == 0;
#else
  return false;
#endif
}

// Whether VDPBF16PS beats the FMA tiles it replaces, so that default_isa() may pick the BF16
// tiles. It does on AMD (Zen 4 and 5 issue it at the FMA rate, two products each: the Zen 5 VM's
// BF16 pp512 was 1.9x its FMA tiles'); it does not on the Intel one measured (Emerald Rapids), where
// `BM_Matmul` BF16 5632x2048 at 512 tokens, one thread, ran at 72.5 GFLOP/s on the BF16 tiles
// against 117 on the AVX-512 FMA ones ("model 207" VM, docs/benchmarks.md).
bool bf16_dot_pays() { return cpu_is_amd(); }

// True when the variable is set to something other than "" or "0".
bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' && !(v[0] == '0' && v[1] == '\0');
}

}  // namespace

bool cpu_is_amd() {
  static const bool amd = vendor_is_amd();
  return amd;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Vnni: return "avx512vnni";
    case Isa::kAvx512Bf16: return "avx512bf16";
  }
  return "?";
}

namespace {
// run_catching_sigill's state: the jump target, the thread that set it, the handler to restore.
std::atomic<sigjmp_buf*> g_sigill_jump{nullptr};
pthread_t g_sigill_owner;
struct sigaction g_sigill_old = {};

void on_sigill(int /*signal*/) {
  sigjmp_buf* jump = g_sigill_jump.load();
  if (jump == nullptr || pthread_equal(pthread_self(), g_sigill_owner) == 0) {
    // Another thread's fault: the old handler back, and the instruction faults again into it.
    sigaction(SIGILL, &g_sigill_old, nullptr);
    return;
  }
  siglongjmp(*jump, 1);
}
}  // namespace

bool run_catching_sigill(bool (*f)()) {
  static std::mutex mu;
  const std::lock_guard<std::mutex> lock(mu);
  sigjmp_buf jump;
  struct sigaction sa = {};
  sa.sa_handler = on_sigill;
  sigemptyset(&sa.sa_mask);
  g_sigill_owner = pthread_self();
  if (sigaction(SIGILL, &sa, &g_sigill_old) != 0) return false;
  auto restore = [&] {
    g_sigill_jump.store(nullptr);
    sigaction(SIGILL, &g_sigill_old, nullptr);
  };
  if (sigsetjmp(jump, 1) != 0) {  // f faulted
    restore();
    return false;
  }
  g_sigill_jump.store(&jump);
  const bool ok = f();
  restore();
  return ok;
}

bool amx_int8_usable() {
  static const bool usable = [] {
#if defined(__x86_64__) && defined(__linux__)
    if (env_flag("PAGELLM_NO_AMX") || env_flag("PAGELLM_NO_AVX512") || cpu_isa() < Isa::kAvx512Vnni) return false;
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    if ((edx & (1u << 24)) == 0 || (edx & (1u << 25)) == 0) return false;
    // ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18): without it TILELOADD faults.
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
    // A VM can list the flags and grant the permission yet fault on the first tile instruction
    // (llama.cpp's AMX build died so on a VM of the model 207 kind once, docs/benchmarks.md): one
    // known multiply, under a SIGILL guard, decides.
    return run_catching_sigill(r16::amx_self_test);
#else
    return false;
#endif
  }();
  return usable;
}

Isa cpu_isa() {
  static const Isa isa = probe();
  return isa;
}

Isa limit_isa(Isa cpu, bool no_avx2, bool no_avx512, bool bf16_dot_pays) {
  if (no_avx2) return Isa::kScalar;
  if (no_avx512) return std::min(cpu, Isa::kAvx2);
  return bf16_dot_pays ? cpu : std::min(cpu, Isa::kAvx512Vnni);
}

Isa default_isa() {
  static const Isa isa =
      limit_isa(cpu_isa(), env_flag("PAGELLM_NO_AVX2"), env_flag("PAGELLM_NO_AVX512"), bf16_dot_pays());
  return isa;
}

std::vector<Isa> usable_isas() {
  std::vector<Isa> out;
  for (int i = 0; i <= static_cast<int>(cpu_isa()); ++i) out.push_back(static_cast<Isa>(i));
  return out;
}

}  // namespace pagellm::kernels

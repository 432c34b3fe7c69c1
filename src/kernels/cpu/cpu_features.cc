#include "kernels/cpu/cpu_features.h"

#include <atomic>
#include <cstdlib>

namespace pagellm::kernels {
namespace {

bool probe_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

bool probe_avx512_vnni() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

// True when the variable is set to something other than "" or "0".
bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' && !(v[0] == '0' && v[1] == '\0');
}

std::atomic<bool>& avx512_enabled() {
  static std::atomic<bool> enabled{!env_flag("PAGELLM_NO_AVX512")};
  return enabled;
}

std::atomic<bool>& repack_enabled() {
  static std::atomic<bool> enabled{!env_flag("PAGELLM_NO_REPACK")};
  return enabled;
}

std::atomic<bool>& simd_enabled() {
  static std::atomic<bool> enabled{!env_flag("PAGELLM_NO_AVX2")};
  return enabled;
}

}  // namespace

bool cpu_has_avx2() {
  static const bool has = probe_avx2();
  return has;
}

bool use_avx2() { return cpu_has_avx2() && simd_enabled().load(std::memory_order_relaxed); }

void set_simd_enabled(bool enabled) { simd_enabled().store(enabled, std::memory_order_relaxed); }

bool cpu_has_avx512_vnni() {
  static const bool has = cpu_has_avx2() && probe_avx512_vnni();
  return has;
}

bool use_avx512_vnni() {
  return use_avx2() && cpu_has_avx512_vnni() && avx512_enabled().load(std::memory_order_relaxed);
}

void set_avx512_enabled(bool enabled) { avx512_enabled().store(enabled, std::memory_order_relaxed); }

bool use_repacking() { return use_avx2() && repack_enabled().load(std::memory_order_relaxed); }

void set_repack_enabled(bool enabled) { repack_enabled().store(enabled, std::memory_order_relaxed); }

}  // namespace pagellm::kernels

// Internal to src/kernels/cpu: a run-time count m in [1, kMax] -> a call with m as a compile-time
// constant (the register tiles are templates over their token count). Baseline code.
#pragma once

#include <type_traits>
#include <utility>

namespace pagellm::kernels {

// Calls f(std::integral_constant<int, m>{}) for m in [1, kMax]; larger m calls it with kMax, and
// m < 1 with 1 (callers pass m in range).
template <int kMax, typename F>
void with_m(int m, F&& f) {
  if (m >= kMax) return f(std::integral_constant<int, kMax>{});
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((m <= I + 1 ? (f(std::integral_constant<int, I + 1>{}), true) : false) || ...);
  }
  (std::make_integer_sequence<int, kMax - 1>{});
}

}  // namespace pagellm::kernels

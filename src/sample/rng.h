// Per-request random number generator with a portable, fully specified output sequence.
//
// std::mt19937_64's sequence is fixed by the C++ standard ([rand.predef]: the 10000th output of
// a default-constructed engine is 9981545732273789042), and the float conversion below is plain
// integer arithmetic, so a given seed yields the same draws with any standard library. (We do
// not use std::uniform_real_distribution: its algorithm is implementation-defined.)
#pragma once

#include <cstdint>
#include <optional>
#include <random>

namespace pagellm {

class Rng {
 public:
  // seed set: deterministic; unset: 64 bits from std::random_device.
  explicit Rng(std::optional<uint64_t> seed) : engine_(seed ? *seed : from_random_device()) {}

  uint64_t next_u64() { return engine_(); }

  // Uniform double in [0, 1): the top 53 bits of one 64-bit output, times 2^-53.
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t from_random_device() {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
  }

  std::mt19937_64 engine_;
};

}  // namespace pagellm

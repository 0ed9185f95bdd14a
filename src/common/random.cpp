// Implements: the draws built on SplitMix64 (see random.hpp for why
// not std:: distributions).
#include "dptrain/common/random.hpp"

#include <cmath>
#include <numbers>

namespace dptrain {

std::uint64_t Rng::below(std::uint64_t n) {
  // Lemire's method would need 128-bit multiply; rejection on the top range
  // is simple and exact.
  const std::uint64_t limit = ~std::uint64_t(0) - (~std::uint64_t(0) % n);
  std::uint64_t x;
  do {
    x = next();
  } while (x >= limit);
  return x % n;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double Rng::normal() {
  double u1 = uniform();
  double u2 = uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace dptrain

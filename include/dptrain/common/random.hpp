// Implements: the one source of randomness. Counter-based and specified here
// (not std:: distributions, whose output differs between standard libraries),
// so the same seed gives the same weights and sample order everywhere.
#pragma once

#include <cstdint>
#include <vector>

namespace dptrain {

// SplitMix64 step: advances state, returns a well-mixed 64-bit value.
// constexpr integer arithmetic, so device kernels (compiled with
// --expt-relaxed-constexpr) repeat the host's draws bit for bit.
constexpr std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
// Mixes several words into one seed (e.g. seed, purpose, epoch).
constexpr std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b, std::uint64_t c = 0) {
  std::uint64_t s = a;
  std::uint64_t h = splitmix64(s);
  s = h ^ b;
  h = splitmix64(s);
  s = h ^ c;
  return splitmix64(s);
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() { return splitmix64(state_); }
  // Uniform integer in [0, n), n > 0, without modulo bias.
  std::uint64_t below(std::uint64_t n);
  // Uniform double in [0, 1).
  double uniform();
  // Standard normal (Box-Muller).
  double normal();
  std::uint64_t state() const { return state_; }

 private:
  std::uint64_t state_;
};

// Fisher-Yates with Rng::below: a permutation defined by the seed alone.
template <typename T>
void shuffle(std::vector<T>& v, Rng& rng) {
  for (std::size_t i = v.size(); i > 1; --i) {
    std::size_t j = static_cast<std::size_t>(rng.below(i));
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace dptrain

// Implements: the one source of randomness. Counter-based and specified here
// (not std:: distributions, whose output differs between standard libraries),
// so the same seed gives the same weights and sample order everywhere.
#pragma once

#include <cstdint>
#include <vector>

namespace dptrain {

// SplitMix64 step: advances state, returns a well-mixed 64-bit value.
std::uint64_t splitmix64(std::uint64_t& state);
// Mixes several words into one seed (e.g. seed, purpose, epoch).
std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b, std::uint64_t c = 0);

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

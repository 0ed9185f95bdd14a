// Implements: Shape (tensor.hpp): construction checks, sizes and the text
// form used in messages.
#include "dptrain/tensor.hpp"

#include <limits>

#include "dptrain/error.hpp"

namespace dptrain {

Shape::Shape(std::initializer_list<int> dims) {
  DPT_REQUIRE(dims.size() <= static_cast<std::size_t>(kMaxRank), ExitCode::kOther,
              "a sample shape has at most " + std::to_string(kMaxRank) + " dimensions, not " +
                  std::to_string(dims.size()));
  for (int d : dims) {
    DPT_REQUIRE(d >= 1, ExitCode::kOther,
                "a sample dimension must be at least 1, not " + std::to_string(d));
    dims_[static_cast<std::size_t>(rank_++)] = d;
  }
}

std::size_t Shape::size() const {
  std::size_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= static_cast<std::size_t>(dims_[static_cast<std::size_t>(i)]);
  return n;
}

Shape Shape::flattened() const {
  const std::size_t n = size();
  DPT_REQUIRE(n <= static_cast<std::size_t>(std::numeric_limits<int>::max()), ExitCode::kData,
              "a sample of shape " + to_string() + " has more than 2^31 values");
  return Shape{static_cast<int>(n)};
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string((*this)[i]);
  return s + "]";
}

}  // namespace dptrain

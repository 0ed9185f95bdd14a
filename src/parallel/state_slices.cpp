// Implements: gathering and scattering optimizer state slices (see
// dptrain/parallel/state_slices.hpp). Point-to-point messages on the world communicator
// with a tag of their own; between one pair of ranks they arrive in the
// order sent, which is the fetch order on both sides.
#include "dptrain/parallel/state_slices.hpp"

#include <algorithm>
#include <climits>
#include <exception>
#include <utility>

#include "dptrain/common/error.hpp"

namespace dptrain {
namespace {

constexpr int kGatherTag = 7301, kScatterTag = 7302;
constexpr std::size_t kMaxMessage = std::size_t(1) << 30;  // floats: MPI counts are int

void send_floats(const float* p, std::size_t n, int to, int tag, MPI_Comm world) {
  for (std::size_t at = 0; at < n; at += kMaxMessage)
    DPT_MPI_CHECK(MPI_Send(p + at, static_cast<int>(std::min(kMaxMessage, n - at)), MPI_FLOAT, to,
                           tag, world));
}

void receive_floats(float* p, std::size_t n, int from, int tag, MPI_Comm world) {
  for (std::size_t at = 0; at < n; at += kMaxMessage)
    DPT_MPI_CHECK(MPI_Recv(p + at, static_cast<int>(std::min(kMaxMessage, n - at)), MPI_FLOAT,
                           from, tag, world, MPI_STATUS_IGNORE));
}

// The part of tensor p in slice r of bounds, as arena offsets [lo, hi).
std::pair<std::size_t, std::size_t> tensor_part(const ParamInfo& p,
                                                const std::vector<std::size_t>& bounds,
                                                std::size_t r) {
  const std::size_t lo = std::max(p.offset, bounds[r]);
  const std::size_t hi = std::min(p.offset + p.count, bounds[r + 1]);
  return {lo, std::max(lo, hi)};
}

}  // namespace

StateSliceGather::StateSliceGather(MPI_Comm world, Backend& be,
                                       const std::vector<ParamInfo>& layout,
                                       std::vector<std::size_t> bounds, std::vector<float*> states)
    : world_(world), be_(be), layout_(layout), bounds_(std::move(bounds)), states_(std::move(states)) {
  DPT_MPI_CHECK(MPI_Comm_rank(world_, &rank_));
  DPT_MPI_CHECK(MPI_Comm_size(world_, &size_));
}

std::pair<std::size_t, std::size_t> StateSliceGather::part(const ParamInfo& p,
                                                             std::size_t r) const {
  return tensor_part(p, bounds_, r);
}

void StateSliceGather::receive(std::size_t s, const ParamInfo& p, float* out) {
  for (std::size_t r = 0; r < static_cast<std::size_t>(size_); ++r) {
    const auto [lo, hi] = part(p, r);
    if (lo == hi) continue;
    float* to = out + (lo - p.offset);
    if (r == 0)
      be_.copy_to_host(to, states_[s] + (lo - bounds_[0]), (hi - lo) * sizeof(float));
    else
      receive_floats(to, hi - lo, static_cast<int>(r), kGatherTag, world_);
  }
}

void StateSliceGather::fetch(std::size_t s, const ParamInfo& p, float* out) {
  const ParamInfo& expected = layout_[next_ % layout_.size()];
  DPT_REQUIRE(next_ / layout_.size() == s && p.offset == expected.offset &&
                  p.count == expected.count,
              ExitCode::kOther, "sliced optimizer state fetched out of order");
  receive(s, expected, out);
  ++next_;
}

void StateSliceGather::drain() {
  std::size_t largest = 0;
  for (const ParamInfo& p : layout_) largest = std::max(largest, p.count);
  std::vector<float> scratch(largest);
  for (; next_ < states_.size() * layout_.size(); ++next_)
    receive(next_ / layout_.size(), layout_[next_ % layout_.size()], scratch.data());
}

void StateSliceGather::serve() {
  const auto me = static_cast<std::size_t>(rank_);
  std::vector<float> staging;
  for (float* state : states_) {
    for (const ParamInfo& p : layout_) {
      const auto [lo, hi] = part(p, me);
      if (lo == hi) continue;
      staging.resize(hi - lo);
      be_.copy_to_host(staging.data(), state + (lo - bounds_[me]), (hi - lo) * sizeof(float));
      send_floats(staging.data(), hi - lo, 0, kGatherTag, world_);
    }
  }
}

void scatter_state_slices(MPI_Comm world, Backend& be, const std::vector<ParamInfo>& layout,
                          const std::vector<std::size_t>& bounds,
                          const std::vector<float*>& states, const StateTensorRead& read) {
  int rank = 0, size = 1;
  DPT_MPI_CHECK(MPI_Comm_rank(world, &rank));
  DPT_MPI_CHECK(MPI_Comm_size(world, &size));
  const auto me = static_cast<std::size_t>(rank);
  auto part = [&](const ParamInfo& p, std::size_t r) { return tensor_part(p, bounds, r); };
  std::vector<float> tensor;  // rank 0: the whole tensor; elsewhere: this rank's part of it
  std::exception_ptr failed;  // rank 0: the first read that threw
  for (std::size_t s = 0; s < states.size(); ++s) {
    for (const ParamInfo& p : layout) {
      if (rank != 0) {
        const auto [lo, hi] = part(p, me);
        if (lo == hi) continue;
        tensor.resize(hi - lo);
        receive_floats(tensor.data(), hi - lo, 0, kScatterTag, world);
        be.copy_to_device(states[s] + (lo - bounds[me]), tensor.data(), (hi - lo) * sizeof(float));
        continue;
      }
      tensor.resize(p.count);
      if (!failed) {
        try {
          read(s, p, tensor.data());
        } catch (...) {
          failed = std::current_exception();
        }
      }
      if (failed) std::fill(tensor.begin(), tensor.end(), 0.0f);
      for (std::size_t r = 0; r < static_cast<std::size_t>(size); ++r) {
        const auto [lo, hi] = part(p, r);
        if (lo == hi) continue;
        const float* from = tensor.data() + (lo - p.offset);
        if (r == 0)
          be.copy_to_device(states[s] + (lo - bounds[0]), from, (hi - lo) * sizeof(float));
        else
          send_floats(from, hi - lo, static_cast<int>(r), kScatterTag, world);
      }
    }
  }
  if (failed) std::rethrow_exception(failed);
}

}  // namespace dptrain

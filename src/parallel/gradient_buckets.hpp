// Implements: gradient buckets (docs/design.md section 1, "buckets, last layer
// first"), the reduction machinery of the strategies that sum gradients
// (internal to parallel/; tests and benchmarks drive it too). The gradient
// arena is cut at layer boundaries into buckets of about --bucket-mb, last
// layer first; a strategy passes on backward's grads_ready and a bucket's
// all-reduce (or reduce-scatter) starts as soon as all its layers are done,
// while earlier layers still compute. Each bucket is summed exactly as the
// whole arena would be (an elementwise sum over ranks), so results do not
// depend on the bucket size.
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

#include "dptrain/backends/backend.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/model/model.hpp"

namespace dptrain {

struct BucketRange {
  std::size_t begin = 0, end = 0;  // arena offsets in floats, [begin, end)
};

// Buckets of at least bucket_bytes (a layer larger than that is a bucket of
// its own; layers are never split: a layer is the run of `params` entries
// with one layer name), in start order: the first covers the last layers.
// bucket_bytes == 0 gives one bucket for the whole arena.
std::vector<BucketRange> plan_buckets(const std::vector<ParamInfo>& params, std::size_t num_params,
                                      std::size_t bucket_bytes);

class GradientBuckets {
 public:
  using Clock = std::chrono::steady_clock;
  GradientBuckets(Communicator& comm, float* grads, std::vector<BucketRange> plan);

  // --shard-optimizer: each bucket is reduce-scattered, not all-reduced, so
  // that rank r ends with the sum of arena[arena_bounds[r], arena_bounds[r+1])
  // (slice_bounds); a bucket's pieces are those bounds cut to it.
  void reduce_scatter_to(const std::vector<std::size_t>& arena_bounds);
  // --accumulate: `earlier` (an arena like the gradients, the sum of the
  // earlier micro-batches) is added to each bucket just before its
  // reduction starts; nullptr: nothing added (the default).
  void add_before_reducing(Backend* be, const float* earlier) {
    be_ = be;
    earlier_ = earlier;
  }
  void begin_step();  // before backward: no bucket started yet
  // Moves started buckets along (the strategy calls it between layers).
  void between_layers() { poll(); }
  // Backward's news: gradients from `begin` on are final; starts every
  // bucket that lies wholly past it.
  void grads_ready(std::size_t begin);
  // Starts the buckets not started yet and waits for all of them.
  void finish();

  const std::vector<BucketRange>& plan() const { return plan_; }
  // When bucket i was started and first seen complete, this step.
  Clock::time_point started_at(std::size_t i) const { return started_[i]; }
  Clock::time_point done_at(std::size_t i) const { return done_[i]; }

 private:
  void start_next();
  void poll();

  Communicator& comm_;
  float* grads_;
  std::vector<BucketRange> plan_;
  std::vector<std::vector<std::size_t>> pieces_;  // per bucket, sliced: its bounds
  Backend* be_ = nullptr;
  const float* earlier_ = nullptr;
  std::size_t next_ = 0;  // first bucket not started
  std::vector<int> ticket_;
  std::vector<char> seen_done_;
  std::vector<Clock::time_point> started_, done_;
};

}  // namespace dptrain

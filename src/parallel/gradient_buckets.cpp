// Implements: bucket planning and the overlapped gradient reduction (see
// src/parallel/gradient_buckets.hpp).
#include "parallel/gradient_buckets.hpp"

#include <algorithm>

namespace dptrain {

std::vector<BucketRange> plan_buckets(const std::vector<ParamInfo>& params, std::size_t num_params,
                                      std::size_t bucket_bytes) {
  std::vector<BucketRange> plan;
  if (num_params == 0) return plan;
  if (bucket_bytes == 0) return {{0, num_params}};
  const std::vector<std::size_t> begins = layer_begins(params);
  std::size_t end = num_params;
  for (std::size_t i = begins.size(); i-- > 0;) {
    const std::size_t begin = begins[i];
    if ((end - begin) * sizeof(float) >= bucket_bytes || i == 0) {
      plan.push_back({begin, end});
      end = begin;
    }
  }
  return plan;
}

GradientBuckets::GradientBuckets(Communicator& comm, float* grads, std::vector<BucketRange> plan)
    : comm_(comm),
      grads_(grads),
      plan_(std::move(plan)),
      ticket_(plan_.size(), -1),
      seen_done_(plan_.size(), 0),
      started_(plan_.size()),
      done_(plan_.size()) {}

void GradientBuckets::begin_step() {
  next_ = 0;
  std::fill(seen_done_.begin(), seen_done_.end(), 0);
}

void GradientBuckets::reduce_scatter_to(const std::vector<std::size_t>& arena_bounds) {
  pieces_.clear();
  for (const BucketRange& b : plan_) {
    std::vector<std::size_t> cut;
    for (std::size_t at : arena_bounds) cut.push_back(std::clamp(at, b.begin, b.end) - b.begin);
    pieces_.push_back(std::move(cut));
  }
}

void GradientBuckets::start_next() {
  const BucketRange& b = plan_[next_];
  started_[next_] = Clock::now();
  if (earlier_) be_->add(earlier_ + b.begin, grads_ + b.begin, b.end - b.begin);
  ticket_[next_] = pieces_.empty()
                       ? comm_.start_allreduce_sum(grads_ + b.begin, b.end - b.begin)
                       : comm_.start_reduce_scatter_sum(grads_ + b.begin, pieces_[next_].data());
  ++next_;
}

void GradientBuckets::poll() {
  if (next_ == 0) return;
  comm_.progress();
  const auto now = Clock::now();
  for (std::size_t i = 0; i < next_; ++i) {
    if (!seen_done_[i] && comm_.done(ticket_[i])) {
      seen_done_[i] = 1;
      done_[i] = now;
    }
  }
}

void GradientBuckets::grads_ready(std::size_t begin) {
  while (next_ < plan_.size() && plan_[next_].begin >= begin) start_next();
  poll();
}

void GradientBuckets::finish() {
  while (next_ < plan_.size()) start_next();
  poll();
  comm_.wait_all();
  const auto now = Clock::now();
  for (std::size_t i = 0; i < plan_.size(); ++i) {
    if (!seen_done_[i]) {
      seen_done_[i] = 1;
      done_[i] = now;
    }
  }
}

}  // namespace dptrain

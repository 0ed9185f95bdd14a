// Implements: the shared gradient reduction of the strategies (see
// src/parallel/gradient_reduction.hpp).
#include "parallel/gradient_reduction.hpp"

#include <cstdio>

namespace dptrain {

GradientReduction::GradientReduction(Backend& be, Communicator& comm, Model& model,
                                     GradientBuckets* buckets, std::vector<std::size_t> slices)
    : be_(be), comm_(comm), model_(model), buckets_(buckets), slices_(std::move(slices)) {
  if (buckets_ && !slices_.empty()) buckets_->reduce_scatter_to(slices_);
}

GradientReduction::GradientReduction(Backend& be, Communicator& comm, Model& model,
                                     std::size_t bucket_bytes, std::vector<std::size_t> slices)
    : GradientReduction(be, comm, model, nullptr, std::move(slices)) {
  own_buckets_ = std::make_unique<GradientBuckets>(
      comm, model.grads(), plan_buckets(model.param_layout(), model.num_params(), bucket_bytes));
  buckets_ = own_buckets_.get();
  if (!slices_.empty()) buckets_->reduce_scatter_to(slices_);
}

void GradientReduction::begin_backward(bool reduce, const float* earlier) {
  reducing_ = reduce;
  earlier_ = reduce ? earlier : nullptr;
  if (!reduce || !buckets_) return;
  buckets_->add_before_reducing(&be_, earlier_);
  buckets_->begin_step();
}

void GradientReduction::between_layers() {
  if (reducing_ && buckets_) buckets_->between_layers();
}

void GradientReduction::grads_ready(std::size_t begin) {
  if (reducing_ && buckets_) buckets_->grads_ready(begin);
}

void GradientReduction::finish_backward() {
  reducing_ = false;
  if (buckets_) {
    buckets_->finish();  // only the part the overlap did not hide
    return;
  }
  float* grads = model_.grads();
  const std::size_t n = model_.num_params();
  if (earlier_) be_.add(earlier_, grads, n);
  if (slices_.empty()) {
    comm_.allreduce_sum(grads, n);
    return;
  }
  comm_.start_reduce_scatter_sum(grads, slices_.data());
  comm_.wait_all();
}

void GradientReduction::visit_collectives(const SyncStrategy::CollectiveVisitor& visit) const {
  if (!buckets_) return;
  const char* op = slices_.empty() ? "all-reduce" : "reduce-scatter";
  for (std::size_t b = 0; b < buckets_->plan().size(); ++b) {
    char name[48];
    std::snprintf(name, sizeof name, "%s bucket %zu", op, b);
    visit(name, buckets_->started_at(b), buckets_->done_at(b));
  }
}

}  // namespace dptrain

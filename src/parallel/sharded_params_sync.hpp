// Implements: the sharded-parameters strategy, --shard-params (ZeRO stage 3
// / FSDP; docs/design.md section 1), internal to parallel/. The arena is cut
// into the P slices of --shard-optimizer (slice_bounds); rank r keeps slice
// r of the parameters, of the reduced gradients and of the optimizer state,
// and nothing else of them. A unit is a top-level layer with parameters
// (a res block with all its parts). Before a unit's forward its parameters
// are all-gathered from the slices into one of two unit buffers and the
// layer is pointed at them (Model::bind_layer), and the next unit's gather
// starts into the other buffer while this one computes; before its
// backward they are gathered again (unless still in a buffer), the
// previous unit's gather started likewise; when the next unit's backward
// begins (or backward ends) the unit's gradient is reduce-scattered, behind
// the next unit's backward, each rank keeping the sum of its own
// piece, in the same rank order as --shard-optimizer's buckets, so the
// results are its results bit for bit on the CPU. The update is that of
// --shard-optimizer on the slice; the next forward gathers the new values.
//
// Under --precision bf16 the gathers move bf16 copies, half the bytes: each
// rank rounds its piece of the unit to bf16, the pieces travel packed two
// to a float (each piece padded to whole floats), and every rank expands
// all of them, its own included, to floats in the unit buffer. The layers
// then compute with parameters rounded to bf16, identically on every rank
// (GEMMs round their operands to bf16 anyway; layer norms, biases and
// embeddings are rounded too, as under PyTorch FSDP's bf16 param_dtype);
// the slices, gradients and optimizer state stay fp32.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/parallel/sync_strategy.hpp"

namespace dptrain {

class ConvertKernels;

class ShardedParamsSync final : public SyncStrategy {
 public:
  // Over a model built with ModelStorage::kShardedParams; fills this rank's
  // slice as Model::init(seed) would fill the whole arena. accumulates
  // (--accumulate K > 1): the gradients of a step's earlier micro-batches are
  // summed, unit by unit, into an arena of the whole model's size, and
  // added to the last micro-batch's before its one reduce-scatter.
  // bf16_gathers: gather bf16 copies (--precision bf16), as above.
  ShardedParamsSync(Backend& be, Communicator& comm, Model& model, std::uint64_t seed,
                    bool accumulates, bool bf16_gathers = false);

  std::string name() const override { return "sharded parameters"; }
  ArenaRange owned() const override;
  const std::vector<std::size_t>& state_slices() const override { return slices_; }
  void begin_backward(bool reduce, const float* earlier) override;
  void finish_backward() override;
  bool update(Optimizer& opt, float lr, PhaseTimer* timer) override;
  void visit_collectives(const CollectiveVisitor&) const override {}

  void before_forward(std::size_t layer) override;
  void before_backward(std::size_t layer) override;
  void grads_ready(std::size_t begin) override;

  // Floats of the largest unit: each of the four unit buffers holds one.
  std::size_t largest_unit() const { return largest_; }
  // Floats of each of the two packed bf16 gather buffers (0 without them).
  std::size_t packed_unit() const { return packed_largest_; }

 private:
  static constexpr std::size_t kNone = ~std::size_t(0);
  // The unit's pieces: P + 1 bounds within the unit, rank r's piece its
  // slice's part of the unit (made once, in the constructor).
  const std::vector<std::size_t>& pieces(std::size_t layer) const { return pieces_[layer]; }
  // Layer's parameters in a unit buffer (gathered unless there already or
  // on their way); returns the buffer.
  float* gathered(std::size_t layer);
  // Starts gathering layer's parameters (kNone: none) into the buffer not
  // bound last, to run while the bound layer computes.
  void prefetch(std::size_t layer);
  // The next (step -1: previous) top-level layer with parameters, or kNone.
  std::size_t neighbour(std::size_t layer, int step) const;
  // The pending unit's gradient: its reduce-scatter started (completed by
  // the next flush or finish_backward, so it runs while the next unit
  // computes), or (a micro-batch before the last) summed into the
  // accumulation arena.
  void flush_pending();
  // Waits for the reduce-scatter in flight and keeps this rank's piece.
  void complete_in_flight();
  // bf16 gathers: the gathered packed pieces of layer, in unit buffer i's
  // packed twin, expanded to floats in unit buffer i.
  void expand(std::size_t i, std::size_t layer);

  Backend& be_;
  Communicator& comm_;
  Model& model_;
  std::vector<std::size_t> slices_;
  std::vector<std::vector<std::size_t>> pieces_;  // per top-level layer
  std::size_t largest_ = 0;
  DeviceBuffer<float> params_, grads_;  // this rank's slices
  std::array<DeviceBuffer<float>, 2> unit_params_;
  std::array<std::size_t, 2> holds_{kNone, kNone};  // the layer each unit buffer holds
  std::size_t last_used_ = 1;                       // the unit buffer bound last
  std::size_t prefetched_ = kNone;                  // the layer on its way (start_allgather)
  std::size_t prefetch_buf_ = 0;                    // into this buffer
  // Two unit gradient buffers: one being reduce-scattered, one written.
  std::array<DeviceBuffer<float>, 2> unit_grads_;
  std::size_t pending_ = kNone;    // the layer whose gradient awaits its reduce-scatter
  std::size_t pending_buf_ = 0;    // and its buffer
  std::size_t in_flight_ = kNone;  // the layer whose reduce-scatter runs
  std::size_t in_flight_buf_ = 0;
  // bf16 gathers: per top-level layer, P + 1 bounds in floats of the packed
  // pieces (piece r takes ceil(its bf16 values / 2) floats), and each unit
  // buffer's packed twin, which the gather fills.
  ConvertKernels* convert_ = nullptr;
  std::vector<std::vector<std::size_t>> packed_;
  std::size_t packed_largest_ = 0;
  std::array<DeviceBuffer<float>, 2> unit_packed_;
  DeviceBuffer<float> accumulated_;  // --accumulate: the earlier micro-batches' sum
  bool reduce_ = true;               // the running backward pass is the step's last
  int earlier_passes_ = 0;           // micro-batches of this step summed so far
};

}  // namespace dptrain

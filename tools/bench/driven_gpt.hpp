// Implements: the GPT of dptrain_gpt_bench's layers row (gpt_layer_rows.cpp),
// with its res blocks opened up: the same layers (built from the spec with
// every block replaced by its parts, so names, arena layout and init are the
// model's), driven through the Layer API the way Model and the res block
// drive them, each call timed and its time added to its layer family's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "gpt_bench.hpp"

namespace dptrain::bench {

enum Family { kEmbed, kPos, kLn, kAttn, kDense, kGelu, kResAdds, kLoss, kOptimizer, kOther, kFamilies };
constexpr const char* kFamilyNames[] = {"embed", "pos",  "ln",        "attn",        "dense",
                                        "gelu",  "res adds", "loss", "optimizer", "other layers"};
enum Pass { kForward, kBackward, kUpdate, kPasses };

// The family a layer belongs to, by its spec's kind.
inline Family family_of(const Layer& l) {
  const std::string spec = l.spec();
  const std::string kind = spec.substr(0, spec.find_first_of(":("));
  static const std::map<std::string, Family> kinds{{"embed", kEmbed}, {"pos", kPos},
                                                   {"ln", kLn},       {"attn", kAttn},
                                                   {"dense", kDense}, {"gelu", kGelu}};
  const auto it = kinds.find(kind);
  return it == kinds.end() ? kOther : it->second;
}

struct Acc {
  std::array<double, kPasses> ms{};
  double gemm_ms = 0.0, batched_ms = 0.0;
  long gemm_calls = 0, batched_calls = 0;
  long folded = 0;  // calls folded into the previous layer's GEMM (no kernel of their own)
  double total() const { return ms[kForward] + ms[kBackward] + ms[kUpdate]; }
};
using Accs = std::array<Acc, kFamilies>;

class DrivenGpt {
 public:
  DrivenGpt(InstrumentedBackend& be, const GptArgs& a);

  const Model& model() const { return *model_; }

  // One training step, as train_step runs it on one rank; adds each
  // family's time to acc and returns the step's: its host time, or on a
  // device clock the sum of its calls' device times (the host waits after
  // each call, and the device's idle time in between is no part of it).
  double step(Accs& acc);

 private:
  struct Node {
    std::vector<Layer*> body;    // one plain layer, or a block's parts
    std::vector<Family> family;  // of each
    bool block = false;
    DeviceBuffer<float> out;  // a block's output
  };

  // The step's passes: forward returns the output and fills node_in with
  // each node's input; backward stops at the first layer with parameters.
  ConstTensorView forward(Accs& acc, std::vector<ConstTensorView>& node_in);
  // One block's backward (node i, input x): dy in, the block's dx out.
  ConstTensorView backward_block(Accs& acc, std::size_t i, const ConstTensorView& x,
                                 const ConstTensorView& dy);
  void backward(Accs& acc, const std::vector<ConstTensorView>& node_in);

  // Whether block part j starts a bf16 MLP, as residual.cpp decides it: it
  // folds the gelu:tanh after it, and the part after that folds it
  // backward and keeps its input's rounding, where the backend rounds.
  bool mlp_bf16(const Node& n, std::size_t j) const;

  // Whether a block's last part (not folded into the part before it) adds
  // the shortcut as it writes the block's output, as residual.cpp decides it.
  static bool adds_in_last(const Layer& l) { return l.forward_adds() && !l.backward_reads_output(); }

  TensorView output(Layer* l) { return {outputs_.at(l).get(), a_.batch, l->output_shape()}; }

  // Runs fn, its time (device time on a device clock) and its GEMMs' added
  // to family f's pass p.
  template <typename F>
  void timed(Accs& acc, Family f, Pass p, F&& fn) {
    const double g0 = be_.gemm_ms, b0 = be_.batched_ms;
    const long gc0 = be_.gemm_calls, bc0 = be_.batched_calls;
    const double ms = device_ms(be_, fn);
    be_.settle();
    device_step_ms_ += ms;
    Acc& x = acc[f];
    x.ms[p] += ms;
    x.gemm_ms += be_.gemm_ms - g0;
    x.batched_ms += be_.batched_ms - b0;
    x.gemm_calls += be_.gemm_calls - gc0;
    x.batched_calls += be_.batched_calls - bc0;
  }

  InstrumentedBackend& be_;
  const GptArgs& a_;
  TokenShard data_;
  DeviceBuffer<float> stats_{be_, 2};
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> opt_;
  std::vector<Node> nodes_;
  std::size_t first_trained_ = 0;
  double device_step_ms_ = 0.0;  // this step's calls, device-timed
  std::map<Layer*, DeviceBuffer<float>> outputs_;
  DeviceBuffer<float> ga_, gb_, gc_, gd_;  // Model's and the block's gradient buffers
  DeviceBuffer<std::uint16_t> ga16_, gb16_;  // the copies of ga_ and gb_, where rounded
  // The bf16 MLP's hidden values: each first dense's output, and a pass's
  // gradient of it (the model keeps them in the block's slots).
  std::map<Layer*, DeviceBuffer<std::uint16_t>> hidden16_;
  DeviceBuffer<std::uint16_t> dgelu16_;
};

}  // namespace dptrain::bench

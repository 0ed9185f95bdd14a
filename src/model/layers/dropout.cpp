// Implements: the dropout layer family, `dropout:P` (docs/design.md section 2):
// in training each value is zeroed with probability P and the others are
// scaled by 1/(1-P); in eval it is the identity. The mask is the counter-
// based draw of kernels/dropout_kernels.hpp, a function of (seed, epoch,
// global row, element) and of this layer's index among the dropout layers,
// so P ranks draw what one rank draws. It is kept from forward (one byte a
// value, allocated once for max_rows) for backward. The key and first row
// reach the kernel through device memory (stage_step), so a recorded step
// (--cuda-graphs) draws a new mask at each replay.
#include <charconv>
#include <cmath>
#include <system_error>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/dropout_kernels.hpp"
#include "dptrain/common/error.hpp"
#include "model/layers/family.hpp"

namespace dptrain {
namespace {

// The P of "dropout:P"; throws BadLayerToken with the reason.
double parse_probability(const std::string& text) {
  double p = 0.0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), p);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(p))
    throw BadLayerToken("the drop probability P must be a number, e.g. dropout:0.5");
  if (!(p >= 0.0 && p < 1.0))
    throw BadLayerToken("the drop probability P must be in [0, 1)");
  return p;
}

// Shortest text that reads back as p: the canonical argument.
std::string probability_text(double p) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, p);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(p);
}

class Dropout final : public Layer {
 public:
  Dropout(const LayerContext& ctx, double p)
      : Layer(ctx, ctx.input),
        p_(p),
        index_(static_cast<std::uint64_t>(ctx.index)),
        threshold_(dropout_draw::threshold(p)),
        scale_(static_cast<float>(1.0 / (1.0 - p))) {}

  std::string spec() const override { return "dropout:" + probability_text(p_); }
  bool differs_in_eval() const override { return true; }

  void allocate(Backend& be, int max_rows) override {
    kernels_ = &be.kernels<DropoutKernels>();  // a backend without these kernels says so here, at
                                               // build time
    keep_ = reserve<std::uint8_t>(be, max_rows, input_shape().size(), Lifetime::kSaved);
    draw_ = DeviceBuffer<std::uint64_t>(be, 2);
    staged_ = false;
  }

  // The step's draw into device memory, where it changed since the last.
  void stage_step(Backend& /*be*/) override {
    const std::uint64_t key = dropout_draw::step_key(step().seed, index_, step().epoch);
    const std::uint64_t first_row = step().first_row;
    if (staged_ && key == staged_key_ && first_row == staged_row_) return;
    kernels_->set_draw(draw_.get(), key, first_row);
    staged_ = true;
    staged_key_ = key;
    staged_row_ = first_row;
  }

  void forward(Backend& be, ConstTensorView x, TensorView y, Mode mode) override {
    if (mode == Mode::kEval) {
      be.copy_device(y.data, x.data, x.count() * sizeof(float));
      return;
    }
    stage_step(be);
    kernels_->forward(x.data, y.data, keep_.get(), x.rows, x.row_width(), draw_.get(), threshold_,
                      scale_);
  }

  void backward_input(Backend&, ConstTensorView, ConstTensorView, ConstTensorView dy,
                      TensorView dx) override {
    kernels_->backward(dy.data, keep_.get(), dx.data, dy.count(), scale_);
  }

 private:
  double p_;
  std::uint64_t index_;      // dropout<i>: layers draw independently of each other
  std::uint64_t threshold_;  // of the draw: dropped when (bits >> 11) < threshold
  float scale_;
  DropoutKernels* kernels_ = nullptr;
  ArenaBuffer<std::uint8_t> keep_;  // [max_rows, sample]: the last training forward's mask
  // {step_key, first_row} of the forward (DropoutKernels::set_draw), as
  // last staged, and whether anything was.
  DeviceBuffer<std::uint64_t> draw_;
  bool staged_ = false;
  std::uint64_t staged_key_ = 0, staged_row_ = 0;
};

LayerSpec parse_dropout(const std::string& token) {
  const auto colon = token.find(':');
  if (token.substr(0, colon) != "dropout") throw BadLayerToken();
  if (colon == std::string::npos)
    throw BadLayerToken("dropout needs its drop probability: dropout:P with 0 <= P < 1");
  return {"dropout", {probability_text(parse_probability(token.substr(colon + 1)))}, token};
}

std::unique_ptr<Layer> make_dropout(const LayerSpec& spec, const LayerContext& ctx) {
  try {
    DPT_REQUIRE(spec.args.size() == 1, ExitCode::kUsage, "dropout takes one argument");
    return std::make_unique<Dropout>(ctx, parse_probability(spec.args[0]));
  } catch (const BadLayerToken& e) {
    throw Error(ExitCode::kUsage, "dropout layer '" + spec.token + "': " + e.what());
  }
}

}  // namespace

LayerFamily dropout_family() {
  return {{"dropout"}, "dropout:P (0 <= P < 1)", parse_dropout, make_dropout, nullptr, ""};
}

}  // namespace dptrain

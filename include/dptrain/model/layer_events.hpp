// Implements: what forward and backward announce as they go through the
// layers (docs/design.md section 1), to every listener on a list: a point
// between layers (to move communication along: the input pipeline's next
// scatter, the gradient buckets), the moments before a layer's forward and
// before its backward (where a strategy that keeps parameters sliced would
// gather a unit's parameters), and, in backward, each time a suffix of the
// gradient arena is final (last layer first), so that its reduction can
// start while earlier layers still compute. Listeners know nothing of each
// other; the list calls them in the order they were added.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>

#include "dptrain/common/error.hpp"

namespace dptrain {

class LayerListener {
 public:
  virtual ~LayerListener() = default;
  // Forward is about to run the model's top-level layer `layer` (index).
  virtual void before_forward(std::size_t layer) { (void)layer; }
  // Backward is about to run top-level layer `layer` (its parameter
  // gradients, then its input gradient).
  virtual void before_backward(std::size_t layer) { (void)layer; }
  // Between two layers, in forward and in backward.
  virtual void between_layers() {}
  // Gradients from arena offset `begin` to the end are final for this pass.
  virtual void grads_ready(std::size_t begin) { (void)begin; }
};

// The listeners of one model's passes: a fixed list (no allocation, so a
// step made with one stays allocation-free), each event passed to every
// listener in the order added.
class LayerEvents final : public LayerListener {
 public:
  static constexpr std::size_t kMaxListeners = 4;
  LayerEvents() = default;
  // Null entries are skipped.
  LayerEvents(std::initializer_list<LayerListener*> listeners) {
    for (LayerListener* l : listeners) add(l);
  }
  void add(LayerListener* l) {
    if (!l) return;
    DPT_REQUIRE(count_ < kMaxListeners, ExitCode::kOther, "LayerEvents: too many listeners");
    listeners_[count_++] = l;
  }
  std::size_t size() const { return count_; }

  void before_forward(std::size_t layer) override {
    for (std::size_t i = 0; i < count_; ++i) listeners_[i]->before_forward(layer);
  }
  void before_backward(std::size_t layer) override {
    for (std::size_t i = 0; i < count_; ++i) listeners_[i]->before_backward(layer);
  }
  void between_layers() override {
    for (std::size_t i = 0; i < count_; ++i) listeners_[i]->between_layers();
  }
  void grads_ready(std::size_t begin) override {
    for (std::size_t i = 0; i < count_; ++i) listeners_[i]->grads_ready(begin);
  }

 private:
  std::array<LayerListener*, kMaxListeners> listeners_{};
  std::size_t count_ = 0;
};

}  // namespace dptrain

// Implements: DrivenGpt (driven_gpt.hpp), the layers row's GPT.
#include "driven_gpt.hpp"

#include <algorithm>

namespace dptrain::bench {

DrivenGpt::DrivenGpt(InstrumentedBackend& be, const GptArgs& a) : be_(be), a_(a), data_(be, a, 5) {
  std::vector<LayerSpec> flat;
  std::vector<std::size_t> parts;  // per top-level layer: 0 plain, else the block's size
  for (const LayerSpec& s : parse_model_spec(a.model)) {
    if (s.kind == "res") {
      for (const LayerSpec& in : s.inner)
        DPT_REQUIRE(in.inner.empty(), ExitCode::kUsage, "layers: nested blocks are not supported");
      flat.insert(flat.end(), s.inner.begin(), s.inner.end());
      parts.push_back(s.inner.size());
    } else {
      flat.push_back(s);
      parts.push_back(0);
    }
  }
  const Shape input{a.tokens};
  std::vector<std::unique_ptr<Layer>> layers = build_layers(flat, input, a.vocab);
  std::vector<Layer*> raw;
  for (const auto& l : layers) raw.push_back(l.get());
  std::size_t widest = input.size();
  for (Layer* l : raw) widest = std::max({widest, l->input_shape().size(), l->output_shape().size()});
  model_ = std::make_unique<Model>(be, std::move(layers), input, a.batch, a.vocab,
                                   Recompute::kNone, ModelStorage::kAllocated,
                                   logits_precision(a.precision, LossKind::kXent));
  model_->init(1);
  model_->round_params();  // the layers run here without Model::forward
  opt_ = std::make_unique<Optimizer>(be, adamw(a, *model_), model_->num_params());
  const auto rows = static_cast<std::size_t>(a.batch);
  std::size_t next = 0;
  for (std::size_t p : parts) {
    Node n;
    n.block = p > 0;
    for (std::size_t j = 0; j < std::max<std::size_t>(p, 1); ++j) n.body.push_back(raw[next++]);
    for (Layer* l : n.body) {
      outputs_.emplace(l, DeviceBuffer<float>(be, rows * l->output_shape().size()));
      n.family.push_back(family_of(*l));
    }
    if (n.block) n.out = DeviceBuffer<float>(be, rows * n.body.back()->output_shape().size());
    nodes_.push_back(std::move(n));
  }
  first_trained_ = nodes_.size();
  for (std::size_t i = 0; i < nodes_.size() && first_trained_ == nodes_.size(); ++i)
    for (Layer* l : nodes_[i].body)
      if (!l->params().empty()) first_trained_ = i;
  for (DeviceBuffer<float>* b : {&ga_, &gb_, &gc_, &gd_})
    *b = DeviceBuffer<float>(be, rows * widest);
  if (be.caps().rounds_gemm_operands)
    for (DeviceBuffer<std::uint16_t>* b : {&ga16_, &gb16_, &dgelu16_})
      *b = DeviceBuffer<std::uint16_t>(be, rows * widest);
  for (const Node& n : nodes_)
    for (std::size_t j = 0; j < n.body.size(); ++j)
      if (mlp_bf16(n, j))
        hidden16_.emplace(n.body[j],
                          DeviceBuffer<std::uint16_t>(be, rows * n.body[j]->output_shape().size()));
}

bool DrivenGpt::mlp_bf16(const Node& n, std::size_t j) const {
  return n.block && be_.caps().rounds_gemm_operands && j + 2 < n.body.size() &&
         n.body[j]->folds_next(*n.body[j + 1]) && n.body[j + 2]->folds_previous(*n.body[j + 1]) &&
         !n.body[j + 2]->backward_reads_input();
}

double DrivenGpt::step(Accs& acc) {
  const auto t_step = Clock::now();
  device_step_ms_ = 0.0;
  be_.device_gemms = be_.caps().device_clock;
  std::vector<ConstTensorView> node_in(nodes_.size());
  const ConstTensorView out = forward(acc, node_in);
  const int terms = loss_terms_per_sample(LossKind::kXent, model_->output_shape());
  const float scale = 1.0f / static_cast<float>(std::uint64_t(a_.batch) * std::uint64_t(terms));
  timed(acc, kLoss, kForward, [&] {
    apply_loss(be_, LossKind::kXent, out.data, data_.shard, model_->output_shape(), scale,
               model_->output_grad(), stats_.get(), model_->output_grad_bf16(),
               model_->output_bf16());
  });
  backward(acc, node_in);
  timed(acc, kOptimizer, kUpdate, [&] {
    if (be_.count_nonfinite(model_->grads(), model_->num_params()) != 0) return;
    float* w = model_->params();  // and the bf16 twin in the same pass, as training does
    opt_->step(w, model_->grads(), a_.lr, nullptr, model_->params_bf16_for_update());
  });
  be_.synchronize();
  be_.device_gemms = false;
  return be_.caps().device_clock ? device_step_ms_ : ms_since(t_step);
}

ConstTensorView DrivenGpt::forward(Accs& acc, std::vector<ConstTensorView>& node_in) {
  const int rows = a_.batch;
  ConstTensorView in{data_.shard.features, rows, model_->input_shape()};
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    Node& n = nodes_[i];
    node_in[i] = in;
    ConstTensorView cur = in;
    for (std::size_t j = 0; j < n.body.size(); ++j) {
      Layer* l = n.body[j];
      TensorView y = output(l);
      if (n.block && j + 1 < n.body.size() && l->folds_next(*n.body[j + 1])) {
        // The part and the activation after it in one GEMM, as the block
        // runs them (in bf16 where it is a bf16 MLP): the time is the
        // part's family's.
        TensorView next = output(n.body[j + 1]);
        if (mlp_bf16(n, j)) {
          y.bf16 = hidden16_.at(l).get();
          next.bf16 = n.body[j + 2]->input_bf16();
        }
        ++j;
        timed(acc, n.family[j - 1], kForward,
              [&] { l->forward_folding_next(be_, cur, y, next, Mode::kTrain); });
        ++acc[n.family[j]].folded;
        cur = next;
        continue;
      }
      // A layer norm writes the next part's input copy, as in the block.
      if (n.block && j + 1 < n.body.size() && l->writes_output_bf16())
        y.bf16 = n.body[j + 1]->input_bf16();
      if (n.block && j + 1 == n.body.size() && adds_in_last(*l)) {
        // y = f(x) + x by the last part's GEMM, as the block makes it
        const TensorView out{n.out.get(), rows, in.shape};
        timed(acc, n.family[j], kForward,
              [&] { l->forward_adding(be_, cur, in, out, Mode::kTrain); });
        ++acc[kResAdds].folded;
        cur = out;
        break;
      }
      timed(acc, n.family[j], kForward, [&] { l->forward(be_, cur, y, Mode::kTrain); });
      cur = y;
    }
    if (n.block && cur.data != n.out.get()) {  // y = f(x) + x, one pass as the block makes it
      const TensorView y{n.out.get(), rows, in.shape};
      timed(acc, kResAdds, kForward, [&] { be_.sum(cur.data, in.data, y.data, y.count()); });
      cur = y;
    }
    in = cur;
  }
  return in;
}

void DrivenGpt::backward(Accs& acc, const std::vector<ConstTensorView>& node_in) {
  const int rows = a_.batch;
  ConstTensorView dy{model_->output_grad(), rows, model_->output_shape(),
                     model_->output_grad_bf16()};
  for (std::size_t i = nodes_.size(); i-- > first_trained_;) {
    Node& n = nodes_[i];
    const ConstTensorView x = node_in[i];
    if (n.block) {
      dy = backward_block(acc, i, x, dy);
      if (i == first_trained_) break;
      continue;
    }
    Layer* l = n.body[0];
    if (!l->params().empty()) {
      timed(acc, n.family[0], kBackward, [&] { l->backward_params(be_, x, dy); });
      if (i == first_trained_) break;
    }
    const TensorView dx{dy.data == ga_.get() ? gb_.get() : ga_.get(), rows, l->input_shape()};
    timed(acc, n.family[0], kBackward, [&] { l->backward_input(be_, x, output(l), dy, dx); });
    dy = dx;
  }
}

// The block's chain, as residual.cpp runs it: its parts last first, both
// passes of each (a part that folds the activation before it carries the
// gradient through both); the first part's input gradient with dy added,
// dx = df + dy, in its own pass (ln's), with the copy for the block before,
// as the model hands it on. The first trained block computes no dx.
ConstTensorView DrivenGpt::backward_block(Accs& acc, std::size_t i, const ConstTensorView& x,
                                          const ConstTensorView& dy) {
  const int rows = a_.batch;
  Node& n = nodes_[i];
  const bool adds_in_first = !(n.body.size() > 1 && n.body[1]->folds_previous(*n.body[0]));
  const bool in_a = dy.data != ga_.get();
  const TensorView block_dx{in_a ? ga_.get() : gb_.get(), rows, x.shape,
                            in_a ? ga16_.get() : gb16_.get()};
  ConstTensorView g = dy;
  auto part_input = [&](std::size_t j) {
    return j == 0 ? x : ConstTensorView(output(n.body[j - 1]));
  };
  for (std::size_t j = n.body.size(); j-- > 0;) {
    Layer* l = n.body[j];
    const ConstTensorView lin = part_input(j);
    const Family f = n.family[j];
    if (!l->params().empty()) timed(acc, f, kBackward, [&] { l->backward_params(be_, lin, g); });
    if (j == 0 && adds_in_first) {
      if (i == first_trained_) return dy;
      timed(acc, f, kBackward,
            [&] { l->backward_input_adding(be_, lin, output(l), g, block_dx, dy); });
      ++acc[kResAdds].folded;
      return block_dx;
    }
    float* free = g.data == gc_.get() ? gd_.get() : gc_.get();
    if (j >= 1 && l->folds_previous(*n.body[j - 1])) {
      TensorView dx{free, rows, n.body[--j]->input_shape()};
      ConstTensorView prev_x = part_input(j);
      if (j >= 1 && mlp_bf16(n, j - 1)) {  // the bf16 MLP's gradient, in bf16
        prev_x.bf16 = hidden16_.at(n.body[j - 1]).get();
        dx.bf16 = dgelu16_.get();
      }
      timed(acc, f, kBackward, [&] { l->backward_input_folding_previous(be_, lin, prev_x, g, dx); });
      ++acc[n.family[j]].folded;
      g = dx;
      continue;
    }
    const TensorView dx{free, rows, l->input_shape()};
    timed(acc, f, kBackward, [&] { l->backward_input(be_, lin, output(l), g, dx); });
    g = dx;
  }
  if (i == first_trained_) return dy;
  if (!adds_in_first)
    timed(acc, kResAdds, kBackward,
          [&] { be_.sum(g.data, dy.data, block_dx.data, x.count(), block_dx.bf16); });
  return block_dx;
}

}  // namespace dptrain::bench

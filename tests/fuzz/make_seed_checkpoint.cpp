// Implements: the checkpoint seeds of the fuzz corpus (tools/fuzz.sh), written
// by write_checkpoint itself so the fuzzer starts from the real format: a
// full Adam checkpoint and an SGD one with momentum.
#include <cstdio>
#include <string>
#include <vector>

#include "dptrain/checkpoint/checkpoint.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/model/layer_spec.hpp"

namespace {

dptrain::CheckpointData make(const std::vector<int> &dims,
                             const std::string &optimizer,
                             const std::vector<std::string> &states) {
  dptrain::CheckpointData d;
  d.meta.model = "dense:" + std::to_string(dims[1]);
  for (std::size_t i = 2; i < dims.size(); ++i)
    d.meta.model += ",relu,dense:" + std::to_string(dims[i]);
  d.meta.loss = "xent";
  d.meta.step = 2;
  d.meta.epoch = 0;
  d.meta.epoch_position = 64;
  d.meta.seed = 7;
  d.meta.world_size = 1;
  d.meta.config = "model = " + d.meta.model + "\nlr = 0.01\n";
  d.meta.optimizer = optimizer;
  d.meta.optimizer_step = 2;
  d.param_layout = dptrain::model_layout(dptrain::parse_model_spec(d.meta.model),
                                         dptrain::Shape{dims[0]})
                       .params;
  const std::size_t n = dptrain::arena_size(d.param_layout);
  d.params.resize(n);
  for (std::size_t j = 0; j < n; ++j)
    d.params[j] = 0.01f * float(j % 17) - 0.05f;
  for (const auto &s : states)
    d.optimizer_state.push_back({s, std::vector<float>(n, 0.5f)});
  d.has_training_state = true;
  return d;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  try {
    dptrain::write_checkpoint(dir + "/ckpt-adam.h5",
                              make({8, 4, 3}, "adam", {"m", "v"}));
    dptrain::write_checkpoint(dir + "/ckpt-sgd.h5",
                              make({4, 2}, "sgd", {"velocity"}));
  } catch (const dptrain::Error &e) {
    std::fprintf(stderr, "make_seed_checkpoint: %s\n", e.message().c_str());
    return 1;
  }
  return 0;
}

// Implements: bn against PyTorch — dptrain's bn layer runs three training
// steps and one eval on flat, [C, H, W] and [C, D, H, W] samples; the
// numbers go to bn_torch_check.py, which runs torch.nn.BatchNorm1d/2d/3d in
// double on the same inputs and compares every output, gradient and running
// statistic. Skipped when no Python can import torch ($DPTRAIN_TORCH_PYTHON,
// $PYTHON, python3 and the system python3 are tried).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "bn_reference.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "layer_rig.hpp"
#include "test_paths.hpp"

namespace dptrain {
namespace {

using testing::normal_values;
using testing::to_floats;

// The first interpreter that imports torch, or "". Debian's python3-torch
// installs for the system python3, which a user's own python3 earlier on
// PATH may hide (as tools/find-python.sh reasons for h5py).
std::string torch_python() {
  std::vector<std::string> candidates;
  for (const char* var : {"DPTRAIN_TORCH_PYTHON", "PYTHON"})
    if (const char* p = std::getenv(var); p && *p) candidates.emplace_back(p);
  candidates.insert(candidates.end(), {"python3", "/usr/bin/python3"});
  for (const std::string& py : candidates)
    if (std::system((py + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0) return py;
  return "";
}

nlohmann::json run_case(Backend& be, const Shape& sample, int rows) {
  testing::LayerRig rig(be, "bn", sample, rows);
  const int C = sample[0];
  rig.set_params(to_floats(normal_values(2 * C, 7, 0.8, 0.4)));
  nlohmann::json c;
  std::vector<int> shape = {rows};
  for (int i = 0; i < sample.rank(); ++i) shape.push_back(sample[i]);
  c["shape"] = shape;
  c["weight"] = std::vector<float>(rig.params.begin(), rig.params.begin() + C);
  c["bias"] = std::vector<float>(rig.params.begin() + C, rig.params.end());
  const std::size_t n = rows * sample.size();
  for (int step = 0; step < 3; ++step) {
    const auto x = to_floats(normal_values(n, 50 + step, 2.0 - step, 1.0 + 0.5 * step));
    const auto dy = to_floats(normal_values(n, 60 + step, 0.0, 1.0));
    const auto y = rig.forward(x, rows);
    const auto dx = rig.backward(x, y, dy, rows);
    c["steps"].push_back({{"x", x},
                          {"dy", dy},
                          {"y", y},
                          {"dx", dx},
                          {"dweight", std::vector<float>(rig.grads.begin(), rig.grads.begin() + C)},
                          {"dbias", std::vector<float>(rig.grads.begin() + C, rig.grads.end())}});
  }
  c["running_mean"] = std::vector<float>(rig.buffers.begin(), rig.buffers.begin() + C);
  c["running_var"] = std::vector<float>(rig.buffers.begin() + C, rig.buffers.end());
  const auto x = to_floats(normal_values(2 * sample.size(), 70, 0.0, 1.0));
  shape[0] = 2;
  c["eval_shape"] = shape;
  c["eval_x"] = x;
  c["eval_y"] = rig.forward(x, 2, Mode::kEval);
  return c;
}

TEST(BatchNormTorch, MatchesTorchBatchNorm) {
  const std::string python = torch_python();
  if (python.empty()) GTEST_SKIP() << "no Python here imports torch";
  auto be = make_cpu_backend(BackendOptions{});
  nlohmann::json cases = nlohmann::json::array();
  cases.push_back(run_case(*be, Shape{5}, 7));
  cases.push_back(run_case(*be, Shape{3, 5, 3}, 3));
  cases.push_back(run_case(*be, Shape{2, 3, 2, 3}, 3));
  const std::string file = testing::scratch_dir("bn-torch") + "/cases.json";
  std::ofstream(file) << cases.dump();
  const std::string script = testing::source_dir() + "/tests/unit/bn_torch_check.py";
  const int rc = std::system((python + " " + script + " " + file).c_str());
  ASSERT_TRUE(WIFEXITED(rc)) << "the torch check did not exit";
  if (WEXITSTATUS(rc) == 77) GTEST_SKIP() << python << " cannot import torch";
  EXPECT_EQ(WEXITSTATUS(rc), 0) << "bn differs from torch (see the lines above)";
}

}  // namespace
}  // namespace dptrain

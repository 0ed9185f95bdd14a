// Implements: the CUDA backend's answer to layers it has no kernels for yet
// (bn, bn:local, dropout): a usage error (exit 2) saying to use --device cpu,
// raised while the model is built (Layer::allocate), before the first step.
#include <gtest/gtest.h>

#include <string>

#include "dptrain/error.hpp"
#include "dptrain/model.hpp"
#include "gpu_env.hpp"

namespace {

using namespace dptrain;

TEST(CudaLayers, BnAndDropoutAreRefusedWhenTheModelIsBuilt) {
  auto be = gpu_test::make_gpu();
  for (const char* spec : {"dense:4,bn,dense:2", "dense:4,bn:local,dense:2", "dense:4,dropout:0.5,dense:2"}) {
    try {
      Model m(*be, parse_model_spec(spec), 3, 4);
      ADD_FAILURE() << spec << " was built on cuda";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage) << spec;
      EXPECT_NE(std::string(e.what()).find("use --device cpu"), std::string::npos) << e.what();
    }
  }
}

}  // namespace

// Implements: models with conv and pooling layers on --device cuda. Built
// with cuDNN they build and run a forward pass, and a small CNN's forward
// and backward through the layers match the CPU backend's (same init, same
// input); built without it they are refused when the model is built
// (Layer::allocate), as a usage error naming the layer, saying the build
// lacks cuDNN and pointing at --device cpu. flatten needs no spatial
// kernels and builds either way. The start-up summary's library line names
// cuDNN's version, or its absence.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dptrain/build_config.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/model/model.hpp"
#include "gpu_env.hpp"

namespace {

using namespace dptrain;

struct Case {
  const char* spec;
  const char* message;  // the refusal without cuDNN; nullptr: builds anyway
};

const Case kCases[] = {
    {"conv:4:3,dense:2", "conv0: conv layers on --device cuda need cuDNN"},
    {"flatten,dense:4,dense:2", nullptr},
    {"maxpool:2,dense:2", "maxpool0: maxpool layers on --device cuda need cuDNN"},
    {"gap,dense:2", "gap0: avgpool and gap layers on --device cuda need cuDNN"},
    {"conv:4:3,relu,avgpool:2,conv:3:3:2,gap,dense:2", "conv0: conv layers"},
};

TEST(CudaSpatial, ConvAndPoolingBuildWithCudnnAndAreRefusedWithout) {
  auto be = gpu_test::make_gpu();
  for (const Case& c : kCases) {
    try {
      Model model(*be, parse_model_spec(c.spec), Shape{1, 8, 8}, 4);
      EXPECT_TRUE(DPTRAIN_HAVE_CUDNN || c.message == nullptr) << "built " << c.spec << " on cuda";
      model.init(1);
      const std::vector<float> x(4 * 64, 0.5f);
      auto input = gpu_test::upload(*be, x);
      const float* out = model.forward(input.get(), 4, nullptr, Mode::kEval);
      const auto logits = gpu_test::download(*be, out, 4 * 2);
      for (float v : logits) EXPECT_TRUE(std::isfinite(v)) << c.spec;
    } catch (const Error& e) {
      ASSERT_FALSE(DPTRAIN_HAVE_CUDNN) << c.spec << ": " << e.what();
      ASSERT_NE(c.message, nullptr) << c.spec << ": " << e.what();
      EXPECT_EQ(e.code(), ExitCode::kUsage);
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("which this build was made without"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("use --device cpu"), std::string::npos) << e.what();
    }
  }
}

// Forward and backward of spec over rows on be, from the same seed and input.
struct Pass {
  std::vector<float> out, grads;
};
Pass train_pass(Backend& be, const std::string& spec, const Shape& input, int rows,
                const std::vector<float>& x, const std::vector<float>& dout) {
  Model model(be, parse_model_spec(spec), input, rows);
  model.init(7);
  auto dx = gpu_test::upload(be, x);
  const float* out = model.forward(dx.get(), rows);
  Pass p;
  p.out = gpu_test::download(be, out, dout.size());
  be.copy_to_device(model.output_grad(), dout.data(), dout.size() * sizeof(float));
  model.backward(dx.get(), model.output_grad(), rows);
  p.grads = gpu_test::download(be, model.grads(), model.num_params());
  return p;
}

TEST(CudaSpatial, ACnnTrainsAsOnTheCpu) {
  if (!DPTRAIN_HAVE_CUDNN) GTEST_SKIP() << "built without cuDNN";
  const std::string spec =
      "conv:6:3,relu,maxpool:2,conv:4:3:2,relu,res(conv:4:3),avgpool:2,gap,dense:3";
  const Shape input{2, 13, 11};
  const int rows = 5;
  const auto x = gpu_test::random_vector(rows * input.size(), 21);
  const auto dout = gpu_test::random_vector(rows * 3, 22);
  auto gpu = gpu_test::make_gpu();
  auto cpu = gpu_test::make_cpu();
  const Pass got = train_pass(*gpu, spec, input, rows, x, dout);
  const Pass want = train_pass(*cpu, spec, input, rows, x, dout);
  EXPECT_TRUE(gpu_test::all_close(got.out, want.out, 1e-4, 1e-5));
  EXPECT_TRUE(gpu_test::all_close(got.grads, want.grads, 1e-3, 1e-5));
}

TEST(CudaSpatial, TheLibraryLineNamesCudnn) {
  auto be = gpu_test::make_gpu();
  const std::string line = be->gemm_library();
  EXPECT_EQ(line.rfind("cuBLAS ", 0), 0u) << line;
  EXPECT_NE(line.find(DPTRAIN_HAVE_CUDNN ? ", cuDNN " : ", no cuDNN"), std::string::npos) << line;
}

}  // namespace

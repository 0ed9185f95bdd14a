// Implements: until the cuDNN version exists, a model with conv or pooling
// layers on --device cuda is refused when it is built (Layer::allocate),
// as a usage error naming the layer and pointing at --device cpu; flatten
// needs no spatial kernels and still builds.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dptrain/error.hpp"
#include "dptrain/model.hpp"
#include "gpu_env.hpp"

namespace {

using namespace dptrain;

TEST(CudaSpatial, ConvAndPoolingAreRefusedAtBuildNamingTheLayer) {
  auto be = gpu_test::make_gpu();
  struct Case {
    const char* spec;
    const char* message;
  };
  const Case cases[] = {
      {"conv:4:3,dense:2", "conv0: conv layers need cuDNN on --device cuda"},
      {"flatten,dense:4,dense:2", nullptr},
      {"maxpool:2,dense:2", "maxpool0: maxpool layers need cuDNN"},
      {"gap,dense:2", "gap0: avgpool and gap layers need cuDNN"},
  };
  for (const Case& c : cases) {
    try {
      Model model(*be, parse_model_spec(c.spec), Shape{1, 8, 8}, 4);
      EXPECT_EQ(c.message, nullptr) << "built " << c.spec << " on cuda";
    } catch (const Error& e) {
      ASSERT_NE(c.message, nullptr) << c.spec << ": " << e.what();
      EXPECT_EQ(e.code(), ExitCode::kUsage);
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("use --device cpu"), std::string::npos) << e.what();
    }
  }
}

}  // namespace

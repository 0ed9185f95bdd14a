// Implements: unit tests of the spatial tokens of --model (conv, maxpool,
// avgpool, gap, flatten): parsing to canonical arguments, the layout and
// shapes they give without a backend (torch.nn names and shapes), and the
// bad specs that are usage errors naming the layer, at parse or build time.
#include <gtest/gtest.h>

#include "backends/cpu/cpu_backend.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/model/model.hpp"

namespace dptrain {
namespace {

using Args = std::vector<std::string>;

TEST(SpatialSpecs, ParseToCanonicalArguments) {
  const auto specs = parse_model_spec(
      "conv:8:3,conv:8:3:1:1,conv:8:3:1:0,conv:8:3:2,conv:08:5:1:2,maxpool:2:2,maxpool:3:2,"
      "avgpool:2,gap,flatten,dense:10");
  ASSERT_EQ(specs.size(), 11u);
  EXPECT_EQ(specs[0].kind, "conv");
  EXPECT_EQ(specs[0].args, (Args{"8", "3"}));
  EXPECT_EQ(specs[1].args, (Args{"8", "3"}));  // S and P at their defaults
  EXPECT_EQ(specs[2].args, (Args{"8", "3", "1", "0"}));
  EXPECT_EQ(specs[3].args, (Args{"8", "3", "2"}));
  EXPECT_EQ(specs[4].args, (Args{"8", "5"}));
  EXPECT_EQ(specs[5].kind, "maxpool");
  EXPECT_EQ(specs[5].args, Args{"2"});
  EXPECT_EQ(specs[6].args, (Args{"3", "2"}));
  EXPECT_EQ(specs[7].kind, "avgpool");
  EXPECT_EQ(specs[8].kind, "gap");
  EXPECT_TRUE(specs[8].args.empty());
  EXPECT_EQ(specs[9].kind, "flatten");
}

TEST(SpatialSpecs, LayoutNamesAndShapesAreTorchs) {
  const auto specs = parse_model_spec("conv:4:3,relu,maxpool:2,conv:6:3:2:0,gap,dense:3");
  const ModelLayout layout = model_layout(specs, Shape{1, 11, 9});
  const std::vector<ParamInfo> want = {{"conv0", "weight", {4, 1, 3, 3}, 0, 36},
                                       {"conv0", "bias", {4}, 36, 4},
                                       {"conv1", "weight", {6, 4, 3, 3}, 40, 216},
                                       {"conv1", "bias", {6}, 256, 6},
                                       {"dense0", "weight", {3, 6}, 262, 18},
                                       {"dense0", "bias", {3}, 280, 3}};
  EXPECT_EQ(layout.params, want);
  const auto layers = build_layers(specs, Shape{1, 11, 9});
  EXPECT_EQ(layers[0]->output_shape(), (Shape{4, 11, 9}));
  EXPECT_EQ(layers[2]->name(), "maxpool0");
  EXPECT_EQ(layers[2]->output_shape(), (Shape{4, 5, 4}));
  EXPECT_EQ(layers[3]->output_shape(), (Shape{6, 2, 1}));
  EXPECT_EQ(layers[4]->output_shape(), Shape{6});
  EXPECT_EQ(layers[3]->spec(), "conv:6:3:2:0");

  const ModelLayout volume =
      model_layout(parse_model_spec("conv:2:3,avgpool:2,flatten,dense:1"), Shape{3, 4, 5, 6});
  EXPECT_EQ(volume.params[0].shape, (std::vector<std::size_t>{2, 3, 3, 3, 3}));
  EXPECT_EQ(volume.params[2].shape, (std::vector<std::size_t>{1, 2 * 2 * 2 * 3}));
}

void expect_usage_error(const std::string& spec, const Shape& input,
                        const std::vector<std::string>& parts) {
  try {
    const auto specs = parse_model_spec(spec);
    auto be = make_cpu_backend(BackendOptions{});
    Model model(*be, specs, input, 2);
    ADD_FAILURE() << "accepted " << spec << " on " << input.to_string();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage) << e.what();
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(SpatialSpecs, BadSpecsAreUsageErrorsNamingTheLayer) {
  const Shape image{1, 8, 8};
  expect_usage_error("conv:0:3,dense:2", image, {"bad layer 'conv:0:3'", "filters C must be >= 1"});
  expect_usage_error("conv:4:0,dense:2", image, {"'conv:4:0'", "kernel K must be >= 1"});
  expect_usage_error("conv:4:3:0,dense:2", image, {"'conv:4:3:0'", "stride S must be >= 1"});
  expect_usage_error("conv:4,dense:2", image, {"'conv:4'", "conv takes C:K[:S[:P]]"});
  expect_usage_error("conv:4:3:1:x,dense:2", image, {"padding P must be an integer"});
  expect_usage_error("maxpool,dense:2", image, {"'maxpool'", "maxpool takes K[:S]"});
  expect_usage_error("gap:2,dense:2", image, {"'gap:2'", "gap takes no arguments"});
  expect_usage_error("flatten:1,dense:2", image, {"'flatten:1'"});
  expect_usage_error("conv:4:9:1:0,dense:2", image,
                     {"'conv:4:9:1:0' (conv0)", "kernel 9 is larger than the padded input"});
  expect_usage_error("conv:2:3,maxpool:9,dense:2", image,
                     {"'maxpool:9' (maxpool0)", "window 9 is larger than the input [2, 8, 8]"});
  expect_usage_error("conv:2:3,avgpool:3:1,conv:2:7:1:0,dense:2", image,
                     {"(conv1)", "kernel 7 is larger than the padded input (6"});
  const std::string not_spatial = "needs a spatial input [C, H, W] or [C, D, H, W]; got ";
  expect_usage_error("flatten,conv:4:3,dense:2", image,
                     {"'conv:4:3' (conv0)", not_spatial + "[64]"});
  expect_usage_error("dense:5,maxpool:2,dense:2", image, {"(maxpool0)", not_spatial + "[5]"});
  expect_usage_error("gap,gap,dense:2", image, {"(gap1)", not_spatial + "[1]"});
  expect_usage_error("conv:4:3,dense:2", Shape{10}, {"(conv0)", not_spatial + "[10]"});
  expect_usage_error("avgpool:2,dense:2", Shape{6, 6}, {"(avgpool0)", not_spatial + "[6, 6]"});
  // A spatial layer cannot give the output width.
  expect_usage_error("dense:4,conv:2:1", image, {"must be dense:N"});
}

TEST(SpatialSpecs, ModelSpecRoundTripsCanonically) {
  auto be = make_cpu_backend(BackendOptions{});
  Model m(*be, parse_model_spec("conv:4:3:1:1,maxpool:2:2,avgpool:1:1,gap,dense:2"),
          Shape{2, 6, 6}, 2);
  EXPECT_EQ(m.spec(), "conv:4:3,maxpool:2,avgpool:1,gap,dense:2");
}

}  // namespace
}  // namespace dptrain

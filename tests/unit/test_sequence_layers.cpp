// Implements: checks of the sequence layers (embed, pos, ln, attn, seq, gap
// over positions, dense per position, K*(...)) on the CPU backend:
// whole-model central finite differences for a 2-block GPT (causal and
// not), a ViT-style model and layer norm on flat inputs; attention against
// a double-precision reference; the causal mask (a later token never moves
// an earlier output); embedding gradients of repeated ids; spec errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/sequence_kernels.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/common/h5.hpp"
#include "dptrain/common/random.hpp"
#include "dptrain/data/dataset.hpp"
#include "dptrain/model/loss.hpp"
#include "dptrain/model/model.hpp"
#include "test_paths.hpp"

namespace dptrain {
namespace {

std::vector<float> uniform_floats(std::size_t n, std::uint64_t seed, double lo, double hi) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(lo + (hi - lo) * rng.uniform());
  return v;
}

// Token ids as the model's input buffer carries them: int32 bit patterns.
std::vector<float> id_input(const std::vector<std::int32_t>& ids) {
  std::vector<float> x(ids.size());
  std::memcpy(x.data(), ids.data(), ids.size() * sizeof(float));
  return x;
}

// The batch a test model trains on: its input (ids or features) and labels.
struct Batch {
  std::vector<float> x;
  std::vector<std::int32_t> labels;  // one per loss term (per position on sequences)
  int rows = 0;
};

// Mean xent over every loss term, from the backend's stats; writes the
// gradient scaled by 1/terms into output_grad(), as the trainer does.
double mean_loss(Backend& be, Model& model, const Batch& b) {
  const float* out = model.forward(b.x.data(), b.rows);
  Shard shard;
  shard.rows = b.rows;
  shard.labels = const_cast<std::int32_t*>(b.labels.data());
  const double terms =
      static_cast<double>(b.rows) * loss_terms_per_sample(LossKind::kXent, model.output_shape());
  float stats[2] = {0, 0};
  apply_loss(be, LossKind::kXent, out, shard, model.output_shape(), static_cast<float>(1.0 / terms),
             model.output_grad(), stats);
  return stats[0] / terms;
}

// Every parameter's gradient against central differences of the mean loss;
// float differences carry ~1e-4 noise at this step, hence the absolute floor.
void check_gradients(Backend& be, Model& model, const Batch& b, float eps = 4e-3f) {
  mean_loss(be, model, b);
  model.backward(b.x.data(), model.output_grad(), b.rows);
  const std::size_t n = model.num_params();
  std::vector<float> grads(n), params(n);
  be.copy_to_host(grads.data(), model.grads(), n * sizeof(float));
  be.copy_to_host(params.data(), model.params(), n * sizeof(float));
  auto loss_at = [&](std::size_t i, float value) {
    std::vector<float> p = params;
    p[i] = value;
    be.copy_to_device(model.params(), p.data(), n * sizeof(float));
    return mean_loss(be, model, b);
  };
  double max_grad = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const float up = params[i] + eps, down = params[i] - eps;
    const double numeric = (loss_at(i, up) - loss_at(i, down)) / (static_cast<double>(up) - down);
    const double tol = 1e-2 * std::max(std::abs(numeric), std::abs(double(grads[i]))) + 3e-4;
    EXPECT_NEAR(grads[i], numeric, tol) << "parameter " << i;
    max_grad = std::max(max_grad, std::abs(static_cast<double>(grads[i])));
  }
  be.copy_to_device(model.params(), params.data(), n * sizeof(float));
  EXPECT_GT(max_grad, 1e-2) << "gradients are suspiciously small";
}

// A token batch: rows windows of T ids (with repeats) and their next ids.
Batch token_batch(int rows, int tokens, int vocab, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(rows) * tokens), next(ids.size());
  for (auto& v : ids) v = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
  for (auto& v : next) v = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
  ids[1] = ids[0];  // a repeated id: its embedding row gathers both gradients
  return {id_input(ids), next, rows};
}

class SequenceTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend(BackendOptions{});
};

constexpr int kTokens = 5, kVocab = 7;
const std::string kGpt =
    "embed:8,pos,2*(res(ln,attn:2:causal),res(ln,dense:12,gelu:tanh,dense:8)),ln,dense:7";

TEST_F(SequenceTest, GptModelBackwardMatchesFiniteDifferences) {
  for (const std::string& spec : {kGpt, std::string("embed:8,pos,res(ln,attn:4),ln,dense:7")}) {
    SCOPED_TRACE(spec);
    Model model(*be_, parse_model_spec(spec), Shape{kTokens}, 3, kVocab);
    model.init(7);
    ASSERT_EQ(model.output_shape(), (Shape{kTokens, kVocab}));
    check_gradients(*be_, model, token_batch(3, kTokens, kVocab, 5));
  }
}

TEST_F(SequenceTest, VisionTransformerBackwardMatchesFiniteDifferences) {
  const std::string spec = "conv:6:2:2:0,seq,pos,res(ln,attn:2),res(ln,dense:8,gelu,dense:6),gap,dense:3";
  Model model(*be_, parse_model_spec(spec), Shape{2, 4, 4}, 3);
  model.init(3);
  ASSERT_EQ(model.layer(1).output_shape(), (Shape{4, 6}));  // 2x2 patches of 6 channels
  Batch b{uniform_floats(3 * 32, 9, -1.0, 1.0), {2, 0, 1}, 3};
  check_gradients(*be_, model, b);
}

TEST_F(SequenceTest, LayerNormOnFlatFeaturesBackward) {
  Model model(*be_, parse_model_spec("dense:6,ln,tanh,dense:3"), Shape{4}, 4);
  model.init(1);
  Batch b{uniform_floats(16, 2, -1.0, 1.0), {0, 2, 1, 2}, 4};
  check_gradients(*be_, model, b);
}

// Output position t must not move when a token after t changes; position
// t itself and later ones must.
TEST_F(SequenceTest, CausalAttentionIgnoresLaterTokens) {
  Model model(*be_, parse_model_spec(kGpt), Shape{kTokens}, 1, kVocab);
  model.init(11);
  std::vector<std::int32_t> ids = {1, 4, 2, 6, 3};
  const std::size_t width = kTokens * kVocab;
  std::vector<float> base(width), changed(width);
  be_->copy_to_host(base.data(), model.forward(id_input(ids).data(), 1), width * sizeof(float));
  ids[3] = 0;
  be_->copy_to_host(changed.data(), model.forward(id_input(ids).data(), 1), width * sizeof(float));
  for (std::size_t i = 0; i < 3 * kVocab; ++i) EXPECT_EQ(base[i], changed[i]) << "logit " << i;
  double moved = 0.0;
  for (std::size_t i = 3 * kVocab; i < width; ++i) moved += std::abs(base[i] - changed[i]);
  EXPECT_GT(moved, 1e-3);
}

// attn alone: y = out_proj(softmax(q kᵀ/√hd + mask) v), in double from the
// same weights, for a causal and a full mask.
TEST_F(SequenceTest, AttentionMatchesDoubleReference) {
  const int t = 4, d = 6, h = 2, hd = d / h, rows = 2;
  for (const bool causal : {false, true}) {
    std::vector<std::unique_ptr<Layer>> layers;
    const LayerSpec spec{"attn", causal ? std::vector<std::string>{"2", "causal"}
                                        : std::vector<std::string>{"2"}, "attn"};
    LayerBuilder builder;
    layers.push_back(builder.build(spec, Shape{t, d}));
    Model model(*be_, std::move(layers), Shape{t, d}, rows);
    const auto params = uniform_floats(model.num_params(), 3, -0.5, 0.5);
    be_->copy_to_device(model.params(), params.data(), params.size() * sizeof(float));
    const auto x = uniform_floats(static_cast<std::size_t>(rows) * t * d, 4, -1.0, 1.0);
    const float* y = model.forward(x.data(), rows);
    const float* w_in = params.data();
    const float* b_in = w_in + 3 * d * d;
    const float* w_out = b_in + 3 * d;
    const float* b_out = w_out + d * d;
    for (int n = 0; n < rows; ++n) {
      std::vector<double> qkv(static_cast<std::size_t>(t) * 3 * d), o(static_cast<std::size_t>(t) * d);
      for (int i = 0; i < t; ++i)
        for (int j = 0; j < 3 * d; ++j) {
          double s = b_in[j];
          for (int c = 0; c < d; ++c) s += double(w_in[j * d + c]) * x[(n * t + i) * d + c];
          qkv[i * 3 * d + j] = s;
        }
      for (int hh = 0; hh < h; ++hh)
        for (int i = 0; i < t; ++i) {
          std::vector<double> p(t, 0.0);
          double mx = -std::numeric_limits<double>::infinity(), sum = 0.0;
          for (int j = 0; j < (causal ? i + 1 : t); ++j) {
            double s = 0.0;
            for (int c = 0; c < hd; ++c) s += qkv[i * 3 * d + hh * hd + c] * qkv[j * 3 * d + d + hh * hd + c];
            p[j] = s / std::sqrt(double(hd));
            mx = std::max(mx, p[j]);
          }
          for (int j = 0; j < (causal ? i + 1 : t); ++j) sum += (p[j] = std::exp(p[j] - mx));
          for (int c = 0; c < hd; ++c) {
            double acc = 0.0;
            for (int j = 0; j < (causal ? i + 1 : t); ++j) acc += p[j] / sum * qkv[j * 3 * d + 2 * d + hh * hd + c];
            o[i * d + hh * hd + c] = acc;
          }
        }
      for (int i = 0; i < t; ++i)
        for (int j = 0; j < d; ++j) {
          double s = b_out[j];
          for (int c = 0; c < d; ++c) s += double(w_out[j * d + c]) * o[i * d + c];
          EXPECT_NEAR(y[(n * t + i) * d + j], s, 2e-6 * (1.0 + std::abs(s)))
              << (causal ? "causal " : "") << "row " << n << " position " << i << " feature " << j;
        }
    }
  }
}

// Repeated ids add their rows' gradients into one embedding row; ids that
// do not occur get exact zeros.
TEST_F(SequenceTest, EmbeddingGradientSumsRepeatedIds) {
  const std::vector<std::int32_t> ids = {2, 5, 2, 2, 0};
  const int dim = 3;
  const auto dy = uniform_floats(ids.size() * dim, 8, -1.0, 1.0);
  std::vector<float> dtable(6 * dim, 7.0f);
  be_->kernels<SequenceKernels>().embed_grad(ids.data(), dy.data(), static_cast<int>(ids.size()), 6,
                                             dim, dtable.data());
  for (int c = 0; c < dim; ++c) {
    EXPECT_FLOAT_EQ(dtable[2 * dim + c], (dy[0 * dim + c] + dy[2 * dim + c]) + dy[3 * dim + c]);
    EXPECT_EQ(dtable[1 * dim + c], 0.0f);
    EXPECT_EQ(dtable[5 * dim + c], dy[1 * dim + c]);
  }
}

// Ids reach the model as int32 bit patterns: exact above 2^24, where a
// float would round 2^24 + 1 to 2^24 (the file holds int32 windows).
TEST_F(SequenceTest, TokenIdsStayExactAbove2To24) {
  const std::string path = testing::scratch_dir("tokens") + "/big.h5";
  const std::int32_t big = (1 << 24) + 1, top = 2147483645;
  const std::vector<std::int32_t> windows = {big, 3, top, 7, big + 2, big};  // [2, 3]
  {
    h5::File f = h5::create_file(path, ExitCode::kOther);
    h5::write_array(f.get(), "/train/tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, {2, 3},
                    windows.data(), ExitCode::kOther);
    h5::DataSet d = h5::open_dataset(f.get(), "/train/tokens", ExitCode::kOther);
    h5::write_attr(d.get(), "vocab_size", std::int64_t{top} + 1, ExitCode::kOther);
  }
  Dataset ds(path, "train");
  ASSERT_TRUE(ds.info().tokens());
  EXPECT_EQ(ds.info().feature_type, FeatureType::kTokenId);
  EXPECT_EQ(ds.info().dim, 2u);
  EXPECT_EQ(ds.validate(0), top);
  std::vector<std::int32_t> ids(4), next(4);
  ds.read_rows(0, 2, ids.data(), next.data());
  EXPECT_EQ(ids, (std::vector<std::int32_t>{big, 3, 7, big + 2}));
  EXPECT_EQ(next, (std::vector<std::int32_t>{3, top, big + 2, big}));
  // Through the shard's float buffer and into the embedding: the row of
  // big + 2, not of a rounded id.
  std::vector<float> as_features(4);
  convert_features(FeatureType::kTokenId, ids.data(), ids.size(), as_features.data());
  std::vector<std::int32_t> back(4);
  std::memcpy(back.data(), as_features.data(), sizeof(float) * 4);
  EXPECT_EQ(back, ids);
  std::vector<float> table(static_cast<std::size_t>(big) + 3);
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i % 1000);
  float row = -1.0f;
  be_->kernels<SequenceKernels>().embed(back.data() + 3, table.data(), 1, 1, &row);
  EXPECT_EQ(row, static_cast<float>((big + 2) % 1000));
}

TEST_F(SequenceTest, RepetitionNamesCountOn) {
  const ModelLayout layout =
      model_layout(parse_model_spec("embed:8,pos,3*(res(ln,attn:2:causal)),ln,dense:7"), Shape{4}, 7);
  std::vector<std::string> names;
  for (const ParamInfo& p : layout.params) names.push_back(p.path());
  const std::vector<std::string> want = {
      "embed0/weight",          "pos0/weight",          "ln0/weight",       "ln0/bias",
      "attn0/in_proj_weight",   "attn0/in_proj_bias",   "attn0/out_proj/weight",
      "attn0/out_proj/bias",    "ln1/weight",           "ln1/bias",         "attn1/in_proj_weight",
      "attn1/in_proj_bias",     "attn1/out_proj/weight", "attn1/out_proj/bias", "ln2/weight",
      "ln2/bias",               "attn2/in_proj_weight", "attn2/in_proj_bias", "attn2/out_proj/weight",
      "attn2/out_proj/bias",    "ln3/weight",           "ln3/bias",         "dense0/weight",
      "dense0/bias"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(layout.output, (Shape{4, 7}));
}

// Each bad spec is a usage error whose message says what is wrong.
TEST_F(SequenceTest, BadSequenceSpecsAreUsageErrors) {
  struct Case {
    std::string spec;
    Shape input;
    int vocab;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"embed:8,attn:3,dense:7", Shape{4}, 7, "does not divide into 3 heads"},
      {"embed:8,bn,dense:7", Shape{4}, 7, "normalize sequences with ln"},
      {"dense:8,dense:7", Shape{4}, 7, "must begin with embed:D"},
      {"embed:8,dense:7", Shape{4}, 0, "token set"},
      {"attn:2,dense:3", Shape{8}, 0, "needs a sequence"},
      {"pos,dense:3", Shape{1, 4, 4}, 0, "needs a sequence"},
      {"seq,dense:3", Shape{6}, 0, "as a sequence"},
      {"embed:8,res(dense:4),dense:7", Shape{4}, 7, "must keep its shape"},
      {"ln,dense:3", Shape{1, 4, 4}, 0, "use bn on images"},
  };
  for (const Case& c : cases) {
    try {
      model_layout(parse_model_spec(c.spec), c.input, c.vocab);
      ADD_FAILURE() << c.spec << " built";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage) << c.spec;
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << c.spec << ": " << e.what();
    }
  }
  for (const std::string bad : {"0*(ln),dense:3", "2*ln,dense:3", "x*(ln),dense:3", "2*(),dense:3",
                                "attn:2:future,dense:3", "embed:0,dense:3"}) {
    try {
      parse_model_spec(bad);
      ADD_FAILURE() << bad << " parsed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage) << bad;
    }
  }
}

}  // namespace
}  // namespace dptrain

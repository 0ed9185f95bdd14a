// Implements: the spatial layers against PyTorch (Debian python3-torch):
// conv 2-D and 3-D (plain and blocked paths), max and average pooling,
// forward and backward on the same inputs and weights, torch computing in
// float64 (tests/support/torch_spatial.py); ours must lie within the float
// bound of the naive reference around torch's values. Skipped with a
// message when no Python here imports torch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "backends/cpu/cpu_backend.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "spatial_test_support.hpp"
#include "test_paths.hpp"

namespace dptrain {
namespace {

namespace ref = spatial_reference;

// The first of $PYTHON, python3 and Debian's own interpreter (where
// python3-torch installs) that imports torch; "" when none does.
const std::string& torch_python() {
  static const std::string found = [] {
    std::vector<std::string> candidates;
    if (const char* p = std::getenv("PYTHON")) candidates.push_back(p);
    candidates.push_back("python3");
    candidates.push_back("/usr/bin/python3");
    for (const std::string& py : candidates)
      if (std::system((py + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0) return py;
    return std::string();
  }();
  return found;
}

void write_f32(const std::string& path, const std::vector<float>& v) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
}

std::vector<double> read_f64(const std::string& path, std::size_t n) {
  std::vector<double> v(n);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 8));
  EXPECT_TRUE(in.good()) << path;
  return v;
}

// torch's values with the reference's magnitudes: the bound to hold.
ref::Values around(std::vector<double> torch_values, const ref::Values& reference) {
  ref::Values v = reference;
  v.value = std::move(torch_values);
  return v;
}

struct TorchCase {
  const char* token;
  Shape input;
  std::vector<int> args;  // conv: filters, kernel, stride, padding; pool: window, stride
};

ref::Geometry geometry_of(const TorchCase& c, bool conv) {
  ref::Geometry g;
  g.in_channels = c.input[0];
  g.out_channels = conv ? c.args[0] : c.input[0];
  const int first = c.input.rank() == 3 ? 1 : 0;
  for (int d = first; d < 3; ++d) {
    g.input[d] = c.input[d - first + 1];
    g.kernel[d] = conv ? c.args[1] : c.args[0];
    g.stride[d] = conv ? c.args[2] : c.args[1];
    g.padding[d] = conv ? c.args[3] : 0;
  }
  return g;
}

std::string joined(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// Our layer's passes on distinct inputs and parameters.
struct Result {
  std::string kind;
  bool conv = false;
  std::vector<float> x, dy, w, b, y, dx, dw, db;
};

Result run_ours(Backend& be, const TorchCase& c, int rows) {
  Result r;
  r.kind = std::string(c.token).substr(0, std::string(c.token).find(':'));
  r.conv = r.kind == "conv";
  const ref::Geometry g = geometry_of(c, r.conv);
  BoundLayer l(be, c.token, c.input, rows);
  r.x = distinct_floats(std::size_t(rows) * g.in_size(), 21);
  r.dy = distinct_floats(std::size_t(rows) * g.out_size(), 22);
  std::copy_n(distinct_floats(l.params.size(), 23).begin(), l.params.size(), l.params.begin());
  r.y.assign(r.dy.size(), NAN);  // NaN unless written
  r.dx.assign(r.x.size(), NAN);
  std::fill(l.grads.begin(), l.grads.end(), NAN);
  const ConstTensorView xv{r.x.data(), rows, c.input};
  const Shape out = l.layer->output_shape();
  l.layer->forward(be, xv, {r.y.data(), rows, out}, Mode::kTrain);
  if (r.conv) l.layer->backward_params(be, xv, {r.dy.data(), rows, out});
  l.layer->backward_input(be, xv, {r.y.data(), rows, out}, {r.dy.data(), rows, out},
                          {r.dx.data(), rows, c.input});
  r.w = l.param("weight");
  r.b = l.param("bias");
  r.dw = l.grad("weight");
  r.db = l.grad("bias");
  return r;
}

// Ours within the float bound around torch's float64 values.
void compare(const Result& r, const TorchCase& c, int rows, const std::string& dir) {
  const ref::Geometry g = geometry_of(c, r.conv);
  const std::string what = std::string(c.token) + " on " + c.input.to_string();
  const auto xd = to_double(r.x), dyd = to_double(r.dy);
  const int taps = g.taps();
  const auto torch_y = read_f64(dir + "/y.f64", r.y.size());
  const auto torch_dx = read_f64(dir + "/dx.f64", r.dx.size());
  if (r.conv) {
    const auto wd = to_double(r.w);
    const auto dwb = ref::conv_backward_weights(g, rows, xd, dyd);
    const int sums = rows * g.out_size() / g.out_channels;
    expect_within_bound(r.y, around(torch_y, ref::conv_forward(g, rows, xd, wd, to_double(r.b))),
                        g.in_channels * taps + 1, what + " y");
    expect_within_bound(r.dx, around(torch_dx, ref::conv_backward_data(g, rows, dyd, wd)),
                        g.out_channels * taps, what + " dx");
    expect_within_bound(r.dw, around(read_f64(dir + "/dw.f64", r.dw.size()), dwb[0]), sums,
                        what + " dweight");
    expect_within_bound(r.db, around(read_f64(dir + "/db.f64", r.db.size()), dwb[1]), sums,
                        what + " dbias");
  } else if (r.kind == "maxpool") {
    for (std::size_t i = 0; i < r.y.size(); ++i)
      ASSERT_EQ(double(r.y[i]), torch_y[i]) << what << " y[" << i << "]";
    expect_within_bound(r.dx, around(torch_dx, ref::max_pool_backward(g, rows, xd, dyd)), taps,
                        what + " dx");
  } else {
    expect_within_bound(r.y, around(torch_y, ref::avg_pool_forward(g, rows, xd)), taps + 1,
                        what + " y");
    expect_within_bound(r.dx, around(torch_dx, ref::avg_pool_backward(g, rows, dyd)), taps + 1,
                        what + " dx");
  }
}

TEST(TorchSpatial, LayersAgreeWithPyTorch) {
  if (torch_python().empty())
    GTEST_SKIP() << "no Python here imports torch ($PYTHON, python3, /usr/bin/python3); "
                    "install python3-torch to run this check";
  const TorchCase cases[] = {
      {"conv:4:3:2", Shape{3, 8, 7}, {4, 3, 2, 1}},
      {"conv:5:3:2:0", Shape{8, 7, 5}, {5, 3, 2, 0}},
      {"conv:3:3", Shape{2, 3, 4, 5}, {3, 3, 1, 1}},
      {"maxpool:3:2", Shape{3, 7, 5}, {3, 2}},
      {"avgpool:2", Shape{2, 7, 5}, {2, 2}},
      {"maxpool:2", Shape{2, 3, 4, 5}, {2, 2}},
  };
  auto be = make_cpu_backend(BackendOptions{});
  const std::string root = testing::scratch_dir("torch-spatial");
  const int rows = 3;
  std::vector<Result> results;
  std::ofstream list(root + "/cases.txt");
  for (const TorchCase& c : cases) {
    results.push_back(run_ours(*be, c, rows));
    const Result& r = results.back();
    const std::string dir = root + "/" + std::to_string(results.size());
    std::filesystem::create_directory(dir);
    write_f32(dir + "/x.f32", r.x);
    write_f32(dir + "/dy.f32", r.dy);
    if (r.conv) {
      write_f32(dir + "/w.f32", r.w);
      write_f32(dir + "/b.f32", r.b);
    }
    std::string shape;
    for (int i = 0; i < c.input.rank(); ++i) shape += (i ? "," : "") + std::to_string(c.input[i]);
    list << dir << " " << r.kind << " " << rows << " " << shape << " " << joined(c.args) << "\n";
  }
  list.close();
  const std::string cmd = torch_python() + " " + testing::source_dir() +
                          "/tests/support/torch_spatial.py " + root + "/cases.txt";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  for (std::size_t i = 0; i < results.size(); ++i)
    compare(results[i], cases[i], rows, root + "/" + std::to_string(i + 1));
}

}  // namespace
}  // namespace dptrain

// Implements: the probe of warp_strip_probe.hpp: one kernel that takes a
// WarpStrip through what the fused attention does with it (zero, the row
// map, a product from shared memory, a store, a scaling by row, a second
// product into the same accumulator, a store), and its host driver.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "backends/cuda/warp_strip.hpp"
#include "warp_strip_probe.hpp"

namespace gpu_test {
namespace {

using dptrain::cuda::kTileElements;
using dptrain::cuda::kWarpLanes;
using dptrain::cuda::WarpStrip;

using dptrain::cuda::to_elem;

// One warp. The operands are staged in shared memory as the attention
// kernels stage them: rows padded (16 bytes of bf16 or Tf32 keep wmma's
// pointers and strides legal), b's rows or its columns (BCol) contiguous.
template <typename E, bool BCol>
__global__ void strip_products_kernel(const float* a, const float* b, const float* factor, float* plain,
                                      float* scaled, float* twice) {
  constexpr int kPad = std::is_same_v<E, float> ? 1 : 16 / static_cast<int>(sizeof(E));
  constexpr int kLda = kStripDepth + kPad;
  constexpr int kLdb = (BCol ? kStripDepth : kStripWidth) + kPad;
  constexpr int kBRows = BCol ? kStripWidth : kStripDepth;
  alignas(32) __shared__ E sa[kStripRows * kLda];
  alignas(32) __shared__ E sb[kBRows * kLdb];
  alignas(32) __shared__ float row_numbers[kTileElements];
  __shared__ float row_factor[kStripRows];
  const int lane = static_cast<int>(threadIdx.x);
  for (int i = lane; i < kStripRows * kStripDepth; i += kWarpLanes)
    sa[i / kStripDepth * kLda + i % kStripDepth] = to_elem<E>(a[i]);
  for (int i = lane; i < kStripDepth * kStripWidth; i += kWarpLanes) {
    const int k = i / kStripWidth, j = i % kStripWidth;
    sb[BCol ? j * kLdb + k : k * kLdb + j] = to_elem<E>(b[i]);
  }
  for (int i = lane; i < kTileElements; i += kWarpLanes) row_numbers[i] = static_cast<float>(i / 16);
  if (lane < kStripRows) row_factor[lane] = factor[lane];
  __syncwarp();
  WarpStrip<E, kStripWidth> c;
  c.zero();
  c.load_row_map(row_numbers);
  c.template mma<BCol, kStripDepth>(sa, kLda, sb, kLdb);
  c.store(plain, kStripWidth);
  c.scale_rows(row_factor);
  c.store(scaled, kStripWidth);
  c.template mma<BCol, kStripDepth>(sa, kLda, sb, kLdb);
  c.store(twice, kStripWidth);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

struct DeviceFloats {
  explicit DeviceFloats(std::size_t n) : n(n) { check(cudaMalloc(&p, n * sizeof(float)), "cudaMalloc"); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  ~DeviceFloats() { cudaFree(p); }
  void put(const std::vector<float>& v) {
    check(cudaMemcpy(p, v.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy to the device");
  }
  std::vector<float> get() const {
    std::vector<float> v(n);
    check(cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy from the device");
    return v;
  }
  float* p = nullptr;
  std::size_t n;
};

template <typename E, bool BCol>
void launch(const DeviceFloats& a, const DeviceFloats& b, const DeviceFloats& factor, DeviceFloats& plain,
            DeviceFloats& scaled, DeviceFloats& twice) {
  strip_products_kernel<E, BCol><<<1, kWarpLanes>>>(a.p, b.p, factor.p, plain.p, scaled.p, twice.p);
}

}  // namespace

StripProducts warp_strip_products(int device, StripElement element, bool b_col_major,
                                  const std::vector<float>& a, const std::vector<float>& b,
                                  const std::vector<float>& factor) {
  const std::size_t out = std::size_t(kStripRows) * kStripWidth;
  if (a.size() != std::size_t(kStripRows) * kStripDepth ||
      b.size() != std::size_t(kStripDepth) * kStripWidth || factor.size() != std::size_t(kStripRows))
    throw std::invalid_argument("warp_strip_products: a is 16 x 32, b 32 x 32, factor 16");
  check(cudaSetDevice(device), "cudaSetDevice");
  DeviceFloats da(a.size()), db(b.size()), df(factor.size()), plain(out), scaled(out), twice(out);
  da.put(a);
  db.put(b);
  df.put(factor);
  const auto run = [&](auto e) {
    using E = decltype(e);
    if (b_col_major) launch<E, true>(da, db, df, plain, scaled, twice);
    else launch<E, false>(da, db, df, plain, scaled, twice);
  };
  if (element == StripElement::kBf16) run(__nv_bfloat16{});
  else if (element == StripElement::kTf32) run(dptrain::cuda::Tf32{});
  else run(float{});
  check(cudaGetLastError(), "the probe's launch");
  check(cudaDeviceSynchronize(), "the probe's kernel");
  return {plain.get(), scaled.get(), twice.get()};
}

}  // namespace gpu_test

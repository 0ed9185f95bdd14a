// Implements: a probe of WarpStrip (src/backends/cuda/warp_strip.hpp), the
// products that the fused attention's warps compute alone, run by one warp
// on the device (warp_strip_probe.cu); test_warp_strip.cpp checks what it
// returns.
#pragma once

#include <vector>

namespace gpu_test {

constexpr int kStripRows = 16, kStripDepth = 32, kStripWidth = 32;

struct StripProducts {
  std::vector<float> plain, scaled, twice;  // each kStripRows × kStripWidth, row-major
};

// On CUDA device `device`, one warp with a WarpStrip c of width
// kStripWidth: c = a · b, stored (plain); c's row r times factor[r],
// stored (scaled); c += a · b, stored (twice). a is kStripRows ×
// kStripDepth and b kStripDepth × kStripWidth, both row-major here; b
// reaches the strip row-major, or column-major (as Kᵀ does) where
// b_col_major. The element type: WarpStrip<float> (fp32 fused
// multiply-adds), or on the tensor cores WarpStrip<Tf32> or
// WarpStrip<__nv_bfloat16> (a and b must then be TF32 or bf16 values).
// Throws std::runtime_error naming the CUDA call that failed.
enum class StripElement { kFp32, kTf32, kBf16 };
StripProducts warp_strip_products(int device, StripElement element, bool b_col_major,
                                  const std::vector<float>& a, const std::vector<float>& b,
                                  const std::vector<float>& factor);

}  // namespace gpu_test

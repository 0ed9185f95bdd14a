// Implements: the table of GPU dense peaks (see dptrain/telemetry/device_peaks.hpp).
// Figures from NVIDIA's datasheets, dense (the sparse figures halved): the
// same parts and bf16 figures as the GPU check's MFU rows
// (tools/gpu-check-gpt.sh).
#include "dptrain/telemetry/device_peaks.hpp"

#include <array>
#include <cstdio>

namespace dptrain {
namespace {

struct DevicePeak {
  const char* name_part;  // found in CUDA's device name
  double fp32, tf32, bf16;
};

// Checked in order: the first part found in the name wins.
constexpr std::array<DevicePeak, 3> kPeaks{{
    {"H100", 66.9, 494.7, 989.4},  // H100 SXM
    {"H200", 66.9, 494.7, 989.4},  // H200 SXM (and GH200): H100's cores and clocks
    {"A100", 19.5, 156.0, 312.0},  // A100, SXM and PCIe
}};
// Parts of the same names whose clocks and power limits differ.
constexpr std::array<const char*, 2> kOtherParts{"PCIe", "NVL"};

bool contains(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kTf32: return "tf32";
    case Precision::kBf16: return "bf16";
    default: return "fp32";
  }
}

}  // namespace

double dense_peak_tflops(const std::string& device_name, Precision precision) {
  for (const DevicePeak& d : kPeaks) {
    if (!contains(device_name, d.name_part)) continue;
    // A100 PCIe has the SXM part's tensor-core peak; H100/H200 PCIe and NVL do not.
    if (!contains(d.name_part, "A100"))
      for (const char* other : kOtherParts)
        if (contains(device_name, other)) return 0.0;
    switch (precision) {
      case Precision::kTf32: return d.tf32;
      case Precision::kBf16: return d.bf16;
      default: return d.fp32;
    }
  }
  return 0.0;
}

std::string describe_peak(const std::string& device_name, Precision precision, double given) {
  char text[160];
  if (given > 0) {
    std::snprintf(text, sizeof text, "%g TFLOPS a device (--peak-tflops)", given);
    return text;
  }
  const double peak = dense_peak_tflops(device_name, precision);
  if (peak <= 0)
    return "no dense peak known for " + (device_name.empty() ? std::string("this device") : device_name) +
           " (--peak-tflops names one)";
  std::snprintf(text, sizeof text, "%g TFLOPS a device (%s, %s dense)", peak, device_name.c_str(),
                precision_name(precision));
  return text;
}

}  // namespace dptrain

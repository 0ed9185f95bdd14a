// Implements: what the CUDA runtime tells of the visible devices without
// making a backend — how many there are (and why none), and a device's UUID
// as nvidia-smi prints it. None of these touches a device it is not asked
// about.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "backends/cuda/cuda_backend.hpp"

namespace dptrain {

// cudaGetDeviceCount, or 0 and the reason. Clears the error, which is not
// sticky, so later runtime calls in the process are unaffected.
int cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    if (why)
      *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(rc) + ": " +
             cudaGetErrorString(rc);
    return 0;
  }
  if (n == 0 && why) *why = "cudaGetDeviceCount found 0 devices";
  return n;
}

int cuda_visible_devices() {
  try {
    return cuda_device_count(nullptr);
  } catch (...) {
    return 0;  // a device query must never end the process
  }
}

std::string cuda_device_uuid(int device) {
  try {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
      cudaGetLastError();
      return {};
    }
    const auto* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
    char text[64];
    std::snprintf(text, sizeof text,
                  "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                  u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                  u[14], u[15]);
    return text;
  } catch (...) {
    return {};
  }
}

}  // namespace dptrain

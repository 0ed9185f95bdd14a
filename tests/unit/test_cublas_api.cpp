// Implements: in a CUDA build, the check that the CUDA backend's cuBLAS and
// cuBLASLt entry points (src/backends/cuda/cublas_api.hpp) are not mapped
// until asked for, then load by their names from the toolkit's libraries:
// every function of the table found (the _v2 names cublas_v2.h maps to
// included), and the libraries mapped afterwards. No GPU is needed: only
// the libraries are loaded. In a build without CUDA there is nothing to test.
#include <gtest/gtest.h>

#include "dptrain/build_config.hpp"

#if DPTRAIN_HAVE_CUDA
#include <fstream>
#include <string>

#include "backends/cuda/cublas_api.hpp"

namespace {

bool mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(library) != std::string::npos) return true;
  return false;
}

TEST(CublasApi, LoadsEveryFunctionOnlyWhenAsked) {
  // This binary links no cuBLAS itself; nothing before this test makes a
  // CUDA backend.
  EXPECT_FALSE(mapped("libcublasLt.so")) << "cuBLASLt is mapped before anything asked for it";
  const dptrain::cuda::CublasApi& api = dptrain::cuda::cublas_api();
#define DPT_EXPECT_LOADED(name, type) EXPECT_NE(api.name##_, nullptr) << #name;
  DPT_CUBLAS_FUNCTIONS(DPT_EXPECT_LOADED)
  DPT_CUBLASLT_FUNCTIONS(DPT_EXPECT_LOADED)
#undef DPT_EXPECT_LOADED
  EXPECT_TRUE(mapped("libcublasLt.so"));
  EXPECT_TRUE(mapped("libcublas.so"));
  EXPECT_EQ(&api, &dptrain::cuda::cublas_api()) << "loaded once";
  // A library call that needs no GPU: a status's name.
  EXPECT_STREQ(api.cublasGetStatusName_(CUBLAS_STATUS_NOT_INITIALIZED),
               "CUBLAS_STATUS_NOT_INITIALIZED");
}

}  // namespace
#endif

// Implements: cublas_api (see cublas_api.hpp): dlopen of the cuBLAS and
// cuBLASLt libraries of the toolkit this build was made with (their
// sonames, from CMake), then dlsym of each function. The handles are never
// closed: the libraries stay for the process, as linked ones would.
#include "backends/cuda/cublas_api.hpp"

#include <dlfcn.h>

#include <string>

#include "dptrain/common/error.hpp"

namespace dptrain::cuda {
namespace {

#define DPT_CUBLAS_STRING2(x) #x
#define DPT_CUBLAS_STRING(x) DPT_CUBLAS_STRING2(x)

#if defined(DPTRAIN_EMULATED_DEVICE)
CublasApi load() {
  CublasApi api;
#define DPT_CUBLAS_TAKE(name, type) api.name##_ = static_cast<type>(&name);
  DPT_CUBLAS_FUNCTIONS(DPT_CUBLAS_TAKE)
  DPT_CUBLASLT_FUNCTIONS(DPT_CUBLAS_TAKE)
#undef DPT_CUBLAS_TAKE
  return api;
}
#else
void* open_library(const char* soname) {
  void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* why = dlerror();
    throw Error(ExitCode::kOther, std::string("the CUDA backend needs ") + soname +
                                      ", which cannot be loaded: " + (why ? why : "unknown") +
                                      " (is the CUDA Toolkit's library folder on the loader's "
                                      "path, e.g. LD_LIBRARY_PATH?)");
  }
  return h;
}

template <typename F>
void take(void* library, const char* soname, const char* symbol, F& field) {
  void* f = dlsym(library, symbol);
  if (!f)
    throw Error(ExitCode::kOther, std::string(soname) + " has no " + symbol +
                                      " (a cuBLAS older than this build's?)");
  field = reinterpret_cast<F>(f);
}

CublasApi load() {
  CublasApi api;
  void* lt = open_library(DPTRAIN_CUBLASLT_SONAME);
  void* blas = open_library(DPTRAIN_CUBLAS_SONAME);
#define DPT_CUBLAS_TAKE(name, type) take(blas, DPTRAIN_CUBLAS_SONAME, DPT_CUBLAS_STRING(name), api.name##_);
#define DPT_CUBLASLT_TAKE(name, type) take(lt, DPTRAIN_CUBLASLT_SONAME, DPT_CUBLAS_STRING(name), api.name##_);
  DPT_CUBLAS_FUNCTIONS(DPT_CUBLAS_TAKE)
  DPT_CUBLASLT_FUNCTIONS(DPT_CUBLASLT_TAKE)
#undef DPT_CUBLAS_TAKE
#undef DPT_CUBLASLT_TAKE
  return api;
}
#endif

}  // namespace

const CublasApi& cublas_api() {
  static const CublasApi api = load();  // a throw leaves it for the next call to retry
  return api;
}

}  // namespace dptrain::cuda

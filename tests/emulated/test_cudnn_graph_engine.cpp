// Implements: tests of the emulated cuDNN backend API's test engine
// (dptrain_emu::cudnn_graph_engines(), include/cudnn.h; cudnn_backend.cpp).
// With the switch on, the SDPA graphs of cudnn/sdpa_graphs.cpp get a plan
// through backend_graph.cpp's own calls (heuristics, engine configuration,
// numerical notes, plan, workspace size) and execute, leaving every output
// as it was — the engine computes nothing, so that a caller's check of
// cuDNN's results can be made to see a wrong one — and the execution is
// refused where a real cuDNN would refuse it (a tensor of the graph
// without a pointer, host memory for a device tensor, device memory for a
// by-value scalar, a misaligned pointer, no workspace). With it off (the
// default), the heuristics refuse and nothing executes, as before.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/cudnn/sdpa_graphs.hpp"
#include "cuda_runtime.h"
#include "cudnn.h"

namespace {

using dptrain::cuda::CudnnRefusal;
using dptrain::cuda::ExecutionPlan;
using dptrain::cuda::SdpaShape;

// Sets the switch for one test, however it ends.
struct Offering {
  Offering() { dptrain_emu::cudnn_graph_engines() = true; }
  ~Offering() { dptrain_emu::cudnn_graph_engines() = false; }
};

struct Handle {
  Handle() { EXPECT_EQ(cudnnCreate(&h), CUDNN_STATUS_SUCCESS); }
  ~Handle() { cudnnDestroy(h); }
  cudnnHandle_t h = nullptr;
};

// Device bytes filled with a pattern of their own.
struct Bytes {
  Bytes(std::size_t n, unsigned char seed) : pattern(n) {
    for (std::size_t i = 0; i < n; ++i) pattern[i] = static_cast<unsigned char>(seed + 7 * i);
    EXPECT_EQ(cudaMalloc(&p, n), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, pattern.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Bytes() { cudaFree(p); }
  bool unchanged() const {
    std::vector<unsigned char> now(pattern.size());
    EXPECT_EQ(cudaMemcpy(now.data(), p, now.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return now == pattern;
  }
  char* at(std::size_t offset) const { return static_cast<char*>(p) + offset; }
  std::vector<unsigned char> pattern;
  void* p = nullptr;
};

const SdpaShape kShape{1, 2, 8, 16, true};  // N, H, T, hd, causal

// The forward's memory: qkv [N, T, 3, H, hd] and o [N, T, H, hd] bf16, lse
// [N, H, T] fp32, the workspace; the scalars on the host.
struct Forward {
  std::size_t tokens = std::size_t(kShape.batch) * kShape.tokens;
  std::size_t model = std::size_t(kShape.heads) * kShape.head_dim;
  Bytes qkv{tokens * 3 * model * 2, 1}, o{tokens * model * 2, 2},
      lse{std::size_t(kShape.batch) * kShape.heads * kShape.tokens * 4, 3}, workspace{256, 4};
  float scale = 0.25f, mask = -INFINITY;

  std::vector<std::int64_t> uids() const {
    using namespace dptrain::cuda;
    return {kSdpaQ, kSdpaK, kSdpaV, kSdpaO, kSdpaStats, kSdpaScale, kSdpaMaskValue};
  }
  std::vector<void*> pointers() {
    const std::size_t bf16 = 2;
    return {qkv.at(dptrain::cuda::sdpa_qkv_offset(kShape, 0) * bf16),
            qkv.at(dptrain::cuda::sdpa_qkv_offset(kShape, 1) * bf16),
            qkv.at(dptrain::cuda::sdpa_qkv_offset(kShape, 2) * bf16),
            o.p,
            lse.p,
            &scale,
            &mask};
  }
};

ExecutionPlan forward_plan(cudnnHandle_t h) {
  return dptrain::cuda::sdpa_forward_plan(h, dptrain::cuda::sdpa_forward_graph(h, kShape));
}

// cudnnBackendExecute of plan with a variant pack of these.
cudnnStatus_t raw_execute(cudnnHandle_t h, const ExecutionPlan& plan, std::vector<std::int64_t> uids,
                      std::vector<void*> pointers, void* workspace) {
  cudnnBackendDescriptor_t pack = nullptr;
  EXPECT_EQ(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                     std::int64_t(uids.size()), uids.data()),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                     CUDNN_TYPE_VOID_PTR, std::int64_t(pointers.size()),
                                     pointers.data()),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
                                     1, &workspace),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnBackendFinalize(pack), CUDNN_STATUS_SUCCESS);
  const cudnnStatus_t rc = cudnnBackendExecute(h, plan.plan.get(), pack);
  cudnnBackendDestroyDescriptor(pack);
  return rc;
}

std::string last_error() {
  char text[512] = {};
  cudnnGetLastErrorString(text, sizeof text);
  return text;
}

TEST(CudnnGraphEngine, OffersOneEngineThatComputesNothing) {
  Offering offering;
  Handle h;
  ExecutionPlan plan = forward_plan(h.h);
  EXPECT_EQ(plan.workspace_bytes, 256);
  // The backward's plan asks for a deterministic engine: the engine, its
  // index and its numerical notes are read (there are none). (make_plan
  // reads the engine only then: the forward's plan.engine stays -1.)
  ExecutionPlan backward = dptrain::cuda::sdpa_backward_plan(
      h.h, dptrain::cuda::sdpa_backward_graph(h.h, kShape));
  EXPECT_EQ(backward.workspace_bytes, 256);
  EXPECT_EQ(backward.engine, 0);

  Forward f;
  EXPECT_NO_THROW(dptrain::cuda::execute(h.h, plan, f.uids(), f.pointers(), f.workspace.p));
  EXPECT_TRUE(f.o.unchanged()) << "the test engine wrote o";
  EXPECT_TRUE(f.lse.unchanged()) << "the test engine wrote lse";
  EXPECT_TRUE(f.qkv.unchanged());
  EXPECT_TRUE(f.workspace.unchanged());
}

TEST(CudnnGraphEngine, ExecuteRefusesWhatCudnnWould) {
  Offering offering;
  Handle h;
  const ExecutionPlan plan = forward_plan(h.h);
  Forward f;
  EXPECT_EQ(raw_execute(h.h, plan, f.uids(), f.pointers(), f.workspace.p), CUDNN_STATUS_SUCCESS);

  EXPECT_EQ(raw_execute(nullptr, plan, f.uids(), f.pointers(), f.workspace.p),
            CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
  EXPECT_EQ(raw_execute(h.h, plan, f.uids(), f.pointers(), nullptr), CUDNN_STATUS_BAD_PARAM);
  EXPECT_NE(last_error().find("workspace"), std::string::npos);

  auto uids = f.uids();
  auto pointers = f.pointers();
  uids.erase(uids.begin() + 4);  // no lse
  pointers.erase(pointers.begin() + 4);
  EXPECT_EQ(raw_execute(h.h, plan, uids, pointers, f.workspace.p), CUDNN_STATUS_BAD_PARAM);
  EXPECT_NE(last_error().find("uid " + std::to_string(dptrain::cuda::kSdpaStats)),
            std::string::npos)
      << last_error();

  pointers = f.pointers();
  pointers[3] = nullptr;  // o
  EXPECT_EQ(raw_execute(h.h, plan, f.uids(), pointers, f.workspace.p),
            CUDNN_STATUS_BAD_PARAM_NULL_POINTER);

  std::vector<unsigned char> host(f.o.pattern.size() + 16);
  pointers = f.pointers();
  pointers[3] = host.data() + (16 - reinterpret_cast<std::uintptr_t>(host.data()) % 16);
  EXPECT_EQ(raw_execute(h.h, plan, f.uids(), pointers, f.workspace.p),
            CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND);
  EXPECT_NE(last_error().find("uid " + std::to_string(dptrain::cuda::kSdpaO)), std::string::npos)
      << last_error();

  pointers = f.pointers();
  pointers[0] = f.qkv.at(2);  // q one bf16 off its declared 16-byte alignment
  EXPECT_EQ(raw_execute(h.h, plan, f.uids(), pointers, f.workspace.p),
            CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER);

  pointers = f.pointers();
  pointers[5] = f.workspace.p;  // the scale by value, given in device memory
  EXPECT_EQ(raw_execute(h.h, plan, f.uids(), pointers, f.workspace.p), CUDNN_STATUS_BAD_PARAM);
  EXPECT_NE(last_error().find("by value"), std::string::npos) << last_error();

  EXPECT_TRUE(f.o.unchanged());
  EXPECT_TRUE(f.lse.unchanged());
}

TEST(CudnnGraphEngine, OffNoEngineAsBefore) {
  ASSERT_FALSE(dptrain_emu::cudnn_graph_engines());
  Handle h;
  try {
    forward_plan(h.h);
    FAIL() << "a plan without engines";
  } catch (const CudnnRefusal& e) {
    EXPECT_NE(std::string(e.what()).find("no engines"), std::string::npos) << e.what();
  }
  // A plan made while offering does not execute once the switch is off.
  ExecutionPlan plan;
  {
    Offering offering;
    plan = forward_plan(h.h);
  }
  Forward f;
  EXPECT_EQ(raw_execute(h.h, plan, f.uids(), f.pointers(), f.workspace.p),
            CUDNN_STATUS_NOT_SUPPORTED);
}

}  // namespace

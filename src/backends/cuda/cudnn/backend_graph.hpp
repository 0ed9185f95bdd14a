// Implements: the cuDNN backend (graph) API of cudnn_graph.h in a few
// helpers (internal to src/backends/cuda/cudnn/): an owner of one backend
// descriptor, a builder of an operation graph from tensors and operations
// (pointwise, reduction, matmul, reshape), the execution plan of the first
// engine the heuristics offer that finalizes (optionally skipping engines
// that note themselves non-deterministic), and its execution. Building is
// allowed to fail: a refusal of cuDNN's while a graph or plan is made is a
// CudnnRefusal naming the call and cuDNN's reason, which the caller turns
// into a fallback; a failure to execute a plan cuDNN accepted is an Error.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace dptrain::cuda {

// cuDNN said no while a graph or plan was made.
struct CudnnRefusal : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class BackendDescriptor {
 public:
  BackendDescriptor() = default;
  explicit BackendDescriptor(cudnnBackendDescriptorType_t type);
  ~BackendDescriptor();
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;
  BackendDescriptor(BackendDescriptor&& o) noexcept;
  BackendDescriptor& operator=(BackendDescriptor&& o) noexcept;

  cudnnBackendDescriptor_t get() const noexcept { return d_; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           std::int64_t count, const void* values);
  void set_int(cudnnBackendAttributeName_t name, std::int64_t value) {
    set(name, CUDNN_TYPE_INT64, 1, &value);
  }
  void set_type(cudnnBackendAttributeName_t name, cudnnDataType_t value) {
    set(name, CUDNN_TYPE_DATA_TYPE, 1, &value);
  }
  void set_descriptor(cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value) {
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
  }
  void finalize();

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// A tensor of 4 dimensions: the batch N, the heads H, then rows and columns.
using Dims = std::array<std::int64_t, 4>;
// The packed (row-major) strides of dims.
Dims packed_strides(const Dims& dims);

class GraphBuilder {
 public:
  // A tensor the caller binds to memory at execution, by uid.
  cudnnBackendDescriptor_t io_tensor(std::int64_t uid, const Dims& dims, const Dims& strides,
                                     cudnnDataType_t type);
  // A scalar [1,1,1,1] passed by value (its address on the host at
  // execution); one descriptor per uid, however often it is asked for.
  cudnnBackendDescriptor_t scalar_by_value(std::int64_t uid, cudnnDataType_t type);
  // An intermediate that never reaches memory, packed, with a fresh uid.
  cudnnBackendDescriptor_t virtual_tensor(const Dims& dims, cudnnDataType_t type);
  // As above with given strides (a transposed view made by reshape).
  cudnnBackendDescriptor_t virtual_tensor(const Dims& dims, const Dims& strides,
                                          cudnnDataType_t type);

  // y = mode(x[, b][, t]), computed in math_type; axis for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math_type, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y,
                 cudnnBackendDescriptor_t t = nullptr, std::int64_t axis = -1);
  // y = the reduction of x over the dimensions where y has extent 1, in fp32.
  void reduction(cudnnReduceTensorOp_t op, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y);
  // c = a b over the last two dimensions, batched over the first two, fp32 sums.
  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c);
  // y = x with y's dimensions and strides (here: a transpose).
  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y);

  // The finalized operation graph of every operation added, in order.
  BackendDescriptor finalize(cudnnHandle_t handle);

 private:
  cudnnBackendDescriptor_t tensor(std::int64_t uid, const Dims& dims, const Dims& strides,
                                  cudnnDataType_t type, bool is_virtual, bool by_value);
  cudnnBackendDescriptor_t keep(BackendDescriptor d);

  std::vector<std::unique_ptr<BackendDescriptor>> owned_;  // tensors, operators
  std::vector<cudnnBackendDescriptor_t> operations_;
  std::map<std::int64_t, cudnnBackendDescriptor_t> scalars_;  // by uid
  std::int64_t next_virtual_uid_ = 1 << 20;  // far above the callers' uids
};

// A finalized operation graph and the descriptors it was made of.
struct OperationGraph {
  std::unique_ptr<GraphBuilder> tensors;
  BackendDescriptor graph;
};

// A finalized graph and the plan cuDNN chose for it.
struct ExecutionPlan {
  OperationGraph graph;
  BackendDescriptor plan;
  std::int64_t workspace_bytes = 0;
  std::int64_t engine = -1;  // cuDNN's global index of the engine (where asked)
  bool noted_nondeterministic = false;  // its numerical notes say NONDETERMINISTIC
};

// The plan of the first engine that cuDNN's heuristics (mode A, then the
// fallback list) offer for graph and that finalizes; CudnnRefusal where
// there is none (the reason: the last refusal). deterministic: the engines
// whose numerical notes say NONDETERMINISTIC are tried only after every
// other (the plan then says so; cudnn-frontend, which asks for determinism
// by the graph's shape, reads no notes, so a note alone refuses nothing).
ExecutionPlan make_plan(cudnnHandle_t handle, OperationGraph graph, bool deterministic);

// One execution of plan on the handle's stream: uids[i] bound to
// pointers[i] (device memory, or host memory for by-value scalars).
void execute(cudnnHandle_t handle, const ExecutionPlan& plan,
             const std::vector<std::int64_t>& uids, const std::vector<void*>& pointers,
             void* workspace);

}  // namespace dptrain::cuda

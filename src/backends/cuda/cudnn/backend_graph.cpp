// Implements: the cuDNN backend-API helpers of backend_graph.hpp.
#include "backends/cuda/cudnn/backend_graph.hpp"

#include <string>
#include <utility>

#include "backends/cuda/cudnn/cudnn_handles.hpp"

namespace dptrain::cuda {
namespace {

// A call made while building: a refusal becomes CudnnRefusal.
void check_building(cudnnStatus_t rc, const char* what) {
  if (rc != CUDNN_STATUS_SUCCESS)
    throw CudnnRefusal(std::string(what) + ": " + cudnnGetErrorString(rc) + cudnn_last_error());
}

// The handle attributes are deprecated in cuDNN 9 (the handle of
// cudnnBackendExecute is used) but still taken; setting them keeps the
// heuristics' device that of the backend's handle on every 9.x.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
constexpr cudnnBackendAttributeName_t kGraphHandle = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
constexpr cudnnBackendAttributeName_t kPlanHandle = CUDNN_ATTR_EXECUTION_PLAN_HANDLE;
#pragma GCC diagnostic pop

}  // namespace

BackendDescriptor::BackendDescriptor(cudnnBackendDescriptorType_t type) {
  check_building(cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor");
}
BackendDescriptor::~BackendDescriptor() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
}
BackendDescriptor::BackendDescriptor(BackendDescriptor&& o) noexcept
    : d_(std::exchange(o.d_, nullptr)) {}
BackendDescriptor& BackendDescriptor::operator=(BackendDescriptor&& o) noexcept {
  if (this != &o) {
    if (d_) cudnnBackendDestroyDescriptor(d_);
    d_ = std::exchange(o.d_, nullptr);
  }
  return *this;
}
void BackendDescriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                            std::int64_t count, const void* values) {
  const cudnnStatus_t rc = cudnnBackendSetAttribute(d_, name, type, count, values);
  if (rc != CUDNN_STATUS_SUCCESS)
    throw CudnnRefusal("cudnnBackendSetAttribute(" + std::to_string(name) +
                       "): " + cudnnGetErrorString(rc) + cudnn_last_error());
}
void BackendDescriptor::finalize() { check_building(cudnnBackendFinalize(d_), "cudnnBackendFinalize"); }

Dims packed_strides(const Dims& dims) {
  Dims s{};
  std::int64_t step = 1;
  for (int i = 3; i >= 0; --i) {
    s[static_cast<std::size_t>(i)] = step;
    step *= dims[static_cast<std::size_t>(i)];
  }
  return s;
}

cudnnBackendDescriptor_t GraphBuilder::keep(BackendDescriptor d) {
  owned_.push_back(std::make_unique<BackendDescriptor>(std::move(d)));
  return owned_.back()->get();
}

cudnnBackendDescriptor_t GraphBuilder::tensor(std::int64_t uid, const Dims& dims,
                                              const Dims& strides, cudnnDataType_t type,
                                              bool is_virtual, bool by_value) {
  BackendDescriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set_type(CUDNN_ATTR_TENSOR_DATA_TYPE, type);
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
  t.set_int(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid);
  t.set_int(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16);
  if (is_virtual) t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  if (by_value) t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
  t.finalize();
  return keep(std::move(t));
}

cudnnBackendDescriptor_t GraphBuilder::io_tensor(std::int64_t uid, const Dims& dims,
                                                 const Dims& strides, cudnnDataType_t type) {
  return tensor(uid, dims, strides, type, false, false);
}
cudnnBackendDescriptor_t GraphBuilder::scalar_by_value(std::int64_t uid, cudnnDataType_t type) {
  const auto made = scalars_.find(uid);
  if (made != scalars_.end()) return made->second;
  const Dims one{1, 1, 1, 1};
  return scalars_[uid] = tensor(uid, one, one, type, false, true);
}
cudnnBackendDescriptor_t GraphBuilder::virtual_tensor(const Dims& dims, cudnnDataType_t type) {
  return virtual_tensor(dims, packed_strides(dims), type);
}
cudnnBackendDescriptor_t GraphBuilder::virtual_tensor(const Dims& dims, const Dims& strides,
                                                      cudnnDataType_t type) {
  return tensor(next_virtual_uid_++, dims, strides, type, true, false);
}

void GraphBuilder::pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math_type,
                             cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                             cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t t,
                             std::int64_t axis) {
  BackendDescriptor op_desc(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  op_desc.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  op_desc.set_type(CUDNN_ATTR_POINTWISE_MATH_PREC, math_type);
  if (axis >= 0) op_desc.set_int(CUDNN_ATTR_POINTWISE_AXIS, axis);
  op_desc.finalize();
  BackendDescriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, op_desc.get());
  op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (b) op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
  if (t) op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
  op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  op.finalize();
  keep(std::move(op_desc));
  operations_.push_back(keep(std::move(op)));
}

void GraphBuilder::reduction(cudnnReduceTensorOp_t reduce, cudnnBackendDescriptor_t x,
                             cudnnBackendDescriptor_t y) {
  BackendDescriptor op_desc(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  op_desc.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce);
  op_desc.set_type(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT);
  op_desc.finalize();
  BackendDescriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_DESC, op_desc.get());
  op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
  op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
  op.finalize();
  keep(std::move(op_desc));
  operations_.push_back(keep(std::move(op)));
}

void GraphBuilder::matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                          cudnnBackendDescriptor_t c) {
  BackendDescriptor op_desc(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  op_desc.set_type(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT);
  op_desc.finalize();
  BackendDescriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
  op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
  op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
  op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_DESC, op_desc.get());
  op.finalize();
  keep(std::move(op_desc));
  operations_.push_back(keep(std::move(op)));
}

void GraphBuilder::reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
  BackendDescriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
  op.set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
  op.finalize();
  operations_.push_back(keep(std::move(op)));
}

BackendDescriptor GraphBuilder::finalize(cudnnHandle_t handle) {
  BackendDescriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(kGraphHandle, CUDNN_TYPE_HANDLE, 1, &handle);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
            static_cast<std::int64_t>(operations_.size()), operations_.data());
  graph.finalize();
  return graph;
}

namespace {

// The engine configurations cuDNN's heuristics of mode offer for graph.
std::vector<BackendDescriptor> heuristic_configs(const BackendDescriptor& graph,
                                                 cudnnBackendHeurMode_t mode) {
  BackendDescriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set_descriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph.get());
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  heur.finalize();
  std::int64_t count = 0;
  check_building(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
                 "engine heuristics' count");
  std::vector<BackendDescriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (std::int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  std::int64_t got = 0;
  check_building(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()),
                 "engine heuristics' results");
  configs.resize(static_cast<std::size_t>(got));
  return configs;
}

// Whether config's engine notes itself non-deterministic; its global index.
bool nondeterministic(const BackendDescriptor& config, std::int64_t* index) {
  BackendDescriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  std::int64_t n = 0;
  cudnnBackendDescriptor_t e = engine.get();
  check_building(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e),
                 "engine of a configuration");
  check_building(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                          &n, index),
                 "engine index");
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  check_building(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                          CUDNN_TYPE_NUMERICAL_NOTE,
                                          CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes),
                 "engine numerical notes");
  for (std::int64_t i = 0; i < n; ++i)
    if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return true;
  return false;
}

}  // namespace

ExecutionPlan make_plan(cudnnHandle_t handle, OperationGraph graph, bool deterministic) {
  std::string why = "the heuristics offered no engine";
  // Deterministic: the engines without the note in a first round, the
  // others in a second.
  for (int round = 0; round < (deterministic ? 2 : 1); ++round) {
    for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      std::vector<BackendDescriptor> configs;
      try {
        configs = heuristic_configs(graph.graph, mode);
      } catch (const CudnnRefusal& e) {
        why = e.what();
        continue;
      }
      for (const BackendDescriptor& config : configs) {
        try {
          std::int64_t engine = -1;
          const bool noted = deterministic && nondeterministic(config, &engine);
          if (noted != (round == 1)) continue;
          BackendDescriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
          plan.set(kPlanHandle, CUDNN_TYPE_HANDLE, 1, &handle);
          plan.set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config.get());
          plan.finalize();
          std::int64_t bytes = 0, n = 0;
          check_building(
              cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                       CUDNN_TYPE_INT64, 1, &n, &bytes),
              "plan workspace size");
          return {std::move(graph), std::move(plan), bytes, engine, noted};
        } catch (const CudnnRefusal& e) {
          why = e.what();
        }
      }
    }
  }
  throw CudnnRefusal(why);
}

void execute(cudnnHandle_t handle, const ExecutionPlan& plan,
             const std::vector<std::int64_t>& uids, const std::vector<void*>& pointers,
             void* workspace) {
  BackendDescriptor pack;
  try {
    pack = BackendDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
             static_cast<std::int64_t>(uids.size()), uids.data());
    pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
             static_cast<std::int64_t>(pointers.size()), pointers.data());
    pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    pack.finalize();
  } catch (const CudnnRefusal& e) {
    throw Error(ExitCode::kOther, std::string("cuDNN variant pack: ") + e.what());
  }
  DPT_CUDNN_CHECK(cudnnBackendExecute(handle, plan.plan.get(), pack.get()));
}

}  // namespace dptrain::cuda

// Implements: the emulated cuDNN backend API's descriptor store
// (cudnn_backend.cpp), shared with its test engine (cudnn_test_engine.cpp):
// a descriptor with its attributes as set, and what finalizing it recorded
// for execution (the tensors of its graph, the engine behind it).
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "cudnn_emulated.hpp"

namespace dptrain_emu::cudnn_graph {

// The test engine's global index and its plans' workspace.
constexpr std::int64_t kEngineIndex = 0;
constexpr std::int64_t kWorkspaceBytes = 256;

// A tensor descriptor as finalized, for the checks of execution.
struct Tensor {
  std::int64_t uid = 0;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  std::vector<std::int64_t> dims, strides;
  std::int64_t alignment = 0;
  bool is_virtual = false, by_value = false;
  bool written = false;  // an operation of the graph writes it
};
using Tensors = std::map<std::int64_t, Tensor>;  // by uid

// The test engine for one graph: the graph's tensors.
struct Engine {
  std::int64_t index = kEngineIndex;
  Tensors tensors;
};

// A descriptor given as an attribute, as it was when given (a real cuDNN
// copies what it needs then, so the caller may destroy it afterwards).
struct Named {
  cudnnBackendDescriptorType_t type = CUDNN_BACKEND_TENSOR_DESCRIPTOR;
  Tensors tensors;
  std::shared_ptr<const Engine> engine;
};

struct BackendDescriptor {
  cudnnBackendDescriptorType_t type = CUDNN_BACKEND_TENSOR_DESCRIPTOR;
  bool finalized = false;
  std::map<int, std::vector<unsigned char>> attributes;  // the values' bytes
  std::map<int, cudnnBackendAttributeType_t> types;      // the values' types
  std::map<int, std::vector<Named>> named;               // descriptor-typed attributes
  Tensors tensors;  // once finalized: itself (a tensor), or those of what it names
  std::shared_ptr<const Engine> engine;  // heuristics, configurations, engines, plans
};

// The live descriptor d points to, or null for a stale or foreign pointer.
BackendDescriptor* find(cudnnBackendDescriptor_t d);

// The bytes of one value of an attribute type (0: not a known type).
std::size_t value_bytes(cudnnBackendAttributeType_t type);

// The values of attribute name as T (empty where it was not set).
template <typename T>
std::vector<T> values(const BackendDescriptor& d, int name) {
  const auto it = d.attributes.find(name);
  if (it == d.attributes.end()) return {};
  std::vector<T> v(it->second.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), it->second.data(), v.size() * sizeof(T));
  return v;
}

// The test engine's answer to cudnnBackendGetAttribute (the switch on).
cudnnStatus_t get_attribute(BackendDescriptor* d, cudnnBackendAttributeName_t name,
                            cudnnBackendAttributeType_t type, int64_t requested, int64_t* count,
                            void* elements);

}  // namespace dptrain_emu::cudnn_graph

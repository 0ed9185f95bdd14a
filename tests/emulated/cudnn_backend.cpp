// Implements: the emulated cuDNN's backend (graph) API (include/cudnn.h):
// a store of descriptors and their attributes, held to the rules of
// cudnn_graph.h that do not need an engine — a known descriptor type, a
// descriptor set only before it is finalized, attribute values of a known
// type and a non-negative count, descriptors given as attributes already
// finalized — and no engines. Asking the heuristics for an engine
// (finalizing an ENGINEHEUR descriptor) is CUDNN_STATUS_NOT_SUPPORTED with
// a last-error message saying so, as a real cuDNN answers for a graph no
// engine of the GPU runs; so an execution plan never finalizes and nothing
// executes. cudnn/sdpa_graphs.cpp's graphs are built here up to that
// point (every descriptor and attribute it sets), and the fused attention
// fallback of cudnn/cudnn_attention_kernels.cpp runs.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cudnn_emulated.hpp"

using dptrain_emu::cudnn::refuse;

namespace {

struct BackendDescriptor {
  cudnnBackendDescriptorType_t type = CUDNN_BACKEND_TENSOR_DESCRIPTOR;
  bool finalized = false;
  std::map<int, std::vector<unsigned char>> attributes;  // the values' bytes
};

// Every live descriptor, so that a stale or foreign pointer is refused.
std::set<const void*>& live() {
  static std::set<const void*> descriptors;
  return descriptors;
}

BackendDescriptor* find(cudnnBackendDescriptor_t d) {
  return live().count(d) ? static_cast<BackendDescriptor*>(d) : nullptr;
}

std::size_t value_bytes(cudnnBackendAttributeType_t type) {
  switch (type) {
    case CUDNN_TYPE_HANDLE:
    case CUDNN_TYPE_VOID_PTR:
    case CUDNN_TYPE_BACKEND_DESCRIPTOR:
      return sizeof(void*);
    case CUDNN_TYPE_BOOLEAN:
      return sizeof(bool);
    case CUDNN_TYPE_INT64:
    case CUDNN_TYPE_DOUBLE:
      return 8;
    case CUDNN_TYPE_FLOAT:
      return sizeof(float);
    case CUDNN_TYPE_DATA_TYPE:
    case CUDNN_TYPE_HEUR_MODE:
    case CUDNN_TYPE_NUMERICAL_NOTE:
    case CUDNN_TYPE_POINTWISE_MODE:
    case CUDNN_TYPE_REDUCTION_OPERATOR_TYPE:
      return sizeof(int);
  }
  return 0;
}

}  // namespace

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                           cudnnBackendDescriptor_t* descriptor) {
  if (!descriptor) return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "no place for the descriptor");
  auto* d = new BackendDescriptor;
  d->type = type;
  live().insert(d);
  *descriptor = d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  BackendDescriptor* d = find(descriptor);
  if (!d) return refuse(CUDNN_STATUS_BAD_PARAM, "destroy: not a live backend descriptor");
  live().erase(d);
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count,
                                       const void* elements) {
  BackendDescriptor* d = find(descriptor);
  if (!d) return refuse(CUDNN_STATUS_BAD_PARAM, "set attribute: not a live backend descriptor");
  if (d->finalized)
    return refuse(CUDNN_STATUS_BAD_PARAM,
                  "set attribute " + std::to_string(name) + " of a finalized descriptor");
  const std::size_t bytes = value_bytes(type);
  if (!bytes || count < 0 || (count > 0 && !elements))
    return refuse(CUDNN_STATUS_BAD_PARAM,
                  "attribute " + std::to_string(name) + ": type " + std::to_string(type) +
                      ", " + std::to_string(count) + " elements");
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    const auto* given = static_cast<const cudnnBackendDescriptor_t*>(elements);
    for (int64_t i = 0; i < count; ++i) {
      const BackendDescriptor* g = find(given[i]);
      if (!g || !g->finalized)
        return refuse(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED,
                      "attribute " + std::to_string(name) + "[" + std::to_string(i) +
                          "]: not a finalized backend descriptor");
    }
  }
  const auto* first = static_cast<const unsigned char*>(elements);
  d->attributes[name].assign(first, first + bytes * static_cast<std::size_t>(count));
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  BackendDescriptor* d = find(descriptor);
  if (!d) return refuse(CUDNN_STATUS_BAD_PARAM, "finalize: not a live backend descriptor");
  if (d->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED,
                  "the host emulation of cuDNN has no engines for backend graphs");
  if (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, "the host emulation of cuDNN has no engines");
  d->finalized = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t, int64_t, int64_t*, void*) {
  const BackendDescriptor* d = find(descriptor);
  if (!d) return refuse(CUDNN_STATUS_BAD_PARAM, "get attribute: not a live backend descriptor");
  return refuse(CUDNN_STATUS_NOT_SUPPORTED,
                "get attribute " + std::to_string(name) +
                    ": the host emulation of cuDNN has no engines, heuristics or plans");
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t, cudnnBackendDescriptor_t,
                                  cudnnBackendDescriptor_t) {
  return refuse(CUDNN_STATUS_NOT_SUPPORTED,
                "execute: the host emulation of cuDNN has no execution plans");
}

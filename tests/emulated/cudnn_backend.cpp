// Implements: the emulated cuDNN's backend (graph) API (include/cudnn.h):
// a store of descriptors and their attributes, held to the rules of
// cudnn_graph.h that do not need an engine — a known descriptor type, a
// descriptor set only before it is finalized, attribute values of a known
// type and a non-negative count, descriptors given as attributes already
// finalized — and, by default, no engines. Asking the heuristics for an engine
// (finalizing an ENGINEHEUR descriptor) is CUDNN_STATUS_NOT_SUPPORTED with
// a last-error message saying so, as a real cuDNN answers for a graph no
// engine of the GPU runs; so an execution plan never finalizes and nothing
// executes. cudnn/sdpa_graphs.cpp's graphs are built here up to that
// point (every descriptor and attribute it sets), and the fused attention
// fallback of cudnn/cudnn_attention_kernels.cpp runs.
//
// A test switch, dptrain_emu::cudnn_graph_engines() (include/cudnn.h,
// false unless a test sets it), makes the heuristics offer one engine for
// every graph: the configuration and engine descriptors the caller creates
// are filled in (its global index kEngineIndex, no numerical notes, so it
// counts as deterministic), its execution plan finalizes with a workspace
// of kWorkspaceBytes (cudnnBackendGetAttribute answers ENGINEHEUR_RESULTS,
// ENGINECFG_ENGINE, ENGINE_GLOBAL_INDEX, ENGINE_NUMERICAL_NOTE and
// EXECUTION_PLAN_WORKSPACE_SIZE as cudnn_graph.h defines them, and gives
// back any other attribute as set but descriptor-typed ones, of finalized
// descriptors only), and cudnnBackendExecute checks the call — handle,
// plan and variant pack finalized and of their types, a non-null pointer
// for every non-virtual tensor of the graph by its uid, device memory
// spanning the tensor inside one allocation at its declared alignment,
// host memory for by-value scalars, a device workspace of the plan's size —
// and then COMPUTES NOTHING: every output tensor (and the workspace) is
// left as it was (or, with dptrain_emu::cudnn_graph_execution_varies(),
// filled with a byte pattern that changes with every execution). The
// engine exists only so that tests can reach the callers' checks of
// cuDNN's results (a wrong result must make them fall back); it says
// nothing about what a real engine computes. The engine's answers and its
// checks of an execution are in cudnn_test_engine.cpp; the descriptor store
// both use is cudnn_backend_store.hpp.
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cudnn_backend_store.hpp"

using dptrain_emu::cudnn::refuse;
using namespace dptrain_emu::cudnn_graph;

namespace {

// Every live descriptor, so that a stale or foreign pointer is refused.
std::set<const void*>& live() {
  static std::set<const void*> descriptors;
  return descriptors;
}

// Whether boolean attribute name was set true.
bool flag(const BackendDescriptor& d, int name) {
  const auto it = d.attributes.find(name);
  if (it == d.attributes.end() || it->second.size() != sizeof(bool)) return false;
  bool v = false;
  std::memcpy(&v, it->second.data(), sizeof v);
  return v;
}

// Whether an operation's attribute names what it writes.
bool is_output(int name) {
  return name == CUDNN_ATTR_OPERATION_POINTWISE_YDESC ||
         name == CUDNN_ATTR_OPERATION_MATMUL_CDESC ||
         name == CUDNN_ATTR_OPERATION_REDUCTION_YDESC ||
         name == CUDNN_ATTR_OPERATION_RESHAPE_YDESC;
}

// What a descriptor being finalized records for execution: a tensor itself
// (where it has a uid), anything else the tensors of what it names.
void record_tensors(BackendDescriptor* d) {
  d->tensors.clear();
  if (d->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR) {
    const auto uid = values<std::int64_t>(*d, CUDNN_ATTR_TENSOR_UNIQUE_ID);
    if (uid.size() != 1) return;
    Tensor t;
    t.uid = uid[0];
    const auto type = values<int>(*d, CUDNN_ATTR_TENSOR_DATA_TYPE);
    if (type.size() == 1) t.type = static_cast<cudnnDataType_t>(type[0]);
    t.dims = values<std::int64_t>(*d, CUDNN_ATTR_TENSOR_DIMENSIONS);
    t.strides = values<std::int64_t>(*d, CUDNN_ATTR_TENSOR_STRIDES);
    const auto alignment = values<std::int64_t>(*d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT);
    if (alignment.size() == 1) t.alignment = alignment[0];
    t.is_virtual = flag(*d, CUDNN_ATTR_TENSOR_IS_VIRTUAL);
    t.by_value = flag(*d, CUDNN_ATTR_TENSOR_IS_BY_VALUE);
    d->tensors[t.uid] = t;
    return;
  }
  for (const auto& [name, given] : d->named) {
    const bool output = is_output(name);
    for (const Named& n : given)
      for (auto [uid, t] : n.tensors) {
        t.written = t.written || output;
        const auto [at, fresh] = d->tensors.emplace(uid, t);
        if (!fresh) at->second.written = at->second.written || t.written;
      }
  }
}

// The one descriptor given as attribute name, or null.
const Named* named_one(const BackendDescriptor& d, int name) {
  const auto it = d.named.find(name);
  return it != d.named.end() && it->second.size() == 1 ? &it->second[0] : nullptr;
}

}  // namespace

namespace dptrain_emu::cudnn_graph {

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

}  // namespace dptrain_emu::cudnn_graph

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
  std::vector<Named> named;
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    const auto* given = static_cast<const cudnnBackendDescriptor_t*>(elements);
    for (int64_t i = 0; i < count; ++i) {
      const BackendDescriptor* g = find(given[i]);
      if (!g || !g->finalized)
        return refuse(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED,
                      "attribute " + std::to_string(name) + "[" + std::to_string(i) +
                          "]: not a finalized backend descriptor");
      named.push_back({g->type, g->tensors, g->engine});
    }
  }
  const auto* first = static_cast<const unsigned char*>(elements);
  d->attributes[name].assign(first, first + bytes * static_cast<std::size_t>(count));
  d->types[name] = type;
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
    d->named[name] = std::move(named);
  else
    d->named.erase(name);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  BackendDescriptor* d = find(descriptor);
  if (!d) return refuse(CUDNN_STATUS_BAD_PARAM, "finalize: not a live backend descriptor");
  const bool engines = dptrain_emu::cudnn_graph_engines();
  if (d->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR) {
    if (!engines)
      return refuse(CUDNN_STATUS_NOT_SUPPORTED,
                    "the host emulation of cuDNN has no engines for backend graphs");
    const Named* graph = named_one(*d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
    if (!graph || graph->type != CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)
      return refuse(CUDNN_STATUS_BAD_PARAM, "finalize heuristics: no operation graph set");
    if (values<int>(*d, CUDNN_ATTR_ENGINEHEUR_MODE).size() != 1)
      return refuse(CUDNN_STATUS_BAD_PARAM, "finalize heuristics: no heuristics mode set");
    auto engine = std::make_shared<Engine>();
    engine->tensors = graph->tensors;
    d->engine = std::move(engine);
  }
  if (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) {
    if (!engines)
      return refuse(CUDNN_STATUS_NOT_SUPPORTED, "the host emulation of cuDNN has no engines");
    const Named* config = named_one(*d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
    if (!config || config->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)
      return refuse(CUDNN_STATUS_BAD_PARAM, "finalize execution plan: no engine configuration set");
    if (!config->engine)
      return refuse(CUDNN_STATUS_NOT_SUPPORTED,
                    "finalize execution plan: the configuration is not of the emulated engine");
    d->engine = config->engine;
  }
  if (d->type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR) {
    const Named* engine = named_one(*d, CUDNN_ATTR_ENGINECFG_ENGINE);
    if (engine) d->engine = engine->engine;
  }
  record_tensors(d);
  d->finalized = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested,
                                       int64_t* count, void* elements) {
  BackendDescriptor* d = find(descriptor);
  if (!d) return refuse(CUDNN_STATUS_BAD_PARAM, "get attribute: not a live backend descriptor");
  if (dptrain_emu::cudnn_graph_engines())
    return get_attribute(d, name, type, requested, count, elements);
  return refuse(CUDNN_STATUS_NOT_SUPPORTED,
                "get attribute " + std::to_string(name) +
                    ": the host emulation of cuDNN has no engines, heuristics or plans");
}

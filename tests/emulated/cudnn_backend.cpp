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
// nothing about what a real engine computes.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cudnn_emulated.hpp"

using dptrain_emu::cudnn::refuse;

namespace {

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

// The values of attribute name as T (empty where it was not set).
template <typename T>
std::vector<T> values(const BackendDescriptor& d, int name) {
  const auto it = d.attributes.find(name);
  if (it == d.attributes.end()) return {};
  std::vector<T> v(it->second.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), it->second.data(), v.size() * sizeof(T));
  return v;
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

std::string text(const void* p) {
  char s[32];
  std::snprintf(s, sizeof s, "%p", p);
  return s;
}

// The bytes from a tensor's first element to one past its furthest.
std::size_t span_bytes(const Tensor& t) {
  std::int64_t last = 0;
  for (std::size_t i = 0; i < t.dims.size() && i < t.strides.size(); ++i)
    last += (t.dims[i] - 1) * t.strides[i];
  return static_cast<std::size_t>(last + 1) * dptrain_emu::cudnn::element_bytes(t.type);
}

// Every element of t at p set to `byte` in each of its bytes.
void fill_elements(const Tensor& t, void* p, unsigned char byte) {
  const std::size_t bytes = dptrain_emu::cudnn::element_bytes(t.type);
  std::vector<std::int64_t> at(t.dims.size(), 0);
  while (true) {
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < at.size() && i < t.strides.size(); ++i)
      offset += at[i] * t.strides[i];
    std::memset(static_cast<unsigned char*>(p) + offset * static_cast<std::int64_t>(bytes), byte,
                bytes);
    std::size_t i = at.size();
    while (i > 0 && ++at[i - 1] == t.dims[i - 1]) at[--i] = 0;
    if (i == 0) return;
  }
}

// The test engine's answers to cudnnBackendGetAttribute (the switch on).
cudnnStatus_t get_attribute(BackendDescriptor* d, cudnnBackendAttributeName_t name,
                            cudnnBackendAttributeType_t type, int64_t requested, int64_t* count,
                            void* elements) {
  const std::string what = "get attribute " + std::to_string(name) + " of a descriptor of type " +
                           std::to_string(d->type);
  if (!d->finalized)
    return refuse(CUDNN_STATUS_NOT_INITIALIZED, what + ": the descriptor is not finalized");
  if (requested < 0) return refuse(CUDNN_STATUS_BAD_PARAM, what + ": a negative count requested");
  if (requested > 0 && !elements)
    return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, what + ": no place for the elements");
  const auto answer_type = [&](cudnnBackendDescriptorType_t of, cudnnBackendAttributeType_t t) {
    if (d->type != of)
      return refuse(CUDNN_STATUS_BAD_PARAM, what + ": not an attribute of this descriptor type");
    if (type != t)
      return refuse(CUDNN_STATUS_BAD_PARAM, what + ": asked as type " + std::to_string(type) +
                                                ", it is of type " + std::to_string(t));
    return CUDNN_STATUS_SUCCESS;
  };
  cudnnStatus_t rc = CUDNN_STATUS_SUCCESS;
  // A descriptor-typed answer: the caller's descriptors of type as, filled in.
  const auto fill = [&](cudnnBackendDescriptorType_t as) {
    if (!d->engine)
      return refuse(CUDNN_STATUS_NOT_SUPPORTED, what + ": no emulated engine behind it");
    if (count) *count = 1;
    if (requested < 1) return CUDNN_STATUS_SUCCESS;
    BackendDescriptor* out = find(static_cast<cudnnBackendDescriptor_t*>(elements)[0]);
    if (!out || out->type != as)
      return refuse(CUDNN_STATUS_BAD_PARAM,
                    what + ": element 0 is not a live descriptor of type " + std::to_string(as));
    out->engine = d->engine;
    out->tensors = d->engine->tensors;
    out->finalized = true;
    return CUDNN_STATUS_SUCCESS;
  };
  switch (name) {
    case CUDNN_ATTR_ENGINEHEUR_RESULTS:
      rc = answer_type(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR);
      return rc != CUDNN_STATUS_SUCCESS ? rc : fill(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    case CUDNN_ATTR_ENGINECFG_ENGINE:
      rc = answer_type(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR);
      return rc != CUDNN_STATUS_SUCCESS ? rc : fill(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    case CUDNN_ATTR_ENGINE_GLOBAL_INDEX:
      rc = answer_type(CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_TYPE_INT64);
      if (rc == CUDNN_STATUS_SUCCESS && !d->engine)
        rc = refuse(CUDNN_STATUS_NOT_SUPPORTED, what + ": not an emulated engine");
      if (rc != CUDNN_STATUS_SUCCESS) return rc;
      if (count) *count = 1;
      if (requested >= 1) static_cast<int64_t*>(elements)[0] = d->engine->index;
      return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_ENGINE_NUMERICAL_NOTE:  // none
      rc = answer_type(CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_TYPE_NUMERICAL_NOTE);
      if (rc == CUDNN_STATUS_SUCCESS && !d->engine)
        rc = refuse(CUDNN_STATUS_NOT_SUPPORTED, what + ": not an emulated engine");
      if (rc != CUDNN_STATUS_SUCCESS) return rc;
      if (count) *count = 0;
      return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE:
      rc = answer_type(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_TYPE_INT64);
      if (rc != CUDNN_STATUS_SUCCESS) return rc;
      if (count) *count = 1;
      if (requested >= 1) static_cast<int64_t*>(elements)[0] = kWorkspaceBytes;
      return CUDNN_STATUS_SUCCESS;
    default:
      break;
  }
  // Anything else the caller set, given back as set (descriptors excepted).
  const auto set = d->attributes.find(name);
  if (set == d->attributes.end() || d->types[name] == CUDNN_TYPE_BACKEND_DESCRIPTOR)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED,
                  what + ": the host emulation's test engine does not answer it");
  if (type != d->types[name])
    return refuse(CUDNN_STATUS_BAD_PARAM, what + ": asked as type " + std::to_string(type) +
                                              ", it was set as type " +
                                              std::to_string(d->types[name]));
  const std::size_t bytes = value_bytes(type);
  const auto has = static_cast<int64_t>(set->second.size() / bytes);
  if (count) *count = has;
  if (requested > 0)
    std::memcpy(elements, set->second.data(),
                static_cast<std::size_t>(std::min(requested, has)) * bytes);
  return CUDNN_STATUS_SUCCESS;
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

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan_descriptor,
                                  cudnnBackendDescriptor_t variant_pack) {
  if (!dptrain_emu::cudnn_graph_engines())
    return refuse(CUDNN_STATUS_NOT_SUPPORTED,
                  "execute: the host emulation of cuDNN has no execution plans");
  if (!handle) return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "execute: the handle is null");
  const BackendDescriptor* plan = find(plan_descriptor);
  if (!plan || plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)
    return refuse(CUDNN_STATUS_BAD_PARAM, "execute: the plan is not a live execution plan");
  if (!plan->finalized || !plan->engine)
    return refuse(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "execute: the plan is not finalized");
  const BackendDescriptor* pack = find(variant_pack);
  if (!pack || pack->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
    return refuse(CUDNN_STATUS_BAD_PARAM, "execute: the variant pack is not a live variant pack");
  if (!pack->finalized)
    return refuse(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "execute: the variant pack is not finalized");
  const auto uids = values<std::int64_t>(*pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
  const auto pointers = values<void*>(*pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
  if (uids.size() != pointers.size())
    return refuse(CUDNN_STATUS_BAD_PARAM,
                  "execute: the variant pack has " + std::to_string(uids.size()) + " uids and " +
                      std::to_string(pointers.size()) + " data pointers");
  std::map<std::int64_t, void*> bound;
  for (std::size_t i = 0; i < uids.size(); ++i) {
    if (!pointers[i])
      return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER,
                    "execute: the data pointer of uid " + std::to_string(uids[i]) + " is null");
    if (!bound.emplace(uids[i], pointers[i]).second)
      return refuse(CUDNN_STATUS_BAD_PARAM,
                    "execute: uid " + std::to_string(uids[i]) + " twice in the variant pack");
  }
  for (const auto& [uid, t] : plan->engine->tensors) {
    if (t.is_virtual) continue;
    const std::string name = "execute: uid " + std::to_string(uid);
    const auto at = bound.find(uid);
    if (at == bound.end())
      return refuse(CUDNN_STATUS_BAD_PARAM, name + ": a tensor of the graph without a data pointer");
    const void* p = at->second;
    if (t.by_value) {  // read on the host at the call
      if (dptrain_emu::is_device_pointer(p))
        return refuse(CUDNN_STATUS_BAD_PARAM,
                      name + " is passed by value: " + text(p) + " must be host memory, not device");
      continue;
    }
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    const auto alignment = static_cast<std::uintptr_t>(
        std::max<std::int64_t>(t.alignment, dptrain_emu::cudnn::element_bytes(t.type)));
    if (address % alignment)
      return refuse(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER,
                    name + " at " + text(p) + " is not aligned to " + std::to_string(alignment) +
                        " bytes");
    const std::size_t bytes = span_bytes(t);
    if (!dptrain_emu::is_device_range(p, bytes))
      return refuse(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND,
                    name + ": " + std::to_string(bytes) + " bytes from " + text(p) +
                        " do not lie inside one device allocation");
  }
  const auto workspace = values<void*>(*pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE);
  void* w = workspace.size() == 1 ? workspace[0] : nullptr;
  if (kWorkspaceBytes > 0 &&
      (!w || !dptrain_emu::is_device_range(w, static_cast<std::size_t>(kWorkspaceBytes))))
    return refuse(CUDNN_STATUS_BAD_PARAM,
                  "execute: the plan's workspace of " + std::to_string(kWorkspaceBytes) +
                      " bytes is not device memory at " + text(w));
  if (dptrain_emu::cudnn_graph_execution_fails())
    return refuse(CUDNN_STATUS_EXECUTION_FAILED, "execute: the test engine was set to fail");
  if (dptrain_emu::cudnn_graph_execution_varies()) {  // a finite pattern, new each time
    static unsigned executions = 0;
    const auto byte = static_cast<unsigned char>(0x30 + executions++ % 16);
    for (const auto& [uid, t] : plan->engine->tensors)
      if (t.written && !t.is_virtual && !t.by_value) fill_elements(t, bound.at(uid), byte);
  }
  return CUDNN_STATUS_SUCCESS;  // the test engine computes nothing (the header says why)
}

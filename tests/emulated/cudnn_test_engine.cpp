// Implements: the test engine of the emulated cuDNN backend API
// (cudnn_backend.cpp says what it is and is not): its answers to
// cudnnBackendGetAttribute, and cudnnBackendExecute's checks of a call.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "cudnn_backend_store.hpp"

using dptrain_emu::cudnn::refuse;
using namespace dptrain_emu::cudnn_graph;

namespace {

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

}  // namespace

namespace dptrain_emu::cudnn_graph {

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

}  // namespace dptrain_emu::cudnn_graph

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

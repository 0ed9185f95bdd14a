// Implements: the part of the CUDA runtime API that src/backends/cuda/ uses, for the
// host emulation of tests/emulated/: device memory is host memory that the
// emulator registers (device_emulator.hpp), pinned memory is host memory
// it knows as pinned, and streams and events defer work as streams.hpp
// says; the calls that allocate or wait for the device are counted
// (dptrain_emu::calls, device_emulator.hpp). Stream capture and graphs
// record a stream's work and replay it (graphs.hpp, which also says which
// calls here invalidate a capture). Nothing here talks to a GPU.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "device_emulator.hpp"
#include "graphs.hpp"

// --- runtime API: memory, streams, events, errors ------------------------------
inline cudaError_t cudaGetLastError() { return dptrain_emu::take_error(); }
inline const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    default: return "cudaErrorLaunchFailure";
  }
}
inline const char* cudaGetErrorString(cudaError_t e) {
  if (e == cudaErrorNotReady) return "device not ready";
  return e == cudaSuccess ? "no error" : dptrain_emu::error_detail();
}

// A failed allocation is also the last error, as CUDA records it. These
// five calls are refused during a capture as its mode says (graphs.hpp).
inline cudaError_t cudaMalloc(void** p, std::size_t bytes) {
  dptrain_emu::count_call(dptrain_emu::RuntimeCall::kMalloc);
  *p = nullptr;
  if (dptrain_emu::invalidate_captures_forbidding("cudaMalloc"))
    return cudaErrorStreamCaptureUnsupported;
  *p = dptrain_emu::device_allocate(bytes);
  if (*p || bytes == 0) return cudaSuccess;
  dptrain_emu::set_error(cudaErrorMemoryAllocation,
                         "out of memory: " + std::to_string(bytes) + " bytes asked");
  return cudaErrorMemoryAllocation;
}
template <typename T>
cudaError_t cudaMalloc(T** p, std::size_t bytes) {
  void* v = nullptr;
  const cudaError_t e = cudaMalloc(&v, bytes);
  *p = static_cast<T*>(v);
  return e;
}
// cudaFree and cudaFreeHost wait for the device, as CUDA's do.
inline cudaError_t cudaFree(void* p) {
  dptrain_emu::count_call(dptrain_emu::RuntimeCall::kFree);
  if (dptrain_emu::invalidate_captures_forbidding("cudaFree"))
    return cudaErrorStreamCaptureUnsupported;
  dptrain_emu::run_device();
  dptrain_emu::device_free(p);
  return dptrain_emu::take_error();
}
inline cudaError_t cudaMallocHost(void** p, std::size_t bytes) {
  dptrain_emu::count_call(dptrain_emu::RuntimeCall::kHostAlloc);
  *p = nullptr;
  if (dptrain_emu::invalidate_captures_forbidding("cudaMallocHost or cudaHostAlloc"))
    return cudaErrorStreamCaptureUnsupported;
  *p = dptrain_emu::pinned_allocate(bytes);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
constexpr unsigned cudaHostAllocDefault = 0;
inline cudaError_t cudaHostAlloc(void** p, std::size_t bytes, unsigned) {
  return cudaMallocHost(p, bytes);
}
inline cudaError_t cudaFreeHost(void* p) {
  dptrain_emu::count_call(dptrain_emu::RuntimeCall::kFree);
  if (dptrain_emu::invalidate_captures_forbidding("cudaFreeHost"))
    return cudaErrorStreamCaptureUnsupported;
  dptrain_emu::run_device();
  dptrain_emu::pinned_free(p);
  return dptrain_emu::take_error();
}

namespace dptrain_emu {
// Whether each side of a copy is the memory its kind says.
inline bool copy_sides_are_valid(void* dst, const void* src, cudaMemcpyKind k) {
  const bool dst_device = dst && is_device_pointer(dst), src_device = src && is_device_pointer(src);
  switch (k) {
    case cudaMemcpyHostToDevice: return dst_device && !src_device;
    case cudaMemcpyDeviceToHost: return src_device && !dst_device;
    case cudaMemcpyDeviceToDevice: return dst_device && src_device;
    default: return dst && src;
  }
}
}  // namespace dptrain_emu

// As CUDA does it: a copy from pageable host memory reads it when queued
// (staging), one into pageable host memory returns when it has landed; any
// other copy reads and writes when its stream gets to it. A capture records
// only the last kind: either of the others invalidates it.
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind k,
                                   cudaStream_t s = nullptr) {
  if (!bytes) return cudaSuccess;
  if (!dptrain_emu::copy_sides_are_valid(dst, src, k)) return cudaErrorInvalidValue;
  const bool src_staged = !dptrain_emu::is_device_pointer(src) && !dptrain_emu::is_pinned(src);
  const bool dst_pageable = !dptrain_emu::is_device_pointer(dst) && !dptrain_emu::is_pinned(dst);
  if ((src_staged || dst_pageable) &&
      dptrain_emu::invalidate_capture_of(s, src_staged ? "cudaMemcpyAsync from pageable memory"
                                                       : "cudaMemcpyAsync into pageable memory"))
    return cudaErrorStreamCaptureUnsupported;
  if (src_staged) {
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + bytes);
    dptrain_emu::enqueue(s, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
  } else if (dst_pageable) {
    dptrain_emu::count_call(dptrain_emu::RuntimeCall::kBlockingCopy);
    dptrain_emu::enqueue_and_run(s, [dst, src, bytes] { std::memmove(dst, src, bytes); });
  } else {
    dptrain_emu::enqueue(s, [dst, src, bytes] { std::memmove(dst, src, bytes); });
  }
  return cudaSuccess;
}
// On the legacy stream: at once, without waiting for the (non-blocking)
// streams of src/backends/cuda/.
inline cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind k) {
  return cudaMemcpyAsync(dst, src, bytes, k, nullptr);
}
inline cudaError_t cudaMemsetAsync(void* p, int value, std::size_t bytes,
                                   cudaStream_t s = nullptr) {
  if (!dptrain_emu::is_device_pointer(p)) return cudaErrorInvalidValue;
  if (bytes) dptrain_emu::enqueue(s, [p, value, bytes] { std::memset(p, value, bytes); });
  return cudaSuccess;
}

// Synchronizing calls return an error found by work they ran (a failed
// kernel), as CUDA's return errors of earlier asynchronous work; during a
// capture they are refused (graphs.hpp).
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = dptrain_emu::create_stream();
  return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
  dptrain_emu::destroy_stream(s);
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  dptrain_emu::count_call(dptrain_emu::RuntimeCall::kStreamSync);
  if (dptrain_emu::invalidate_capture_of(s, "cudaStreamSynchronize of the capturing stream"))
    return cudaErrorStreamCaptureUnsupported;
  dptrain_emu::run_stream(s);
  return dptrain_emu::take_error();
}
// Work left is run, not reported: code that polls must see progress.
inline cudaError_t cudaStreamQuery(cudaStream_t s) {
  if (dptrain_emu::invalidate_capture_of(s, "cudaStreamQuery of the capturing stream")) {
    dptrain_emu::count_call(dptrain_emu::RuntimeCall::kStreamSync);
    return cudaErrorStreamCaptureUnsupported;
  }
  return cudaStreamSynchronize(s);
}
inline cudaError_t cudaDeviceSynchronize() {
  dptrain_emu::count_call(dptrain_emu::RuntimeCall::kDeviceSync);
  if (dptrain_emu::invalidate_every_capture("cudaDeviceSynchronize"))
    return cudaErrorStreamCaptureUnsupported;
  dptrain_emu::run_device();
  return dptrain_emu::take_error();
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  *e = dptrain_emu::create_event((flags & cudaEventDisableTiming) == 0);
  return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  dptrain_emu::destroy_event(e);
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr) {
  return dptrain_emu::record_event(e, s) ? cudaSuccess : cudaErrorStreamCaptureUnsupported;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  dptrain_emu::count_call(dptrain_emu::RuntimeCall::kEventSync);
  if (!dptrain_emu::run_to_event(e)) return cudaErrorStreamCaptureUnsupported;
  return dptrain_emu::take_error();
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned = 0) {
  return dptrain_emu::wait_event(s, e) ? cudaSuccess : cudaErrorStreamCaptureUnsupported;
}
// Host time between the runs of the two records.
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t from, cudaEvent_t to) {
  return dptrain_emu::elapsed_ms(from, to, ms) ? cudaSuccess : cudaErrorNotReady;
}

// --- stream capture and graphs (graphs.hpp) -----------------------------------
inline cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
  return dptrain_emu::begin_capture(s, mode);
}
inline cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  if (!status) return cudaErrorInvalidValue;
  *status = dptrain_emu::capture_status(s);
  return cudaSuccess;
}
inline cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  return dptrain_emu::end_capture(s, graph);
}
// CUDA 12's form; no flag changes what the emulation does.
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                        unsigned long long flags = 0) {
  (void)flags;
  if (!exec || !graph) return cudaErrorInvalidValue;
  *exec = dptrain_emu::instantiate_graph(graph);
  return cudaSuccess;
}
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  if (!exec) return cudaErrorInvalidValue;
  dptrain_emu::launch_graph(exec, s);
  return cudaSuccess;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  if (!graph) return cudaErrorInvalidValue;
  dptrain_emu::destroy_graph(graph);
  return cudaSuccess;
}
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  if (!exec) return cudaErrorInvalidValue;
  dptrain_emu::destroy_graph_exec(exec);
  return cudaSuccess;
}

// --- the device: one emulated GPU a process (DPTRAIN_EMULATED_SMS multiprocessors, 1
// by default: a grid-stride launch gets 8 blocks, as a GPU's 8 a multiprocessor).
struct cudaUUID_t {
  char bytes[16];
};
struct cudaDeviceProp {
  char name[256];
  cudaUUID_t uuid;
  std::size_t totalGlobalMem;
  int major, minor, multiProcessorCount;
};
typedef enum {
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
} cudaDeviceAttr;
namespace dptrain_emu {
int multiprocessors();
}  // namespace dptrain_emu
inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : cudaErrorInvalidValue;
}
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr attr, int device) {
  *v = attr == cudaDevAttrMaxSharedMemoryPerBlockOptin
           ? static_cast<int>(dptrain_emu::kOptInSharedBytes)
           : dptrain_emu::multiprocessors();
  return device == 0 ? cudaSuccess : cudaErrorInvalidValue;
}
// A kernel's attribute: the dynamic shared memory its launches may take.
typedef enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 } cudaFuncAttribute;
template <typename... P>
cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute, int value) {
  return dptrain_emu::set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), value);
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device != 0) return cudaErrorInvalidValue;
  *p = cudaDeviceProp{};
  std::strncpy(p->name, "dptrain host emulation", sizeof p->name - 1);
  // Every process emulates a GPU of its own: its UUID holds the process id.
  const unsigned pid = static_cast<unsigned>(getpid());
  for (int i = 0; i < 16; ++i) p->uuid.bytes[i] = static_cast<char>(0xe0 + i);
  std::memcpy(p->uuid.bytes + 8, &pid, sizeof pid);
  p->totalGlobalMem = dptrain_emu::device_capacity();
  p->major = 9;
  p->multiProcessorCount = dptrain_emu::multiprocessors();
  return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total) {
  *total = dptrain_emu::device_capacity();
  *free_bytes = *total - std::min(*total, dptrain_emu::device_bytes_in_use());
  return cudaSuccess;
}

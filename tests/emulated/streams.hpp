// Implements: the streams and events of the host emulation of CUDA
// (device_emulator.hpp has the kernels). Work given to a stream — kernel
// launches, copies, memsets, cuBLAS calls, the stand-ins for cuDNN and NCCL
// — is queued, in order, and runs only when the host needs it: when it
// synchronizes with that stream, with an event recorded after the work, or
// with the device, or when work it needs has to run (a stream waiting on an
// event runs the recording stream up to that record, and no further). So
// the device lags the host as far as it ever could on a GPU, and each stream
// lags the others as far as their events allow: a missing event wait, or a
// host write to pinned memory before a copy from it has run, changes what
// the work sees, as it may on a GPU.
//
// That is the lazy schedule, the default. DPTRAIN_EMULATED_STREAMS=eager
// selects the other extreme: work runs as soon as it is queued, unless work
// queued before it on its stream has not run, as on a device that is always
// ahead of the host, except for work queued late (enqueue_late: the result
// of a collective, as over a slow network), which runs only when needed.
// So the lazy schedule shows work that the host or another stream goes on
// without waiting for; the eager one, a stream that reads a collective's
// result without waiting for it.
//
// The legacy default stream (a null cudaStream_t) runs its work when it is
// queued, without waiting for other streams: src/backends/cuda/ makes only
// non-blocking streams, which never synchronize with it. The emulator's own
// tests launch there.
//
// A stream that captures (graphs.hpp) records the work given to it instead
// of queueing it, and a call CUDA forbids during a capture invalidates it:
// enqueue_late and enqueue_and_run on the capturing stream, an event's
// record on it or its wait for an event, a run to an event recorded in it.
#pragma once

#include <cstddef>
#include <functional>

typedef struct CUstreamEmulated* cudaStream_t;
typedef struct CUeventEmulated* cudaEvent_t;

namespace dptrain_emu {

using StreamWork = std::function<void()>;

// Whether DPTRAIN_EMULATED_STREAMS=eager chose the eager schedule.
bool eager_schedule();

cudaStream_t create_stream();
// Runs what is left on s, then frees it (CUDA lets queued work finish).
void destroy_stream(cudaStream_t s);
// Queues work on s (on the legacy stream: runs it now; on a capturing
// stream: records it).
void enqueue(cudaStream_t s, StreamWork work);
// Queues work on s that runs only when s is run, under either schedule.
void enqueue_late(cudaStream_t s, StreamWork work);
// Queues work on s and runs s up to and including it, before returning:
// what CUDA does synchronously with respect to the host on a stream (a copy
// to pageable memory), and the NCCL stand-in's collectives, which every rank
// must reach in the same order as its host code.
void enqueue_and_run(cudaStream_t s, StreamWork work);
// Runs everything queued on s / on every stream.
void run_stream(cudaStream_t s);
void run_device();

cudaEvent_t create_event(bool timed);
void destroy_event(cudaEvent_t e);
// Each false, having done nothing, where it invalidated a capture (graphs.hpp):
// a record on a capturing stream (it marks e as recorded in that capture);
bool record_event(cudaEvent_t e, cudaStream_t s);
// a wait by a capturing stream, or for an event recorded in a capture;
// otherwise later work on s waits for e's last record (nothing if it was
// never recorded).
bool wait_event(cudaStream_t s, cudaEvent_t e);
// a run to an event recorded in a capture still open; otherwise runs e's
// stream up to e's last record.
bool run_to_event(cudaEvent_t e);
// Milliseconds of host time between the runs of the two records; false when
// either is untimed or has not run.
bool elapsed_ms(cudaEvent_t from, cudaEvent_t to, float* ms);

// Memory from cudaHostAlloc / cudaMallocHost: copies from and to it are
// asynchronous; from other host memory they are staged when queued.
void* pinned_allocate(std::size_t bytes);
void pinned_free(void* p);
bool is_pinned(const void* p);

}  // namespace dptrain_emu

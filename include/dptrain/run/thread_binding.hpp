// Implements: the check that each rank's compute threads have CPUs of their
// own. A launcher that binds a rank to one core (Open MPI's default for up
// to two ranks) while the rank runs several threads makes them take turns
// on that core: the job runs, at a fraction of its speed, and nothing else
// would say so.
#pragma once

#include <mpi.h>

#include <string>

namespace dptrain {

// CPUs in this process's affinity mask (sched_getaffinity); 0 if unknown.
int affinity_cpus();

// Collective over world. At rank 0: a warning naming the ranks whose
// `threads` exceed the CPUs of their affinity mask, and how to launch so they
// do not; "" when every rank has a CPU per thread. Empty on other ranks.
std::string thread_binding_warning(MPI_Comm world, int threads);

}  // namespace dptrain

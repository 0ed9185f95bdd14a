// Implements: the test-only fault-injection hooks, the one place production
// code reads a DPTRAIN_TEST_* environment variable. Each hook is one named
// function; with its variable unset it does nothing, so a normal run never
// notices them. The tests that set them are named with each hook.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dptrain::test_hooks {

// DPTRAIN_TEST_SIGNAL_AT_START, set to any value (the value is not read):
// main raises SIGUSR1 right after holding the stop signals and before MPI
// starts, as a Slurm signal during start-up would; the run then stops after
// its first step with a checkpoint (exit 75). tests/cli/test_preempt.sh.
bool signal_at_start();

// DPTRAIN_TEST_NAN_AT=RANK:STEP, two decimal integers (world rank, 0-based
// step index as the error messages name it): the first feature of that
// rank's shard becomes NaN at that step, before forward, so the step's
// gradient is non-finite (exit 5, or a skipped step with --skip-nonfinite).
// Anything else than RANK:STEP turns the hook off. Read once per process.
// tests/cli/test_faults.sh.
bool nan_in_shard_at(int rank, std::uint64_t step);

// DPTRAIN_TEST_PERTURB_AT=RANK:STEP, the format of DPTRAIN_TEST_NAN_AT: after
// that step's optimizer update, the first parameter of that rank's model is
// set to 1234.5, so its tower differs from the others and the consistency
// check (--check-every) fails with exit 5. Read once per process.
// tests/cli/test_faults.sh.
bool perturb_tower_at(int rank, std::uint64_t step);

// DPTRAIN_TEST_SLOW_CHECKPOINT_MS=N, a decimal number of milliseconds (N <= 0
// or no number: no pause): write_checkpoint sleeps N ms between the fsync of
// NAME.tmp and its rename to NAME, so a test can kill a process while a
// checkpoint is half done and check that NAME never appears partially.
// Read at every checkpoint (a test may set and unset it in one process).
// tests/cli/test_checkpoint_kill.sh, tests/unit/test_checkpoint.cpp.
void slow_checkpoint_pause();

// DPTRAIN_TEST_NCCL_STAGING_FLOATS=N, a decimal count (N < 1 or no number:
// the default): the floats the NCCL communicator's staging buffer may hold
// instead of its default (16 Mi), so that small calls run in several
// windows, as calls over a large arena do. Read once per process.
// tests/gpu/test_nccl.cpp on the emulation.
std::size_t nccl_staging_floats(std::size_t default_floats);

}  // namespace dptrain::test_hooks

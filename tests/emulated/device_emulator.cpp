// Implements: the emulator of device_emulator.hpp — the block scheduler
// (one Boost.Context fiber per thread of a block, resumed in thread order,
// or the reverse of it, until each waits at a barrier, in a shuffle, or
// ends), the warp exchange, the fill of shared memory and the check of
// launch bounds. The launch error, the counts and the order are
// launch_state.cpp's; the registry of emulated device memory is
// device_memory.cpp's.
#include "device_emulator.hpp"
#include "launch_state.hpp"

#include <boost/context/fiber.hpp>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <unordered_map>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
// AddressSanitizer's defaults for the emulated binaries: no leak report at
// exit, which would be Open MPI's own allocations (what is checked is
// out-of-bounds use).
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }
#endif

namespace dptrain_emu {
namespace {

constexpr std::size_t kStackBytes = 128 * 1024;
constexpr int kWarpSize = 32;

enum class State { kRunnable, kAtBarrier, kInShuffle, kDone };

namespace bctx = boost::context;

struct Fiber {
  bctx::fiber thread;     // the suspended thread, while the scheduler runs
  bctx::fiber scheduler;  // the suspended scheduler, while the thread runs
  State state = State::kRunnable;
  uint3 index;
  std::uint64_t barriers = 0;  // __syncthreads reached: those released together must agree
  const char* file = nullptr;  // the source line of the __syncthreads it waits at
  int line = 0;
  std::uint64_t shuffles = 0;  // shuffle waits reached: the lanes of a warp must agree
  std::uint64_t value = 0;     // this lane's value in the current shuffle
  void* fake_stack = nullptr;  // AddressSanitizer's, while the thread is switched out
};

struct Block {
  std::vector<Fiber> fibers;
  int current = -1;
  const ThreadBody* body = nullptr;
  bool failed = false;
  std::uint64_t generation = 0;  // counts the blocks of the grid run so far
  std::unordered_map<const void*, std::uint64_t> fresh;  // shared variable -> block that filled it
  unsigned char* dynamic = nullptr;  // the launch's dynamic shared memory
  std::size_t dynamic_bytes = 0;
};

// Heap memory of exactly bytes (so AddressSanitizer stops a kernel that
// reads or writes past it), 128-byte aligned.
struct DynamicShared {
  static constexpr std::align_val_t kAlign{128};
  explicit DynamicShared(std::size_t bytes)
      : p(static_cast<unsigned char*>(::operator new[](bytes ? bytes : 1, kAlign))) {}
  ~DynamicShared() { ::operator delete[](p, kAlign); }
  DynamicShared(const DynamicShared&) = delete;
  DynamicShared& operator=(const DynamicShared&) = delete;
  unsigned char* p;
};

thread_local Block* t_block = nullptr;

thread_local std::vector<std::unique_ptr<char[]>> t_stacks;

// AddressSanitizer follows the stack in use and must be told of every switch
// between the scheduler's stack and a thread's; without it these do nothing.
#if defined(__SANITIZE_ADDRESS__)
thread_local void* t_scheduler_fake_stack = nullptr;
thread_local const void* t_scheduler_bottom = nullptr;
thread_local std::size_t t_scheduler_size = 0;
void switching_to_thread(const char* stack) {
  __sanitizer_start_switch_fiber(&t_scheduler_fake_stack, stack, kStackBytes);
}
void back_in_scheduler() {
  __sanitizer_finish_switch_fiber(t_scheduler_fake_stack, nullptr, nullptr);
}
void in_thread(void* fake_stack) {
  __sanitizer_finish_switch_fiber(fake_stack, &t_scheduler_bottom, &t_scheduler_size);
}
void switching_to_scheduler(void** fake_stack) {  // nullptr: the thread has ended
  __sanitizer_start_switch_fiber(fake_stack, t_scheduler_bottom, t_scheduler_size);
}
#else
void switching_to_thread(const char*) {}
void back_in_scheduler() {}
void in_thread(void*) {}
void switching_to_scheduler(void**) {}
#endif

// The threads of a failed block stay suspended for good, with their stacks:
// unwinding them would run code that never expected to end there.
void abandon(Block& b) {
  struct Abandoned {
    std::vector<Fiber> fibers;
    std::vector<std::unique_ptr<char[]>> stacks;
  };
  static auto* abandoned = new std::vector<Abandoned>();  // never destroyed
  abandoned->push_back({std::move(b.fibers), std::move(t_stacks)});
  t_stacks.clear();
}

// Hands out the stacks of t_stacks: a block's fibers reuse them launch after launch.
class PooledStack {
 public:
  explicit PooledStack(char* base) : base_(base) {}
  bctx::stack_context allocate() {
    bctx::stack_context sc;
    sc.size = kStackBytes;
    sc.sp = base_ + kStackBytes;  // stacks grow down
    return sc;
  }
  void deallocate(bctx::stack_context&) noexcept {}

 private:
  char* base_;
};

void fail_block(const std::string& why) {
  set_error(cudaErrorLaunchFailure, why);
  t_block->failed = true;
}

// The running thread gives the host thread back to the scheduler until it
// is released.
void wait_as(State s) {
  if (!t_block) {
    std::fprintf(stderr, "device emulator: a barrier or shuffle outside a kernel\n");
    std::abort();
  }
  Block& b = *t_block;
  Fiber& f = b.fibers[static_cast<std::size_t>(b.current)];
  f.state = s;
  if (s == State::kAtBarrier) ++f.barriers;
  if (s == State::kInShuffle) ++f.shuffles;
  switching_to_scheduler(&f.fake_stack);
  f.scheduler = std::move(f.scheduler).resume();
  in_thread(f.fake_stack);
}

bctx::fiber start_thread(std::size_t i) {
  return bctx::fiber(std::allocator_arg, PooledStack(t_stacks[i].get()),
                     [i](bctx::fiber&& scheduler) {
                       in_thread(nullptr);
                       Block& b = *t_block;
                       b.fibers[i].scheduler = std::move(scheduler);
                       (*b.body)();
                       b.fibers[i].state = State::kDone;
                       switching_to_scheduler(nullptr);
                       return std::move(b.fibers[i].scheduler);
                     });
}

std::string thread_name(const Fiber& f) {
  return "thread (" + std::to_string(f.index.x) + "," + std::to_string(f.index.y) + "," +
         std::to_string(f.index.z) + ")";
}

// After a pass, every thread waits or has ended. Releases the block barrier
// when all live threads wait there, and each warp whose lanes all wait in a
// shuffle; false (with the error recorded) when the block cannot go on.
bool release_waiters(Block& b, bool& all_done) {
  std::size_t live = 0, at_barrier = 0;
  for (const Fiber& f : b.fibers) {
    live += f.state != State::kDone;
    at_barrier += f.state == State::kAtBarrier;
  }
  all_done = live == 0;
  if (all_done) return true;
  if (at_barrier == live) {
    const Fiber* first = nullptr;
    for (Fiber& f : b.fibers) {
      if (f.state != State::kAtBarrier) continue;
      if (first && (f.barriers != first->barriers || f.line != first->line ||
                    std::strcmp(f.file, first->file) != 0)) {
        fail_block(thread_name(f) + " and " + thread_name(*first) +
                   " wait at different __syncthreads (a barrier in divergent code)");
        return false;
      }
      first = first ? first : &f;
      f.state = State::kRunnable;
    }
    return true;
  }
  bool released = false;
  for (std::size_t w = 0; w < b.fibers.size(); w += kWarpSize) {
    const std::size_t end = std::min(b.fibers.size(), w + kWarpSize);
    std::size_t in_shuffle = 0;
    for (std::size_t i = w; i < end; ++i) in_shuffle += b.fibers[i].state == State::kInShuffle;
    if (in_shuffle == 0) continue;
    for (std::size_t i = w; i < end; ++i) {
      const Fiber& f = b.fibers[i];
      if (f.state != State::kInShuffle || f.shuffles != b.fibers[w].shuffles) {
        fail_block("a full-mask shuffle of warp " + std::to_string(w / kWarpSize) + " where " +
                   thread_name(f) +
                   (f.state == State::kDone ? " has ended" : " is not in the same shuffle"));
        return false;
      }
    }
    for (std::size_t i = w; i < end; ++i) b.fibers[i].state = State::kRunnable;
    released = true;
  }
  if (!released) fail_block("deadlock: no thread of the block can go on");
  return released;
}

bool run_block(Block& b, dim3 block) {
  const std::size_t n = b.fibers.size();
  ++b.generation;
  while (t_stacks.size() < n) t_stacks.push_back(std::make_unique<char[]>(kStackBytes));
  for (std::size_t i = 0; i < n; ++i) {
    Fiber& f = b.fibers[i];
    f.state = State::kRunnable;
    f.barriers = f.shuffles = 0;
    f.index = {static_cast<unsigned>(i % block.x), static_cast<unsigned>(i / block.x % block.y),
               static_cast<unsigned>(i / (block.x * block.y))};
    f.thread = start_thread(i);
  }
  const bool reverse = reverse_order();
  for (;;) {
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = reverse ? n - 1 - k : k;
      if (b.fibers[i].state != State::kRunnable) continue;
      b.current = static_cast<int>(i);
      threadIdx = b.fibers[i].index;
      switching_to_thread(t_stacks[i].get());
      b.fibers[i].thread = std::move(b.fibers[i].thread).resume();
      back_in_scheduler();
      if (b.failed) return false;
    }
    bool all_done = false;
    if (!release_waiters(b, all_done)) return false;
    if (all_done) return true;
  }
}

}  // namespace

void run_grid(dim3 grid, dim3 block, const char* kernel, const ThreadBody& body,
              std::size_t dynamic_shared) {
  if (!configuration_is_valid(grid, block, kernel)) return;
  const DynamicShared shared(dynamic_shared);
  Block b;
  b.body = &body;
  b.dynamic = shared.p;
  b.dynamic_bytes = dynamic_shared;
  b.fibers.resize(static_cast<std::size_t>(block.x) * block.y * block.z);
  Block* outer = std::exchange(t_block, &b);
  gridDim = grid;
  blockDim = block;
  const std::uint64_t blocks = std::uint64_t{grid.x} * grid.y * grid.z;
  for (std::uint64_t k = 0; k < blocks; ++k) {
    const std::uint64_t i = reverse_order() ? blocks - 1 - k : k;
    blockIdx = {static_cast<unsigned>(i % grid.x), static_cast<unsigned>(i / grid.x % grid.y),
                static_cast<unsigned>(i / (std::uint64_t{grid.x} * grid.y))};
    if (!run_block(b, block)) {
      abandon(b);
      name_failed_block(kernel, blockIdx);
      t_block = outer;
      return;
    }
  }
  t_block = outer;
  count_launch(kernel);
}

void sync_block(const char* file, int line) {
  if (t_block) {
    Fiber& f = t_block->fibers[static_cast<std::size_t>(t_block->current)];
    f.file = file;
    f.line = line;
  }
  wait_as(State::kAtBarrier);
}

std::uint64_t exchange_in_warp(std::uint64_t v, int (*source)(int lane, int arg, int width),
                               int arg, int width) {
  Block& b = *t_block;
  const auto me = static_cast<std::size_t>(b.current);
  b.fibers[me].value = v;
  wait_as(State::kInShuffle);  // every lane has stored its value
  const int lane = static_cast<int>(me % kWarpSize);
  const int src = source(lane, arg, width);
  std::uint64_t result = v;
  if (src >= 0) {
    const std::size_t from = me - static_cast<std::size_t>(lane) + static_cast<std::size_t>(src);
    if (from >= b.fibers.size()) {
      fail_block(thread_name(b.fibers[me]) + " shuffles from lane " + std::to_string(src) +
                 ", which this block does not have");
      wait_as(State::kDone);
    }
    result = b.fibers[from].value;
  }
  wait_as(State::kInShuffle);  // every lane has read before anyone stores again
  return result;
}

void fresh_shared(void* p, std::size_t bytes) {
  if (!t_block) return;
  auto [at, first] = t_block->fresh.try_emplace(p, t_block->generation);
  if (!first && at->second == t_block->generation) return;  // filled in this block
  at->second = t_block->generation;
  std::memset(p, 0xFF, bytes);
}

void* dynamic_shared() {
  if (!t_block) return nullptr;
  fresh_shared(t_block->dynamic, t_block->dynamic_bytes);
  return t_block->dynamic;
}

void within_launch_bounds(unsigned max_threads) {
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  if (threads <= max_threads) return;
  set_error(cudaErrorLaunchOutOfResources,
            std::to_string(threads) + " threads a block, over the kernel's __launch_bounds__(" +
                std::to_string(max_threads) + ")");
  t_block->failed = true;
  wait_as(State::kDone);
}

bool runs_last_in_warp() {
  const Block& b = *t_block;
  const auto me = static_cast<std::size_t>(b.current);
  const std::size_t first = me - me % kWarpSize;
  const std::size_t last = std::min(first + kWarpSize, b.fibers.size()) - 1;
  return me == (reverse_order() ? first : last);
}

std::uint64_t or_in_warp(std::uint64_t v) {
  Block& b = *t_block;
  const auto me = static_cast<std::size_t>(b.current);
  b.fibers[me].value = v;
  wait_as(State::kInShuffle);  // every lane has stored its value
  const std::size_t first = me - me % kWarpSize;
  const std::size_t end = std::min(first + kWarpSize, b.fibers.size());
  std::uint64_t all = 0;
  for (std::size_t f = first; f < end; ++f) all |= b.fibers[f].value;
  wait_as(State::kInShuffle);  // every lane has read before anyone stores again
  return all;
}

}  // namespace dptrain_emu

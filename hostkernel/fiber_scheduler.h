// Runs a CUDA grid on the CPU: the execution engine behind every host kernel
// library (linked statically into each, with hidden visibility, so two
// libraries in one agent never share or interpose each other's state).
//
//   GridLaunch launch;
//   launch.grid = {4, 1, 1}; launch.block = {256, 1, 1};
//   launch.body = &CallKernel;  // runs the kernel for the current thread
//   launch.args = &typed_args;
//   int err = RunGrid(launch);  // 0, or a cudaError_t value
//
// Model. Each CUDA thread of a block is a fiber (ucontext, its own pooled
// stack with a guard page). The fibers of a block run on one OS thread; a
// fiber runs until it finishes or reaches a barrier, then the next one runs.
// __syncthreads() parks the fiber until every live fiber of its block arrived.
// Ordinary launches run blocks one after another, in x, y, z order, on the
// calling thread. Cooperative launches run every block at once, each on its
// own OS thread (so `static thread_local` __shared__ variables stay per
// block), and grid.sync() is a barrier across those threads (bounded wait).
//
// Stacks: REVENANT_HOST_KERNEL_STACK_KB (default 64) per fiber, read once.
// Deep recursion or big local arrays in a kernel need more.
#ifndef REVENANT_HOSTKERNEL_FIBER_SCHEDULER_H_
#define REVENANT_HOSTKERNEL_FIBER_SCHEDULER_H_

#include <cstddef>
#include <string>

#include "hostkernel/host_kernel_abi.h"

#pragma GCC visibility push(hidden)

namespace revenant {
namespace hostkernel {

// cudaError_t values the scheduler reports (kept numeric: no CUDA library).
constexpr int kErrSuccess = 0;
constexpr int kErrInvalidValue = 1;
constexpr int kErrLaunchFailure = 719;
// CUDA 13 with driver 580 reports every invalid launch configuration (zero
// or oversized grid/block dimensions, >1024 threads per block, too much
// dynamic shared memory) as cudaErrorInvalidValue, not
// cudaErrorInvalidConfiguration: measured on an H200 with <<<>>> and
// cudaLaunchKernel. The host backend answers the same.
constexpr int kErrInvalidLaunchConfig = kErrInvalidValue;
constexpr int kErrCooperativeLaunchTooLarge = 720;

// Limits of the emulated device (an H200's).
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockDimX = 1024, kMaxBlockDimY = 1024, kMaxBlockDimZ = 64;
constexpr unsigned kMaxGridDimX = 0x7fffffffu, kMaxGridDimYZ = 65535;
constexpr size_t kMaxSharedBytes = 232448;  // 227 KiB, the opt-in maximum
// A cooperative grid must be co-resident: one OS thread per block here.
constexpr unsigned kMaxCooperativeBlocks = 256;
constexpr unsigned long long kMaxCooperativeThreads = 65536;
// How long a block waits in grid.sync() for the other blocks.
constexpr int kGridBarrierTimeoutSeconds = 120;

struct GridLaunch {
  RevenantDim3 grid{1, 1, 1};
  RevenantDim3 block{1, 1, 1};
  size_t shared_bytes = 0;
  bool cooperative = false;
  // Runs the kernel body for the current CUDA thread; `args` is passed back.
  void (*body)(const void* args) = nullptr;
  const void* args = nullptr;
};

// Validates the configuration as CUDA 13 does, then runs every thread of the
// grid to completion before returning. Returns a cudaError_t value; the
// reason is in LastErrorMessage().
int RunGrid(const GridLaunch& launch);

// The reason for the last failed RunGrid on this thread, "" after success.
const char* LastErrorMessage();

// Checks the launch configuration only (used by RunGrid).
int ValidateLaunch(const GridLaunch& launch, std::string* why);

}  // namespace hostkernel
}  // namespace revenant

#pragma GCC visibility pop

#endif  // REVENANT_HOSTKERNEL_FIBER_SCHEDULER_H_

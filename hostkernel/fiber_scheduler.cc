#include "hostkernel/fiber_scheduler.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hostkernel/cuda_host_compat.h"

// The "special registers" declared in cuda_host_compat.h.
__thread uint3 threadIdx;
__thread uint3 blockIdx;
__thread uint3 blockDim;
__thread uint3 gridDim;

#pragma GCC visibility push(hidden)

namespace revenant {
namespace hostkernel {
namespace {

size_t PageBytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

size_t StackBytes() {
  static const size_t bytes = [] {
    size_t kb = 64;
    // The one knob not read through common/knobs.h: this runtime is linked
    // into every host kernel library, which carries no Revenant library.
    if (const char* env = std::getenv("REVENANT_HOST_KERNEL_STACK_KB")) {
      long v = std::strtol(env, nullptr, 10);
      if (v >= 16) kb = static_cast<size_t>(v);
    }
    size_t b = kb * 1024;
    return (b + PageBytes() - 1) / PageBytes() * PageBytes();
  }();
  return bytes;
}

// A fiber stack with a PROT_NONE guard page below it, so an overflow faults
// instead of silently corrupting the neighbouring fiber's stack.
struct Stack {
  char* mapping = nullptr;  // guard page + usable stack
  size_t usable = 0;
  char* usable_base() const { return mapping + PageBytes(); }
};

// Stacks are expensive to map and cheap to keep: each OS thread keeps the
// ones it used for the next launch (a block needs at most 1024).
class StackPool {
 public:
  ~StackPool() {
    for (Stack& s : free_) munmap(s.mapping, s.usable + PageBytes());
  }
  bool Get(Stack* out) {
    if (!free_.empty()) {
      *out = free_.back();
      free_.pop_back();
      return true;
    }
    const size_t usable = StackBytes();
    void* m = mmap(nullptr, usable + PageBytes(), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) return false;
    if (mprotect(m, PageBytes(), PROT_NONE) != 0) {
      munmap(m, usable + PageBytes());
      return false;
    }
    out->mapping = static_cast<char*>(m);
    out->usable = usable;
    return true;
  }
  void Put(const Stack& s) { free_.push_back(s); }

 private:
  std::vector<Stack> free_;
};

thread_local StackPool tls_stack_pool;
thread_local std::string tls_error;

// The OS-level barrier behind grid.sync(): one participant per block thread.
// Waits are bounded; a timeout or a failed block breaks the barrier for all.
class OsGridBarrier {
 public:
  explicit OsGridBarrier(unsigned participants) : expected_(participants) {}

  bool Arrive() {
    std::unique_lock<std::mutex> lock(mu_);
    if (broken_) return false;
    if (++arrived_ == expected_) {
      ReleaseLocked();
      return true;
    }
    const uint64_t generation = generation_;
    const bool released = cv_.wait_for(
        lock, std::chrono::seconds(kGridBarrierTimeoutSeconds),
        [&] { return generation_ != generation || broken_; });
    if (!released) BreakLocked();
    return generation_ != generation;
  }
  // A block that finished no longer takes part in later grid barriers.
  void Leave() {
    std::lock_guard<std::mutex> lock(mu_);
    --expected_;
    if (arrived_ > 0 && arrived_ == expected_) ReleaseLocked();
  }
  void Break() {
    std::lock_guard<std::mutex> lock(mu_);
    BreakLocked();
  }

 private:
  void ReleaseLocked() {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  }
  void BreakLocked() {
    broken_ = true;
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  unsigned expected_;
  unsigned arrived_ = 0;
  uint64_t generation_ = 0;
  bool broken_ = false;
};

// ---- fiber context switch ------------------------------------------------
// glibc's swapcontext/getcontext/setcontext save and restore the signal mask
// with a system call each time: three syscalls per CUDA thread measured 4.2 s
// for a 1M-thread vector add. On x86-64 fibers therefore switch with the
// small routine below, which saves exactly what the ABI says a callee must
// preserve (rbx, rbp, r12-r15, rsp, MXCSR and the x87 control word); the
// signal mask is the same for every fiber of a thread anyway. Elsewhere the
// ucontext functions are used as they are.
#if defined(__x86_64__)

extern "C" void revenant_hk_switch_stack(void** save_sp, void* load_sp);
asm(R"(
  .text
  .p2align 4
  .globl revenant_hk_switch_stack
  .hidden revenant_hk_switch_stack
  .type revenant_hk_switch_stack, @function
revenant_hk_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size revenant_hk_switch_stack, .-revenant_hk_switch_stack
)");

struct Context {
  void* sp = nullptr;
};

// Lays out a fresh stack so that the first switch "returns" into `entry`
// with the stack aligned as after a call. `entry` must never return.
void ContextInit(Context* c, char* stack_base, size_t stack_bytes, void (*entry)()) {
  uintptr_t top = reinterpret_cast<uintptr_t>(stack_base + stack_bytes) & ~uintptr_t{15};
  uint64_t* sp = reinterpret_cast<uint64_t*>(top);
  *--sp = 0;                                     // fake return address of entry
  *--sp = reinterpret_cast<uint64_t>(entry);     // popped by `ret`
  for (int i = 0; i < 6; ++i) *--sp = 0;         // rbp rbx r12 r13 r14 r15
  --sp;
  const uint32_t mxcsr = 0x1f80;                 // defaults: all exceptions masked
  const uint16_t x87_cw = 0x037f;
  std::memcpy(reinterpret_cast<char*>(sp), &mxcsr, 4);
  std::memcpy(reinterpret_cast<char*>(sp) + 4, &x87_cw, 2);
  c->sp = sp;
}

inline void ContextSwitch(Context* from, Context* to) {
  revenant_hk_switch_stack(&from->sp, to->sp);
}

#else  // !__x86_64__

struct Context {
  ucontext_t uc;  // not movable: glibc points into it (fpregs)
};

void ContextInit(Context* c, char* stack_base, size_t stack_bytes, void (*entry)()) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack_base;
  c->uc.uc_stack.ss_size = stack_bytes;
  c->uc.uc_link = nullptr;
  makecontext(&c->uc, entry, 0);
}

inline void ContextSwitch(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }

#endif  // __x86_64__

enum class FiberState { kRunnable, kBlockWait, kGridWait, kDone };

struct Fiber {
  Context context;
  Stack stack;
  uint3 thread_idx;
  FiberState state;
};

// One block being run by one OS thread.
struct BlockRun {
  const GridLaunch* launch = nullptr;
  OsGridBarrier* grid_barrier = nullptr;  // cooperative launches only
  void* dynamic_shared = nullptr;
  Fiber* fibers = nullptr;
  unsigned num_fibers = 0;
  unsigned live = 0;
  unsigned arrived_block = 0;
  Fiber* current = nullptr;
  Context scheduler;
  std::string error;
};

thread_local BlockRun* tls_block = nullptr;

void ReleaseBlockWaiters(BlockRun* b) {
  for (unsigned i = 0; i < b->num_fibers; ++i) {
    if (b->fibers[i].state == FiberState::kBlockWait) {
      b->fibers[i].state = FiberState::kRunnable;
    }
  }
  b->arrived_block = 0;
}

void FiberEntry() {
  BlockRun* b = tls_block;
  b->launch->body(b->launch->args);
  b = tls_block;  // same OS thread, but do not trust a cached value
  b->current->state = FiberState::kDone;
  --b->live;
  // Threads that exited no longer count for __syncthreads, as on the device.
  if (b->arrived_block > 0 && b->arrived_block == b->live) ReleaseBlockWaiters(b);
  // Back to the scheduler for good: a finished fiber is never resumed.
  ContextSwitch(&b->current->context, &b->scheduler);
  std::abort();
}

// Runs every thread of block `block_idx` to completion on this OS thread.
int RunBlock(BlockRun* b, uint3 block_idx) {
  const RevenantDim3& bd = b->launch->block;
  blockIdx = block_idx;
  blockDim = make_uint3(bd.x, bd.y, bd.z);
  gridDim = make_uint3(b->launch->grid.x, b->launch->grid.y, b->launch->grid.z);
  for (unsigned i = 0; i < b->num_fibers; ++i) {
    Fiber& f = b->fibers[i];
    f.thread_idx = make_uint3(i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y));
    f.state = FiberState::kRunnable;
    if (f.stack.mapping == nullptr && !tls_stack_pool.Get(&f.stack)) {
      b->error = "cannot map a fiber stack";
      return kErrLaunchFailure;
    }
    ContextInit(&f.context, f.stack.usable_base(), f.stack.usable, &FiberEntry);
  }
  b->live = b->num_fibers;
  b->arrived_block = 0;
  while (b->live > 0) {
    bool ran = false;
    for (unsigned i = 0; i < b->num_fibers; ++i) {
      Fiber& f = b->fibers[i];
      if (f.state != FiberState::kRunnable) continue;
      ran = true;
      threadIdx = f.thread_idx;
      b->current = &f;
      ContextSwitch(&b->scheduler, &f.context);
    }
    if (b->live == 0 || ran) continue;
    // Nothing could run: either the whole block waits in grid.sync(), or it
    // can never make progress again.
    unsigned grid_waiters = 0;
    for (unsigned i = 0; i < b->num_fibers; ++i) {
      if (b->fibers[i].state == FiberState::kGridWait) ++grid_waiters;
    }
    if (!b->error.empty()) return kErrLaunchFailure;
    if (b->grid_barrier == nullptr || grid_waiters != b->live) {
      b->error = "deadlock: the live threads of a block wait at different barriers";
      return kErrLaunchFailure;
    }
    if (!b->grid_barrier->Arrive()) {
      b->error = "grid.sync() failed: another block failed or the wait timed out";
      return kErrLaunchFailure;
    }
    for (unsigned i = 0; i < b->num_fibers; ++i) {
      if (b->fibers[i].state == FiberState::kGridWait) {
        b->fibers[i].state = FiberState::kRunnable;
      }
    }
  }
  return kErrSuccess;
}

// Runs the blocks [first, first + count) in x, y, z order on this OS thread.
int RunBlocks(const GridLaunch& launch, OsGridBarrier* barrier,
              unsigned long long first, unsigned long long count,
              std::string* error) {
  const unsigned threads = launch.block.x * launch.block.y * launch.block.z;
  std::unique_ptr<Fiber[]> fibers(new Fiber[threads]());
  void* shared = nullptr;
  if (launch.shared_bytes > 0) {
    shared = std::aligned_alloc(256, (launch.shared_bytes + 255) / 256 * 256);
  }
  BlockRun run;
  run.launch = &launch;
  run.grid_barrier = barrier;
  run.dynamic_shared = shared;
  run.fibers = fibers.get();
  run.num_fibers = threads;
  tls_block = &run;
  int err = kErrSuccess;
  const unsigned long long gx = launch.grid.x, gy = launch.grid.y;
  for (unsigned long long n = first; n < first + count && err == kErrSuccess; ++n) {
    uint3 idx = make_uint3(static_cast<unsigned>(n % gx),
                           static_cast<unsigned>((n / gx) % gy),
                           static_cast<unsigned>(n / (gx * gy)));
    err = RunBlock(&run, idx);
  }
  tls_block = nullptr;
  // Fibers abandoned by a failure are never resumed; their stacks are reused.
  for (unsigned i = 0; i < threads; ++i) {
    if (fibers[i].stack.mapping != nullptr) tls_stack_pool.Put(fibers[i].stack);
  }
  std::free(shared);
  if (err != kErrSuccess) *error = run.error;
  return err;
}

}  // namespace

void BlockBarrier() {
  BlockRun* b = tls_block;
  if (b == nullptr) return;  // outside a launch: nothing to wait for
  if (++b->arrived_block == b->live) {
    ReleaseBlockWaiters(b);  // the last one to arrive goes straight on
    return;
  }
  b->current->state = FiberState::kBlockWait;
  ContextSwitch(&b->current->context, &b->scheduler);
}

void GridBarrier() {
  BlockRun* b = tls_block;
  if (b == nullptr) return;
  if (b->grid_barrier == nullptr && b->error.empty()) {
    b->error = "grid.sync() in a launch that is not cooperative";
  }
  // Parked until every live thread of the block is here; RunBlock then joins
  // the other blocks (or reports the error above).
  b->current->state = FiberState::kGridWait;
  ContextSwitch(&b->current->context, &b->scheduler);
}

void* DynamicSharedMemory() {
  return tls_block == nullptr ? nullptr : tls_block->dynamic_shared;
}

bool InCooperativeLaunch() {
  return tls_block != nullptr && tls_block->grid_barrier != nullptr;
}

int ValidateLaunch(const GridLaunch& l, std::string* why) {
  const RevenantDim3& g = l.grid;
  const RevenantDim3& b = l.block;
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0) {
    *why = "cudaErrorInvalidValue: a grid or block dimension is zero";
    return kErrInvalidLaunchConfig;
  }
  const unsigned long long threads = 1ull * b.x * b.y * b.z;
  if (b.x > kMaxBlockDimX || b.y > kMaxBlockDimY || b.z > kMaxBlockDimZ ||
      threads > kMaxThreadsPerBlock) {
    *why = "cudaErrorInvalidValue: block of " + std::to_string(b.x) + "x" +
           std::to_string(b.y) + "x" + std::to_string(b.z) +
           " threads exceeds 1024 threads per block (1024x1024x64 per dimension)";
    return kErrInvalidLaunchConfig;
  }
  if (g.x > kMaxGridDimX || g.y > kMaxGridDimYZ || g.z > kMaxGridDimYZ) {
    *why = "cudaErrorInvalidValue: grid exceeds 2^31-1 x 65535 x 65535 blocks";
    return kErrInvalidLaunchConfig;
  }
  if (l.shared_bytes > kMaxSharedBytes) {
    *why = "cudaErrorInvalidValue: " + std::to_string(l.shared_bytes) +
           " bytes of dynamic shared memory exceed the 232448-byte maximum";
    return kErrInvalidValue;
  }
  if (l.body == nullptr) {
    *why = "cudaErrorInvalidValue: no kernel body";
    return kErrInvalidValue;
  }
  if (l.cooperative) {
    const unsigned long long blocks = 1ull * g.x * g.y * g.z;
    if (blocks > kMaxCooperativeBlocks || blocks * threads > kMaxCooperativeThreads) {
      *why = "cudaErrorCooperativeLaunchTooLarge: " + std::to_string(blocks) +
             " blocks cannot all be co-resident (host backend limit: " +
             std::to_string(kMaxCooperativeBlocks) + " blocks, " +
             std::to_string(kMaxCooperativeThreads) + " threads)";
      return kErrCooperativeLaunchTooLarge;
    }
  }
  return kErrSuccess;
}

int RunGrid(const GridLaunch& launch) {
  tls_error.clear();
  if (tls_block != nullptr) {
    tls_error = "cudaErrorNotSupported: kernel launch from inside a kernel";
    return 801;  // cudaErrorNotSupported
  }
  int err = ValidateLaunch(launch, &tls_error);
  if (err != kErrSuccess) return err;
  const unsigned long long blocks =
      1ull * launch.grid.x * launch.grid.y * launch.grid.z;
  if (!launch.cooperative) {
    err = RunBlocks(launch, nullptr, 0, blocks, &tls_error);
    if (err != kErrSuccess) tls_error = "cudaErrorLaunchFailure: " + tls_error;
    return err;
  }
  // Cooperative: all blocks live at once, one OS thread each.
  OsGridBarrier barrier(static_cast<unsigned>(blocks));
  std::vector<int> errors(blocks, kErrSuccess);
  std::vector<std::string> messages(blocks);
  std::vector<std::thread> threads;
  threads.reserve(blocks);
  for (unsigned long long n = 0; n < blocks; ++n) {
    threads.emplace_back([&, n] {
      errors[n] = RunBlocks(launch, &barrier, n, 1, &messages[n]);
      if (errors[n] != kErrSuccess) barrier.Break();
      barrier.Leave();
    });
  }
  for (std::thread& t : threads) t.join();
  for (unsigned long long n = 0; n < blocks; ++n) {
    if (errors[n] != kErrSuccess) {
      tls_error = "cudaErrorLaunchFailure: block " + std::to_string(n) + ": " +
                  messages[n];
      return errors[n];
    }
  }
  return kErrSuccess;
}

const char* LastErrorMessage() { return tls_error.c_str(); }

}  // namespace hostkernel
}  // namespace revenant

#pragma GCC visibility pop

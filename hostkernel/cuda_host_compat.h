// Makes CUDA kernel source compile with g++ and run on the CPU.
//
// Include this before a kernel source (.cuh) in a host kernel library:
//
//   #include "hostkernel/cuda_host_compat.h"
//   #include "tests/apps/vector_add_kernels.cuh"
//   #include "hostkernel/host_kernel.h"
//   REVENANT_HOST_KERNEL(vector_add);
//
// What it provides, and how each piece maps CUDA's execution model onto one
// CPU thread (the scheduler is in fiber_scheduler.cc):
//  - __global__/__device__/__host__ expand to nothing, so a kernel is an
//    ordinary function. It keeps its namespace and signature, hence the same
//    Itanium-mangled name nvcc registers for the device function.
//  - threadIdx/blockIdx/blockDim/gridDim are per-OS-thread variables. The
//    threads of a block are user-level fibers (ucontext) on one OS thread;
//    the scheduler rewrites these variables before it resumes each fiber.
//  - __syncthreads() suspends the fiber until every live thread of its block
//    has arrived. A kernel that never synchronizes simply runs each fiber to
//    completion.
//  - __shared__ is `static thread_local`: one copy per OS thread. Blocks of an
//    ordinary launch run one after another on the launching thread, so the
//    fibers of the running block (and only they) see that copy, like a block's
//    shared memory; the next block reuses it, as the next block on an SM
//    reuses shared memory without clearing it. thread_local (rather than plain
//    static) keeps launches on different streams, hence different agent
//    threads, apart, and lets a cooperative launch run each block on its own
//    OS thread with its own copy.
//  - Dynamic shared memory: g++ cannot give `extern __shared__ T x[];` a
//    per-launch address, so portable kernels write
//    REVENANT_DYNAMIC_SHARED(T, x); (hostkernel/kernel_portability.h), which is
//    that very declaration under nvcc and a pointer into the launch's
//    sharedMem-sized buffer here.
//  - atomics via GCC __atomic builtins (so they are real atomics even on
//    memory another launch or the application touches), __threadfence*,
//    warpSize, min/max, a few fast-math intrinsics, and the cooperative-groups
//    subset this_thread_block().sync() / this_grid().sync().
// Not provided: warp shuffles/votes/__syncwarp, textures/surfaces, dynamic
// parallelism. `__device__`/`__constant__` variables are plain globals here;
// a host kernel library registers them (REVENANT_HOST_DEVICE_VARIABLE,
// host_kernel.h) so cudaMemcpyToSymbol & co. reach the same storage.
#ifndef REVENANT_HOSTKERNEL_CUDA_HOST_COMPAT_H_
#define REVENANT_HOSTKERNEL_CUDA_HOST_COMPAT_H_

#if defined(__CUDACC__)
#error "cuda_host_compat.h is for g++ builds of kernel sources, not for nvcc"
#endif

// Defined before the CUDA headers: crt/host_defines.h only defines these when
// they are not yet defined, and its own versions (GNU attributes g++ ignores
// with a warning) would not make __shared__ shared.
#define __global__
#define __device__
#define __host__
#define __shared__ static thread_local
#define __constant__ static
#define __managed__
#define __grid_constant__
#define __launch_bounds__(...)
#define __noinline__ __attribute__((noinline))

// The real <cooperative_groups.h> needs nvcc; a kernel source may include it
// unconditionally and gets the subset below instead.
#define _COOPERATIVE_GROUPS_H_

#include <cuda_runtime_api.h>  // dim3, uint3, float4, cudaError_t ...
#include <vector_functions.h>  // make_float4 ...

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#define REVENANT_HK_INTERNAL __attribute__((visibility("hidden")))

// Per-OS-thread "special registers", rewritten by the scheduler before each
// fiber resumes. __thread (not thread_local) so reads need no TLS wrapper
// call; uint3 converts to dim3 where code wants one.
extern __thread uint3 threadIdx REVENANT_HK_INTERNAL;
extern __thread uint3 blockIdx REVENANT_HK_INTERNAL;
extern __thread uint3 blockDim REVENANT_HK_INTERNAL;
extern __thread uint3 gridDim REVENANT_HK_INTERNAL;
constexpr int warpSize = 32;

namespace revenant {
namespace hostkernel {
// Implemented in fiber_scheduler.cc; callable only from inside a launch.
REVENANT_HK_INTERNAL void BlockBarrier();
REVENANT_HK_INTERNAL void GridBarrier();
REVENANT_HK_INTERNAL void* DynamicSharedMemory();
REVENANT_HK_INTERNAL bool InCooperativeLaunch();
}  // namespace hostkernel
}  // namespace revenant

inline void __syncthreads() { ::revenant::hostkernel::BlockBarrier(); }
inline int __syncthreads_count(int) = delete;  // not emulated (needs votes)
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// cudaGraphSetConditional: the host backend's agent exports
// revenant_host_set_conditional (agent/backends/host/host_backend.cc), which
// sets the condition of the graph launch running the kernel; a library
// loaded elsewhere (tests) has no such agent, and a kernel setting a
// condition there stops loudly.
extern "C" void revenant_host_set_conditional(unsigned long long handle, unsigned int value)
    __attribute__((weak));
inline void cudaGraphSetConditional(cudaGraphConditionalHandle handle, unsigned int value) {
  if (revenant_host_set_conditional == nullptr) {
    std::fprintf(stderr,
                 "cudaGraphSetConditional: no host backend agent in this process to run "
                 "conditional graph nodes\n");
    std::abort();
  }
  revenant_host_set_conditional(handle, value);
}

#define REVENANT_DYNAMIC_SHARED(type, name) \
  type* name = static_cast<type*>(::revenant::hostkernel::DynamicSharedMemory())

// ---- atomics: the old value is returned, as on the device ----------------
namespace revenant {
namespace hostkernel {
namespace internal {
// Read-modify-write through a compare-and-swap on the bit pattern, for the
// floating-point forms GCC has no fetch_* builtin for.
template <typename T, typename Bits, typename Op>
inline T AtomicRmwBits(T* address, Op op) {
  static_assert(sizeof(T) == sizeof(Bits), "size mismatch");
  Bits* bits = reinterpret_cast<Bits*>(address);
  Bits expected = __atomic_load_n(bits, __ATOMIC_RELAXED);
  for (;;) {  // retries only while another writer changes the word
    T old_value;
    std::memcpy(&old_value, &expected, sizeof(T));
    T new_value = op(old_value);
    Bits desired;
    std::memcpy(&desired, &new_value, sizeof(T));
    if (__atomic_compare_exchange_n(bits, &expected, desired, false,
                                    __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
      return old_value;
    }
  }
}
}  // namespace internal
}  // namespace hostkernel
}  // namespace revenant

#define REVENANT_HK_INT_ATOMICS(T)                                           \
  inline T atomicAdd(T* a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
  inline T atomicSub(T* a, T v) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
  inline T atomicAnd(T* a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
  inline T atomicOr(T* a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }   \
  inline T atomicXor(T* a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
  inline T atomicExch(T* a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
  inline T atomicCAS(T* a, T compare, T v) {                                 \
    __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_SEQ_CST,     \
                                __ATOMIC_SEQ_CST);                           \
    return compare;                                                          \
  }                                                                          \
  inline T atomicMax(T* a, T v) {                                            \
    return ::revenant::hostkernel::internal::AtomicRmwBits<T, T>(            \
        a, [v](T old) { return old > v ? old : v; });                        \
  }                                                                          \
  inline T atomicMin(T* a, T v) {                                            \
    return ::revenant::hostkernel::internal::AtomicRmwBits<T, T>(            \
        a, [v](T old) { return old < v ? old : v; });                        \
  }

REVENANT_HK_INT_ATOMICS(int)
REVENANT_HK_INT_ATOMICS(unsigned int)
REVENANT_HK_INT_ATOMICS(unsigned long long)
REVENANT_HK_INT_ATOMICS(long long)
#undef REVENANT_HK_INT_ATOMICS

inline float atomicAdd(float* a, float v) {
  return ::revenant::hostkernel::internal::AtomicRmwBits<float, uint32_t>(
      a, [v](float old) { return old + v; });
}
inline double atomicAdd(double* a, double v) {
  return ::revenant::hostkernel::internal::AtomicRmwBits<double, uint64_t>(
      a, [v](double old) { return old + v; });
}
inline float atomicExch(float* a, float v) {
  return ::revenant::hostkernel::internal::AtomicRmwBits<float, uint32_t>(
      a, [v](float) { return v; });
}
// atomicInc/atomicDec wrap like the device forms: ((old >= limit) ? 0 : old+1).
inline unsigned int atomicInc(unsigned int* a, unsigned int limit) {
  return ::revenant::hostkernel::internal::AtomicRmwBits<unsigned, unsigned>(
      a, [limit](unsigned old) { return old >= limit ? 0u : old + 1; });
}
inline unsigned int atomicDec(unsigned int* a, unsigned int limit) {
  return ::revenant::hostkernel::internal::AtomicRmwBits<unsigned, unsigned>(
      a, [limit](unsigned old) {
        return (old == 0 || old > limit) ? limit : old - 1;
      });
}

// ---- device math and helpers the host lacks ------------------------------
// Device code calls unqualified min/max on mixed integer types; these
// overloads mirror the device library's set.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
template <typename T>
inline T __ldg(const T* p) { return *p; }
inline long long clock64() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// ---- cooperative groups subset -------------------------------------------
namespace cooperative_groups {

class thread_block {
 public:
  void sync() const { ::revenant::hostkernel::BlockBarrier(); }
  unsigned thread_rank() const {
    return (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  }
  unsigned size() const { return blockDim.x * blockDim.y * blockDim.z; }
  unsigned num_threads() const { return size(); }
  dim3 group_index() const { return dim3(blockIdx); }
  dim3 thread_index() const { return dim3(threadIdx); }
  dim3 group_dim() const { return dim3(blockDim); }
};

class grid_group {
 public:
  // Valid only in a cooperative launch, as on the device.
  bool is_valid() const { return ::revenant::hostkernel::InCooperativeLaunch(); }
  void sync() const { ::revenant::hostkernel::GridBarrier(); }
  unsigned long long num_blocks() const {
    return 1ull * gridDim.x * gridDim.y * gridDim.z;
  }
  unsigned long long block_rank() const {
    return (1ull * blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  }
  unsigned long long size() const {
    return num_blocks() * blockDim.x * blockDim.y * blockDim.z;
  }
  unsigned long long num_threads() const { return size(); }
  unsigned long long thread_rank() const {
    return block_rank() * (blockDim.x * blockDim.y * blockDim.z) +
           this_block_rank();
  }
  dim3 group_dim() const { return dim3(gridDim); }

 private:
  static unsigned this_block_rank() {
    return (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  }
};

inline thread_block this_thread_block() { return thread_block(); }
inline grid_group this_grid() { return grid_group(); }
template <typename Group>
inline void sync(const Group& g) { g.sync(); }

}  // namespace cooperative_groups

#endif  // REVENANT_HOSTKERNEL_CUDA_HOST_COMPAT_H_

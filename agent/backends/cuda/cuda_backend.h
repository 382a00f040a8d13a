// CudaBackend: the real GPU. The agent is an ordinary CUDA program: runtime
// calls reach libcudart, driver calls go through entry points obtained from
// the runtime (cudaGetDriverEntryPointByVersion), so revenant-agent does not
// link libcuda and still starts on machines without a GPU.
//
//   BackendOptions options;              // rank 0, device 0
//   absl::StatusOr<std::unique_ptr<Backend>> b = MakeCudaBackend(options);
//   void* p;  (*b)->cudaMalloc(&p, 1 << 20);   // 0x200000000000 for rank 0
//
// Device memory: one virtual range reserved at a fixed address
// (cuMemAddressReserve; default kDefaultDeviceBase + rank * kRankStride, 64
// GiB; see kDefaultDeviceBase), sub-allocated by a FixedRangeAllocator. Physical memory is mapped in
// 2 MiB-granular chunks (cuMemCreate + cuMemMap + cuMemSetAccess) as the
// allocator's high-water mark grows and stays mapped until Reset. The same
// allocation sequence therefore gives the same device addresses in a
// replacement agent. Stream-ordered allocations come from the same allocator;
// a cudaFreeAsync returns its block at the next point of the call sequence
// that covers the stream (its synchronize, cudaDeviceSynchronize, cudaFree,
// or an allocation that would otherwise fail), never when the GPU happens to
// finish, so allocation stays deterministic.
//
// Device pointers given to copies and memsets are checked against the live
// allocations and the registered shared host ranges: a bad one gives
// cudaErrorInvalidValue instead of a fault.
//
// Everything else (streams, events, graphs, queries, occupancy, function
// attributes) is the runtime's or the driver's own behaviour and errors.
// Kernel handles (KernelInfo::handle) are CUfunctions.
//
// Thread safety: all methods may be called from several threads.
#ifndef REVENANT_AGENT_BACKENDS_CUDA_CUDA_BACKEND_H_
#define REVENANT_AGENT_BACKENDS_CUDA_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "agent/backend.h"

namespace revenant {
namespace agent {

namespace cuda {
// Rank r's device range starts at kDefaultDeviceBase + r * kRankStride.
// 0x200000000000 (32 TiB) lies far from where Linux puts shared libraries,
// thread stacks and mmap()ed memory (the randomized top 1 TiB below
// 0x7fffffffffff: on the H200 one agent start in 12 found its own libraries
// inside a range at 0x7f0000000000), from PIE binaries and their heap
// (0x55..., 0x56...), and below the shim's pinned host memory
// (0x300000000000 + rank TiB, mapped at the same address in the agent).
// Ranks 0..15 fit below the pinned region of rank 0.
inline constexpr uint64_t kDefaultDeviceBase = 0x200000000000ull;
inline constexpr uint64_t kRankStride = 0x10000000000ull;  // 1 TiB
inline constexpr uint64_t kDefaultDeviceSize = 64ull << 30;
}  // namespace cuda

// Creates the cuda backend on options.device: initializes the device's
// primary context and reserves the device range (kFailedPrecondition, saying
// which address, when the reservation does not land there; kUnavailable when
// there is no usable GPU or driver).
absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const BackendOptions& options);

}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_BACKENDS_CUDA_CUDA_BACKEND_H_

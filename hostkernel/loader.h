// Agent-side access to host kernel libraries: the kernels the host backend
// runs in place of the GPU.
//
//   // paths from REVENANT_HOST_KERNELS=/a.so:/b.so (SplitHostKernelPaths)
//   absl::StatusOr<std::unique_ptr<HostKernelRegistry>> reg =
//       HostKernelRegistry::Load(paths);
//   const HostKernel* k = (*reg)->Find("_Z5saxpyifPKfPf");
//   // pack arguments at k->params[i].offset, then
//   absl::Status s = k->Launch({4, 1, 1}, {256, 1, 1}, 0, packed, false);
//
// Each library is a shared object exporting revenant_host_kernel_table_v1()
// (host_kernel_abi.h), built from the same kernel source nvcc compiles. A
// kernel is found by the Itanium-mangled name nvcc passes to
// __cudaRegisterFunction. Launch runs the whole grid on the calling thread
// and returns when every CUDA thread finished, so the backend calls it from
// the stream's worker thread to keep stream order.
//
// Thread safety: after Load, Find and Launch may be called from any number of
// threads concurrently (each launch keeps its state on its own thread).
#ifndef REVENANT_HOSTKERNEL_LOADER_H_
#define REVENANT_HOSTKERNEL_LOADER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hostkernel/host_kernel_abi.h"

namespace revenant {
namespace hostkernel {

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

struct ParamInfo {
  size_t offset = 0;
  size_t size = 0;
};

// The status payload (type URL) carrying the cudaError_t value of a failed
// launch as decimal text; CudaErrorOf() reads it.
inline constexpr absl::string_view kCudaErrorPayload = "revenant.dev/cuda_error";

// The cudaError_t value a Launch status stands for: 0 for OK, the payload if
// present, else 999 (cudaErrorUnknown).
int CudaErrorOf(const absl::Status& status);

class HostKernel {
 public:
  std::string name;               // mangled
  std::vector<ParamInfo> params;  // in declaration order
  size_t args_size = 0;           // bytes a packed argument buffer needs
  std::string library;            // path it came from

  // Runs the grid; `packed_args` holds every parameter at its offset (may be
  // null for a kernel without parameters). Errors, with the cudaError_t in
  // the kCudaErrorPayload payload and its name leading the message:
  //  - kInvalidArgument "cudaErrorInvalidValue: ..." for a zero dimension,
  //    more than 1024 threads per block, an oversized grid or more than
  //    227 KiB of dynamic shared memory — CUDA 13 (driver 580, measured on an
  //    H200) returns cudaErrorInvalidValue for all of these, not
  //    cudaErrorInvalidConfiguration. The 48 KiB default limit without
  //    cudaFuncSetAttribute opt-in is the backend's to enforce;
  //  - kResourceExhausted "cudaErrorCooperativeLaunchTooLarge: ...";
  //  - kInternal "cudaErrorLaunchFailure: ..." when the kernel deadlocks on a
  //    barrier (or calls grid.sync() outside a cooperative launch).
  absl::Status Launch(Dim3 grid, Dim3 block, size_t shared_bytes,
                      const void* packed_args, bool cooperative) const;

 private:
  friend class HostKernelRegistry;
  RevenantHostLaunchFn launch_ = nullptr;
  const char* (*last_error_)(void) = nullptr;
};

class HostKernelRegistry {
 public:
  // dlopens every library (RTLD_NOW | RTLD_LOCAL) and indexes its kernels.
  // Fails with kNotFound for a missing file or table symbol, kInvalidArgument
  // for an ABI version mismatch or unnamed kernels, kAlreadyExists when two
  // libraries (or one) register the same mangled name. Libraries stay loaded
  // for the registry's lifetime.
  static absl::StatusOr<std::unique_ptr<HostKernelRegistry>> Load(
      const std::vector<std::string>& paths);

  ~HostKernelRegistry();
  HostKernelRegistry(const HostKernelRegistry&) = delete;
  HostKernelRegistry& operator=(const HostKernelRegistry&) = delete;

  // The kernel registered under `mangled_name`, or nullptr. The pointer lives
  // as long as the registry.
  const HostKernel* Find(absl::string_view mangled_name) const;

  // Every kernel's mangled name, sorted.
  std::vector<std::string> Names() const;

  // A `__device__` variable of the libraries (REVENANT_HOST_DEVICE_VARIABLE),
  // by the name nvcc registers it under; nullptr if none has it.
  struct Variable {
    std::string name;
    void* address = nullptr;
    size_t size = 0;
    std::string library;
  };
  const Variable* FindVariable(absl::string_view name) const;

 private:
  HostKernelRegistry() = default;

  std::vector<void*> handles_;
  absl::flat_hash_map<std::string, std::unique_ptr<HostKernel>> kernels_;
  absl::flat_hash_map<std::string, Variable> variables_;
};

// Splits "a.so:b.so" (REVENANT_HOST_KERNELS) into paths, dropping empty ones.
std::vector<std::string> SplitHostKernelPaths(absl::string_view list);

}  // namespace hostkernel
}  // namespace revenant

#endif  // REVENANT_HOSTKERNEL_LOADER_H_

// The host backend's driver rows (api/driver.textproto, the forwarded ones):
// 32-bit memsets and the stream memory operations on its in-order streams.
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

#include "agent/backends/host/host_backend.h"
#include "common/knobs.h"

namespace revenant {
namespace agent {
namespace host {
namespace {

void* Ptr(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); }
cudaStream_t Stream(CUstream s) { return reinterpret_cast<cudaStream_t>(s); }

bool ValueReached(uint32_t word, uint32_t value, unsigned int op) {
  switch (op) {
    case CU_STREAM_WAIT_VALUE_GEQ:
      return static_cast<int32_t>(word - value) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
      return word == value;
    case CU_STREAM_WAIT_VALUE_AND:
      return (word & value) != 0;
    default:  // CU_STREAM_WAIT_VALUE_NOR
      return ~(word | value) != 0;
  }
}

}  // namespace

CUresult HostBackend::cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  CUresult r = cuMemsetD32Async(dstDevice, ui, N, nullptr);
  if (r != CUDA_SUCCESS) return r;
  // Complete on return, as cudaMemset (the legacy stream's last operation
  // is this one or a later one).
  std::shared_ptr<Marker> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done = legacy_->last();
  }
  done->Wait();
  return CUDA_SUCCESS;
}

CUresult HostBackend::cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                       CUstream hStream) {
  std::lock_guard<std::mutex> lock(mu_);
  HostStream* s = ResolveStream(Stream(hStream));
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if ((dstDevice & 3) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (N == 0) return CUDA_SUCCESS;
  if (N > SIZE_MAX / sizeof(uint32_t) || !DeviceAccessible(Ptr(dstDevice), N * sizeof(uint32_t)))
    return CUDA_ERROR_INVALID_VALUE;
  uint32_t* p = static_cast<uint32_t*>(Ptr(dstDevice));
  EnqueueLocked(s, {}, [p, ui, N]() {
    std::fill(p, p + N, static_cast<uint32_t>(ui));
    return cudaSuccess;
  });
  return CUDA_SUCCESS;
}

CUresult HostBackend::cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                              unsigned int flags) {
  std::lock_guard<std::mutex> lock(mu_);
  HostStream* s = ResolveStream(Stream(stream));
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if ((flags & ~static_cast<unsigned int>(CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)) != 0 ||
      (addr & 3) != 0 || !DeviceAccessible(Ptr(addr), sizeof(uint32_t)))
    return CUDA_ERROR_INVALID_VALUE;
  uint32_t* p = static_cast<uint32_t*>(Ptr(addr));
  EnqueueLocked(s, {}, [p, value]() {
    __atomic_store_n(p, static_cast<uint32_t>(value), __ATOMIC_SEQ_CST);
    return cudaSuccess;
  });
  return CUDA_SUCCESS;
}

CUresult HostBackend::cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                             unsigned int flags) {
  const unsigned int op = flags & ~static_cast<unsigned int>(CU_STREAM_WAIT_VALUE_FLUSH);
  std::lock_guard<std::mutex> lock(mu_);
  HostStream* s = ResolveStream(Stream(stream));
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (op > CU_STREAM_WAIT_VALUE_NOR || (addr & 3) != 0 ||
      !DeviceAccessible(Ptr(addr), sizeof(uint32_t)))
    return CUDA_ERROR_INVALID_VALUE;
  const double timeout_s =
      knobs::Double(knobs::Id::kCollectiveTimeoutS, 0, 1e6).value_or(60);
  const uint32_t* p = static_cast<const uint32_t*>(Ptr(addr));
  EnqueueLocked(s, {}, [p, value, op, timeout_s]() {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration<double>(timeout_s);
    auto pause = std::chrono::microseconds(2);
    while (!ValueReached(__atomic_load_n(p, __ATOMIC_SEQ_CST), static_cast<uint32_t>(value), op)) {
      if (std::chrono::steady_clock::now() >= deadline) return cudaErrorLaunchTimeout;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
    return cudaSuccess;
  });
  return CUDA_SUCCESS;
}

}  // namespace host
}  // namespace agent
}  // namespace revenant

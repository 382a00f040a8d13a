// Hand-written shim hooks answered locally: current device, error state,
// error strings, pointer attributes, the thread's stream capture mode,
// refused device-side NCCL.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <nccl.h>

#include "api/hook_structs.h"
#include "common/logging.h"
#include "shim/call.h"
#include "shim/runtime.h"

using revenant::shim::Runtime;

namespace {
// One agent (one device) per application process: its device is ordinal 0.
thread_local int tls_device = 0;

template <typename Fn>
Fn RealRuntime(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}
}  // namespace

extern "C" REVENANT_EXPORT cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) {
    revenant::shim::SetLastError(cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
  }
  *device = tls_device;
  return cudaSuccess;
}

extern "C" REVENANT_EXPORT cudaError_t cudaSetDevice(int device) {
  if (device != 0) {
    // As CUDA answers for a device it does not see: this process sees one.
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      REVENANT_LOG(WARNING, "shim")
          << "cudaSetDevice(" << device << "): cudaErrorInvalidDevice — under Revenant a "
          << "process sees one GPU, device 0, the one its agent serves; a process driving "
             "several GPUs is not supported: run one process per GPU (revenant-run --gpus=G)";
    }
    revenant::shim::SetLastError(cudaErrorInvalidDevice);
    return cudaErrorInvalidDevice;
  }
  tls_device = device;
  return cudaSuccess;
}

// The calling thread's stream capture interaction mode, as CUDA keeps it
// per thread (Global until the thread exchanges it).
thread_local cudaStreamCaptureMode tls_capture_mode = cudaStreamCaptureModeGlobal;

// Answered from the thread's mode kept here, and sent to the agent without
// waiting: the executor, which runs every thread's calls, takes the mode
// on as before (the calls a capture forbids depend on it), and the
// application does not wait for the executor's backlog. PyTorch exchanges
// it around allocations and event queries, ~4 times a training step. An
// invalid mode or a null pointer waits for the agent's (CUDA's) answer; so
// does every exchange with REVENANT_SHIM_ANSWERS=0.
extern "C" REVENANT_EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(
    cudaStreamCaptureMode* mode) {
  using revenant::api::ApiId;
  const bool answer = mode != nullptr &&
                      (*mode == cudaStreamCaptureModeGlobal ||
                       *mode == cudaStreamCaptureModeThreadLocal ||
                       *mode == cudaStreamCaptureModeRelaxed) &&
                      revenant::shim::ShimAnswers() && revenant::shim::CudaRuntimeAnswered();
  revenant::hooks::cudaThreadExchangeStreamCaptureModeRequest req;
  req.has_mode = mode != nullptr;
  req.mode = mode != nullptr ? static_cast<int32_t>(*mode) : 0;
  revenant::shim::Call call(ApiId::cudaThreadExchangeStreamCaptureMode, req.Size(), answer);
  if (!call.ok()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  req.Encode(call.args());
  if (!call.Send()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  // Waited for (answers off, or bad input): the agent's status; the
  // previous mode is the thread's, as CUDA keeps one per thread (the
  // executor's is every thread's).
  if (answer || call.executed_status() == 0) {
    const cudaStreamCaptureMode previous = tls_capture_mode;
    tls_capture_mode = *mode;
    *mode = previous;
  }
  return static_cast<cudaError_t>(call.status());
}

extern "C" REVENANT_EXPORT cudaError_t cudaGetLastError(void) {
  int32_t e = revenant::shim::TakeLastError();
  int32_t d = Runtime::Get()->TakeDeferredError();
  return static_cast<cudaError_t>(e != 0 ? e : d);
}

extern "C" REVENANT_EXPORT cudaError_t cudaPeekAtLastError(void) {
  int32_t e = revenant::shim::PeekLastError();
  if (e != 0) return static_cast<cudaError_t>(e);
  int32_t d = Runtime::Get()->TakeDeferredError();
  Runtime::Get()->NoteDeferredError(d);  // peek leaves it in place
  return static_cast<cudaError_t>(d);
}

// Error names and strings are pure tables: the application's own libcudart
// (loaded as its dependency, never initialized) answers them; without it a
// short fallback keeps the answer non-null.
extern "C" REVENANT_EXPORT const char* cudaGetErrorName(cudaError_t error) {
  using Fn = const char* (*)(cudaError_t);
  static Fn real = RealRuntime<Fn>("cudaGetErrorName");
  if (real != nullptr) return real(error);
  return error == cudaSuccess ? "cudaSuccess" : "cudaErrorUnknown";
}

extern "C" REVENANT_EXPORT const char* cudaGetErrorString(cudaError_t error) {
  using Fn = const char* (*)(cudaError_t);
  static Fn real = RealRuntime<Fn>("cudaGetErrorString");
  if (real != nullptr) return real(error);
  return error == cudaSuccess ? "no error" : "unrecognized error code";
}

extern "C" REVENANT_EXPORT cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes,
                                                               const void* ptr) {
  if (attributes == nullptr) return cudaErrorInvalidValue;
  Runtime* rt = Runtime::Get();
  rt->Channel();  // learn the device range
  *attributes = cudaPointerAttributes{};
  if (rt->IsDevicePointer(ptr)) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->device = 0;
    attributes->devicePointer = const_cast<void*>(ptr);
  } else if (rt->FindPinned(ptr, 1, nullptr)) {
    attributes->type = cudaMemoryTypeHost;
    attributes->device = 0;
    attributes->devicePointer = const_cast<void*>(ptr);
    attributes->hostPointer = const_cast<void*>(ptr);
  } else {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;
    attributes->hostPointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}

extern "C" REVENANT_EXPORT const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

extern "C" REVENANT_EXPORT const char* ncclGetLastError(ncclComm_t) {
  return "see the Revenant agent's log for the collective engine's last error";
}

extern "C" REVENANT_EXPORT ncclResult_t ncclDevCommCreate(ncclComm_t, const void*, void*) {
  revenant::shim::LogNotSupported("ncclDevCommCreate");
  return ncclInvalidUsage;
}

extern "C" REVENANT_EXPORT ncclResult_t ncclDevCommDestroy(ncclComm_t, const void*) {
  revenant::shim::LogNotSupported("ncclDevCommDestroy");
  return ncclInvalidUsage;
}

extern "C" REVENANT_EXPORT const char* pncclGetErrorString(ncclResult_t r)
    __attribute__((alias("ncclGetErrorString")));
extern "C" REVENANT_EXPORT const char* pncclGetLastError(ncclComm_t c)
    __attribute__((alias("ncclGetLastError")));
extern "C" REVENANT_EXPORT ncclResult_t pncclDevCommCreate(ncclComm_t, const void*, void*)
    __attribute__((alias("ncclDevCommCreate")));
extern "C" REVENANT_EXPORT ncclResult_t pncclDevCommDestroy(ncclComm_t, const void*)
    __attribute__((alias("ncclDevCommDestroy")));

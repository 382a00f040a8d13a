// The driver API rows the shim answers itself (api/driver.textproto, mode
// LOCAL): from its own knowledge (error strings, the stand-in primary
// context, pointer attributes) or through the shim's runtime rows, which the
// agent runs and journals as it does the application's own runtime calls
// (cuMemAlloc_v2 is cudaMalloc: journaled as state, rebuilt by a
// replacement; copies and memsets are replayed work). CUstream is
// cudaStream_t, CUevent is cudaEvent_t, a CUdeviceptr is the device address.
//
// Driver calls leave the runtime's last error (cudaGetLastError) as they
// found it, as natively; runtime codes become the driver's (the numbering is
// shared wherever both have the error).
//
// The primary context: the agent owns the only real context; the shim hands
// out one stand-in CUcontext for it (the same value on every call). It is
// active once the application reached the agent through the runtime (the
// agent's context exists from its start) or retained it. The current
// context is per thread, as the driver's: a thread that never set one sees
// the primary context once it is active (the runtime makes it current).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/logging.h"
#include "shim/call.h"
#include "shim/driver_status.h"
#include "shim/runtime.h"

// cuda.h renames these to their newest variants, which are rows of their own.
#undef cuDeviceGetUuid
#undef cuEventElapsedTime
extern "C" CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice dev);
extern "C" CUresult CUDAAPI cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd);

namespace revenant {
namespace shim {
namespace {

// Every CUresult of cuda.h with its meaning (cuda.h's documentation,
// shortened; the driver's own wording where it is well known).
#define REVENANT_CU_RESULTS(X) \
  X(CUDA_SUCCESS, "no error") \
  X(CUDA_ERROR_INVALID_VALUE, "invalid argument") \
  X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory") \
  X(CUDA_ERROR_NOT_INITIALIZED, "initialization error") \
  X(CUDA_ERROR_DEINITIALIZED, "driver shutting down") \
  X(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled while using external profiling tool") \
  X(CUDA_ERROR_PROFILER_NOT_INITIALIZED, "profiler not initialized: call cudaProfilerInitialize()") \
  X(CUDA_ERROR_PROFILER_ALREADY_STARTED, "profiler already started") \
  X(CUDA_ERROR_PROFILER_ALREADY_STOPPED, "profiler already stopped") \
  X(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library") \
  X(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "the call requires a newer driver") \
  X(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable") \
  X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected") \
  X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal") \
  X(CUDA_ERROR_DEVICE_NOT_LICENSED, "device doesn't have valid Grid license") \
  X(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid") \
  X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context") \
  X(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current") \
  X(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed") \
  X(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed") \
  X(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped") \
  X(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped") \
  X(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device") \
  X(CUDA_ERROR_ALREADY_ACQUIRED, "resource already acquired") \
  X(CUDA_ERROR_NOT_MAPPED, "resource not mapped") \
  X(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "resource not mapped as array") \
  X(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "resource not mapped as pointer") \
  X(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered") \
  X(CUDA_ERROR_UNSUPPORTED_LIMIT, "limit is not supported on this architecture") \
  X(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "exclusive-thread device already in use by a different thread") \
  X(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access is not supported between these two devices") \
  X(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed") \
  X(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, "invalid OpenGL or DirectX context") \
  X(CUDA_ERROR_NVLINK_UNCORRECTABLE, "uncorrectable NVLink error detected during the execution") \
  X(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "PTX JIT compiler library not found") \
  X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "the provided PTX was compiled with an unsupported toolchain") \
  X(CUDA_ERROR_JIT_COMPILATION_DISABLED, "PTX JIT compilation was disabled") \
  X(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "the provided execution affinity is not supported") \
  X(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, "the provided PTX contains unsupported call to cudaDeviceSynchronize") \
  X(CUDA_ERROR_CONTAINED, "an exception occurred on the device that is now contained by the GPU's error containment capability") \
  X(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid") \
  X(CUDA_ERROR_FILE_NOT_FOUND, "file not found") \
  X(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "shared object symbol not found") \
  X(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object initialization failed") \
  X(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS") \
  X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle") \
  X(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state") \
  X(CUDA_ERROR_LOSSY_QUERY, "attempted introspection would be semantically lossy") \
  X(CUDA_ERROR_NOT_FOUND, "named symbol not found") \
  X(CUDA_ERROR_NOT_READY, "device not ready") \
  X(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered") \
  X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch") \
  X(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated") \
  X(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, "launch uses incompatible texturing mode") \
  X(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled") \
  X(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled") \
  X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process") \
  X(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed") \
  X(CUDA_ERROR_ASSERT, "device-side assert triggered") \
  X(CUDA_ERROR_TOO_MANY_PEERS, "peer mapping resources exhausted") \
  X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped") \
  X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region") \
  X(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error") \
  X(CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered") \
  X(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address") \
  X(CUDA_ERROR_INVALID_ADDRESS_SPACE, "operation not supported on global/shared address space") \
  X(CUDA_ERROR_INVALID_PC, "invalid program counter") \
  X(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure") \
  X(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch") \
  X(CUDA_ERROR_TENSOR_MEMORY_LEAK, "tensor memory not completely freed") \
  X(CUDA_ERROR_NOT_PERMITTED, "operation not permitted") \
  X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported") \
  X(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized") \
  X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system has unsupported display driver / cuda driver combination") \
  X(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "forward compatibility was attempted on non supported HW") \
  X(CUDA_ERROR_MPS_CONNECTION_FAILED, "MPS client failed to connect to the MPS control daemon or the MPS server") \
  X(CUDA_ERROR_MPS_RPC_FAILURE, "the remote procedural call between the MPS server and the MPS client failed") \
  X(CUDA_ERROR_MPS_SERVER_NOT_READY, "MPS server is not ready to accept new MPS client requests") \
  X(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, "the hardware resources required to create MPS client have been exhausted") \
  X(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, "the hardware resources required to support device connections have been exhausted") \
  X(CUDA_ERROR_MPS_CLIENT_TERMINATED, "the MPS client has been terminated by the server") \
  X(CUDA_ERROR_CDP_NOT_SUPPORTED, "the module is using CUDA Dynamic Parallelism, but the current configuration does not support it") \
  X(CUDA_ERROR_CDP_VERSION_MISMATCH, "the application and the module use different CUDA Dynamic Parallelism versions") \
  X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing") \
  X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture") \
  X(CUDA_ERROR_STREAM_CAPTURE_MERGE, "operation would result in a merge of separate capture sequences") \
  X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not ended in the same stream as it began") \
  X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work") \
  X(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "dependency created on uncaptured work in another stream") \
  X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "operation would make the legacy stream depend on a capturing blocking stream") \
  X(CUDA_ERROR_CAPTURED_EVENT, "operation not permitted on an event last recorded in a capturing stream") \
  X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread") \
  X(CUDA_ERROR_TIMEOUT, "wait operation timed out") \
  X(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update") \
  X(CUDA_ERROR_EXTERNAL_DEVICE, "an async error has occurred in an external entity outside of CUDA") \
  X(CUDA_ERROR_INVALID_CLUSTER_SIZE, "a kernel launch error has occurred due to cluster misconfiguration") \
  X(CUDA_ERROR_FUNCTION_NOT_LOADED, "the function handle is not loaded when calling an API that requires a loaded function") \
  X(CUDA_ERROR_INVALID_RESOURCE_TYPE, "one or more resources passed in are not valid resource types for the operation") \
  X(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "one or more resources are insufficient or non-applicable for the operation") \
  X(CUDA_ERROR_KEY_ROTATION, "an error occurred during the key rotation sequence") \
  X(CUDA_ERROR_UNKNOWN, "unknown error")


const char* ErrorName(int e) {
  switch (e) {
#define REVENANT_CU_NAME(name, text) \
  case name:                         \
    return #name;
    REVENANT_CU_RESULTS(REVENANT_CU_NAME)
#undef REVENANT_CU_NAME
    default:
      return nullptr;
  }
}

const char* ErrorString(int e) {
  switch (e) {
#define REVENANT_CU_TEXT(name, text) \
  case name:                         \
    return text;
    REVENANT_CU_RESULTS(REVENANT_CU_TEXT)
#undef REVENANT_CU_TEXT
    default:
      return nullptr;
  }
}

}  // namespace

CUresult CuFromRuntime(cudaError_t e) {
  if (ErrorName(static_cast<int>(e)) != nullptr) return static_cast<CUresult>(e);
  return static_cast<int>(e) < 100 ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_UNKNOWN;
}

namespace {

CUresult ToCu(cudaError_t e) { return CuFromRuntime(e); }

#define REVENANT_VIA_RUNTIME(call)       \
  do {                                   \
    ::revenant::shim::KeepLastError keep_; \
    return ::revenant::shim::ToCu(call);   \
  } while (0)

// The stand-in primary context.
struct StandIn {
  char tag;
};
StandIn primary_tag;
CUcontext Primary() { return reinterpret_cast<CUcontext>(&primary_tag); }
std::atomic<int> retained{0};
std::atomic<unsigned int> primary_flags{0};

bool PrimaryActive() { return retained.load() > 0 || Runtime::Get()->connected(); }

// The thread's context stack; empty until the thread sets one itself (its
// current context is then the primary one once active).
thread_local std::vector<CUcontext> ctx_stack;
CUcontext CurrentContext() {
  if (!ctx_stack.empty()) return ctx_stack.back();
  return PrimaryActive() ? Primary() : nullptr;
}
void TakeOverStack() {
  if (ctx_stack.empty()) ctx_stack.push_back(PrimaryActive() ? Primary() : nullptr);
}

// Device properties do not change: fetched once.
CUresult Properties(const cudaDeviceProp** out) {
  static std::mutex mu;
  static cudaDeviceProp prop;
  static bool have = false;
  std::lock_guard<std::mutex> lock(mu);
  if (!have) {
    KeepLastError keep;
    cudaError_t e = cudaGetDeviceProperties(&prop, 0);
    if (e != cudaSuccess) return ToCu(e);
    have = true;
  }
  *out = &prop;
  return CUDA_SUCCESS;
}

// One device per application process (its agent's): ordinal 0.
bool BadDevice(CUdevice dev) { return dev != 0; }

void* Ptr(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); }
cudaStream_t Stream(CUstream s) { return reinterpret_cast<cudaStream_t>(s); }
cudaEvent_t Event(CUevent e) { return reinterpret_cast<cudaEvent_t>(e); }

// One pointer attribute. `lenient` (cuPointerGetAttributes): a pointer the
// shim does not know gets default values instead of an error.
enum class PtrKind { kDevice, kPinned, kUnknown };
PtrKind Classify(CUdeviceptr ptr) {
  Runtime* rt = Runtime::Get();
  rt->Channel();  // learn the device range
  if (rt->IsDevicePointer(Ptr(ptr))) return PtrKind::kDevice;
  if (rt->FindPinned(Ptr(ptr), 1, nullptr)) return PtrKind::kPinned;
  return PtrKind::kUnknown;
}

CUresult PointerAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr, PtrKind kind,
                          bool lenient) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (kind == PtrKind::kUnknown && !lenient) return CUDA_ERROR_INVALID_VALUE;
  const bool known = kind != PtrKind::kUnknown;
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) = known ? Primary() : nullptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned int*>(data) = kind == PtrKind::kDevice   ? CU_MEMORYTYPE_DEVICE
                                          : kind == PtrKind::kPinned ? CU_MEMORYTYPE_HOST
                                                                     : 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      *static_cast<CUdeviceptr*>(data) = known ? ptr : 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (kind == PtrKind::kDevice && !lenient) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = kind == PtrKind::kPinned ? Ptr(ptr) : nullptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<unsigned int*>(data) = 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = known ? 0 : -2;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      *static_cast<unsigned int*>(data) = known ? 1 : 0;
      return CUDA_SUCCESS;
    default:
      // Buffer ids, allocation ranges, access flags...: the shim does not
      // know the agent's allocations.
      LogNotSupported("cuPointerGetAttribute(s) of this attribute");
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

}  // namespace
}  // namespace shim
}  // namespace revenant

namespace rs = ::revenant::shim;

// --- Initialization, version, devices ----------------------------------------

// The driver's private tables: the runtimes inside the application's
// libraries (its own libcudart, kept loaded as a dependency; those linked
// into cuBLASLt and cuDNN) ask for them while they initialize against the
// driver they loaded -- the shim. It has none: they fail their
// initialization, which is what keeps them from driving a GPU in this
// process. Expected, so logged at debug level only.
extern "C" REVENANT_EXPORT CUresult cuGetExportTable(const void** ppExportTable,
                                                     const CUuuid* pExportTableId) {
  if (ppExportTable == nullptr || pExportTableId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ppExportTable = nullptr;
  REVENANT_LOG(DEBUG, "shim") << "cuGetExportTable: the shim has no private driver tables";
  return CUDA_ERROR_NOT_SUPPORTED;
}

// Never connects: libraries call it from their initializers, before main.
extern "C" REVENANT_EXPORT CUresult cuInit(unsigned int Flags) {
  return Flags != 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

extern "C" REVENANT_EXPORT CUresult cuDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REVENANT_VIA_RUNTIME(cudaDriverGetVersion(driverVersion));
}

extern "C" REVENANT_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *device = 0;
  return CUDA_SUCCESS;
}

extern "C" REVENANT_EXPORT CUresult cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REVENANT_VIA_RUNTIME(cudaGetDeviceCount(count));
}

// CUdevice_attribute and cudaDeviceAttr share their numbering.
extern "C" REVENANT_EXPORT CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib,
                                                         CUdevice dev) {
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (rs::BadDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  REVENANT_VIA_RUNTIME(cudaDeviceGetAttribute(pi, static_cast<cudaDeviceAttr>(attrib), 0));
}

extern "C" REVENANT_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (rs::BadDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  const cudaDeviceProp* p = nullptr;
  if (CUresult r = rs::Properties(&p); r != CUDA_SUCCESS) return r;
  std::snprintf(name, static_cast<size_t>(len), "%s", p->name);
  return CUDA_SUCCESS;
}

extern "C" REVENANT_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (rs::BadDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  const cudaDeviceProp* p = nullptr;
  if (CUresult r = rs::Properties(&p); r != CUDA_SUCCESS) return r;
  *bytes = p->totalGlobalMem;
  return CUDA_SUCCESS;
}

extern "C" REVENANT_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (rs::BadDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  const cudaDeviceProp* p = nullptr;
  if (CUresult r = rs::Properties(&p); r != CUDA_SUCCESS) return r;
  static_assert(sizeof(CUuuid) == sizeof(p->uuid), "CUuuid and cudaUUID_t differ");
  std::memcpy(uuid, &p->uuid, sizeof(CUuuid));
  return CUDA_SUCCESS;
}

extern "C" REVENANT_EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  return cuDeviceGetUuid_v2(uuid, dev);
}

// "domain:bus:device.function" in upper-case hex, as cudaDeviceGetPCIBusId
// writes it (driver_api compares the two natively).
extern "C" REVENANT_EXPORT CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (rs::BadDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  const cudaDeviceProp* p = nullptr;
  if (CUresult r = rs::Properties(&p); r != CUDA_SUCCESS) return r;
  std::snprintf(pciBusId, static_cast<size_t>(len), "%04X:%02X:%02X.0", p->pciDomainID,
                p->pciBusID, p->pciDeviceID);
  return CUDA_SUCCESS;
}

// --- The primary context ---------------------------------------------------------

extern "C" REVENANT_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags,
                                                               int* active) {
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (rs::BadDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *flags = rs::primary_flags.load();
  *active = rs::PrimaryActive() ? 1 : 0;
  return CUDA_SUCCESS;
}

extern "C" REVENANT_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (rs::BadDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  rs::retained.fetch_add(1);
  *pctx = rs::Primary();
  return CUDA_SUCCESS;
}

extern "C" REVENANT_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (rs::BadDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  int n = rs::retained.load();
  while (n > 0 && !rs::retained.compare_exchange_weak(n, n - 1)) {
  }
  return n > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

// The scheduling and local-memory flags reach the agent's context through
// cudaSetDeviceFlags (journaled as state); the rest is kept and reported.
extern "C" REVENANT_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev,
                                                                 unsigned int flags) {
  if (rs::BadDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  constexpr unsigned int kKnown = CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX |
                                  CU_CTX_COREDUMP_ENABLE | CU_CTX_USER_COREDUMP_ENABLE |
                                  CU_CTX_SYNC_MEMOPS;
  if ((flags & ~kKnown) != 0 || (flags & CU_CTX_SCHED_MASK) == 3 ||
      (flags & CU_CTX_SCHED_MASK) > CU_CTX_SCHED_BLOCKING_SYNC)
    return CUDA_ERROR_INVALID_VALUE;
  {
    rs::KeepLastError keep;
    cudaError_t e = cudaSetDeviceFlags(flags & (CU_CTX_SCHED_MASK | CU_CTX_LMEM_RESIZE_TO_MAX));
    if (e != cudaSuccess) return rs::ToCu(e);
  }
  rs::primary_flags.store(flags);
  return CUDA_SUCCESS;
}

extern "C" REVENANT_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (rs::BadDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  REVENANT_VIA_RUNTIME(cudaDeviceReset());
}

// --- The current context ---------------------------------------------------------

extern "C" REVENANT_EXPORT CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = rs::CurrentContext();
  return CUDA_SUCCESS;
}

extern "C" REVENANT_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (ctx != nullptr && ctx != rs::Primary()) return CUDA_ERROR_INVALID_CONTEXT;
  rs::TakeOverStack();
  rs::ctx_stack.back() = ctx;
  return CUDA_SUCCESS;
}

extern "C" REVENANT_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ctx != rs::Primary()) return CUDA_ERROR_INVALID_CONTEXT;
  rs::TakeOverStack();
  rs::ctx_stack.push_back(ctx);
  return CUDA_SUCCESS;
}

extern "C" REVENANT_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  rs::TakeOverStack();
  CUcontext top = rs::ctx_stack.back();
  if (top == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  rs::ctx_stack.pop_back();
  if (rs::ctx_stack.empty()) rs::ctx_stack.push_back(nullptr);
  if (pctx != nullptr) *pctx = top;
  return CUDA_SUCCESS;
}

extern "C" REVENANT_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (rs::CurrentContext() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *device = 0;
  return CUDA_SUCCESS;
}

extern "C" REVENANT_EXPORT CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ctx == nullptr) ctx = rs::CurrentContext();
  if (ctx == nullptr || ctx != rs::Primary()) return CUDA_ERROR_INVALID_CONTEXT;
  *device = 0;
  return CUDA_SUCCESS;
}

extern "C" REVENANT_EXPORT CUresult cuCtxSynchronize(void) {
  if (rs::CurrentContext() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  REVENANT_VIA_RUNTIME(cudaDeviceSynchronize());
}

extern "C" REVENANT_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  if (ctx == nullptr) ctx = rs::CurrentContext();
  if (ctx == nullptr || ctx != rs::Primary()) return CUDA_ERROR_INVALID_CONTEXT;
  REVENANT_VIA_RUNTIME(cudaDeviceSynchronize());
}

// The context's API version: 3020, the interface of every context made
// since CUDA 3.2 (primary contexts included).
extern "C" REVENANT_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ctx == nullptr) ctx = rs::CurrentContext();
  if (ctx != rs::Primary()) return CUDA_ERROR_INVALID_CONTEXT;
  *version = 3020;
  return CUDA_SUCCESS;
}

// --- Errors ------------------------------------------------------------------------

extern "C" REVENANT_EXPORT CUresult cuGetErrorString(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pStr = rs::ErrorString(static_cast<int>(error));
  return *pStr == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

extern "C" REVENANT_EXPORT CUresult cuGetErrorName(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pStr = rs::ErrorName(static_cast<int>(error));
  return *pStr == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

// --- Pointers and memory -------------------------------------------------------

extern "C" REVENANT_EXPORT CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                                          CUdeviceptr ptr) {
  return rs::PointerAttribute(data, attribute, ptr, rs::Classify(ptr), /*lenient=*/false);
}

extern "C" REVENANT_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes,
                                                           CUpointer_attribute* attributes,
                                                           void** data, CUdeviceptr ptr) {
  if (numAttributes == 0 || attributes == nullptr || data == nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  const rs::PtrKind kind = rs::Classify(ptr);
  for (unsigned int i = 0; i < numAttributes; ++i) {
    CUresult r = rs::PointerAttribute(data[i], attributes[i], ptr, kind, /*lenient=*/true);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

extern "C" REVENANT_EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REVENANT_VIA_RUNTIME(cudaMemGetInfo(free, total));
}

extern "C" REVENANT_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = nullptr;
  rs::KeepLastError keep;
  cudaError_t e = cudaMalloc(&p, bytesize);
  if (e == cudaSuccess) *dptr = reinterpret_cast<CUdeviceptr>(p);
  return rs::ToCu(e);
}

extern "C" REVENANT_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  REVENANT_VIA_RUNTIME(cudaFree(rs::Ptr(dptr)));
}

extern "C" REVENANT_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  REVENANT_VIA_RUNTIME(cudaMemcpy(rs::Ptr(dst), rs::Ptr(src), ByteCount, cudaMemcpyDefault));
}

extern "C" REVENANT_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void* srcHost,
                                                    size_t ByteCount) {
  REVENANT_VIA_RUNTIME(
      cudaMemcpy(rs::Ptr(dstDevice), srcHost, ByteCount, cudaMemcpyHostToDevice));
}

extern "C" REVENANT_EXPORT CUresult cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice,
                                                    size_t ByteCount) {
  REVENANT_VIA_RUNTIME(
      cudaMemcpy(dstHost, rs::Ptr(srcDevice), ByteCount, cudaMemcpyDeviceToHost));
}

extern "C" REVENANT_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                                    size_t ByteCount) {
  REVENANT_VIA_RUNTIME(
      cudaMemcpy(rs::Ptr(dstDevice), rs::Ptr(srcDevice), ByteCount, cudaMemcpyDeviceToDevice));
}

extern "C" REVENANT_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src,
                                                  size_t ByteCount, CUstream hStream) {
  REVENANT_VIA_RUNTIME(cudaMemcpyAsync(rs::Ptr(dst), rs::Ptr(src), ByteCount, cudaMemcpyDefault,
                                       rs::Stream(hStream)));
}

extern "C" REVENANT_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice,
                                                         const void* srcHost, size_t ByteCount,
                                                         CUstream hStream) {
  REVENANT_VIA_RUNTIME(cudaMemcpyAsync(rs::Ptr(dstDevice), srcHost, ByteCount,
                                       cudaMemcpyHostToDevice, rs::Stream(hStream)));
}

extern "C" REVENANT_EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dstHost, CUdeviceptr srcDevice,
                                                         size_t ByteCount, CUstream hStream) {
  REVENANT_VIA_RUNTIME(cudaMemcpyAsync(dstHost, rs::Ptr(srcDevice), ByteCount,
                                       cudaMemcpyDeviceToHost, rs::Stream(hStream)));
}

extern "C" REVENANT_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice,
                                                         CUdeviceptr srcDevice, size_t ByteCount,
                                                         CUstream hStream) {
  REVENANT_VIA_RUNTIME(cudaMemcpyAsync(rs::Ptr(dstDevice), rs::Ptr(srcDevice), ByteCount,
                                       cudaMemcpyDeviceToDevice, rs::Stream(hStream)));
}

extern "C" REVENANT_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc,
                                                  size_t N) {
  REVENANT_VIA_RUNTIME(cudaMemset(rs::Ptr(dstDevice), uc, N));
}

extern "C" REVENANT_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc,
                                                    size_t N, CUstream hStream) {
  REVENANT_VIA_RUNTIME(cudaMemsetAsync(rs::Ptr(dstDevice), uc, N, rs::Stream(hStream)));
}

// --- Streams and events ------------------------------------------------------------

extern "C" REVENANT_EXPORT CUresult cuStreamSynchronize(CUstream hStream) {
  REVENANT_VIA_RUNTIME(cudaStreamSynchronize(rs::Stream(hStream)));
}

extern "C" REVENANT_EXPORT CUresult cuStreamQuery(CUstream hStream) {
  REVENANT_VIA_RUNTIME(cudaStreamQuery(rs::Stream(hStream)));
}

extern "C" REVENANT_EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent,
                                                      unsigned int Flags) {
  REVENANT_VIA_RUNTIME(cudaStreamWaitEvent(rs::Stream(hStream), rs::Event(hEvent), Flags));
}

// CU_EVENT_* and cudaEvent* flags share their values.
extern "C" REVENANT_EXPORT CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
  cudaEvent_t e = nullptr;
  rs::KeepLastError keep;
  cudaError_t r = cudaEventCreateWithFlags(&e, Flags);
  if (r == cudaSuccess) *phEvent = reinterpret_cast<CUevent>(e);
  return rs::ToCu(r);
}

extern "C" REVENANT_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  REVENANT_VIA_RUNTIME(cudaEventRecord(rs::Event(hEvent), rs::Stream(hStream)));
}

extern "C" REVENANT_EXPORT CUresult cuEventSynchronize(CUevent hEvent) {
  REVENANT_VIA_RUNTIME(cudaEventSynchronize(rs::Event(hEvent)));
}

extern "C" REVENANT_EXPORT CUresult cuEventQuery(CUevent hEvent) {
  REVENANT_VIA_RUNTIME(cudaEventQuery(rs::Event(hEvent)));
}

extern "C" REVENANT_EXPORT CUresult cuEventDestroy_v2(CUevent hEvent) {
  REVENANT_VIA_RUNTIME(cudaEventDestroy(rs::Event(hEvent)));
}

extern "C" REVENANT_EXPORT CUresult cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart,
                                                          CUevent hEnd) {
  REVENANT_VIA_RUNTIME(
      cudaEventElapsedTime(pMilliseconds, rs::Event(hStart), rs::Event(hEnd)));
}

extern "C" REVENANT_EXPORT CUresult cuEventElapsedTime(float* pMilliseconds, CUevent hStart,
                                                       CUevent hEnd) {
  return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

// How the application reaches the driver: its dlopen of libcuda.so.1 and its
// entry-point lookups (cuGetProcAddress, cudaGetDriverEntryPoint*) all end
// in the shim, so no real driver is ever loaded or initialized in the
// application process (the agent owns the GPU).
//
// - dlopen/dlmopen of a file whose base name is libcuda.so.1 or libcuda.so
//   (any directory, any flags, RTLD_NOLOAD included) returns a handle of the
//   shim itself: dlsym(handle, "cuMemAlloc_v2") then finds the shim's export
//   (a row of api/driver.textproto or the refusing stub of a driver function
//   without one). Every other request goes to the real dlopen unchanged.
//   The exported interposers are in shim/hooks_dlopen.cc.
// - Entry points: a base name and a CUDA version give the newest variant
//   introduced by that version (shim/driver_names.h has the rule and the
//   generated table); the pointer is the shim's export of that name.
//   The per-thread default stream variants (_ptsz/_ptds) are never handed
//   out: the shim serves the per-thread stream as the legacy one, which only
//   adds ordering (agent/backends/host/host_backend.h).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <cstring>

#include "common/knobs.h"
#include "common/logging.h"
#include "shim/call.h"
#include "shim/driver_entry.h"
#include "shim/driver_names.h"
#include "shim/runtime.h"

// cuda.h names the CUDA 12 form cuGetProcAddress; the CUDA 11.3 one is a row too.
#undef cuGetProcAddress
extern "C" CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                             cuuint64_t flags);

namespace revenant {
namespace shim {
namespace {

using DlopenFn = void* (*)(const char*, int);
using DlmopenFn = void* (*)(Lmid_t, const char*, int);

DlopenFn RealDlopen() {
  static DlopenFn real = [] {
    void* p = dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.34");
    if (p == nullptr) p = dlsym(RTLD_NEXT, "dlopen");
    return reinterpret_cast<DlopenFn>(p);
  }();
  return real;
}

DlmopenFn RealDlmopen() {
  static DlmopenFn real = [] {
    void* p = dlvsym(RTLD_NEXT, "dlmopen", "GLIBC_2.34");
    if (p == nullptr) p = dlsym(RTLD_NEXT, "dlmopen");
    return reinterpret_cast<DlmopenFn>(p);
  }();
  return real;
}

bool IsDriverFile(const char* file) {
  if (file == nullptr) return false;
  const char* slash = std::strrchr(file, '/');
  const char* base = slash == nullptr ? file : slash + 1;
  return std::strcmp(base, "libcuda.so.1") == 0 || std::strcmp(base, "libcuda.so") == 0;
}

// The shim's own file name (the object this function lives in).
const char* SelfPath() {
  static const char* path = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&IsDriverFile), &info) == 0) return "";
    return info.dli_fname != nullptr ? info.dli_fname : "";
  }();
  return path;
}

// A new reference to the shim (it is loaded already: never a fresh load).
void* SelfHandle(int mode) {
  int m = (mode & (RTLD_GLOBAL | RTLD_NODELETE | RTLD_LAZY | RTLD_NOW)) | RTLD_NOLOAD;
  if ((m & (RTLD_LAZY | RTLD_NOW)) == 0) m |= RTLD_LAZY;
  return RealDlopen()(SelfPath(), m);
}

void NoteDriverLoad(const char* file, void* handle) {
  static std::atomic<bool> logged{false};
  if (!knobs::Bool(knobs::Id::kDiagnostics).value_or(false)) return;
  if (logged.exchange(true)) return;
  REVENANT_LOG(INFO, "shim") << "dlopen(\"" << file << "\") answered with the shim itself ("
                             << SelfPath() << (handle == nullptr ? ": failed" : "")
                             << "): the application's driver calls are the shim's";
}

}  // namespace

bool AnswerDriverLoad(const char* file, int mode, void** handle) {
  if (!IsDriverFile(file)) return false;
  *handle = SelfHandle(mode);
  NoteDriverLoad(file, *handle);
  return true;
}

void* RealDlopenAddress() { return reinterpret_cast<void*>(RealDlopen()); }
void* RealDlmopenAddress() { return reinterpret_cast<void*>(RealDlmopen()); }

void* Dlopen(const char* file, int mode) {
  if (IsDriverFile(file)) {
    void* h = SelfHandle(mode);
    NoteDriverLoad(file, h);
    return h;
  }
  DlopenFn real = RealDlopen();
  return real == nullptr ? nullptr : real(file, mode);
}

void* Dlmopen(Lmid_t lmid, const char* file, int mode) {
  if (IsDriverFile(file)) {
    // The shim lives in the base namespace; its handle serves any caller.
    void* h = SelfHandle(mode);
    NoteDriverLoad(file, h);
    return h;
  }
  DlmopenFn real = RealDlmopen();
  return real == nullptr ? nullptr : real(lmid, file, mode);
}

namespace {

// The version of the driver the agent runs (cached; 0 when unknown). Asked
// only once the process is connected: the lookups run in libraries'
// initializers (the runtime inside libcublasLt resolves the driver while it
// is being loaded), where connecting to the agent must not happen.
int AgentDriverVersion() {
  static std::atomic<int> cached{0};
  int v = cached.load(std::memory_order_relaxed);
  if (v != 0) return v;
  if (!Runtime::Get()->connected()) return 0;
  using Fn = cudaError_t (*)(int*);
  static Fn own = [] {
    void* self = SelfHandle(RTLD_LAZY);
    return reinterpret_cast<Fn>(self == nullptr ? nullptr : dlsym(self, "cudaDriverGetVersion"));
  }();
  if (own != nullptr && own(&v) == cudaSuccess && v > 0) {
    cached.store(v, std::memory_order_relaxed);
    return v;
  }
  return 0;
}

}  // namespace

// The shim export answering `symbol` at `version`; `*how` says why not.
void* FindDriverEntry(const char* symbol, int version, DriverLookup* how) {
  const DriverSymbol* s = FindDriverSymbol(kDriverSymbols, kDriverSymbolCount, symbol, version, how);
  if (s == nullptr) return nullptr;
  static void* self = SelfHandle(RTLD_LAZY);
  void* fn = self == nullptr ? nullptr : dlsym(self, s->name);
  if (fn == nullptr) {
    // Every driver export is the shim's; reaching this is a build defect.
    REVENANT_LOG(ERROR, "shim") << "driver entry point " << s->name << " (for " << symbol
                                << ") is not exported by the shim";
    *how = DriverLookup::kNotFound;
  }
  return fn;
}

// Common part of the four lookups: CUresult codes (the runtime's are equal
// for these: success, invalid value).
CUresult LookupEntry(const char* symbol, void** pfn, int version, uint64_t flags,
                     DriverLookup* how) {
  *how = DriverLookup::kNotFound;
  if (pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  if (symbol == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags > CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) return CUDA_ERROR_INVALID_VALUE;
  // "If the specified CUDA version is greater than the driver version, the
  // API will return CUDA_ERROR_INVALID_VALUE" (cuda.h).
  const int driver = AgentDriverVersion();
  if (version < 0 || (driver > 0 && version > driver)) return CUDA_ERROR_INVALID_VALUE;
  *pfn = FindDriverEntry(symbol, version, how);
  return CUDA_SUCCESS;
}

}  // namespace shim
}  // namespace revenant

using revenant::shim::DriverLookup;


extern "C" REVENANT_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn,
                                                        int cudaVersion, cuuint64_t flags,
                                                        CUdriverProcAddressQueryResult* symbolStatus) {
  DriverLookup how;
  CUresult r = revenant::shim::LookupEntry(symbol, pfn, cudaVersion, flags, &how);
  if (symbolStatus != nullptr) {
    *symbolStatus = how == DriverLookup::kFound ? CU_GET_PROC_ADDRESS_SUCCESS
                    : how == DriverLookup::kVersionNotSufficient
                        ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                        : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  }
  return r;
}

// The CUDA 11.3 form, without a status.
extern "C" REVENANT_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn,
                                                     int cudaVersion, cuuint64_t flags) {
  DriverLookup how;
  return revenant::shim::LookupEntry(symbol, pfn, cudaVersion, flags, &how);
}

namespace {
cudaError_t RuntimeEntry(const char* symbol, void** funcPtr, int version,
                         unsigned long long flags, cudaDriverEntryPointQueryResult* status) {
  DriverLookup how;
  CUresult r = revenant::shim::LookupEntry(symbol, funcPtr, version, flags, &how);
  if (status != nullptr) {
    *status = how == DriverLookup::kFound ? cudaDriverEntryPointSuccess
              : how == DriverLookup::kVersionNotSufficient
                  ? cudaDriverEntryPointVersionNotSufficent
                  : cudaDriverEntryPointSymbolNotFound;
  }
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}
}  // namespace

extern "C" REVENANT_EXPORT cudaError_t cudaGetDriverEntryPoint(
    const char* symbol, void** funcPtr, unsigned long long flags,
    cudaDriverEntryPointQueryResult* driverStatus) {
  return RuntimeEntry(symbol, funcPtr, CUDART_VERSION, flags, driverStatus);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(
    const char* symbol, void** funcPtr, unsigned int cudaVersion, unsigned long long flags,
    cudaDriverEntryPointQueryResult* driverStatus) {
  if (cudaVersion > 0x7fffffffu) {
    if (funcPtr != nullptr) *funcPtr = nullptr;
    return cudaErrorInvalidValue;
  }
  return RuntimeEntry(symbol, funcPtr, static_cast<int>(cudaVersion), flags, driverStatus);
}

// What programs built with --default-stream per-thread call: the same lookups
// (the shim never hands out per-thread-stream variants).
extern "C" REVENANT_EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(
    const char* symbol, void** funcPtr, unsigned long long flags,
    cudaDriverEntryPointQueryResult* driverStatus) {
  return cudaGetDriverEntryPoint(symbol, funcPtr, flags, driverStatus);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(
    const char* symbol, void** funcPtr, unsigned int cudaVersion, unsigned long long flags,
    cudaDriverEntryPointQueryResult* driverStatus) {
  return cudaGetDriverEntryPointByVersion(symbol, funcPtr, cudaVersion, flags, driverStatus);
}

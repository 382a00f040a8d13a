// Hand-written shim hooks for copies and host memory shared with the agent.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "api/hook_protocol.h"
#include "common/logging.h"
#include "shim/call.h"
#include "shim/runtime.h"

namespace revenant {
namespace shim {
namespace {

using hooks::MemcpyMode;

// Pageable host-to-device bytes up to this size travel inside the request;
// larger ones go through the staging area in chunks.
constexpr size_t kInlineLimit = size_t{1} << 20;

cudaMemcpyKind ResolveKind(Runtime* rt, void* dst, const void* src, cudaMemcpyKind kind) {
  if (kind != cudaMemcpyDefault) return kind;
  const bool d = rt->IsDevicePointer(dst);
  const bool s = rt->IsDevicePointer(src);
  if (d && s) return cudaMemcpyDeviceToDevice;
  if (d) return cudaMemcpyHostToDevice;
  if (s) return cudaMemcpyDeviceToHost;
  return cudaMemcpyHostToHost;
}

// One copy request; `inline_src` non-null for kInlineSource.
cudaError_t SendCopy(api::ApiId id, void* dst, const void* src, size_t count,
                     cudaMemcpyKind kind, cudaStream_t stream, MemcpyMode mode,
                     uint64_t staging_offset) {
  const bool inline_bytes = mode == hooks::kInlineSource;
  wire::Sizer sz;
  sz.Put(uint64_t{}); sz.Put(uint64_t{}); sz.Put(uint64_t{}); sz.Put(int32_t{});
  sz.Put(uint64_t{}); sz.Put(uint8_t{});
  if (inline_bytes) sz.PutBytes(src, count);
  if (mode == hooks::kStagingDest || mode == hooks::kStagingSource) sz.Put(uint64_t{});
  Call call(id, sz.size());
  if (!call.ok()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  wire::Encoder& a = call.args();
  a.Put(reinterpret_cast<uint64_t>(dst));
  a.Put(reinterpret_cast<uint64_t>(src));
  a.Put(static_cast<uint64_t>(count));
  a.Put(static_cast<int32_t>(kind));
  a.Put(reinterpret_cast<uint64_t>(stream));
  a.Put(static_cast<uint8_t>(mode));
  if (inline_bytes) a.PutBytes(src, count);
  if (mode == hooks::kStagingDest || mode == hooks::kStagingSource) a.Put(staging_offset);
  if (!call.Send()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  if (call.status() == 0 && mode == hooks::kReplyDest) call.CopyOut(call.reply(), dst, count);
  return static_cast<cudaError_t>(call.status());
}

cudaError_t Memcpy(api::ApiId id, void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                   cudaStream_t stream) {
  Runtime* rt = Runtime::Get();
  transport::ShmClientChannel* ch = rt->Channel();
  if (ch == nullptr) {
    SetLastError(cudaErrorDevicesUnavailable);
    return cudaErrorDevicesUnavailable;
  }
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) {
    SetLastError(cudaErrorInvalidMemcpyDirection);
    return cudaErrorInvalidMemcpyDirection;
  }
  if (count == 0) return cudaSuccess;
  kind = ResolveKind(rt, dst, src, kind);
  const bool dst_shared = rt->IsDevicePointer(dst, count) || rt->FindPinned(dst, count, nullptr);
  const bool src_shared = rt->IsDevicePointer(src, count) || rt->FindPinned(src, count, nullptr);

  if (kind == cudaMemcpyHostToHost && !(dst_shared && src_shared)) {
    // Pageable host to host: nothing for the device to do. Keep stream order
    // by waiting for earlier work first, as CUDA does for this case.
    if (stream != nullptr || id == api::ApiId::cudaMemcpy) {
      cudaError_t e = cudaStreamSynchronize(stream);
      if (e != cudaSuccess) return e;
    }
    std::memmove(dst, src, count);
    return cudaSuccess;
  }
  if (dst_shared && src_shared) {
    return SendCopy(id, dst, src, count, kind, stream, hooks::kDirect, 0);
  }
  const uint32_t reply_room = transport::ChannelOptions().reply_data_size - 64;
  if (!src_shared) {
    // Host-to-device from pageable memory.
    if (count <= kInlineLimit) {
      return SendCopy(id, dst, src, count, kind, stream, hooks::kInlineSource, 0);
    }
    std::lock_guard<std::mutex> lock(rt->staging_mutex());
    const size_t chunk = ch->staging_size();
    for (size_t done = 0; done < count; done += chunk) {
      const size_t n = count - done < chunk ? count - done : chunk;
      std::memcpy(ch->staging(), static_cast<const char*>(src) + done, n);
      // Synchronous per chunk: the staging area is reused for the next one.
      cudaError_t e = SendCopy(api::ApiId::cudaMemcpy, static_cast<char*>(dst) + done,
                               nullptr, n, kind, stream, hooks::kStagingSource, 0);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
  // Device-to-host into pageable memory: always synchronous, as in CUDA.
  if (count <= reply_room) {
    return SendCopy(api::ApiId::cudaMemcpy, dst, src, count, kind, stream, hooks::kReplyDest, 0);
  }
  std::lock_guard<std::mutex> lock(rt->staging_mutex());
  const size_t chunk = ch->staging_size();
  for (size_t done = 0; done < count; done += chunk) {
    const size_t n = count - done < chunk ? count - done : chunk;
    cudaError_t e = SendCopy(api::ApiId::cudaMemcpy, nullptr,
                             static_cast<const char*>(src) + done, n, kind, stream,
                             hooks::kStagingDest, 0);
    if (e != cudaSuccess) return e;
    std::memcpy(static_cast<char*>(dst) + done, ch->staging(), n);
  }
  return cudaSuccess;
}

}  // namespace

int Runtime::AllocPinned(void** out, size_t size, unsigned int flags) {
  if (out == nullptr) return cudaErrorInvalidValue;
  if (Channel() == nullptr) return cudaErrorDevicesUnavailable;
  if (size == 0) {
    *out = nullptr;
    return cudaSuccess;
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t mapped = (size + page - 1) / page * page;
  std::string path;
  void* addr = MAP_FAILED;
  int fd = -1;
  {
    std::lock_guard<std::mutex> lock(pinned_mu_);
    path = absl::StrCat(job_dir_, "/host-", getpid(), "-", ++pinned_serial_);
    fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(mapped)) != 0) {
      REVENANT_LOG(ERROR, "shim") << "cannot create pinned memory file " << path << ": "
                                  << std::strerror(errno);
      if (fd >= 0) close(fd);
      unlink(path.c_str());
      return cudaErrorMemoryAllocation;
    }
    // Find a free spot in our range; MAP_FIXED_NOREPLACE never clobbers.
    for (int tries = 0; tries < 64 && addr == MAP_FAILED; ++tries) {
      void* want = reinterpret_cast<void*>(pinned_next_);
      void* got = mmap(want, mapped, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
      pinned_next_ += (mapped + (size_t{2} << 20) - 1) / (size_t{2} << 20) * (size_t{2} << 20);
      if (got == want) addr = got;
      else if (got != MAP_FAILED) munmap(got, mapped);  // old kernels ignore NOREPLACE
    }
    close(fd);
  }
  if (addr == MAP_FAILED) {
    unlink(path.c_str());
    return cudaErrorMemoryAllocation;
  }
  wire::Sizer sz;
  sz.Put(uint64_t{}); sz.Put(uint64_t{}); sz.Put(uint32_t{}); sz.PutBytes(path.data(), path.size());
  Call call(api::ApiId::cudaHostAlloc, sz.size());
  int status = cudaErrorDevicesUnavailable;
  if (call.ok()) {
    call.args().Put(reinterpret_cast<uint64_t>(addr));
    call.args().Put(static_cast<uint64_t>(mapped));
    call.args().Put(static_cast<uint32_t>(flags));
    call.args().PutBytes(path.data(), path.size());
    if (call.Send()) status = call.status();
  }
  if (status != cudaSuccess) {
    munmap(addr, mapped);
    unlink(path.c_str());
    return status;
  }
  {
    std::lock_guard<std::mutex> lock(pinned_mu_);
    pinned_[reinterpret_cast<uint64_t>(addr)] =
        PinnedRange{reinterpret_cast<uint64_t>(addr), mapped, flags, path};
  }
  *out = addr;
  return cudaSuccess;
}

int Runtime::FreePinned(void* p) {
  if (p == nullptr) return cudaSuccess;
  PinnedRange r;
  {
    std::lock_guard<std::mutex> lock(pinned_mu_);
    auto it = pinned_.find(reinterpret_cast<uint64_t>(p));
    if (it == pinned_.end()) return cudaErrorInvalidValue;
    r = it->second;
    pinned_.erase(it);
  }
  int status = cudaSuccess;
  wire::Sizer sz;
  sz.Put(uint64_t{});
  Call call(api::ApiId::cudaFreeHost, sz.size());
  if (call.ok()) {
    call.args().Put(r.addr);
    status = call.Send() ? call.status() : cudaErrorDevicesUnavailable;
  }
  munmap(reinterpret_cast<void*>(r.addr), r.size);
  unlink(r.path.c_str());
  return status;
}

}  // namespace shim
}  // namespace revenant

using revenant::api::ApiId;
using revenant::shim::Runtime;
using revenant::shim::SetLastError;

extern "C" REVENANT_EXPORT cudaError_t cudaMemcpy(void* dst, const void* src, size_t count,
                                                  cudaMemcpyKind kind) {
  return revenant::shim::Memcpy(ApiId::cudaMemcpy, dst, src, count, kind, nullptr);
}

extern "C" REVENANT_EXPORT cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count,
                                                       cudaMemcpyKind kind, cudaStream_t stream) {
  return revenant::shim::Memcpy(ApiId::cudaMemcpyAsync, dst, src, count, kind, stream);
}

extern "C" REVENANT_EXPORT cudaError_t cudaMallocHost(void** ptr, size_t size) {
  int e = Runtime::Get()->AllocPinned(ptr, size, cudaHostAllocDefault);
  SetLastError(e);
  return static_cast<cudaError_t>(e);
}

extern "C" REVENANT_EXPORT cudaError_t cudaHostAlloc(void** pHost, size_t size,
                                                     unsigned int flags) {
  int e = Runtime::Get()->AllocPinned(pHost, size, flags);
  SetLastError(e);
  return static_cast<cudaError_t>(e);
}

extern "C" REVENANT_EXPORT cudaError_t cudaFreeHost(void* ptr) {
  int e = Runtime::Get()->FreePinned(ptr);
  SetLastError(e);
  return static_cast<cudaError_t>(e);
}

// Registering existing application memory: the agent cannot reach memory the
// application did not allocate through the shim, so registered ranges stay
// pageable for copies (staged, hence synchronous: a valid CUDA schedule).
// Mapped registration (device access to the range) is refused clearly.
extern "C" REVENANT_EXPORT cudaError_t cudaHostRegister(void* ptr, size_t size,
                                                        unsigned int flags) {
  if (ptr == nullptr || size == 0) {
    SetLastError(cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
  }
  if (flags & (cudaHostRegisterMapped | cudaHostRegisterIoMemory | cudaHostRegisterReadOnly)) {
    revenant::shim::LogNotSupported("cudaHostRegister with cudaHostRegisterMapped/IoMemory/ReadOnly");
    SetLastError(cudaErrorNotSupported);
    return cudaErrorNotSupported;
  }
  return cudaSuccess;
}

extern "C" REVENANT_EXPORT cudaError_t cudaHostUnregister(void* ptr) {
  if (ptr == nullptr) {
    SetLastError(cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

// Shared host memory sits at the same address in both processes, and the
// device address of mapped host memory is the host address (unified
// addressing), so the answer needs no round trip.
extern "C" REVENANT_EXPORT cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost,
                                                                unsigned int flags) {
  if (pDevice == nullptr || flags != 0) {
    SetLastError(cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
  }
  if (!Runtime::Get()->FindPinned(pHost, 1, nullptr)) {
    SetLastError(cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
  }
  *pDevice = pHost;
  return cudaSuccess;
}

// Managed memory is host memory shared with the agent at the same address:
// both the application and the device (through unified addressing) reach
// it, without page migration.
extern "C" REVENANT_EXPORT cudaError_t cudaMallocManaged(void** devPtr, size_t size,
                                                         unsigned int flags) {
  if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost) {
    SetLastError(cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
  }
  int e = Runtime::Get()->AllocPinned(devPtr, size, cudaHostAllocMapped);
  SetLastError(e);
  return static_cast<cudaError_t>(e);
}

extern "C" REVENANT_EXPORT cudaError_t cudaFree(void* devPtr) {
  Runtime* rt = Runtime::Get();
  if (devPtr != nullptr && rt->FindPinned(devPtr, 1, nullptr)) {
    int e = rt->FreePinned(devPtr);
    SetLastError(e);
    return static_cast<cudaError_t>(e);
  }
  revenant::wire::Sizer sz;
  sz.Put(devPtr);
  revenant::shim::Call call(ApiId::cudaFree, sz.size());
  if (!call.ok()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  call.args().Put(devPtr);
  if (!call.Send()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  return static_cast<cudaError_t>(call.status());
}

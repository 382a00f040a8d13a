// Hand-written shim hooks for copies and host memory shared with the agent.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/hook_protocol.h"
#include "api/hook_structs.h"
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

// The variable a symbol copy names (cudaMemcpyToSymbol & co.): the request
// starts with it, so a replay finds the variable in a replacement agent's
// module wherever it lies there.
struct SymbolPrefix {
  const SymbolRef* symbol;
  uint64_t offset;
};

// One copy request; `inline_src` non-null for kInlineSource.
cudaError_t SendCopy(api::ApiId id, void* dst, const void* src, size_t count,
                     cudaMemcpyKind kind, cudaStream_t stream, MemcpyMode mode,
                     uint64_t staging_offset, const SymbolPrefix* sym = nullptr) {
  hooks::CopyHead head;
  head.dst = reinterpret_cast<uint64_t>(dst);
  head.src = reinterpret_cast<uint64_t>(src);
  head.count = static_cast<uint64_t>(count);
  head.kind = static_cast<int32_t>(kind);
  head.stream = reinterpret_cast<uint64_t>(stream);
  head.mode = static_cast<uint8_t>(mode);
  // A plain copy, or (sym) one naming a device variable first.
  hooks::cudaMemcpyRequest req;
  hooks::cudaMemcpyToSymbolRequest sym_req;
  req.head = head;
  req.data = wire::Bytes::Of(src, count);
  req.staging_offset = staging_offset;
  if (sym != nullptr) {
    sym_req.module_key = sym->symbol->module_key;
    sym_req.device_name = wire::Bytes::Of(sym->symbol->name.data(), sym->symbol->name.size());
    sym_req.offset = sym->offset;
    sym_req.head = head;
    sym_req.data = req.data;
    sym_req.staging_offset = staging_offset;
  }
  Call call(id, sym != nullptr ? sym_req.Size() : req.Size());
  if (!call.ok()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  if (sym != nullptr) sym_req.Encode(call.args()); else req.Encode(call.args());
  if (!call.Send()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  if (call.status() == 0 && mode == hooks::kReplyDest) {
    hooks::cudaMemcpyReply reply;
    hooks::cudaMemcpyToSymbolReply sym_reply;
    const bool ok = sym != nullptr ? sym_reply.Decode(call.reply(), sym_req)
                                   : reply.Decode(call.reply(), req);
    const wire::Bytes& data = sym != nullptr ? sym_reply.data : reply.data;
    if (ok && data.data != nullptr) std::memcpy(dst, data.data, std::min<uint64_t>(data.size, count));
  }
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
    const cudaError_t e = SendCopy(id, dst, src, count, kind, stream, hooks::kDirect, 0);
    // A large upload from pinned memory the agent may hold (common/upload_hold.h;
    // the agent decides, with the same size bound): its source is
    // write-protected now, while the copy runs.
    if (e == cudaSuccess && rt->holding() && count >= kHoldMinBytes &&
        rt->IsDevicePointer(dst, count) && !rt->IsDevicePointer(src, count)) {
      rt->HoldUploadSource(src, count);
    }
    return e;
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

cudaError_t Failed(cudaError_t e) {
  if (e != cudaSuccess) SetLastError(e);
  return e;
}

// A copy to (`to_symbol`) or from a `__device__` variable; `other` is the
// application's side. Host bytes going to the variable always travel in the
// request (in chunks), so the journal holds them and a replay does not read
// host memory the application may have reused; bytes coming from it come
// back in the reply or through the staging area (synchronously, as natively
// into pageable memory).
cudaError_t SymbolMemcpy(bool to_symbol, bool async, const void* symbol, void* other,
                         size_t count, size_t offset, cudaMemcpyKind kind, cudaStream_t stream) {
  Runtime* rt = Runtime::Get();
  transport::ShmClientChannel* ch = rt->Channel();
  if (ch == nullptr) return Failed(cudaErrorDevicesUnavailable);
  const bool kind_ok = to_symbol ? (kind == cudaMemcpyHostToDevice ||
                                    kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyDefault)
                                 : (kind == cudaMemcpyDeviceToHost ||
                                    kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyDefault);
  if (!kind_ok) return Failed(cudaErrorInvalidMemcpyDirection);
  SymbolRef sym;
  if (int32_t e = ResolveSymbol(symbol, &sym); e != cudaSuccess) {
    return Failed(static_cast<cudaError_t>(e));
  }
  if (offset > sym.size || count > sym.size - offset) return Failed(cudaErrorInvalidValue);
  if (count == 0) return cudaSuccess;
  if (kind == cudaMemcpyDefault) {
    kind = rt->IsDevicePointer(other, count)
               ? cudaMemcpyDeviceToDevice
               : (to_symbol ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
  }
  const api::ApiId sync_id =
      to_symbol ? api::ApiId::cudaMemcpyToSymbol : api::ApiId::cudaMemcpyFromSymbol;
  const api::ApiId id =
      !async ? sync_id
             : (to_symbol ? api::ApiId::cudaMemcpyToSymbolAsync
                          : api::ApiId::cudaMemcpyFromSymbolAsync);
  if (kind == cudaMemcpyDeviceToDevice) {
    if (!rt->IsDevicePointer(other, count)) return Failed(cudaErrorInvalidValue);
    SymbolPrefix p{&sym, offset};
    return Failed(SendCopy(id, to_symbol ? nullptr : other, to_symbol ? other : nullptr, count,
                           kind, stream, hooks::kDirect, 0, &p));
  }
  if (to_symbol) {
    for (size_t done = 0; done < count; done += kInlineLimit) {
      const size_t n = count - done < kInlineLimit ? count - done : kInlineLimit;
      SymbolPrefix p{&sym, offset + done};
      cudaError_t e = SendCopy(id, nullptr, static_cast<const char*>(other) + done, n, kind,
                               stream, hooks::kInlineSource, 0, &p);
      if (e != cudaSuccess) return Failed(e);
    }
    return cudaSuccess;
  }
  const uint32_t reply_room = transport::ChannelOptions().reply_data_size - 64;
  if (count <= reply_room) {
    SymbolPrefix p{&sym, offset};
    return Failed(SendCopy(sync_id, other, nullptr, count, kind, stream, hooks::kReplyDest, 0, &p));
  }
  std::lock_guard<std::mutex> lock(rt->staging_mutex());
  const size_t chunk = ch->staging_size();
  for (size_t done = 0; done < count; done += chunk) {
    const size_t n = count - done < chunk ? count - done : chunk;
    SymbolPrefix p{&sym, offset + done};
    cudaError_t e =
        SendCopy(sync_id, nullptr, nullptr, n, kind, stream, hooks::kStagingDest, 0, &p);
    if (e != cudaSuccess) return Failed(e);
    std::memcpy(static_cast<char*>(other) + done, ch->staging(), n);
  }
  return cudaSuccess;
}

// The process sees one device, ordinal 0 (shim/hooks_device.cc).
bool PeerDevicesOk(const char* api, int dst_device, int src_device) {
  if (dst_device == 0 && src_device == 0) return true;
  REVENANT_LOG(ERROR, "shim") << api << " between devices " << src_device << " and "
                              << dst_device
                              << ": the process has one device (ordinal 0) under Revenant";
  return false;
}

void LogIpcRefused(const char* api) {
  static std::mutex mu;
  static std::set<std::string>* logged = new std::set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  if (!logged->insert(api).second) return;
  REVENANT_LOG(ERROR, "shim")
      << api << " is refused under Revenant (cudaErrorNotSupported): device memory and events "
      << "belong to the process's agent, which journals and may replace them, so they cannot "
         "be shared with another process through CUDA IPC handles";
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
  hooks::cudaHostAllocRequest req;
  req.addr = reinterpret_cast<uint64_t>(addr);
  req.size = static_cast<uint64_t>(mapped);
  req.flags = static_cast<uint32_t>(flags);
  req.path = wire::Bytes::Of(path.data(), path.size());
  Call call(api::ApiId::cudaHostAlloc, req.Size());
  int status = cudaErrorDevicesUnavailable;
  if (call.ok()) {
    req.Encode(call.args());
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
  GuardPinned(reinterpret_cast<uint64_t>(addr), mapped);
  *out = addr;
  return cudaSuccess;
}

int Runtime::FreePinned(void* p) {
  if (p == nullptr) return cudaSuccess;
  PinnedRange r;
  {
    std::lock_guard<std::mutex> lock(pinned_mu_);
    auto it = pinned_.find(reinterpret_cast<uint64_t>(p));
    if (it == pinned_.end() || it->second.registered != 0) return cudaErrorInvalidValue;
    r = it->second;
    pinned_.erase(it);
  }
  UnguardPinned(r.addr, r.size);
  int status = cudaSuccess;
  hooks::cudaFreeHostRequest req;
  req.addr = r.addr;
  Call call(api::ApiId::cudaFreeHost, req.Size());
  if (call.ok()) {
    req.Encode(call.args());
    status = call.Send() ? call.status() : cudaErrorDevicesUnavailable;
  }
  munmap(reinterpret_cast<void*>(r.addr), r.size);
  unlink(r.path.c_str());
  return status;
}

namespace {

// One line of /proc/self/maps.
struct MapEntry {
  uint64_t start = 0, end = 0;
  std::string perms, path;
};

std::vector<MapEntry> ReadMaps() {
  std::vector<MapEntry> maps;
  FILE* f = std::fopen("/proc/self/maps", "re");
  if (f == nullptr) return maps;
  char line[4096 + 256];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    MapEntry e;
    char perms[8] = {0};
    int path_at = 0;
    unsigned long long start = 0, end = 0;
    if (std::sscanf(line, "%llx-%llx %7s %*s %*s %*s %n", &start, &end, perms, &path_at) < 3) {
      continue;
    }
    e.start = start;
    e.end = end;
    e.perms = perms;
    if (path_at > 0) {
      e.path = line + path_at;
      while (!e.path.empty() && (e.path.back() == '\n' || e.path.back() == ' ')) e.path.pop_back();
    }
    maps.push_back(std::move(e));
  }
  std::fclose(f);
  return maps;
}

// Whether every page of [start, end) is mapped by entries that `ok` accepts.
template <typename Pred>
bool Covered(const std::vector<MapEntry>& maps, uint64_t start, uint64_t end, Pred ok) {
  uint64_t at = start;
  for (const MapEntry& e : maps) {
    if (e.end <= at || e.start > at) continue;
    if (!ok(e)) return false;
    at = e.end;
    if (at >= end) return true;
  }
  return false;
}

}  // namespace

int Runtime::RegisterHost(void* p, size_t size, unsigned int flags, std::string* why) {
  if (Channel() == nullptr) return cudaErrorDevicesUnavailable;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t user = reinterpret_cast<uint64_t>(p);
  const uint64_t start = user / page * page;
  const uint64_t end = (user + size + page - 1) / page * page;
  const uint64_t len = end - start;
  {
    std::lock_guard<std::mutex> lock(pinned_mu_);
    auto next = pinned_.lower_bound(start);
    if ((next != pinned_.end() && next->first < end) ||
        (next != pinned_.begin() && std::prev(next)->first + std::prev(next)->second.size > start)) {
      *why = "its pages overlap host memory already shared with the agent";
      return cudaErrorHostMemoryAlreadyRegistered;
    }
  }
  const std::vector<MapEntry> maps = ReadMaps();
  if (!Covered(maps, start, end, [](const MapEntry&) { return true; })) {
    *why = "the range is not mapped in the process";
    return cudaErrorInvalidValue;
  }
  if (!Covered(maps, start, end, [](const MapEntry& e) {
        return e.perms.size() >= 4 && e.perms[0] == 'r' && e.perms[1] == 'w' && e.perms[3] == 'p' &&
               e.path != "[stack]";
      })) {
    *why = "its pages are not private read-write memory (a shared or read-only mapping, or the "
           "main thread's stack)";
    return cudaErrorNotSupported;
  }
  std::string path;
  {
    std::lock_guard<std::mutex> lock(pinned_mu_);
    path = absl::StrCat(job_dir_, "/host-", getpid(), "-", ++pinned_serial_);
  }
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(len)) != 0) {
    *why = absl::StrCat("cannot create ", path, ": ", std::strerror(errno));
    if (fd >= 0) close(fd);
    unlink(path.c_str());
    return cudaErrorMemoryAllocation;
  }
  // The file takes the pages' bytes at a spare address, then moves over
  // them in one step (mremap), so the application never sees them empty.
  // Writes other threads make to the range meanwhile are lost: registering
  // memory that is being written is a race natively too (CUDA pins it).
  void* spare = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (spare == MAP_FAILED) {
    *why = absl::StrCat("cannot map ", path, ": ", std::strerror(errno));
    unlink(path.c_str());
    return cudaErrorMemoryAllocation;
  }
  std::memcpy(spare, reinterpret_cast<void*>(start), len);
  void* moved = mremap(spare, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(start));
  if (moved != reinterpret_cast<void*>(start)) {
    *why = absl::StrCat("cannot move the shared pages into place: ", std::strerror(errno));
    munmap(spare, len);
    unlink(path.c_str());
    return cudaErrorMemoryAllocation;
  }
  hooks::cudaHostRegisterRequest req;
  req.addr = start;
  req.size = len;
  req.flags = static_cast<uint32_t>(flags);
  req.path = wire::Bytes::Of(path.data(), path.size());
  Call call(api::ApiId::cudaHostRegister, req.Size());
  int status = cudaErrorDevicesUnavailable;
  if (call.ok()) {
    req.Encode(call.args());
    if (call.Send()) status = call.status();
  }
  PinnedRange r{start, len, flags, path, user, size};
  if (status != cudaSuccess) {
    *why = "the agent refused to map it";
    RestorePrivate(r);
    return status;
  }
  {
    std::lock_guard<std::mutex> lock(pinned_mu_);
    pinned_[start] = r;
  }
  GuardPinned(start, len);
  return cudaSuccess;
}

// The pages of a registered range become private memory again with the
// bytes they hold, unless the application unmapped them (or mapped something
// else there) itself; the file goes.
void Runtime::RestorePrivate(const PinnedRange& r) {
  const std::vector<MapEntry> maps = ReadMaps();
  if (Covered(maps, r.addr, r.addr + r.size, [&](const MapEntry& e) { return e.path == r.path; })) {
    void* fresh = mmap(nullptr, r.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fresh != MAP_FAILED) {
      std::memcpy(fresh, reinterpret_cast<void*>(r.addr), r.size);
      if (mremap(fresh, r.size, r.size, MREMAP_MAYMOVE | MREMAP_FIXED,
                 reinterpret_cast<void*>(r.addr)) != reinterpret_cast<void*>(r.addr)) {
        // The shared pages stay (same bytes, still the application's).
        REVENANT_LOG(WARNING, "shim") << "cudaHostUnregister: the pages at 0x" << std::hex
                                      << r.addr << " stay shared memory: " << std::strerror(errno);
        munmap(fresh, r.size);
      }
    }
  }
  unlink(r.path.c_str());
}

int Runtime::UnregisterHost(void* p) {
  PinnedRange r;
  {
    std::lock_guard<std::mutex> lock(pinned_mu_);
    const uint64_t user = reinterpret_cast<uint64_t>(p);
    auto it = pinned_.upper_bound(user);
    if (it == pinned_.begin()) return cudaErrorHostMemoryNotRegistered;
    --it;
    if (it->second.registered != user) return cudaErrorHostMemoryNotRegistered;
    r = it->second;
    pinned_.erase(it);
  }
  int status = cudaSuccess;
  hooks::cudaHostUnregisterRequest req;
  req.addr = r.addr;
  Call call(api::ApiId::cudaHostUnregister, req.Size());
  if (call.ok()) {
    req.Encode(call.args());
    status = call.Send() ? call.status() : cudaErrorDevicesUnavailable;
  }
  UnguardPinned(r.addr, r.size);
  RestorePrivate(r);
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

extern "C" REVENANT_EXPORT cudaError_t cudaMemcpyPeer(void* dst, int dstDevice, const void* src,
                                                      int srcDevice, size_t count) {
  if (!revenant::shim::PeerDevicesOk("cudaMemcpyPeer", dstDevice, srcDevice)) {
    return revenant::shim::Failed(cudaErrorInvalidDevice);
  }
  return revenant::shim::Memcpy(ApiId::cudaMemcpy, dst, src, count, cudaMemcpyDeviceToDevice,
                                nullptr);
}

extern "C" REVENANT_EXPORT cudaError_t cudaMemcpyPeerAsync(void* dst, int dstDevice,
                                                           const void* src, int srcDevice,
                                                           size_t count, cudaStream_t stream) {
  if (!revenant::shim::PeerDevicesOk("cudaMemcpyPeerAsync", dstDevice, srcDevice)) {
    return revenant::shim::Failed(cudaErrorInvalidDevice);
  }
  return revenant::shim::Memcpy(ApiId::cudaMemcpyAsync, dst, src, count,
                                cudaMemcpyDeviceToDevice, stream);
}

extern "C" REVENANT_EXPORT cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src,
                                                          size_t count, size_t offset,
                                                          cudaMemcpyKind kind) {
  return revenant::shim::SymbolMemcpy(true, false, symbol, const_cast<void*>(src), count, offset,
                                      kind, nullptr);
}

extern "C" REVENANT_EXPORT cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol,
                                                            size_t count, size_t offset,
                                                            cudaMemcpyKind kind) {
  return revenant::shim::SymbolMemcpy(false, false, symbol, dst, count, offset, kind, nullptr);
}

extern "C" REVENANT_EXPORT cudaError_t cudaMemcpyToSymbolAsync(const void* symbol,
                                                               const void* src, size_t count,
                                                               size_t offset,
                                                               cudaMemcpyKind kind,
                                                               cudaStream_t stream) {
  return revenant::shim::SymbolMemcpy(true, true, symbol, const_cast<void*>(src), count, offset,
                                      kind, stream);
}

extern "C" REVENANT_EXPORT cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol,
                                                                 size_t count, size_t offset,
                                                                 cudaMemcpyKind kind,
                                                                 cudaStream_t stream) {
  return revenant::shim::SymbolMemcpy(false, true, symbol, dst, count, offset, kind, stream);
}

// The address is the agent's: usable in kernel arguments and copies (the
// shim then treats the variable's range as device memory), not kept across a
// replacement agent.
extern "C" REVENANT_EXPORT cudaError_t cudaGetSymbolAddress(void** devPtr, const void* symbol) {
  if (devPtr == nullptr) return revenant::shim::Failed(cudaErrorInvalidValue);
  revenant::shim::SymbolRef sym;
  if (int32_t e = revenant::shim::ResolveSymbol(symbol, &sym, /*want_address=*/true);
      e != cudaSuccess) {
    return revenant::shim::Failed(static_cast<cudaError_t>(e));
  }
  Runtime::Get()->AddDeviceSymbol(sym.address, sym.size);
  *devPtr = reinterpret_cast<void*>(sym.address);
  return cudaSuccess;
}

extern "C" REVENANT_EXPORT cudaError_t cudaGetSymbolSize(size_t* size, const void* symbol) {
  if (size == nullptr) return revenant::shim::Failed(cudaErrorInvalidValue);
  revenant::shim::SymbolRef sym;
  if (int32_t e = revenant::shim::ResolveSymbol(symbol, &sym); e != cudaSuccess) {
    return revenant::shim::Failed(static_cast<cudaError_t>(e));
  }
  *size = sym.size;
  return cudaSuccess;
}

// The agent answers into a buffer of its own (cudaDeviceGetPCIBusIdReply); at most
// `len` bytes reach the application, always NUL-terminated.
extern "C" REVENANT_EXPORT cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  if (pciBusId == nullptr || len <= 0) return revenant::shim::Failed(cudaErrorInvalidValue);
  revenant::hooks::cudaDeviceGetPCIBusIdRequest req;
  req.device = static_cast<int32_t>(device);
  revenant::shim::Call call(ApiId::cudaDeviceGetPCIBusId, req.Size());
  if (!call.ok()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  req.Encode(call.args());
  if (!call.Send()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  if (call.status() != 0) return revenant::shim::Failed(static_cast<cudaError_t>(call.status()));
  revenant::hooks::cudaDeviceGetPCIBusIdReply reply;
  if (!reply.Decode(call.reply()) || reply.id.data == nullptr || reply.id.size == 0) {
    return revenant::shim::Failed(cudaErrorUnknown);
  }
  const char* id = reply.id.data;
  const uint64_t n = reply.id.size;
  const size_t copy = std::min<size_t>(n, static_cast<size_t>(len));
  std::memcpy(pciBusId, id, copy);
  pciBusId[copy - 1] = '\0';
  return cudaSuccess;
}

extern "C" REVENANT_EXPORT cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool,
                                                            const cudaMemAccessDesc* descList,
                                                            size_t count) {
  if (count > 0 && descList == nullptr) return revenant::shim::Failed(cudaErrorInvalidValue);
  const size_t bytes = count * sizeof(cudaMemAccessDesc);
  revenant::hooks::cudaMemPoolSetAccessRequest req;
  req.pool = reinterpret_cast<uint64_t>(memPool);
  req.descs = revenant::wire::Bytes::Of(descList, bytes);
  revenant::shim::Call call(ApiId::cudaMemPoolSetAccess, req.Size());
  if (!call.ok()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  req.Encode(call.args());
  if (!call.Send()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  return revenant::shim::Failed(static_cast<cudaError_t>(call.status()));
}

extern "C" REVENANT_EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t*, void*) {
  revenant::shim::LogIpcRefused("cudaIpcGetMemHandle");
  return revenant::shim::Failed(cudaErrorNotSupported);
}
extern "C" REVENANT_EXPORT cudaError_t cudaIpcOpenMemHandle(void**, cudaIpcMemHandle_t,
                                                            unsigned int) {
  revenant::shim::LogIpcRefused("cudaIpcOpenMemHandle");
  return revenant::shim::Failed(cudaErrorNotSupported);
}
extern "C" REVENANT_EXPORT cudaError_t cudaIpcCloseMemHandle(void*) {
  revenant::shim::LogIpcRefused("cudaIpcCloseMemHandle");
  return revenant::shim::Failed(cudaErrorNotSupported);
}
extern "C" REVENANT_EXPORT cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t*, cudaEvent_t) {
  revenant::shim::LogIpcRefused("cudaIpcGetEventHandle");
  return revenant::shim::Failed(cudaErrorNotSupported);
}
extern "C" REVENANT_EXPORT cudaError_t cudaIpcOpenEventHandle(cudaEvent_t*, cudaIpcEventHandle_t) {
  revenant::shim::LogIpcRefused("cudaIpcOpenEventHandle");
  return revenant::shim::Failed(cudaErrorNotSupported);
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

// Registering existing application memory: its pages become memory shared
// with the agent in place (Runtime::RegisterHost), so that, as natively on a
// device with unified addressing, copies to and from it are asynchronous
// and kernels reach it at its own address (cudaHostGetDevicePointer). The
// pages of a default or portable registration that cannot be shared (a
// shared or read-only mapping) stay pageable memory for copies (staged,
// synchronous: a valid CUDA schedule); a mapped registration of them is
// refused with a log line. I/O and read-only registrations are refused.
namespace {

constexpr unsigned int kHostRegisterFlags = cudaHostRegisterPortable | cudaHostRegisterMapped |
                                            cudaHostRegisterIoMemory | cudaHostRegisterReadOnly;

// Default or portable registrations kept pageable: pointer -> size.
std::mutex pageable_registered_mu;
std::map<uint64_t, uint64_t>& PageableRegistered() {
  static auto* m = new std::map<uint64_t, uint64_t>();
  return *m;
}

}  // namespace

extern "C" REVENANT_EXPORT cudaError_t cudaHostRegister(void* ptr, size_t size,
                                                        unsigned int flags) {
  if (ptr == nullptr || size == 0 || (flags & ~kHostRegisterFlags) != 0) {
    SetLastError(cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
  }
  if (flags & (cudaHostRegisterIoMemory | cudaHostRegisterReadOnly)) {
    revenant::shim::LogNotSupported("cudaHostRegister with cudaHostRegisterIoMemory/ReadOnly");
    SetLastError(cudaErrorNotSupported);
    return cudaErrorNotSupported;
  }
  const uint64_t a = reinterpret_cast<uint64_t>(ptr);
  {
    std::lock_guard<std::mutex> lock(pageable_registered_mu);
    auto& m = PageableRegistered();
    auto next = m.lower_bound(a);
    if ((next != m.end() && next->first < a + size) ||
        (next != m.begin() && std::prev(next)->first + std::prev(next)->second > a)) {
      SetLastError(cudaErrorHostMemoryAlreadyRegistered);
      return cudaErrorHostMemoryAlreadyRegistered;
    }
  }
  std::string why;
  int e = Runtime::Get()->RegisterHost(ptr, size, flags, &why);
  if (e == cudaErrorNotSupported && !(flags & cudaHostRegisterMapped)) {
    REVENANT_LOG(DEBUG, "shim") << "cudaHostRegister(" << ptr << ", " << size
                                << "): stays pageable memory: " << why;
    std::lock_guard<std::mutex> lock(pageable_registered_mu);
    PageableRegistered()[a] = size;
    return cudaSuccess;
  }
  if (e == cudaErrorNotSupported || e == cudaErrorMemoryAllocation) {
    REVENANT_LOG(ERROR, "shim") << "cudaHostRegister(" << ptr << ", " << size << ", flags 0x"
                                << std::hex << flags << std::dec << ") fails (cudaError " << e
                                << "): " << why;
  }
  SetLastError(e);
  return static_cast<cudaError_t>(e);
}

extern "C" REVENANT_EXPORT cudaError_t cudaHostUnregister(void* ptr) {
  if (ptr == nullptr) {
    SetLastError(cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
  }
  {
    std::lock_guard<std::mutex> lock(pageable_registered_mu);
    if (PageableRegistered().erase(reinterpret_cast<uint64_t>(ptr)) == 1) return cudaSuccess;
  }
  int e = Runtime::Get()->UnregisterHost(ptr);
  SetLastError(e);
  return static_cast<cudaError_t>(e);
}

// The flags of pinned memory, as the runtime answers them on the H200 (CUDA
// 13, measured by tests/apps/mapped_host in the GPU section conformance):
// memory of cudaHostAlloc/cudaMallocHost is mapped and portable whatever it
// was allocated with (unified addressing), registered memory answers its
// registration flags.
extern "C" REVENANT_EXPORT cudaError_t cudaHostGetFlags(unsigned int* pFlags, void* pHost) {
  revenant::shim::PinnedRange r;
  if (pFlags == nullptr || !Runtime::Get()->FindPinned(pHost, 1, &r)) {
    SetLastError(cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
  }
  *pFlags = r.registered != 0 ? r.flags : r.flags | cudaHostAllocMapped | cudaHostAllocPortable;
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
  revenant::hooks::cudaFreeRequest req;
  req.devPtr = reinterpret_cast<uint64_t>(devPtr);
  revenant::shim::Call call(ApiId::cudaFree, req.Size());
  if (!call.ok()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  req.Encode(call.args());
  if (!call.Send()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  return static_cast<cudaError_t>(call.status());
}

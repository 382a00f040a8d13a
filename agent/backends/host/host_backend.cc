#include "agent/backends/host/host_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "api/launch_attributes.h"
#include "common/content_hash.h"
#include "common/logging.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

// Conditional handles of the host backend: kCondTag | the handle's index
// among its root graph's handles. The condition values of the launch a
// stream's worker runs (set around the launch's steps, read by
// revenant_host_set_conditional).
namespace {
constexpr uint64_t kCondTag = 0x5245564300000000ull;  // "REVC"
constexpr uint64_t kCondIndexMask = 0xffffffffull;
thread_local unsigned int* tls_cond_values = nullptr;
thread_local size_t tls_cond_count = 0;
}  // namespace

// cudaGraphSetConditional of host kernels (hostkernel/cuda_host_compat.h
// resolves it in the agent's dynamic symbols): sets the condition of the
// running launch.
extern "C" __attribute__((visibility("default"))) void revenant_host_set_conditional(
    unsigned long long handle, unsigned int value) {
  const uint64_t index = handle & kCondIndexMask;
  if ((handle & ~kCondIndexMask) != kCondTag || tls_cond_values == nullptr ||
      index >= tls_cond_count) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      REVENANT_LOG(ERROR, "host-backend")
          << "cudaGraphSetConditional: handle 0x" << std::hex << handle << std::dec
          << " is not a conditional handle of the graph this kernel runs in (or the kernel "
             "runs in a cooperative launch, whose threads cannot set one here): ignored";
    }
    return;
  }
  __atomic_store_n(&tls_cond_values[index], value, __ATOMIC_SEQ_CST);
}

namespace revenant {
namespace agent {
namespace host {
namespace {

constexpr char kLog[] = "host-backend";
constexpr int kVersion = 13000;
constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kMaxBlockDim[3] = {1024, 1024, 64};
constexpr int kMaxGridDim[3] = {2147483647, 65535, 65535};
constexpr size_t kSharedPerBlock = 48 << 10;
constexpr size_t kSharedPerBlockOptin = 227 << 10;
constexpr size_t kSharedPerSm = 228 << 10;
constexpr int kRegsPerBlock = 65536;
constexpr int kMaxThreadsPerSm = 2048;
constexpr size_t kConstMem = 64 << 10;
constexpr int kL2Size = 50 << 20;
constexpr unsigned int kValidDeviceFlags =
    cudaDeviceScheduleMask | cudaDeviceMapHost | cudaDeviceLmemResizeToMax;

uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

std::map<int, size_t> DefaultLimits() {
  return {
      {cudaLimitStackSize, 1024},
      {cudaLimitPrintfFifoSize, 1 << 20},
      {cudaLimitMallocHeapSize, 8 << 20},
      {cudaLimitDevRuntimeSyncDepth, 2},
      {cudaLimitDevRuntimePendingLaunchCount, 2048},
      {cudaLimitMaxL2FetchGranularity, 32},
      {cudaLimitPersistingL2CacheSize, 0},
  };
}

}  // namespace

absl::Status HostBackend::PrepareDevice(const BackendOptions& options, DeviceRange* range_out,
                                        std::unique_ptr<hostkernel::HostKernelRegistry>* registry_out) {
  DeviceRange range = options.device_range;
  if (range.base == 0 && range.size == 0) {
    range.base = kDefaultDeviceBase + static_cast<uint64_t>(options.rank) * kDefaultDeviceSize;
    range.size = kDefaultDeviceSize;
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (range.base == 0 || range.size == 0 || range.base % page != 0 || range.size % page != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device range [0x", absl::Hex(range.base), ", +", range.size,
        ") must be non-empty and page aligned"));
  }
  std::unique_ptr<hostkernel::HostKernelRegistry> registry;
  if (!options.host_kernel_libraries.empty()) {
    absl::StatusOr<std::unique_ptr<hostkernel::HostKernelRegistry>> loaded =
        hostkernel::HostKernelRegistry::Load(options.host_kernel_libraries);
    if (!loaded.ok()) {
      return absl::Status(loaded.status().code(),
                          absl::StrCat("loading host kernel libraries (",
                                       absl::StrJoin(options.host_kernel_libraries, ":"),
                                       "): ", loaded.status().message()));
    }
    registry = std::move(*loaded);
  }
  // MAP_NORESERVE: 64 GiB of address space, backed only where touched.
  // MAP_FIXED_NOREPLACE: never clobber a mapping that is already there.
  void* mapped = mmap(reinterpret_cast<void*>(range.base), range.size, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (mapped == MAP_FAILED) {
    const int err = errno;
    return absl::Status(
        err == EEXIST ? absl::StatusCode::kAlreadyExists : absl::StatusCode::kResourceExhausted,
        absl::StrCat("cannot map the device range [0x", absl::Hex(range.base), ", 0x",
                     absl::Hex(range.base + range.size), "): ", strerror(err),
                     err == EEXIST ? " (the range is already in use; is another agent of "
                                     "this rank running in this process?)"
                                   : ""));
  }
  if (mapped != reinterpret_cast<void*>(range.base)) {
    // A kernel without MAP_FIXED_NOREPLACE treats the address as a hint.
    munmap(mapped, range.size);
    return absl::AlreadyExistsError(absl::StrCat(
        "cannot map the device range at 0x", absl::Hex(range.base),
        ": the address range is already in use"));
  }
  REVENANT_LOG(DEBUG, kLog) << "device range [0x" << std::hex << range.base << ", 0x"
                            << range.base + range.size << std::dec << ") mapped, "
                            << (registry ? registry->Names().size() : 0) << " host kernels";
  *range_out = range;
  *registry_out = std::move(registry);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HostBackend>> HostBackend::Create(const BackendOptions& options) {
  DeviceRange range;
  std::unique_ptr<hostkernel::HostKernelRegistry> registry;
  if (absl::Status s = PrepareDevice(options, &range, &registry); !s.ok()) return s;
  return std::unique_ptr<HostBackend>(
      new HostBackend(range, std::move(registry), options.launch_graph_max));
}

HostBackend::HostBackend(DeviceRange range,
                         std::unique_ptr<hostkernel::HostKernelRegistry> registry,
                         int launch_graph_max)
    : range_(range),
      registry_(std::move(registry)),
      num_cpus_(std::max(1u, std::thread::hardware_concurrency())),
      launch_batch_max_(launch_graph_max),
      allocator_(range.base, range.size),
      limits_(DefaultLimits()) {
  legacy_ = std::make_unique<HostStream>(
      0, kLeastStreamPriority, /*legacy=*/true,
      [this](HostStream* s, cudaError_t err) { RecordError(s, err); });
}

HostBackend::~HostBackend() {
  (void)FlushLaunches();
  WaitAll();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [ptr, stream] : streams_) retired_.push_back(std::move(stream));
    streams_.clear();
  }
  // Joined outside mu_: nothing a worker runs takes mu_, but stay safe.
  std::vector<std::unique_ptr<HostStream>> retired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    retired.swap(retired_);
  }
  retired.clear();
  snapshot_stream_.reset();
  legacy_.reset();
  munmap(reinterpret_cast<void*>(range_.base), range_.size);
}

// --- Internals -------------------------------------------------------------------

HostStream* HostBackend::ResolveStream(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    return legacy_.get();
  }
  auto it = streams_.find(reinterpret_cast<HostStream*>(stream));
  return it == streams_.end() ? nullptr : it->second.get();
}

HostBackend::Event* HostBackend::ResolveEvent(cudaEvent_t event) {
  auto it = events_.find(reinterpret_cast<Event*>(event));
  return it == events_.end() ? nullptr : it->second.get();
}

std::shared_ptr<Marker> HostBackend::EnqueueLocked(HostStream* s,
                                                   std::vector<std::shared_ptr<Marker>> deps,
                                                   HostStream::Op op) {
  auto capture = captures_.find(s);
  if (capture != captures_.end()) {
    // Recorded, not run: the caller gets a marker that is already done.
    if (op) {
      Graph* g = capture->second;
      AddNodeLocked(g, NodeKind::kCaptured, g->capture_deps, std::move(op));
      g->capture_deps = {g->nodes.size() - 1};
    }
    return Marker::Done();
  }
  auto add = [&deps](std::shared_ptr<Marker> m) {
    if (!m->done()) deps.push_back(std::move(m));
  };
  // Nothing queued after a boundary snapshot may run before its copies read
  // the allocations (the application's next writes, on any stream).
  if (snapshot_gate_ != nullptr) add(snapshot_gate_);
  if (s->legacy()) {
    // Legacy default stream: after all earlier work of blocking streams,
    // including destroyed streams whose work is still draining.
    for (auto& [ptr, stream] : streams_) {
      if (stream->blocking()) add(stream->last());
    }
    for (auto& stream : retired_) {
      if (stream->blocking()) add(stream->last());
    }
  } else if (s->blocking()) {
    add(legacy_->last());
  }
  return s->Enqueue(std::move(deps), std::move(op));
}

cudaError_t HostBackend::Enqueue(cudaStream_t stream, HostStream::Op op,
                                 std::shared_ptr<Marker>* done) {
  std::lock_guard<std::mutex> lock(mu_);
  HostStream* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  std::shared_ptr<Marker> m = EnqueueLocked(s, {}, std::move(op));
  if (done != nullptr) *done = std::move(m);
  return cudaSuccess;
}

void HostBackend::WaitAll() {
  std::vector<std::shared_ptr<Marker>> markers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    markers.push_back(legacy_->last());
    if (snapshot_gate_ != nullptr) markers.push_back(snapshot_gate_);
    for (auto& [ptr, stream] : streams_) markers.push_back(stream->last());
    for (auto& stream : retired_) markers.push_back(stream->last());
  }
  for (const auto& m : markers) m->Wait();
}

void HostBackend::ReleasePendingFrees(HostStream* stream) {
  std::vector<PendingFree> keep;
  for (PendingFree& f : pending_frees_) {
    if ((stream == nullptr || f.stream == stream) && f.marker->done()) {
      absl::Status s = FreeBlock(f.addr);
      if (!s.ok()) REVENANT_LOG(ERROR, kLog) << "stream-ordered free: " << s;
    } else {
      keep.push_back(std::move(f));
    }
  }
  pending_frees_.swap(keep);
}

absl::Status HostBackend::FreeBlock(uint64_t addr) {
  absl::Status s = allocator_.Free(addr);
  if (!s.ok()) return s;
  // Give every page wholly inside the (coalesced) free block back to the OS.
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  auto [start, size] = allocator_.FreeBlockContaining(addr);
  const uint64_t first = (start + page - 1) / page * page;
  const uint64_t end = (start + size) / page * page;
  if (end > first) {
    madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
  }
  return absl::OkStatus();
}

cudaError_t HostBackend::AllocateLocked(std::unique_lock<std::mutex>& lock, void** ptr,
                                           size_t size) {
  absl::StatusOr<uint64_t> addr = allocator_.Allocate(size);
  if (!addr.ok() && addr.status().code() == absl::StatusCode::kResourceExhausted &&
      !pending_frees_.empty()) {
    // Memory freed in stream order may be what is missing: wait for it (a
    // point fixed by the call sequence, so replay allocates identically).
    lock.unlock();
    WaitAll();
    lock.lock();
    ReleasePendingFrees(nullptr);
    addr = allocator_.Allocate(size);
  }
  if (!addr.ok()) {
    REVENANT_LOG(DEBUG, kLog) << "allocation of " << size << " bytes: " << addr.status();
    return cudaErrorMemoryAllocation;
  }
  *ptr = reinterpret_cast<void*>(*addr);
  return cudaSuccess;
}

bool HostBackend::InDeviceRange(const void* p) const {
  const uint64_t a = Addr(p);
  return a >= range_.base && a - range_.base < range_.size;
}

bool HostBackend::IsSharedHost(const void* p, size_t n) const {
  const uint64_t a = Addr(p);
  auto it = shared_host_.upper_bound(a);
  if (it == shared_host_.begin()) return false;
  --it;
  const uint64_t end = it->first + it->second;
  return a < end && n <= end - a;
}

bool HostBackend::DeviceAccessible(const void* p, size_t n) const {
  if (p == nullptr) return false;
  if (InDeviceRange(p)) return allocator_.Contains(Addr(p), n);
  if (IsSharedHost(p, n)) return true;
  const uint64_t a = Addr(p);
  auto it = symbols_.upper_bound(a);
  if (it == symbols_.begin()) return false;
  --it;
  const uint64_t end = it->first + it->second;
  return a < end && n <= end - a;
}

void HostBackend::ReapRetired() {
  auto finished = [](const std::unique_ptr<HostStream>& s) { return s->finished(); };
  // Destroying a finished stream only joins an exited thread.
  retired_.erase(std::remove_if(retired_.begin(), retired_.end(), finished), retired_.end());
}

void HostBackend::RecordError(HostStream* stream, cudaError_t err) {
  REVENANT_LOG(DEBUG, kLog) << "deferred error " << static_cast<int>(err);
  std::lock_guard<std::mutex> lock(error_mu_);
  errors_.emplace_back(stream, err);
}

cudaError_t HostBackend::TakeStreamError(HostStream* stream) {
  std::lock_guard<std::mutex> lock(error_mu_);
  cudaError_t first = cudaSuccess;
  std::vector<std::pair<HostStream*, cudaError_t>> keep;
  for (auto& e : errors_) {
    if (e.first == stream) {
      if (first == cudaSuccess) first = e.second;
    } else {
      keep.push_back(e);
    }
  }
  errors_.swap(keep);
  return first;
}

cudaError_t HostBackend::TakeDeferredError() {
  std::lock_guard<std::mutex> lock(error_mu_);
  cudaError_t first = errors_.empty() ? cudaSuccess : errors_.front().second;
  errors_.clear();
  return first;
}

bool HostBackend::Capturing(HostStream* s) const { return captures_.contains(s); }

bool HostBackend::KnownKernel(const void* func) const {
  return func != nullptr && kernels_.contains(func);
}

// --- Modules and launches ------------------------------------------------------------

absl::Status HostBackend::LoadModule(uint64_t module_key, absl::string_view) {
  std::lock_guard<std::mutex> lock(mu_);
  modules_.insert(module_key);
  return absl::OkStatus();
}

absl::StatusOr<KernelInfo> HostBackend::GetKernel(uint64_t module_key,
                                                  const std::string& mangled_name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!modules_.contains(module_key)) {
    return absl::NotFoundError(absl::StrCat("module ", module_key, " is not loaded"));
  }
  const hostkernel::HostKernel* k =
      registry_ == nullptr ? nullptr : registry_->Find(mangled_name);
  if (k == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "the host backend has no implementation of kernel ", mangled_name,
        registry_ == nullptr
            ? " (no host kernel library was given)"
            : absl::StrCat(" (", registry_->Names().size(), " kernels in the loaded libraries)"),
        ": build a host kernel library from the kernel's source (host_kernel_library in "
        "build_defs/cuda.bzl) and pass it with --host-kernels or REVENANT_HOST_KERNELS"));
  }
  kernels_.try_emplace(k);
  KernelInfo info;
  info.handle = k;
  for (const hostkernel::ParamInfo& p : k->params) {
    info.params.push_back({static_cast<uint32_t>(p.offset), static_cast<uint32_t>(p.size)});
  }
  info.args_size = static_cast<uint32_t>(k->args_size);
  return info;
}

cudaError_t HostBackend::KernelOpLocked(const KernelInfo& kernel, dim3 grid, dim3 block,
                                        size_t shared_bytes, const void* packed_args,
                                        bool cooperative, HostStream::Op* op) {
  if (!KnownKernel(kernel.handle)) return cudaErrorInvalidDeviceFunction;
  const auto* k = static_cast<const hostkernel::HostKernel*>(kernel.handle);
  // Configuration errors are the launch's own return value, as on a GPU.
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 ||
      block.z == 0) {
    return cudaErrorInvalidConfiguration;
  }
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads > kMaxThreadsPerBlock || block.x > uint32_t(kMaxBlockDim[0]) ||
      block.y > uint32_t(kMaxBlockDim[1]) || block.z > uint32_t(kMaxBlockDim[2]) ||
      grid.x > uint32_t(kMaxGridDim[0]) || grid.y > uint32_t(kMaxGridDim[1]) ||
      grid.z > uint32_t(kMaxGridDim[2])) {
    return cudaErrorInvalidConfiguration;
  }
  if (shared_bytes > static_cast<size_t>(kernels_[k].max_dynamic_shared)) {
    return cudaErrorInvalidValue;
  }
  if (k->args_size > 0 && packed_args == nullptr) return cudaErrorInvalidValue;
  // The argument buffer is only valid during this call.
  auto args = std::make_shared<std::vector<char>>(
      static_cast<const char*>(packed_args),
      static_cast<const char*>(packed_args) + (packed_args == nullptr ? 0 : k->args_size));
  hostkernel::Dim3 g{grid.x, grid.y, grid.z}, b{block.x, block.y, block.z};
  *op = [k, g, b, shared_bytes, args, cooperative]() {
    absl::Status st = k->Launch(g, b, shared_bytes, args->empty() ? nullptr : args->data(),
                                cooperative);
    if (st.ok()) return cudaSuccess;
    REVENANT_LOG(WARNING, kLog) << "kernel launch failed: " << st;
    return static_cast<cudaError_t>(hostkernel::CudaErrorOf(st));
  };
  return cudaSuccess;
}

cudaError_t HostBackend::LaunchKernel(const KernelInfo& kernel, dim3 grid, dim3 block,
                                      size_t shared_bytes, cudaStream_t stream,
                                      const void* packed_args, bool cooperative) {
  std::lock_guard<std::mutex> lock(mu_);
  FlushHeldLocked();  // held launches go first
  if (!KnownKernel(kernel.handle)) return cudaErrorInvalidDeviceFunction;
  HostStream* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  HostStream::Op op;
  cudaError_t err =
      KernelOpLocked(kernel, grid, block, shared_bytes, packed_args, cooperative, &op);
  if (err != cudaSuccess) return err;
  EnqueueLocked(s, {}, std::move(op));
  return cudaSuccess;
}

cudaError_t HostBackend::LaunchKernelMayHold(const KernelInfo& kernel, dim3 grid, dim3 block,
                                             size_t shared_bytes, cudaStream_t stream,
                                             const void* packed_args, bool more_requests) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!KnownKernel(kernel.handle)) return cudaErrorInvalidDeviceFunction;
  HostStream* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  HostStream::Op op;
  const cudaError_t err =
      KernelOpLocked(kernel, grid, block, shared_bytes, packed_args, false, &op);
  if (err != cudaSuccess) return err;
  if (launch_batch_max_ < 2 || (!more_requests && held_.empty())) {
    EnqueueLocked(s, {}, std::move(op));
    return cudaSuccess;
  }
  if (!held_.empty() && held_.front().first != s) FlushHeldLocked();
  held_.emplace_back(s, std::move(op));
  if (!more_requests || static_cast<int>(held_.size()) >= launch_batch_max_) FlushHeldLocked();
  return cudaSuccess;
}

void HostBackend::FlushHeldLocked() {
  if (held_.empty()) return;
  if (held_.size() >= 2) {
    ++held_batches_;
    held_launches_ += held_.size();
  }
  for (auto& [stream, op] : held_) EnqueueLocked(stream, {}, std::move(op));
  held_.clear();
}

int32_t HostBackend::FlushLaunches() {
  std::lock_guard<std::mutex> lock(mu_);
  FlushHeldLocked();
  return 0;  // configuration errors came back from the launches themselves
}

std::string HostBackend::StatsAtExit() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (held_batches_ == 0) return std::string();
  return absl::StrFormat("launches at exit: %d queued in %d batches held back (at most %d)",
                         held_launches_, held_batches_, launch_batch_max_);
}

cudaError_t HostBackend::LaunchKernelEx(const KernelInfo& kernel, dim3 grid, dim3 block,
                                        size_t shared_bytes, cudaStream_t stream,
                                        const void* packed_args,
                                        const std::vector<cudaLaunchAttribute>& attrs) {
  bool cooperative = false;
  std::string why;
  cudaError_t e =
      api::CheckHostLaunchAttributes(attrs.data(), attrs.size(), grid, &cooperative, &why);
  if (e != cudaSuccess) {
    REVENANT_LOG(ERROR, kLog) << "cudaLaunchKernelExC refused (cudaError " << static_cast<int>(e)
                              << "): " << why;
    return e;
  }
  return LaunchKernel(kernel, grid, block, shared_bytes, stream, packed_args, cooperative);
}

absl::StatusOr<Backend::Symbol> HostBackend::GetSymbol(uint64_t module_key,
                                                       const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!modules_.contains(module_key)) {
    return absl::NotFoundError(absl::StrCat("module ", module_key, " is not loaded"));
  }
  const hostkernel::HostKernelRegistry::Variable* v =
      registry_ == nullptr ? nullptr : registry_->FindVariable(name);
  if (v == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "the host backend has no storage for device variable ", name,
        registry_ == nullptr ? " (no host kernel library was given)" : "",
        ": register it in the host kernel library with REVENANT_HOST_DEVICE_VARIABLE (", name,
        ") (hostkernel/host_kernel.h) and pass the library with --host-kernels"));
  }
  symbols_[Addr(v->address)] = v->size;
  Symbol s;
  s.address = v->address;
  s.size = v->size;
  return s;
}

// --- Copies and memory ------------------------------------------------------------------

cudaError_t HostBackend::Memcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                cudaStream_t stream, bool async) {
  bool dst_device, src_device;
  switch (kind) {
    case cudaMemcpyHostToHost: dst_device = src_device = false; break;
    case cudaMemcpyHostToDevice: dst_device = true; src_device = false; break;
    case cudaMemcpyDeviceToHost: dst_device = false; src_device = true; break;
    case cudaMemcpyDeviceToDevice: dst_device = src_device = true; break;
    case cudaMemcpyDefault:
      dst_device = InDeviceRange(dst);
      src_device = InDeviceRange(src);
      break;
    default:
      return cudaErrorInvalidMemcpyDirection;
  }
  std::shared_ptr<Marker> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    HostStream* s = ResolveStream(stream);
    if (s == nullptr) return cudaErrorInvalidResourceHandle;
    if (count == 0) return cudaSuccess;
    if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
    // A device side must be a live allocation (or shared host memory, which
    // the device reaches too); anything inside the device range is checked
    // whatever the kind says, so a stale pointer never faults the agent.
    auto check = [&](const void* p, bool device) {
      if (device || InDeviceRange(p)) return DeviceAccessible(p, count);
      return true;
    };
    if (!check(dst, dst_device) || !check(src, src_device)) return cudaErrorInvalidValue;
    const bool src_private = !InDeviceRange(src) && !IsSharedHost(src, count);
    const bool dst_private = !InDeviceRange(dst) && !IsSharedHost(dst, count);
    // Host bytes that are not shared memory are only valid during the call:
    // an asynchronous copy takes its own copy of a source, and a destination
    // is written before returning.
    if (dst_private) async = false;
    if (!async && Capturing(s)) return cudaErrorStreamCaptureUnsupported;
    if (async && src_private) {
      auto bytes = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                       static_cast<const char*>(src) + count);
      done = EnqueueLocked(s, {}, [dst, bytes]() {
        std::memcpy(dst, bytes->data(), bytes->size());
        return cudaSuccess;
      });
    } else {
      done = EnqueueLocked(s, {}, [dst, src, count]() {
        std::memmove(dst, src, count);
        return cudaSuccess;
      });
    }
  }
  if (!async) done->Wait();
  return cudaSuccess;
}

bool HostBackend::StreamCapturing(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  HostStream* s = ResolveStream(stream);
  return s != nullptr && Capturing(s);
}

cudaError_t HostBackend::MemcpyHeld(void* dst, const void* src, size_t count, cudaStream_t stream,
                                    bool async, uint64_t* hash_words, uint64_t tag, bool* hashed) {
  *hashed = false;
  std::shared_ptr<Marker> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    HostStream* s = ResolveStream(stream);
    if (s == nullptr) return cudaErrorInvalidResourceHandle;
    if (count != 0 && !Capturing(s) && hash_words != nullptr) {
      if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
      if (!DeviceAccessible(dst, count) || !IsSharedHost(src, count)) return cudaErrorInvalidValue;
      // The upload, then the hash of what the device holds, then the tag:
      // in stream order, as the device does it.
      finished = EnqueueLocked(s, {}, [dst, src, count, hash_words, tag]() {
        std::memmove(dst, src, count);
        __atomic_store_n(&hash_words[0], ContentHash(dst, count), __ATOMIC_RELAXED);
        __atomic_store_n(&hash_words[1], tag, __ATOMIC_RELEASE);
        return cudaSuccess;
      });
    }
  }
  if (finished == nullptr) return Memcpy(dst, src, count, cudaMemcpyHostToDevice, stream, async);
  *hashed = true;
  if (!async) finished->Wait();
  return cudaSuccess;
}

cudaError_t HostBackend::MemcpyCaptured(void* dst, const void* src, size_t count,
                                        cudaStream_t stream, bool async, void* capture,
                                        uint64_t* done, uint64_t tag, bool* captured) {
  *captured = false;
  std::shared_ptr<Marker> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    HostStream* s = ResolveStream(stream);
    if (s == nullptr) return cudaErrorInvalidResourceHandle;
    if (count == 0 || Capturing(s)) {
      // A graph node reads its source when the graph runs: nothing to capture.
    } else {
      if (dst == nullptr || src == nullptr || capture == nullptr || done == nullptr)
        return cudaErrorInvalidValue;
      if (!DeviceAccessible(dst, count) || !IsSharedHost(src, count) ||
          !IsSharedHost(capture, count) || !IsSharedHost(done, sizeof(*done)))
        return cudaErrorInvalidValue;
      // The upload, then its bytes read back from the device into the
      // capture, then the tag: in stream order, as the device does it.
      finished = EnqueueLocked(s, {}, [dst, src, count, capture, done, tag]() {
        std::memmove(dst, src, count);
        std::memcpy(capture, dst, count);
        __atomic_store_n(done, tag, __ATOMIC_RELEASE);
        return cudaSuccess;
      });
    }
  }
  if (finished == nullptr) return Memcpy(dst, src, count, cudaMemcpyHostToDevice, stream, async);
  *captured = true;
  if (!async) finished->Wait();
  return cudaSuccess;
}

cudaError_t HostBackend::QueueSnapshotCopies(const std::vector<SnapshotCopy>& copies,
                                             uint64_t* done, uint64_t tag,
                                             const SnapshotTurns* turns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!captures_.empty()) return cudaErrorNotSupported;
  if (!SnapshotCopiesValid(
          copies, done, turns, [this](const void* p, size_t n) { return DeviceAccessible(p, n); },
          [this](const void* p, size_t n) { return IsSharedHost(p, n); })) {
    return cudaErrorInvalidValue;
  }
  if (snapshot_stream_ == nullptr) {
    snapshot_stream_ = std::make_unique<HostStream>(
        cudaStreamNonBlocking, kLeastStreamPriority, /*legacy=*/false,
        [this](HostStream* st, cudaError_t err) { RecordError(st, err); });
  }
  // After everything queued so far, on every stream.
  std::vector<std::shared_ptr<Marker>> deps;
  auto add = [&deps](std::shared_ptr<Marker> m) {
    if (!m->done()) deps.push_back(std::move(m));
  };
  add(legacy_->last());
  for (auto& [ptr, stream] : streams_) add(stream->last());
  for (auto& stream : retired_) add(stream->last());
  if (snapshot_gate_ != nullptr) add(snapshot_gate_);
  // Staged: as the device does it, turn t after *drained reached t - 1
  // (the device's wait is unbounded; here the stream's thread polls, and
  // gives up after a minute: the caller releases the wait when it stops).
  std::vector<size_t> ends;
  uint64_t* filled = nullptr;
  const uint64_t* drained = nullptr;
  if (turns != nullptr) {
    ends = turns->ends;
    filled = turns->filled;
    drained = turns->drained;
  } else {
    ends.push_back(copies.size());
  }
  snapshot_gate_ = snapshot_stream_->Enqueue(
      std::move(deps), [copies, done, tag, ends, filled, drained]() {
        for (size_t t = 0, c = 0; t < ends.size(); ++t) {
          if (drained != nullptr && t >= 2) {
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
            while (__atomic_load_n(drained, __ATOMIC_ACQUIRE) < t - 1) {
              if (std::chrono::steady_clock::now() > deadline) return cudaErrorLaunchTimeout;
              std::this_thread::sleep_for(std::chrono::microseconds(50));
            }
          }
          for (; c < ends[t]; ++c) std::memcpy(copies[c].dst, copies[c].src, copies[c].count);
          if (filled != nullptr) __atomic_store_n(filled, t + 1, __ATOMIC_RELEASE);
        }
        __atomic_store_n(done, tag, __ATOMIC_RELEASE);
        return cudaSuccess;
      });
  return cudaSuccess;
}

cudaError_t HostBackend::RegisterSharedHost(void* addr, size_t size, unsigned int) {
  if (addr == nullptr || size == 0) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  if (InDeviceRange(addr)) return cudaErrorInvalidValue;
  const uint64_t a = Addr(addr);
  auto next = shared_host_.lower_bound(a);
  if (next != shared_host_.end() && next->first < a + size) {
    return cudaErrorHostMemoryAlreadyRegistered;
  }
  if (next != shared_host_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > a) return cudaErrorHostMemoryAlreadyRegistered;
  }
  shared_host_[a] = size;
  return cudaSuccess;
}

cudaError_t HostBackend::UnregisterSharedHost(void* addr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = shared_host_.find(Addr(addr));
  if (it == shared_host_.end()) return cudaErrorHostMemoryNotRegistered;
  shared_host_.erase(it);
  return cudaSuccess;
}

cudaError_t HostBackend::EnqueueHostCallback(cudaStream_t stream, std::function<void()> fn) {
  if (!fn) return cudaErrorInvalidValue;
  return Enqueue(
      stream,
      [fn = std::move(fn)]() {
        fn();
        return cudaSuccess;
      },
      nullptr);
}

cudaError_t HostBackend::cudaMalloc(void** ptr, size_t size) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  if (size == 0) {
    *ptr = nullptr;  // as cudaMalloc(0)
    return cudaSuccess;
  }
  std::unique_lock<std::mutex> lock(mu_);
  return AllocateLocked(lock, ptr, size);
}

cudaError_t HostBackend::cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  // cudaFree synchronizes the device: no queued work can still use the block
  // when its pages go back to the OS.
  WaitAll();
  std::lock_guard<std::mutex> lock(mu_);
  for (const PendingFree& f : pending_frees_) {
    if (f.addr == Addr(ptr)) return cudaErrorInvalidValue;  // already freed (async)
  }
  // Graph memory freed by the application: its graphs no longer free it.
  graph_allocs_.erase(Addr(ptr));
  absl::Status s = FreeBlock(Addr(ptr));
  ReleasePendingFrees(nullptr);
  if (!s.ok()) {
    REVENANT_LOG(DEBUG, kLog) << "cudaFree: " << s;
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

cudaError_t HostBackend::cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  std::unique_lock<std::mutex> lock(mu_);
  HostStream* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  if (Capturing(s)) {
    // Captured: a memory alloc node of the capture's graph, its memory from
    // the fixed range now and held by the graph (as AddMemAllocNode's).
    void* p = nullptr;
    cudaError_t err = AllocateLocked(lock, &p, size);  // may release the lock
    if (err != cudaSuccess) return err;
    auto capture = captures_.find(s);
    if (capture == captures_.end()) {
      (void)FreeBlock(Addr(p));
      return cudaErrorStreamCaptureInvalidated;
    }
    Graph* g = capture->second;
    AddNodeLocked(g, NodeKind::kMemAlloc, g->capture_deps, nullptr);
    g->capture_deps = {g->nodes.size() - 1};
    g->allocs.push_back(Addr(p));
    graph_allocs_[Addr(p)] = 1;
    *ptr = p;
    return cudaSuccess;
  }
  // Allocated at once: valid for the stream's later work, which is all that
  // stream-ordered allocation promises.
  return AllocateLocked(lock, ptr, size);
}

cudaError_t HostBackend::cudaFreeAsync(void* ptr, cudaStream_t stream) {
  if (ptr == nullptr) return cudaSuccess;
  std::lock_guard<std::mutex> lock(mu_);
  HostStream* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (Capturing(s)) {
    // Captured: a memory free node; only graph memory (as AddMemFreeNode).
    if (!graph_allocs_.contains(Addr(ptr))) return cudaErrorInvalidValue;
    Graph* g = captures_.find(s)->second;
    AddNodeLocked(g, NodeKind::kMemFree, g->capture_deps, nullptr);
    g->capture_deps = {g->nodes.size() - 1};
    return cudaSuccess;
  }
  if (allocator_.SizeOf(Addr(ptr)) == 0) return cudaErrorInvalidValue;
  for (const PendingFree& f : pending_frees_) {
    if (f.addr == Addr(ptr)) return cudaErrorInvalidValue;
  }
  std::shared_ptr<Marker> m = EnqueueLocked(s, {}, nullptr);
  pending_frees_.push_back(PendingFree{Addr(ptr), s, std::move(m)});
  return cudaSuccess;
}

cudaError_t HostBackend::cudaMemset(void* ptr, int value, size_t count) {
  std::shared_ptr<Marker> done;
  cudaError_t err = cudaMemsetAsync(ptr, value, count, nullptr);
  if (err != cudaSuccess) return err;
  // Complete on return (the legacy stream's last operation is this one or a
  // later one, so waiting for it covers the memset).
  {
    std::lock_guard<std::mutex> lock(mu_);
    done = legacy_->last();
  }
  done->Wait();
  return cudaSuccess;
}

cudaError_t HostBackend::cudaMemsetAsync(void* ptr, int value, size_t count,
                                         cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  HostStream* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (count == 0) return cudaSuccess;
  if (!DeviceAccessible(ptr, count)) return cudaErrorInvalidValue;
  EnqueueLocked(s, {}, [ptr, value, count]() {
    std::memset(ptr, value, count);
    return cudaSuccess;
  });
  return cudaSuccess;
}

cudaError_t HostBackend::cudaPointerGetAttributes(struct cudaPointerAttributes* attributes,
                                                  const void* ptr) {
  if (attributes == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  *attributes = cudaPointerAttributes{};
  attributes->device = 0;
  if (InDeviceRange(ptr) && allocator_.Contains(Addr(ptr), 0)) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->devicePointer = const_cast<void*>(ptr);
  } else if (ptr != nullptr && IsSharedHost(ptr, 0)) {
    attributes->type = cudaMemoryTypeHost;
    attributes->devicePointer = const_cast<void*>(ptr);
    attributes->hostPointer = const_cast<void*>(ptr);
  } else {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;  // as the runtime reports for unregistered memory
    attributes->hostPointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}

cudaError_t HostBackend::cudaMemGetInfo(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  *total = range_.size;
  *free = range_.size - allocator_.bytes_in_use();
  return cudaSuccess;
}

cudaError_t HostBackend::cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (pool == nullptr) return cudaErrorInvalidValue;
  if (device != 0) return cudaErrorInvalidDevice;
  std::lock_guard<std::mutex> lock(mu_);
  *pool = reinterpret_cast<cudaMemPool_t>(&default_pool_);
  return cudaSuccess;
}

cudaError_t HostBackend::cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                                 void* value) {
  if (value == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  if (pool != reinterpret_cast<cudaMemPool_t>(&default_pool_)) return cudaErrorInvalidValue;
  switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies:
    case cudaMemPoolReuseAllowOpportunistic:
    case cudaMemPoolReuseAllowInternalDependencies:
      default_pool_.attrs[attr] = static_cast<uint64_t>(*static_cast<int*>(value));
      return cudaSuccess;
    case cudaMemPoolAttrReleaseThreshold:
      default_pool_.attrs[attr] = *static_cast<uint64_t*>(value);
      return cudaSuccess;
    case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemHigh:
      // Only resetting the watermark (to 0) is allowed.
      if (*static_cast<uint64_t*>(value) != 0) return cudaErrorInvalidValue;
      default_pool_.attrs[attr] = allocator_.bytes_in_use();
      return cudaSuccess;
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t HostBackend::cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                                 void* value) {
  if (value == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  if (pool != reinterpret_cast<cudaMemPool_t>(&default_pool_)) return cudaErrorInvalidValue;
  auto stored = [&](uint64_t dflt) {
    auto it = default_pool_.attrs.find(attr);
    return it == default_pool_.attrs.end() ? dflt : it->second;
  };
  switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies:
    case cudaMemPoolReuseAllowOpportunistic:
    case cudaMemPoolReuseAllowInternalDependencies:
      *static_cast<int*>(value) = static_cast<int>(stored(1));
      return cudaSuccess;
    case cudaMemPoolAttrReleaseThreshold:
      *static_cast<uint64_t*>(value) = stored(0);
      return cudaSuccess;
    case cudaMemPoolAttrReservedMemCurrent:
    case cudaMemPoolAttrUsedMemCurrent:
      *static_cast<uint64_t*>(value) = allocator_.bytes_in_use();
      return cudaSuccess;
    case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemHigh:
      *static_cast<uint64_t*>(value) = std::max(stored(0), allocator_.bytes_in_use());
      return cudaSuccess;
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t HostBackend::MemPoolSetAccess(cudaMemPool_t pool, const cudaMemAccessDesc* descs,
                                          size_t count) {
  if (count > 0 && descs == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  if (pool != reinterpret_cast<cudaMemPool_t>(&default_pool_)) return cudaErrorInvalidValue;
  // The pool's own device always has read-write access; there is no other.
  for (size_t i = 0; i < count; ++i) {
    const cudaMemAccessDesc& d = descs[i];
    if (d.location.type != cudaMemLocationTypeDevice) return cudaErrorInvalidValue;
    if (d.location.id != 0) return cudaErrorInvalidDevice;
    if (d.flags != cudaMemAccessFlagsProtReadWrite) return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

cudaError_t HostBackend::cudaMemPoolTrimTo(cudaMemPool_t pool, size_t) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pool != reinterpret_cast<cudaMemPool_t>(&default_pool_)) return cudaErrorInvalidValue;
  // Freed blocks already went back to the OS; nothing is cached.
  return cudaSuccess;
}

// --- Streams -----------------------------------------------------------------------------

cudaError_t HostBackend::cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithPriority(stream, cudaStreamDefault, kLeastStreamPriority);
}

cudaError_t HostBackend::cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  return cudaStreamCreateWithPriority(stream, flags, kLeastStreamPriority);
}

cudaError_t HostBackend::cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags,
                                                      int priority) {
  if (stream == nullptr) return cudaErrorInvalidValue;
  if ((flags & ~static_cast<unsigned int>(cudaStreamNonBlocking)) != 0) {
    return cudaErrorInvalidValue;
  }
  // Out-of-range priorities are clamped, as the runtime does.
  priority = std::min(kLeastStreamPriority, std::max(kGreatestStreamPriority, priority));
  auto s = std::make_unique<HostStream>(
      flags, priority, /*legacy=*/false,
      [this](HostStream* st, cudaError_t err) { RecordError(st, err); });
  std::lock_guard<std::mutex> lock(mu_);
  HostStream* raw = s.get();
  streams_.emplace(raw, std::move(s));
  *stream = reinterpret_cast<cudaStream_t>(raw);
  return cudaSuccess;
}

cudaError_t HostBackend::cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    return cudaErrorInvalidResourceHandle;
  }
  auto it = streams_.find(reinterpret_cast<HostStream*>(stream));
  if (it == streams_.end()) return cudaErrorInvalidResourceHandle;
  auto capture = captures_.find(it->second.get());
  if (capture != captures_.end()) {
    // Destroying the origin abandons the capture; a joined stream leaves it.
    if (capture->second->origin == capture->first) {
      EndCaptureLocked(capture->second);
    } else {
      captures_.erase(capture);
    }
  }
  // Queued work still runs; the worker exits once it is drained.
  it->second->Retire();
  retired_.push_back(std::move(it->second));
  streams_.erase(it);
  ReapRetired();
  return cudaSuccess;
}

cudaError_t HostBackend::cudaStreamSynchronize(cudaStream_t stream) {
  std::shared_ptr<Marker> last;
  HostStream* s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = ResolveStream(stream);
    if (s == nullptr) return cudaErrorInvalidResourceHandle;
    if (Capturing(s)) return cudaErrorStreamCaptureUnsupported;
    last = s->last();
  }
  last->Wait();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ReleasePendingFrees(s);
  }
  return TakeStreamError(s);
}

cudaError_t HostBackend::cudaStreamQuery(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  HostStream* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (Capturing(s)) return cudaErrorStreamCaptureUnsupported;
  return s->last()->done() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t HostBackend::cudaStreamGetPriority(cudaStream_t stream, int* priority) {
  if (priority == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  HostStream* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  *priority = s->priority();
  return cudaSuccess;
}

cudaError_t HostBackend::cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  if (flags == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  HostStream* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  *flags = s->flags();
  return cudaSuccess;
}

cudaError_t HostBackend::cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                             unsigned int flags) {
  if ((flags & ~static_cast<unsigned int>(cudaEventWaitExternal)) != 0) {
    return cudaErrorInvalidValue;
  }
  std::lock_guard<std::mutex> lock(mu_);
  HostStream* s = ResolveStream(stream);
  Event* e = ResolveEvent(event);
  if (s == nullptr || e == nullptr) return cudaErrorInvalidResourceHandle;
  if (e->captured_in != nullptr) {
    auto live = std::find_if(captures_.begin(), captures_.end(), [e](const auto& c) {
      return c.second == e->captured_in;
    });
    if (live != captures_.end()) {
      // A fork: the stream joins the capture (or already is part of it).
      auto mine = captures_.find(s);
      if (mine == captures_.end()) {
        captures_[s] = live->second;
        return cudaSuccess;
      }
      return mine->second == live->second ? cudaSuccess : cudaErrorStreamCaptureIsolation;
    }
  }
  if (Capturing(s)) return cudaErrorStreamCaptureUnsupported;
  // The record current now; a later record of the event does not matter.
  if (e->marker == nullptr) return cudaSuccess;
  EnqueueLocked(s, {e->marker}, nullptr);
  return cudaSuccess;
}

cudaError_t HostBackend::cudaDeviceSynchronize() {
  WaitAll();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ReleasePendingFrees(nullptr);
    ReapRetired();
  }
  return TakeDeferredError();
}

// --- Events ------------------------------------------------------------------------------

cudaError_t HostBackend::cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t HostBackend::cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr) return cudaErrorInvalidValue;
  constexpr unsigned int kValid =
      cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if ((flags & ~kValid) != 0) return cudaErrorInvalidValue;
  // Interprocess events must not time, as the runtime requires.
  if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)) {
    return cudaErrorInvalidValue;
  }
  auto e = std::make_unique<Event>();
  e->flags = flags;
  std::lock_guard<std::mutex> lock(mu_);
  Event* raw = e.get();
  events_.emplace(raw, std::move(e));
  *event = reinterpret_cast<cudaEvent_t>(raw);
  return cudaSuccess;
}

cudaError_t HostBackend::cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(mu_);
  // Pending records hold their own marker, so destroying is always safe.
  if (events_.erase(reinterpret_cast<Event*>(event)) == 0) return cudaErrorInvalidResourceHandle;
  return cudaSuccess;
}

cudaError_t HostBackend::cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return cudaEventRecordWithFlags(event, stream, cudaEventRecordDefault);
}

cudaError_t HostBackend::cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                                  unsigned int flags) {
  if ((flags & ~static_cast<unsigned int>(cudaEventRecordExternal)) != 0) {
    return cudaErrorInvalidValue;
  }
  std::lock_guard<std::mutex> lock(mu_);
  HostStream* s = ResolveStream(stream);
  Event* e = ResolveEvent(event);
  if (s == nullptr || e == nullptr) return cudaErrorInvalidResourceHandle;
  auto capture = captures_.find(s);
  if (capture != captures_.end()) {
    // Inside a capture a record is an ordering point of the graph, which
    // runs serially anyway; it only lets other streams join.
    e->captured_in = capture->second;
    return cudaSuccess;
  }
  e->captured_in = nullptr;
  // The record completes (and takes its timestamp) once all earlier work of
  // the stream is done.
  e->marker = EnqueueLocked(s, {}, nullptr);
  e->stream = s;
  return cudaSuccess;
}

cudaError_t HostBackend::cudaEventQuery(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(mu_);
  Event* e = ResolveEvent(event);
  if (e == nullptr) return cudaErrorInvalidResourceHandle;
  if (e->marker == nullptr) return cudaSuccess;  // never recorded: nothing to wait for
  return e->marker->done() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t HostBackend::cudaEventSynchronize(cudaEvent_t event) {
  std::shared_ptr<Marker> marker;
  HostStream* s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Event* e = ResolveEvent(event);
    if (e == nullptr) return cudaErrorInvalidResourceHandle;
    if (e->marker == nullptr) return cudaSuccess;
    marker = e->marker;
    s = e->stream;
  }
  marker->Wait();
  return TakeStreamError(s);
}

cudaError_t HostBackend::cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  Event* a = ResolveEvent(start);
  Event* b = ResolveEvent(end);
  if (a == nullptr || b == nullptr) return cudaErrorInvalidResourceHandle;
  // As documented for the runtime: never recorded or created without timing
  // -> invalid resource handle; recorded but not complete -> not ready.
  if (a->marker == nullptr || b->marker == nullptr) return cudaErrorInvalidResourceHandle;
  if ((a->flags | b->flags) & cudaEventDisableTiming) return cudaErrorInvalidResourceHandle;
  if (!a->marker->done() || !b->marker->done()) return cudaErrorNotReady;
  std::chrono::duration<float, std::milli> d = b->marker->time() - a->marker->time();
  *ms = d.count();
  return cudaSuccess;
}

// --- Functions ---------------------------------------------------------------------------

cudaError_t HostBackend::cudaFuncGetAttributes(struct cudaFuncAttributes* attr,
                                               const void* func) {
  if (attr == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  if (!KnownKernel(func)) return cudaErrorInvalidDeviceFunction;
  const FuncAttrs& f = kernels_[func];
  *attr = cudaFuncAttributes{};
  attr->maxThreadsPerBlock = kMaxThreadsPerBlock;
  attr->numRegs = 32;
  attr->ptxVersion = 90;
  attr->binaryVersion = 90;
  attr->maxDynamicSharedSizeBytes = f.max_dynamic_shared;
  attr->preferredShmemCarveout = f.carveout;
  return cudaSuccess;
}

// A cache preference means nothing on the CPU: checked, then accepted.
cudaError_t HostBackend::cudaFuncSetCacheConfig(const void* func, enum cudaFuncCache config) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!KnownKernel(func)) return cudaErrorInvalidDeviceFunction;
  if (config < cudaFuncCachePreferNone || config > cudaFuncCachePreferEqual) {
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

cudaError_t HostBackend::cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr,
                                              int value) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!KnownKernel(func)) return cudaErrorInvalidDeviceFunction;
  FuncAttrs& f = kernels_[func];
  switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize:
      if (value < 0 || static_cast<size_t>(value) > kSharedPerBlockOptin) {
        return cudaErrorInvalidValue;
      }
      f.max_dynamic_shared = value;
      return cudaSuccess;
    case cudaFuncAttributePreferredSharedMemoryCarveout:
      if (value < -1 || value > 100) return cudaErrorInvalidValue;
      f.carveout = value;
      return cudaSuccess;
    default:
      // Cluster and scheduling hints mean nothing on the CPU.
      return cudaSuccess;
  }
}

cudaError_t HostBackend::cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int* num_blocks, const void* func, int block_size, size_t, unsigned int) {
  if (num_blocks == nullptr || block_size <= 0) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  if (!KnownKernel(func)) return cudaErrorInvalidDeviceFunction;
  *num_blocks = block_size > kMaxThreadsPerBlock ? 0 : std::max(1, kMaxThreadsPerSm / block_size);
  return cudaSuccess;
}

// --- Graphs ------------------------------------------------------------------------------

namespace {
bool ValidCaptureMode(cudaStreamCaptureMode mode) {
  return mode == cudaStreamCaptureModeGlobal || mode == cudaStreamCaptureModeThreadLocal ||
         mode == cudaStreamCaptureModeRelaxed;
}
}  // namespace

cudaError_t HostBackend::cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (!ValidCaptureMode(mode)) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  HostStream* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  // The legacy stream synchronizes with others implicitly: not capturable.
  if (s->legacy()) return cudaErrorStreamCaptureUnsupported;
  if (Capturing(s)) return cudaErrorIllegalState;
  auto g = std::make_unique<Graph>();
  g->origin = s;
  g->capture_id = ++capture_serial_;
  captures_[s] = g.get();
  graphs_.emplace(g.get(), std::move(g));
  return cudaSuccess;
}

cudaError_t HostBackend::cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (graph == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  HostStream* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  auto it = captures_.find(s);
  if (it == captures_.end()) return cudaErrorIllegalState;
  Graph* g = it->second;
  if (g->origin != s) return cudaErrorStreamCaptureUnmatched;
  EndCaptureLocked(g);
  *graph = reinterpret_cast<cudaGraph_t>(g);
  return cudaSuccess;
}

void HostBackend::EndCaptureLocked(Graph* g) {
  for (auto it = captures_.begin(); it != captures_.end();) {
    if (it->second == g) {
      captures_.erase(it++);
    } else {
      ++it;
    }
  }
  for (auto& [ptr, event] : events_) {
    if (event->captured_in == g) event->captured_in = nullptr;
  }
}

cudaError_t HostBackend::cudaStreamIsCapturing(cudaStream_t stream,
                                               cudaStreamCaptureStatus* status) {
  if (status == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  HostStream* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  *status = Capturing(s) ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t HostBackend::cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (mode == nullptr) return cudaErrorInvalidValue;
  // An unknown mode is refused, never stored (CUDA 13 answers it cudaSuccess,
  // measured on an H200; applications pass the enum's values). Read as an
  // integer: an out-of-range value is no valid enum object to load.
  int value = 0;
  std::memcpy(&value, mode, sizeof(value));
  if (value != cudaStreamCaptureModeGlobal && value != cudaStreamCaptureModeThreadLocal &&
      value != cudaStreamCaptureModeRelaxed) {
    return cudaErrorInvalidValue;
  }
  std::lock_guard<std::mutex> lock(mu_);
  // One mode for the backend: the agent runs a client's calls on one thread.
  std::swap(*mode, capture_mode_);
  return cudaSuccess;
}

cudaError_t HostBackend::cudaGraphCreate(cudaGraph_t* graph, unsigned int flags) {
  if (graph == nullptr || flags != 0) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  auto g = std::make_unique<Graph>();
  *graph = reinterpret_cast<cudaGraph_t>(g.get());
  graphs_.emplace(g.get(), std::move(g));
  return cudaSuccess;
}

cudaError_t HostBackend::cudaGraphDestroy(cudaGraph_t graph) {
  bool owns_memory = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Graph* g = ResolveGraph(graph);
    if (g == nullptr) return cudaErrorInvalidValue;
    if (g->owner != nullptr) return cudaErrorInvalidValue;  // a conditional node's body
    for (const auto& [stream, captured] : captures_) {
      if (captured == g) return cudaErrorIllegalState;  // still being captured
    }
    owns_memory = !g->allocs.empty();
  }
  // Memory it may free goes back only once no queued work can use it.
  if (owns_memory) WaitAll();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = graphs_.find(reinterpret_cast<Graph*>(graph));
  if (it == graphs_.end()) return cudaErrorInvalidValue;
  ReleaseGraphAllocsLocked(it->second->allocs);
  EraseBodiesLocked(it->second.get());
  graphs_.erase(reinterpret_cast<Graph*>(graph));
  return cudaSuccess;
}

void HostBackend::EraseBodiesLocked(Graph* g) {
  for (const std::unique_ptr<Node>& n : g->nodes) {
    for (Graph* body : n->body_graphs) {
      EraseBodiesLocked(body);
      graphs_.erase(body);
    }
  }
}

HostBackend::Graph* HostBackend::RootOf(Graph* g) {
  while (g->owner != nullptr) g = g->owner;
  return g;
}

bool HostBackend::HasConditional(const Graph& g) {
  for (const std::unique_ptr<Node>& n : g.nodes) {
    if (n->kind == NodeKind::kConditional) return true;
  }
  return false;
}

cudaError_t HostBackend::cudaGraphClone(cudaGraph_t* clone, cudaGraph_t original) {
  if (clone == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  Graph* from = ResolveGraph(original);
  if (from == nullptr) return cudaErrorInvalidValue;
  if (HasConditional(*from) || !from->cond_handles.empty()) {
    REVENANT_LOG(ERROR, kLog) << "cudaGraphClone: a graph with conditional nodes or handles "
                                 "cannot be cloned (as in CUDA)";
    return cudaErrorNotSupported;
  }
  auto g = std::make_unique<Graph>();
  for (const std::unique_ptr<Node>& n : from->nodes) {
    Node* copy = AddNodeLocked(g.get(), n->kind, n->deps, n->op);
    copy->event = n->event;
    copy->child = n->child;
  }
  g->allocs = from->allocs;
  for (uint64_t a : g->allocs) {
    auto held = graph_allocs_.find(a);
    if (held != graph_allocs_.end()) ++held->second;
  }
  *clone = reinterpret_cast<cudaGraph_t>(g.get());
  graphs_.emplace(g.get(), std::move(g));
  return cudaSuccess;
}

cudaError_t HostBackend::cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec,
                                                       cudaGraph_t graph,
                                                       unsigned long long flags) {
  return cudaGraphInstantiate(exec, graph, flags);
}

cudaError_t HostBackend::cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                              unsigned long long flags) {
  if (exec == nullptr) return cudaErrorInvalidValue;
  // Auto-free-on-launch holds (graph memory stays valid between launches, see
  // the class comment) and node priorities change nothing in order. An
  // upload needs cudaGraphInstantiateWithParams's stream; device launches
  // have no device to run on.
  constexpr unsigned long long kKnown =
      cudaGraphInstantiateFlagAutoFreeOnLaunch | cudaGraphInstantiateFlagUpload |
      cudaGraphInstantiateFlagDeviceLaunch | cudaGraphInstantiateFlagUseNodePriority;
  if ((flags & ~kKnown) != 0 || (flags & cudaGraphInstantiateFlagUpload) != 0) {
    return cudaErrorInvalidValue;
  }
  if ((flags & cudaGraphInstantiateFlagDeviceLaunch) != 0) {
    REVENANT_LOG(ERROR, kLog) << "cudaGraphInstantiate: cudaGraphInstantiateFlagDeviceLaunch "
                                 "is not supported by the host backend (no device-side launch)";
    return cudaErrorNotSupported;
  }
  std::lock_guard<std::mutex> lock(mu_);
  Graph* g = ResolveGraph(graph);
  if (g == nullptr) return cudaErrorInvalidValue;
  // A snapshot: later changes to the graph do not reach the executable.
  // Creation order is a topological order of the nodes.
  auto e = std::make_unique<GraphExec>();
  for (const std::unique_ptr<Node>& n : g->nodes) {
    e->kinds.push_back(n->kind);
    e->deps.push_back(n->deps);
  }
  e->steps = StepsOf(*g);
  if (!g->cond_handles.empty()) {
    auto cond = std::make_shared<CondValues>();
    cond->handles = g->cond_handles;
    cond->values.reset(new unsigned int[cond->handles.size()]);
    for (size_t i = 0; i < cond->handles.size(); ++i) {
      cond->values[i] = cond->handles[i].default_value;
    }
    e->cond = std::move(cond);
  }
  e->index = g->index;
  e->allocs = g->allocs;
  for (uint64_t a : e->allocs) {
    auto held = graph_allocs_.find(a);
    if (held != graph_allocs_.end()) ++held->second;
  }
  *exec = reinterpret_cast<cudaGraphExec_t>(e.get());
  execs_.emplace(e.get(), std::move(e));
  return cudaSuccess;
}

cudaError_t HostBackend::cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = execs_.find(reinterpret_cast<GraphExec*>(exec));
  if (it == execs_.end()) return cudaErrorInvalidValue;
  HostStream* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  std::shared_ptr<const std::vector<Step>> steps = it->second->steps;
  auto events = std::make_shared<LaunchEvents>();
  // A launch captured into a graph runs later, as often as that graph
  // does: its event nodes then only order, as captured records do.
  if (!Capturing(s)) BindEventsLocked(*steps, s, events.get());
  std::shared_ptr<CondValues> cond = it->second->cond;
  EnqueueLocked(s, {}, [steps, events, cond]() {
    if (cond == nullptr) return RunSteps(*steps, *events, nullptr);
    // Handles created with cudaGraphCondAssignDefault start each launch at
    // their default; the others keep what the last launch left.
    for (size_t i = 0; i < cond->handles.size(); ++i) {
      if (cond->handles[i].assign_default) {
        __atomic_store_n(&cond->values[i], cond->handles[i].default_value, __ATOMIC_SEQ_CST);
      }
    }
    unsigned int* const saved_values = tls_cond_values;
    const size_t saved_count = tls_cond_count;
    tls_cond_values = cond->values.get();
    tls_cond_count = cond->handles.size();
    const cudaError_t err = RunSteps(*steps, *events, cond.get());
    tls_cond_values = saved_values;
    tls_cond_count = saved_count;
    return err;
  });
  return cudaSuccess;
}

std::shared_ptr<std::vector<HostBackend::Step>> HostBackend::StepsOf(const Graph& g) {
  auto steps = std::make_shared<std::vector<Step>>();
  steps->reserve(g.nodes.size());
  for (const std::unique_ptr<Node>& n : g.nodes) {
    steps->push_back(static_cast<const Step&>(*n));
    for (const Graph* body : n->body_graphs) steps->back().bodies.push_back(StepsOf(*body));
  }
  return steps;
}

void HostBackend::BindEventsLocked(const std::vector<Step>& steps, HostStream* s,
                                   LaunchEvents* out) {
  for (const Step& st : steps) {
    if (st.kind == NodeKind::kChild && st.child != nullptr) BindEventsLocked(*st.child, s, out);
    if (st.kind != NodeKind::kEventRecord && st.kind != NodeKind::kEventWait) continue;
    Event* e = ResolveEvent(reinterpret_cast<cudaEvent_t>(st.event));
    if (e == nullptr) continue;  // destroyed since the node was added
    if (st.kind == NodeKind::kEventRecord) {
      auto m = std::make_shared<Marker>();
      e->marker = m;
      e->stream = s;
      e->captured_in = nullptr;
      (*out)[&st] = std::move(m);
    } else {
      (*out)[&st] = e->marker;  // null: never recorded, nothing to wait for
    }
  }
}

cudaError_t HostBackend::RunSteps(const std::vector<Step>& steps, const LaunchEvents& events,
                                   CondValues* cond) {
  cudaError_t first = cudaSuccess;
  for (const Step& st : steps) {
    cudaError_t err = cudaSuccess;
    switch (st.kind) {
      case NodeKind::kEventRecord:
      case NodeKind::kEventWait: {
        auto it = events.find(&st);
        if (it == events.end() || it->second == nullptr) break;
        // A record is set even after a failed step, so waiters never hang.
        if (st.kind == NodeKind::kEventRecord) {
          it->second->Set();
        } else {
          it->second->Wait();
        }
        break;
      }
      case NodeKind::kChild:
        if (st.child != nullptr) err = RunSteps(*st.child, events, cond);
        break;
      case NodeKind::kConditional: {
        if (cond == nullptr || st.cond_index >= cond->handles.size()) break;
        unsigned int* value = &cond->values[st.cond_index];
        auto body = [&](size_t i) {
          if (i >= st.bodies.size() || st.bodies[i] == nullptr) return cudaSuccess;
          return RunSteps(*st.bodies[i], events, cond);
        };
        auto keep = [&](cudaError_t e) {
          if (err == cudaSuccess) err = e;
        };
        const unsigned int v = __atomic_load_n(value, __ATOMIC_SEQ_CST);
        if (st.cond_type == cudaGraphCondTypeIf) {
          if (v != 0) {
            keep(body(0));
          } else if (st.bodies.size() == 2) {
            keep(body(1));
          }
        } else if (st.cond_type == cudaGraphCondTypeSwitch) {
          keep(body(v));
        } else {
          // A failed iteration ends the loop (its condition may never change).
          while (__atomic_load_n(value, __ATOMIC_SEQ_CST) != 0 && err == cudaSuccess) {
            keep(body(0));
          }
        }
        break;
      }
      default:
        if (st.op) err = st.op();
        break;
    }
    if (first == cudaSuccess) first = err;
  }
  return first;
}

cudaError_t HostBackend::cudaGraphExecDestroy(cudaGraphExec_t exec) {
  bool owns_memory = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = execs_.find(reinterpret_cast<GraphExec*>(exec));
    if (it == execs_.end()) return cudaErrorInvalidValue;
    owns_memory = !it->second->allocs.empty();
  }
  if (owns_memory) WaitAll();
  std::lock_guard<std::mutex> lock(mu_);
  // A launch in flight holds its own reference to the operations.
  auto it = execs_.find(reinterpret_cast<GraphExec*>(exec));
  if (it == execs_.end()) return cudaErrorInvalidValue;
  ReleaseGraphAllocsLocked(it->second->allocs);
  execs_.erase(it);
  return cudaSuccess;
}

HostBackend::Graph* HostBackend::ResolveGraph(cudaGraph_t graph) {
  auto it = graphs_.find(reinterpret_cast<Graph*>(graph));
  return it == graphs_.end() ? nullptr : it->second.get();
}

bool HostBackend::DepIndices(const Graph* g, const std::vector<cudaGraphNode_t>& deps,
                             std::vector<size_t>* out) const {
  out->clear();
  for (cudaGraphNode_t d : deps) {
    auto it = g->index.find(reinterpret_cast<const Node*>(d));
    if (it == g->index.end()) return false;
    if (std::find(out->begin(), out->end(), it->second) != out->end()) return false;
    out->push_back(it->second);
  }
  return true;
}

HostBackend::Node* HostBackend::AddNodeLocked(Graph* g, NodeKind kind, std::vector<size_t> deps,
                                              HostStream::Op op) {
  auto n = std::make_unique<Node>();
  n->kind = kind;
  n->deps = std::move(deps);
  n->op = std::move(op);
  Node* raw = n.get();
  g->index[raw] = g->nodes.size();
  g->nodes.push_back(std::move(n));
  return raw;
}

cudaError_t HostBackend::AddChecked(cudaGraphNode_t* node, cudaGraph_t graph,
                                    const std::vector<cudaGraphNode_t>& deps, NodeKind kind,
                                    HostStream::Op op) {
  if (node == nullptr) return cudaErrorInvalidValue;
  Graph* g = ResolveGraph(graph);
  if (g == nullptr) return cudaErrorInvalidValue;
  for (const auto& [stream, captured] : captures_) {
    if (captured == g) return cudaErrorIllegalState;  // being captured into
  }
  std::vector<size_t> indices;
  if (!DepIndices(g, deps, &indices)) return cudaErrorInvalidValue;
  *node = reinterpret_cast<cudaGraphNode_t>(AddNodeLocked(g, kind, std::move(indices),
                                                          std::move(op)));
  return cudaSuccess;
}

void HostBackend::ReleaseGraphAllocsLocked(const std::vector<uint64_t>& allocs) {
  for (uint64_t a : allocs) {
    auto it = graph_allocs_.find(a);
    if (it == graph_allocs_.end() || --it->second > 0) continue;
    graph_allocs_.erase(it);
    absl::Status s = FreeBlock(a);
    if (!s.ok()) {
      REVENANT_LOG(DEBUG, kLog) << "graph memory: " << s;
    }
  }
}

cudaError_t HostBackend::AddKernelNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                       const std::vector<cudaGraphNode_t>& deps,
                                       const KernelInfo& kernel, dim3 grid, dim3 block,
                                       size_t shared_bytes, const void* packed_args) {
  std::lock_guard<std::mutex> lock(mu_);
  HostStream::Op op;
  cudaError_t err = KernelOpLocked(kernel, grid, block, shared_bytes, packed_args, false, &op);
  if (err != cudaSuccess) return err;
  return AddChecked(node, graph, deps, NodeKind::kKernel, std::move(op));
}

cudaError_t HostBackend::AddMemsetNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                       const std::vector<cudaGraphNode_t>& deps,
                                       const cudaMemsetParams& p) {
  const size_t elem = p.elementSize;
  if (elem != 1 && elem != 2 && elem != 4) return cudaErrorInvalidValue;
  if (p.width == 0 || p.height == 0 || p.dst == nullptr) return cudaErrorInvalidValue;
  const size_t row = p.width * elem;
  const size_t pitch = p.height > 1 ? p.pitch : row;
  if (pitch < row) return cudaErrorInvalidValue;
  const size_t span = pitch * (p.height - 1) + row;
  std::lock_guard<std::mutex> lock(mu_);
  if (!DeviceAccessible(p.dst, span)) return cudaErrorInvalidValue;
  char* dst = static_cast<char*>(p.dst);
  const unsigned int value = p.value;
  const size_t width = p.width, height = p.height;
  return AddChecked(node, graph, deps, NodeKind::kMemset,
                    [dst, value, elem, width, height, pitch]() {
                      for (size_t y = 0; y < height; ++y) {
                        char* r = dst + y * pitch;
                        for (size_t x = 0; x < width; ++x) {
                          if (elem == 1) {
                            r[x] = static_cast<char>(value);
                          } else if (elem == 2) {
                            const uint16_t v = static_cast<uint16_t>(value);
                            std::memcpy(r + 2 * x, &v, 2);
                          } else {
                            const uint32_t v = value;
                            std::memcpy(r + 4 * x, &v, 4);
                          }
                        }
                      }
                      return cudaSuccess;
                    });
}

cudaError_t HostBackend::AddMemcpyNode1D(cudaGraphNode_t* node, cudaGraph_t graph,
                                         const std::vector<cudaGraphNode_t>& deps, void* dst,
                                         const void* src, size_t count, cudaMemcpyKind kind) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) {
    return cudaErrorInvalidMemcpyDirection;
  }
  if (count == 0 || dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  // Both sides must stay valid for every launch: device memory, or host
  // memory shared with the application.
  auto ok = [&](const void* p) {
    return InDeviceRange(p) ? DeviceAccessible(p, count) : IsSharedHost(p, count);
  };
  if (!ok(dst) || !ok(src)) return cudaErrorInvalidValue;
  return AddChecked(node, graph, deps, NodeKind::kMemcpy, [dst, src, count]() {
    std::memmove(dst, src, count);
    return cudaSuccess;
  });
}

cudaError_t HostBackend::AddHostNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                     const std::vector<cudaGraphNode_t>& deps,
                                     std::function<void()> fn) {
  if (!fn) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  return AddChecked(node, graph, deps, NodeKind::kHost, [fn = std::move(fn)]() {
    fn();
    return cudaSuccess;
  });
}

cudaError_t HostBackend::AddEmptyNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                      const std::vector<cudaGraphNode_t>& deps) {
  std::lock_guard<std::mutex> lock(mu_);
  return AddChecked(node, graph, deps, NodeKind::kEmpty, nullptr);
}

cudaError_t HostBackend::AddMemAllocNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                         const std::vector<cudaGraphNode_t>& deps,
                                         size_t bytesize, void** dptr) {
  if (dptr == nullptr || bytesize == 0 || node == nullptr) return cudaErrorInvalidValue;
  std::unique_lock<std::mutex> lock(mu_);
  {
    Graph* g = ResolveGraph(graph);
    std::vector<size_t> indices;
    // Conditional bodies hold no memory nodes (CUDA's rule).
    if (g == nullptr || g->owner != nullptr || !DepIndices(g, deps, &indices)) {
      return cudaErrorInvalidValue;
    }
  }
  void* p = nullptr;
  cudaError_t err = AllocateLocked(lock, &p, bytesize);  // may release the lock
  if (err != cudaSuccess) return err;
  err = AddChecked(node, graph, deps, NodeKind::kMemAlloc, nullptr);
  if (err != cudaSuccess) {
    (void)FreeBlock(Addr(p));
    return err;
  }
  ResolveGraph(graph)->allocs.push_back(Addr(p));
  graph_allocs_[Addr(p)] = 1;
  *dptr = p;
  return cudaSuccess;
}

cudaError_t HostBackend::AddMemFreeNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                        const std::vector<cudaGraphNode_t>& deps, void* dptr) {
  std::lock_guard<std::mutex> lock(mu_);
  // Graph memory stays with its graph (see the class comment): the node orders only.
  if (!graph_allocs_.contains(Addr(dptr))) return cudaErrorInvalidValue;
  const Graph* g = ResolveGraph(graph);
  if (g != nullptr && g->owner != nullptr) return cudaErrorInvalidValue;  // a conditional body
  return AddChecked(node, graph, deps, NodeKind::kMemFree, nullptr);
}

cudaError_t HostBackend::AddChildGraphNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                           const std::vector<cudaGraphNode_t>& deps,
                                           cudaGraph_t child) {
  std::lock_guard<std::mutex> lock(mu_);
  const Graph* c = ResolveGraph(child);
  if (c == nullptr) return cudaErrorInvalidValue;
  for (const auto& [stream, captured] : captures_) {
    if (captured == c) return cudaErrorIllegalState;  // still being captured
  }
  for (const std::unique_ptr<Node>& n : c->nodes) {
    // Memory and conditional nodes cannot be cloned into a child graph node (CUDA).
    if (n->kind == NodeKind::kMemAlloc || n->kind == NodeKind::kMemFree ||
        n->kind == NodeKind::kConditional) {
      return cudaErrorInvalidValue;
    }
  }
  std::shared_ptr<const std::vector<Step>> steps = StepsOf(*c);
  cudaError_t err = AddChecked(node, graph, deps, NodeKind::kChild, nullptr);
  if (err == cudaSuccess) reinterpret_cast<Node*>(*node)->child = std::move(steps);
  return err;
}

cudaError_t HostBackend::AddEventNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                      const std::vector<cudaGraphNode_t>& deps,
                                      cudaEvent_t event, bool record) {
  std::lock_guard<std::mutex> lock(mu_);
  Event* e = ResolveEvent(event);
  if (e == nullptr) return cudaErrorInvalidResourceHandle;
  cudaError_t err = AddChecked(node, graph, deps,
                               record ? NodeKind::kEventRecord : NodeKind::kEventWait, nullptr);
  if (err == cudaSuccess) reinterpret_cast<Node*>(*node)->event = e;
  return err;
}

cudaError_t HostBackend::AddConditionalNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                            const std::vector<cudaGraphNode_t>& deps,
                                            cudaGraphConditionalHandle handle,
                                            cudaGraphConditionalNodeType type, unsigned int size,
                                            std::vector<cudaGraph_t>* bodies) {
  if (bodies == nullptr || size == 0) return cudaErrorInvalidValue;
  if ((type == cudaGraphCondTypeWhile && size != 1) ||
      (type == cudaGraphCondTypeIf && size > 2)) {
    return cudaErrorInvalidValue;
  }
  std::lock_guard<std::mutex> lock(mu_);
  Graph* g = ResolveGraph(graph);
  if (g == nullptr) return cudaErrorInvalidValue;
  const uint64_t index = handle & kCondIndexMask;
  if ((handle & ~kCondIndexMask) != kCondTag || index >= RootOf(g)->cond_handles.size()) {
    return cudaErrorInvalidValue;  // not a handle of this graph
  }
  cudaError_t err = AddChecked(node, graph, deps, NodeKind::kConditional, nullptr);
  if (err != cudaSuccess) return err;
  Node* n = reinterpret_cast<Node*>(*node);
  n->cond_index = static_cast<uint32_t>(index);
  n->cond_type = type;
  bodies->clear();
  for (unsigned int i = 0; i < size; ++i) {
    auto body = std::make_unique<Graph>();
    body->owner = g;
    n->body_graphs.push_back(body.get());
    bodies->push_back(reinterpret_cast<cudaGraph_t>(body.get()));
    graphs_.emplace(body.get(), std::move(body));
  }
  return cudaSuccess;
}

cudaError_t HostBackend::cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle* handle,
                                                          cudaGraph_t graph,
                                                          unsigned int default_value,
                                                          unsigned int flags) {
  if (handle == nullptr || (flags & ~static_cast<unsigned int>(cudaGraphCondAssignDefault)) != 0) {
    return cudaErrorInvalidValue;
  }
  std::lock_guard<std::mutex> lock(mu_);
  Graph* g = ResolveGraph(graph);
  if (g == nullptr) return cudaErrorInvalidValue;
  Graph* root = RootOf(g);
  CondHandle h;
  h.default_value = default_value;
  h.assign_default = (flags & cudaGraphCondAssignDefault) != 0;
  *handle = kCondTag | root->cond_handles.size();
  root->cond_handles.push_back(h);
  return cudaSuccess;
}

cudaError_t HostBackend::GraphGetNodes(cudaGraph_t graph, std::vector<cudaGraphNode_t>* nodes) {
  std::lock_guard<std::mutex> lock(mu_);
  Graph* g = ResolveGraph(graph);
  if (g == nullptr || nodes == nullptr) return cudaErrorInvalidValue;
  nodes->clear();
  for (const std::unique_ptr<Node>& n : g->nodes) {
    nodes->push_back(reinterpret_cast<cudaGraphNode_t>(n.get()));
  }
  return cudaSuccess;
}

cudaError_t HostBackend::GraphNodeGetDependencies(cudaGraphNode_t node,
                                                  std::vector<cudaGraphNode_t>* deps) {
  std::lock_guard<std::mutex> lock(mu_);
  if (node == nullptr || deps == nullptr) return cudaErrorInvalidValue;
  const auto* n = reinterpret_cast<const Node*>(node);
  for (const auto& [key, g] : graphs_) {
    if (!g->index.contains(n)) continue;
    deps->clear();
    for (size_t i : n->deps) deps->push_back(reinterpret_cast<cudaGraphNode_t>(g->nodes[i].get()));
    return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}

cudaError_t HostBackend::GraphDebugDot(cudaGraph_t graph, unsigned int flags, std::string* dot) {
  (void)flags;
  std::lock_guard<std::mutex> lock(mu_);
  Graph* g = ResolveGraph(graph);
  if (g == nullptr || dot == nullptr) return cudaErrorInvalidValue;
  static const char* kKinds[] = {"captured",  "kernel",   "memset",       "memcpy",
                                 "host",      "empty",    "mem_alloc",    "mem_free",
                                 "child_graph", "event_record", "event_wait", "conditional"};
  constexpr int kNumKinds = sizeof(kKinds) / sizeof(kKinds[0]);
  *dot = absl::StrCat("digraph revenant_host_graph {\n  label=\"graph of ", g->nodes.size(),
                      " nodes (Revenant host backend)\";\n");
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    const int kind = static_cast<int>(g->nodes[i]->kind);
    absl::StrAppend(dot, "  node", i, " [label=\"", i, ": ",
                    kind >= 0 && kind < kNumKinds ? kKinds[kind] : "?", "\"];\n");
  }
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    for (size_t d : g->nodes[i]->deps) absl::StrAppend(dot, "  node", d, " -> node", i, ";\n");
  }
  absl::StrAppend(dot, "}\n");
  return cudaSuccess;
}

cudaError_t HostBackend::ExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                 const KernelInfo& kernel, dim3 grid, dim3 block,
                                                 size_t shared_bytes, const void* packed_args) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = execs_.find(reinterpret_cast<GraphExec*>(exec));
  if (it == execs_.end()) return cudaErrorInvalidValue;
  GraphExec* e = it->second.get();
  auto at = e->index.find(reinterpret_cast<const Node*>(node));
  if (at == e->index.end() || e->kinds[at->second] != NodeKind::kKernel) {
    return cudaErrorInvalidValue;
  }
  HostStream::Op op;
  cudaError_t err = KernelOpLocked(kernel, grid, block, shared_bytes, packed_args, false, &op);
  if (err != cudaSuccess) return err;
  auto steps = std::make_shared<std::vector<Step>>(*e->steps);
  (*steps)[at->second].op = std::move(op);
  e->steps = std::move(steps);
  return cudaSuccess;
}

cudaError_t HostBackend::ExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph,
                                    cudaGraphExecUpdateResultInfo* info) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = execs_.find(reinterpret_cast<GraphExec*>(exec));
  Graph* g = ResolveGraph(graph);
  if (it == execs_.end() || g == nullptr) return cudaErrorInvalidValue;
  GraphExec* e = it->second.get();
  cudaGraphExecUpdateResultInfo result{};
  result.result = cudaGraphExecUpdateSuccess;
  // Nodes pair up by creation order; kinds and edges must match.
  if (g->nodes.size() != e->kinds.size()) {
    result.result = cudaGraphExecUpdateErrorTopologyChanged;
  } else {
    for (size_t i = 0; i < g->nodes.size(); ++i) {
      const Node& n = *g->nodes[i];
      if (n.kind != e->kinds[i]) {
        result.result = cudaGraphExecUpdateErrorNodeTypeChanged;
      } else if (n.deps != e->deps[i]) {
        result.result = cudaGraphExecUpdateErrorTopologyChanged;
      } else if (n.kind == NodeKind::kMemAlloc || n.kind == NodeKind::kMemFree) {
        // Memory nodes cannot change; the executable keeps its own.
        continue;
      } else {
        continue;
      }
      result.errorNode = reinterpret_cast<cudaGraphNode_t>(g->nodes[i].get());
      break;
    }
  }
  if (info != nullptr) *info = result;
  if (result.result != cudaGraphExecUpdateSuccess) return cudaErrorGraphExecUpdateFailure;
  auto steps = std::make_shared<std::vector<Step>>(*e->steps);
  std::shared_ptr<std::vector<Step>> fresh = StepsOf(*g);
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    const Node& n = *g->nodes[i];
    if (n.kind == NodeKind::kMemAlloc || n.kind == NodeKind::kMemFree) continue;
    (*steps)[i] = (*fresh)[i];
  }
  e->steps = std::move(steps);
  return cudaSuccess;
}

cudaError_t HostBackend::BeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                             const std::vector<cudaGraphNode_t>& deps,
                                             cudaStreamCaptureMode mode) {
  if (!ValidCaptureMode(mode)) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  HostStream* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (s->legacy()) return cudaErrorStreamCaptureUnsupported;
  if (Capturing(s)) return cudaErrorIllegalState;
  Graph* g = ResolveGraph(graph);
  if (g == nullptr) return cudaErrorInvalidValue;
  for (const auto& [stream_ptr, captured] : captures_) {
    if (captured == g) return cudaErrorIllegalState;
  }
  std::vector<size_t> indices;
  if (!DepIndices(g, deps, &indices)) return cudaErrorInvalidValue;
  g->origin = s;
  g->capture_deps = std::move(indices);
  g->capture_id = ++capture_serial_;
  captures_[s] = g;
  return cudaSuccess;
}

cudaError_t HostBackend::GetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                        unsigned long long* id, cudaGraph_t* graph,
                                        std::vector<cudaGraphNode_t>* deps) {
  if (status == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  HostStream* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  auto it = captures_.find(s);
  if (it == captures_.end()) {
    *status = cudaStreamCaptureStatusNone;
    return cudaSuccess;
  }
  const Graph* g = it->second;
  *status = cudaStreamCaptureStatusActive;
  if (id != nullptr) *id = g->capture_id;
  if (graph != nullptr) *graph = reinterpret_cast<cudaGraph_t>(it->second);
  if (deps != nullptr) {
    deps->clear();
    for (size_t i : g->capture_deps) {
      deps->push_back(reinterpret_cast<cudaGraphNode_t>(g->nodes[i].get()));
    }
  }
  return cudaSuccess;
}

cudaError_t HostBackend::UpdateCaptureDependencies(cudaStream_t stream,
                                                   const std::vector<cudaGraphNode_t>& deps,
                                                   unsigned int flags) {
  if (flags != cudaStreamAddCaptureDependencies && flags != cudaStreamSetCaptureDependencies) {
    return cudaErrorInvalidValue;
  }
  std::lock_guard<std::mutex> lock(mu_);
  HostStream* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  auto it = captures_.find(s);
  if (it == captures_.end()) return cudaErrorIllegalState;
  Graph* g = it->second;
  std::vector<size_t> indices;
  if (!DepIndices(g, deps, &indices)) return cudaErrorInvalidValue;
  if (flags == cudaStreamSetCaptureDependencies) g->capture_deps.clear();
  for (size_t i : indices) {
    if (std::find(g->capture_deps.begin(), g->capture_deps.end(), i) == g->capture_deps.end()) {
      g->capture_deps.push_back(i);
    }
  }
  return cudaSuccess;
}

// --- Device ------------------------------------------------------------------------------

cudaError_t HostBackend::cudaGetDeviceCount(int* count) {
  if (count == nullptr) return cudaErrorInvalidValue;
  *count = 1;
  return cudaSuccess;
}

cudaError_t HostBackend::cudaSetDeviceFlags(unsigned int flags) {
  if ((flags & ~kValidDeviceFlags) != 0) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  device_flags_ = flags;
  return cudaSuccess;
}

cudaError_t HostBackend::cudaGetDeviceFlags(unsigned int* flags) {
  if (flags == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  // Host memory is always mappable (unified addressing), as the runtime reports.
  *flags = device_flags_ | cudaDeviceMapHost;
  return cudaSuccess;
}

cudaError_t HostBackend::cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return cudaErrorInvalidValue;
  if (device != 0) return cudaErrorInvalidDevice;
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "%s", "Revenant host device (CPU)");
  prop->totalGlobalMem = range_.size;
  prop->sharedMemPerBlock = kSharedPerBlock;
  prop->regsPerBlock = kRegsPerBlock;
  prop->warpSize = 32;
  prop->memPitch = 2147483647;
  prop->maxThreadsPerBlock = kMaxThreadsPerBlock;
  for (int i = 0; i < 3; ++i) {
    prop->maxThreadsDim[i] = kMaxBlockDim[i];
    prop->maxGridSize[i] = kMaxGridDim[i];
  }
  prop->totalConstMem = kConstMem;
  prop->major = 9;
  prop->minor = 0;
  prop->textureAlignment = 512;
  prop->texturePitchAlignment = 32;
  prop->multiProcessorCount = num_cpus_;
  prop->canMapHostMemory = 1;
  prop->concurrentKernels = 1;
  prop->asyncEngineCount = 1;
  prop->unifiedAddressing = 1;
  prop->memoryBusWidth = 5120;
  prop->l2CacheSize = kL2Size;
  prop->maxThreadsPerMultiProcessor = kMaxThreadsPerSm;
  prop->streamPrioritiesSupported = 1;
  prop->globalL1CacheSupported = 1;
  prop->localL1CacheSupported = 1;
  prop->sharedMemPerMultiprocessor = kSharedPerSm;
  prop->regsPerMultiprocessor = kRegsPerBlock;
  prop->hostNativeAtomicSupported = 1;
  prop->computePreemptionSupported = 1;
  prop->cooperativeLaunch = 1;
  prop->sharedMemPerBlockOptin = kSharedPerBlockOptin;
  prop->maxBlocksPerMultiProcessor = 32;
  prop->reservedSharedMemPerBlock = 1024;
  prop->hostRegisterSupported = 1;
  prop->memoryPoolsSupported = 1;
  prop->deviceNumaId = -1;
  prop->hostNumaId = -1;
  return cudaSuccess;
}

cudaError_t HostBackend::cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return cudaErrorInvalidValue;
  if (device != 0) return cudaErrorInvalidDevice;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = kMaxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = kMaxBlockDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *value = kMaxBlockDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *value = kMaxBlockDim[2]; break;
    case cudaDevAttrMaxGridDimX: *value = kMaxGridDim[0]; break;
    case cudaDevAttrMaxGridDimY: *value = kMaxGridDim[1]; break;
    case cudaDevAttrMaxGridDimZ: *value = kMaxGridDim[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = kSharedPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = kSharedPerBlockOptin; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = kSharedPerSm; break;
    case cudaDevAttrTotalConstantMemory: *value = kConstMem; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMaxRegistersPerBlock: *value = kRegsPerBlock; break;
    case cudaDevAttrMaxRegistersPerMultiprocessor: *value = kRegsPerBlock; break;
    case cudaDevAttrMultiProcessorCount: *value = num_cpus_; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = kMaxThreadsPerSm; break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *value = 32; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrConcurrentKernels: *value = 1; break;
    case cudaDevAttrAsyncEngineCount: *value = 1; break;
    case cudaDevAttrUnifiedAddressing: *value = 1; break;
    case cudaDevAttrCanMapHostMemory: *value = 1; break;
    case cudaDevAttrCooperativeLaunch: *value = 1; break;
    case cudaDevAttrMemoryPoolsSupported: *value = 1; break;
    case cudaDevAttrStreamPrioritiesSupported: *value = 1; break;
    case cudaDevAttrGlobalL1CacheSupported: *value = 1; break;
    case cudaDevAttrLocalL1CacheSupported: *value = 1; break;
    case cudaDevAttrHostNativeAtomicSupported: *value = 1; break;
    case cudaDevAttrL2CacheSize: *value = kL2Size; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = 5120; break;
    case cudaDevAttrIntegrated: *value = 0; break;
    case cudaDevAttrEccEnabled: *value = 0; break;
    case cudaDevAttrManagedMemory: *value = 0; break;
    case cudaDevAttrComputeMode: *value = cudaComputeModeDefault; break;
    case cudaDevAttrPciBusId: *value = 0; break;
    case cudaDevAttrPciDeviceId: *value = 0; break;
    case cudaDevAttrPciDomainId: *value = 0; break;
    case cudaDevAttrTccDriver: *value = 0; break;
    default:
      // Every other attribute of the enumeration names a feature or a limit
      // this CPU device does not have (textures, surfaces, clusters, NUMA,
      // RDMA, ...): 0, as a device answers for what it lacks, and as the
      // corresponding cudaDeviceProp field says.
      if (attr < 1 || attr >= cudaDevAttrMax) return cudaErrorInvalidValue;
      *value = 0;
      break;
  }
  return cudaSuccess;
}

cudaError_t HostBackend::cudaDeviceCanAccessPeer(int* can_access, int device, int peer) {
  if (can_access == nullptr) return cudaErrorInvalidValue;
  if (device != 0 || peer != 0) return cudaErrorInvalidDevice;
  *can_access = 0;
  return cudaSuccess;
}

cudaError_t HostBackend::cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  // One device: the runtime answers cudaErrorPeerAccessUnsupported for the
  // current device itself (measured on an H200, driver 580) and
  // cudaErrorInvalidDevice for an ordinal that does not exist.
  (void)flags;
  return peer == 0 ? cudaErrorPeerAccessUnsupported : cudaErrorInvalidDevice;
}

cudaError_t HostBackend::PciBusId(char* id, int len, int device) {
  if (id == nullptr || len <= 0) return cudaErrorInvalidValue;
  if (device != 0) return cudaErrorInvalidDevice;
  // Domain, bus and device 0, as cudaDevAttrPci*Id answer.
  std::snprintf(id, static_cast<size_t>(len), "%04x:%02x:%02x.0", 0, 0, 0);
  return cudaSuccess;
}

cudaError_t HostBackend::cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least != nullptr) *least = kLeastStreamPriority;
  if (greatest != nullptr) *greatest = kGreatestStreamPriority;
  return cudaSuccess;
}

cudaError_t HostBackend::cudaDriverGetVersion(int* version) {
  if (version == nullptr) return cudaErrorInvalidValue;
  *version = kVersion;
  return cudaSuccess;
}

cudaError_t HostBackend::cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return cudaErrorInvalidValue;
  *version = kVersion;
  return cudaSuccess;
}

cudaError_t HostBackend::cudaProfilerStart() { return cudaSuccess; }
cudaError_t HostBackend::cudaProfilerStop() { return cudaSuccess; }

cudaError_t HostBackend::cudaDeviceSetLimit(cudaLimit limit, size_t value) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = limits_.find(limit);
  if (it == limits_.end()) return cudaErrorUnsupportedLimit;
  it->second = value;
  return cudaSuccess;
}

cudaError_t HostBackend::cudaDeviceGetLimit(size_t* value, cudaLimit limit) {
  if (value == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = limits_.find(limit);
  if (it == limits_.end()) return cudaErrorUnsupportedLimit;
  *value = it->second;
  return cudaSuccess;
}

cudaError_t HostBackend::Reset() {
  (void)FlushLaunches();
  WaitAll();
  std::vector<std::unique_ptr<HostStream>> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [ptr, stream] : streams_) gone.push_back(std::move(stream));
    streams_.clear();
    for (auto& stream : retired_) gone.push_back(std::move(stream));
    retired_.clear();
    events_.clear();
    captures_.clear();
    graphs_.clear();
    execs_.clear();
    graph_allocs_.clear();
    capture_mode_ = cudaStreamCaptureModeGlobal;
    modules_.clear();
    kernels_.clear();
    symbols_.clear();
    pending_frees_.clear();
    // Shared host ranges stay: the agent owns those mappings and
    // unregisters them itself.
    allocator_.Clear();
    // Every page back to the OS; the mapping (and its addresses) stay.
    madvise(reinterpret_cast<void*>(range_.base), range_.size, MADV_DONTNEED);
    limits_ = DefaultLimits();
    device_flags_ = 0;
    default_pool_ = MemPool{};
  }
  gone.clear();  // joins the (idle) workers
  TakeDeferredError();
  return cudaSuccess;
}

void HostBackend::ExpectNextAllocation(uint64_t addr) {
  std::lock_guard<std::mutex> lock(mu_);
  allocator_.ExpectNext(addr);
}

}  // namespace host

absl::StatusOr<std::unique_ptr<Backend>> MakeHostBackend(const BackendOptions& options) {
  absl::StatusOr<std::unique_ptr<host::HostBackend>> b = host::HostBackend::Create(options);
  if (!b.ok()) return b.status();
  return std::unique_ptr<Backend>(std::move(*b));
}

}  // namespace agent
}  // namespace revenant

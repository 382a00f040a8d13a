#include "agent/backends/cuda/cuda_backend.h"

#include <cuda.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <type_traits>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "agent/allocator.h"
#include "agent/backends/cuda/cuda_blas.h"
#include "agent/backends/cuda/cuda_dnn.h"
#include "agent/backends/cuda/content_hash_ptx.h"
#include "agent/backends/cuda/device_copy_fatbin.h"
#include "agent/backends/cuda/cuda_gloo.h"
#include "agent/backends/cuda/cuda_nccl.h"
#include "api/library_rows.h"
#include "common/content_hash.h"
#include "common/knobs.h"
#include "common/logging.h"
#include "common/populate.h"

namespace revenant {
namespace agent {
namespace cuda {
namespace {

constexpr char kLog[] = "cuda";
constexpr uint64_t kChunk = 2ull << 20;

uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// Driver entry points, resolved through the runtime (no link against libcuda).
#define REVENANT_DRIVER_FUNCS(X)                          \
  X(cuDeviceGet)                                          \
  X(cuDevicePrimaryCtxRetain)                             \
  X(cuCtxSetCurrent)                                      \
  X(cuMemGetAllocationGranularity)                        \
  X(cuMemAddressReserve)                                  \
  X(cuMemAddressFree)                                     \
  X(cuMemCreate)                                          \
  X(cuMemRelease)                                         \
  X(cuMemMap)                                             \
  X(cuMemUnmap)                                           \
  X(cuMemSetAccess)                                       \
  X(cuModuleLoadFatBinary)                                \
  X(cuModuleLoadData)                                     \
  X(cuModuleUnload)                                       \
  X(cuModuleGetFunction)                                  \
  X(cuModuleGetGlobal)                                    \
  X(cuFuncGetParamInfo)                                   \
  X(cuLaunchKernel)                                       \
  X(cuLaunchCooperativeKernel)                            \
  X(cuLaunchKernelEx)                                     \
  X(cuFuncGetAttribute)                                   \
  X(cuFuncSetAttribute)                                   \
  X(cuFuncSetCacheConfig)                                 \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags) \
  X(cuGraphAddKernelNode)                                 \
  X(cuGraphExecKernelNodeSetParams)                       \
  X(cuGraphCreate)                                        \
  X(cuGraphDestroy)                                       \
  X(cuGraphInstantiateWithFlags)                          \
  X(cuGraphExecDestroy)                                   \
  X(cuGraphLaunch)                                        \
  X(cuStreamIsCapturing)                                  \
  X(cuStreamWriteValue64)                                 \
  X(cuStreamWaitValue64)

struct Driver {
#define REVENANT_DECLARE(name) decltype(&::name) name = nullptr;
  REVENANT_DRIVER_FUNCS(REVENANT_DECLARE)
#undef REVENANT_DECLARE

  absl::Status Load() {
#define REVENANT_LOAD(fn)                                                                  \
  {                                                                                        \
    void* p = nullptr;                                                                     \
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;                \
    cudaError_t e = ::cudaGetDriverEntryPointByVersion(#fn, &p, CUDA_VERSION,              \
                                                       cudaEnableDefault, &q);             \
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || p == nullptr) {            \
      return absl::UnavailableError(absl::StrCat("driver entry point " #fn " unavailable: ", \
                                                 ::cudaGetErrorString(e), " (query ",      \
                                                 static_cast<int>(q), ")"));               \
    }                                                                                      \
    fn = reinterpret_cast<decltype(fn)>(p);                                                \
  }
    REVENANT_DRIVER_FUNCS(REVENANT_LOAD)
#undef REVENANT_LOAD
    return absl::OkStatus();
  }
};

// The driver rows of the API table the agent runs (api/driver.textproto:
// 32-bit memsets, stream memory operations), by their exact names from the
// libcuda.so.1 the runtime loaded, once; a missing one answers
// CUDA_ERROR_NOT_SUPPORTED and is logged.
struct DriverRows {
#define REVENANT_DRIVER_ROW_POINTER(name, params, args) CUresult (*name) params = nullptr;
  REVENANT_DRIVER_ROWS(REVENANT_DRIVER_ROW_POINTER)
#undef REVENANT_DRIVER_ROW_POINTER

  void Load() {
    std::call_once(once, [this] {
      void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
      if (lib == nullptr) {
        REVENANT_LOG(ERROR, "cuda-backend") << "libcuda.so.1 is not loaded (" << dlerror()
                                            << "): the driver rows answer not-supported";
        return;
      }
#define REVENANT_DRIVER_ROW_RESOLVE(fn, params, args)                                         \
  fn = reinterpret_cast<decltype(fn)>(dlsym(lib, #fn));                                       \
  if (fn == nullptr)                                                                          \
    REVENANT_LOG(ERROR, "cuda-backend") << "libcuda.so.1 has no " #fn ": it answers not-supported";
      REVENANT_DRIVER_ROWS(REVENANT_DRIVER_ROW_RESOLVE)
#undef REVENANT_DRIVER_ROW_RESOLVE
    });
  }
  std::once_flag once;
};

// Runtime and driver codes share their numbering for every error the driver
// calls used here return (invalid value, out of memory, invalid handle,
// launch failures, cooperative launch too large...).
cudaError_t FromCu(CUresult r) { return static_cast<cudaError_t>(r); }

// The driver's kernelParams: a pointer per parameter into `packed_args`
// (`params` has room for them), which the driver copies when a node is
// created or updated, or a launch made.
void KernelParamPointers(const KernelInfo& kernel, const void* packed_args, void** params) {
  const char* base = static_cast<const char*>(packed_args);
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    params[i] = const_cast<char*>(base + kernel.params[i].offset);
  }
}

// The driver's view of a kernel node or launch (KernelParamPointers into
// `params`).
CUDA_KERNEL_NODE_PARAMS DriverKernelParams(const KernelInfo& kernel, dim3 grid, dim3 block,
                                           size_t shared_bytes, const void* packed_args,
                                           void** params) {
  KernelParamPointers(kernel, packed_args, params);
  CUDA_KERNEL_NODE_PARAMS kp = {};
  kp.func = static_cast<CUfunction>(const_cast<void*>(kernel.handle));
  kp.gridDimX = grid.x;
  kp.gridDimY = grid.y;
  kp.gridDimZ = grid.z;
  kp.blockDimX = block.x;
  kp.blockDimY = block.y;
  kp.blockDimZ = block.z;
  kp.sharedMemBytes = static_cast<unsigned int>(shared_bytes);
  kp.kernelParams = kernel.params.empty() ? nullptr : params;
  return kp;
}

// Host nodes: the function lives as long as the backend's graphs (until Reset).
void HostNodeTrampoline(void* data) { (*static_cast<std::function<void()>*>(data))(); }

void HostFuncTrampoline(void* data) {
  auto* fn = static_cast<std::function<void()>*>(data);
  (*fn)();
  delete fn;
}

class CudaBackend : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const BackendOptions& options);
  ~CudaBackend() override;

  const char* name() const override { return "cuda"; }
  DeviceRange device_range() const override { return range_; }
  absl::Status LoadModule(uint64_t module_key, absl::string_view image) override;
  absl::StatusOr<KernelInfo> GetKernel(uint64_t module_key,
                                       const std::string& mangled_name) override;
  cudaError_t LaunchKernel(const KernelInfo& kernel, dim3 grid, dim3 block, size_t shared_bytes,
                           cudaStream_t stream, const void* packed_args,
                           bool cooperative) override;
  cudaError_t LaunchKernelEx(const KernelInfo& kernel, dim3 grid, dim3 block,
                             size_t shared_bytes, cudaStream_t stream, const void* packed_args,
                             const std::vector<cudaLaunchAttribute>& attrs) override;
  cudaError_t LaunchKernelMayHold(const KernelInfo& kernel, dim3 grid, dim3 block,
                                  size_t shared_bytes, cudaStream_t stream,
                                  const void* packed_args, bool more_requests) override;
  int32_t FlushLaunches() override;
  std::string StatsAtExit() const override {
    if (held_batches_ == 0 && held_fallbacks_ == 0) return std::string();
    return absl::StrFormat(
        "launches at exit: %d issued as %d graphs (%.1f launches each, at most %d), %d batches "
        "launched one by one (a graph could not take them)",
        held_launches_, held_batches_,
        held_batches_ ? static_cast<double>(held_launches_) / held_batches_ : 0.0,
        launch_batch_max_, held_fallbacks_);
  }
  cudaError_t LaunchNow(const KernelInfo& kernel, dim3 grid, dim3 block, size_t shared_bytes,
                        cudaStream_t stream, const void* packed_args, bool cooperative);
  cudaError_t LaunchExNow(const KernelInfo& kernel, dim3 grid, dim3 block, size_t shared_bytes,
                          cudaStream_t stream, const void* packed_args,
                          const std::vector<cudaLaunchAttribute>& attrs);
  absl::StatusOr<Symbol> GetSymbol(uint64_t module_key, const std::string& name) override;
  cudaError_t Memcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                     cudaStream_t stream, bool async) override;
  cudaError_t MemcpyCaptured(void* dst, const void* src, size_t count, cudaStream_t stream,
                             bool async, void* capture, uint64_t* done, uint64_t tag,
                             bool* captured) override;
  cudaError_t MemcpyHeld(void* dst, const void* src, size_t count, cudaStream_t stream, bool async,
                         uint64_t* hash_words, uint64_t tag, bool* hashed) override;
  bool RegisterHashWords(void* base, size_t size) override;
  bool StreamCapturing(cudaStream_t stream) override {
    Bind();
    const bool capturing = IsCapturing(stream);
    (void)::cudaGetLastError();
    return capturing;
  }
  // Runs the hash kernel on known bytes against the CPU's ContentHash, on
  // `stream` (the agent's own).
  absl::Status CheckDeviceHash(cudaStream_t stream);
  // Queues the hash kernel over [data, data + count) on `stream`: its sum in
  // `scratch` (two words, left zero after), the hash into *out (device
  // address of mapped host memory). False if it could not be queued.
  bool LaunchHash(const void* data, size_t count, unsigned long long* scratch, CUdeviceptr out,
                  cudaStream_t stream);
  // Either hash kernel over `bytes` with its arguments (the grid's shape).
  bool LaunchHashKernel(CUfunction fn, unsigned long long bytes, void** args,
                        cudaStream_t stream);
  // One piece of a range hashed in pieces (in order, on one stream): the
  // piece's words are words first_word.. of the range; finish_n (the range's
  // bytes) on its last piece, which writes the hash into *out; 0 before.
  bool LaunchHashPiece(const void* data, size_t count, uint64_t first_word,
                       unsigned long long* scratch, CUdeviceptr out, uint64_t finish_n,
                       cudaStream_t stream);
  // Zeroes a hash slot's scratch words behind what `stream` queued (a hash
  // given up part-way leaves its sum and count there), waiting for both.
  void ClearHashScratch(unsigned long long* scratch, cudaStream_t stream);
  // A held upload of kHashPiecesFrom or more: the copy in pieces on
  // `stream`, each hashed behind its part on the stream's hash stream, and
  // `stream` waiting for the last piece's hash. The copy's error (nothing
  // queued if the copy was invalid); *queued false with cudaSuccess: the
  // pieces could not be set up, the caller copies and hashes whole;
  // *hashed: the hash is queued (the caller queues its tag).
  cudaError_t MemcpyHeldInPieces(void* dst, const void* src, size_t count, cudaStream_t stream,
                                 unsigned long long* scratch, CUdeviceptr out, bool* queued,
                                 bool* hashed);
  cudaError_t QueueSnapshotCopies(const std::vector<SnapshotCopy>& copies, uint64_t* done,
                                  uint64_t tag, const SnapshotTurns* turns = nullptr) override;
  cudaError_t RegisterSharedHost(void* addr, size_t size, unsigned int flags) override;
  cudaError_t UnregisterSharedHost(void* addr) override;
  cudaError_t EnqueueHostCallback(cudaStream_t stream, std::function<void()> fn) override;
  // Replay of a compacted journal: the next allocation lands at `addr`
  // (physical memory is mapped up to the highest allocation, wherever it is).
  void ExpectNextAllocation(uint64_t addr) override {
    absl::MutexLock lock(&mu_);
    allocator_.ExpectNext(addr);
  }
  std::vector<std::pair<uint64_t, uint64_t>> DeviceAllocations() override {
    absl::MutexLock lock(&mu_);
    return allocator_.Allocations();
  }
  cudaError_t Reset() override;
  // Real NCCL during a replay: 1-rank communicators are re-created and run,
  // communicators of several ranks join the survivors at the recovery
  // epoch (cuda_nccl.h, "Recovery").
  // With --collectives=gloo, recovery is GlooCollectives' (cuda_gloo.h).
  void SetReplayPhase(ReplayPhase phase) override {
    if (gloo_) return gloo_->nccl().SetReplayPhase(phase);
    nccl_->SetReplayPhase(phase);
  }
  absl::Status JoinRecovery(uint64_t minibatch, bool* behind) override {
    Bind();
    if (!gloo_) return nccl_->JoinRecovery(minibatch, behind);
    return gloo_->nccl().JoinRecovery(minibatch, behind);
  }
  // Collectives of a communicator queue behind its units in flight; work
  // of a stream (kernels, copies, events, cuBLAS) decides in its call
  // whether it may run beside them (GateStream, GateEvent); any other
  // request waits for them (its work could depend on their results, or
  // overwrite what a retry needs).
  int32_t BeforeRequest(api::ApiId id) override {
    if (gloo_ || !nccl_->HasPending()) return 0;
    if (nccl_->Overlaps() && GatedInItsCall(id)) return 0;
    switch (id) {
      case api::ApiId::ncclAllReduce:
      case api::ApiId::ncclAllGather:
      case api::ApiId::ncclBroadcast:
      case api::ApiId::ncclBcast:
      case api::ApiId::ncclReduce:
      case api::ApiId::ncclReduceScatter:
      case api::ApiId::ncclAlltoAll:
      case api::ApiId::ncclGather:
      case api::ApiId::ncclScatter:
      case api::ApiId::ncclSend:
      case api::ApiId::ncclRecv:
      case api::ApiId::ncclCommGetAsyncError:  // answers for a recoverable communicator
        return 0;
      default:
        break;
    }
    Bind();
    return nccl_->SettleAll();
  }
  static bool GatedInItsCall(api::ApiId id) {
    switch (id) {
      case api::ApiId::cudaLaunchKernel:
      case api::ApiId::cudaLaunchKernelExC:
      case api::ApiId::cudaLaunchCooperativeKernel:
      case api::ApiId::__cudaLaunchKernel:
      case api::ApiId::__cudaLaunchKernel_ptsz:
      case api::ApiId::cudaMemcpyAsync:
      case api::ApiId::cudaMemsetAsync:
      case api::ApiId::cudaEventRecord:
      case api::ApiId::cudaEventRecordWithFlags:
      case api::ApiId::cudaStreamWaitEvent:
      case api::ApiId::cudaEventQuery:
      case api::ApiId::cudaEventSynchronize:
        return true;
      default:
        break;
    }
    const api::Library library = api::Traits(id).library;
    return library == api::Library::kCublas || library == api::Library::kCublasLt;
  }
  // Work on `stream` while collectives are in flight: waits for them first
  // when it is ordered behind one (CudaNccl::BeforeStreamWork); their error
  // is kept for the application's next synchronous NCCL call.
  void GateStream(cudaStream_t stream) {
    if (gloo_ || !nccl_->HasPending()) return;
    KeepCollectiveError(nccl_->BeforeStreamWork(stream));
  }
  // A wait on, query or synchronization of `event` (CudaNccl::BeforeEventUse).
  void GateEvent(cudaEvent_t event) {
    if (gloo_ || !nccl_->HasPending()) return;
    KeepCollectiveError(nccl_->BeforeEventUse(event));
  }
  void NoteEventRecord(cudaEvent_t event, cudaStream_t stream) {
    if (!gloo_ && nccl_->HasPending()) nccl_->NoteEventRecord(event, stream);
  }
  void GateAll() {
    if (gloo_ || !nccl_->HasPending()) return;
    KeepCollectiveError(nccl_->SettleAll());
  }
  void KeepCollectiveError(ncclResult_t r) {
    if (r != ncclSuccess && collective_error_ == 0) collective_error_ = r;
  }
  int32_t TakeCollectiveError() override {
    const int32_t e = collective_error_;
    collective_error_ = 0;
    return e;
  }
  // cuBLAS: a call on a handle is work of the handle's stream; any other
  // (no handle) waits for the collectives in flight.
  template <typename... A>
  void GateBlas(cublasHandle_t handle, A...) {
    if (gloo_ || !nccl_->HasPending()) return;
    cudaStream_t stream = nullptr;
    if (blas_.cublasGetStream_v2(handle, &stream) != CUBLAS_STATUS_SUCCESS) return GateAll();
    GateStream(stream);
  }
  template <typename... A>
  void GateBlas(A...) {
    GateAll();
  }
  // cuBLASLt: work of the stream it is given (cublasLtMatmul and the other
  // calls that take one); the rest are host calls (descriptors, heuristics).
  template <typename... A>
  void GateLt(A... a) {
    if (gloo_ || !nccl_->HasPending()) return;
    (GateLtArg(a), ...);
  }
  void GateLtArg(cudaStream_t stream) { GateStream(stream); }
  template <typename T>
  void GateLtArg(T) {}
  void PinAgentBuffer(void* addr, size_t size) override {
    Bind();
    if (const cudaError_t e = ::cudaHostRegister(addr, size, cudaHostRegisterDefault);
        e != cudaSuccess) {
      (void)::cudaGetLastError();
      REVENANT_LOG(WARNING, "cuda-backend") << "the reply slots (" << size << " bytes) could not be "
                                    << "pinned (" << ::cudaGetErrorString(e)
                                    << "): small device-to-host copies take the pageable path";
    }
  }
  void UnpinAgentBuffer(void* addr) override {
    Bind();
    if (::cudaHostUnregister(addr) != cudaSuccess) (void)::cudaGetLastError();
  }
  void MarkBoundary(uint64_t minibatch) override {
    if (gloo_) return gloo_->nccl().MarkBoundary(minibatch);
    nccl_->MarkBoundary(minibatch);
  }
  void NoteStateRestored(uint64_t minibatch) override {
    if (gloo_) return gloo_->nccl().NoteStateRestored(minibatch);
    nccl_->NoteStateRestored(minibatch);
  }
  // Validation replays answer collectives from Gloo's cached results; real
  // NCCL keeps none (the validator skips such minibatches).
  absl::Status BeginValidationReplay() override {
    if (!gloo_) return Backend::BeginValidationReplay();
    return gloo_->nccl().BeginValidationReplay();
  }
  absl::Status EndValidationReplay() override {
    return gloo_ ? gloo_->nccl().EndValidationReplay() : absl::OkStatus();
  }

  // --- NCCL (cuda_nccl.h, or cuda_gloo.h with --collectives=gloo) ---------------------------------------------------------
  ncclResult_t ncclGetVersion(int* version) override {
    if (gloo_) return gloo_->nccl().ncclGetVersion(version);
    return nccl_->GetVersion(version);
  }
  ncclResult_t ncclGetUniqueId(ncclUniqueId* id) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclGetUniqueId(id);
    return nccl_->GetUniqueId(id);
  }
  ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id,
                                int rank) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
    return nccl_->CommInitRankConfig(comm, nranks, id, rank, nullptr);
  }
  ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                      ncclConfig_t* config) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclCommInitRankConfig(comm, nranks, id, rank, config);
    return nccl_->CommInitRankConfig(comm, nranks, id, rank, config);
  }
  ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                             ncclConfig_t* config) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclCommSplit(comm, color, key, newcomm, config);
    return nccl_->CommSplit(comm, color, key, newcomm, config);
  }
  ncclResult_t ncclCommShrink(ncclComm_t comm, int* exclude, int exclude_count,
                              ncclComm_t* newcomm, ncclConfig_t* config, int flags) override {
    Bind();
    if (gloo_) return ncclInvalidUsage;  // not with Gloo (gloo_collectives.h)
    return nccl_->CommShrink(comm, exclude, exclude_count, newcomm, config, flags);
  }
  ncclResult_t ncclCommFinalize(ncclComm_t comm) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclCommFinalize(comm);
    return nccl_->CommFinalize(comm);
  }
  ncclResult_t ncclCommAbort(ncclComm_t comm) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclCommAbort(comm);
    return nccl_->CommAbort(comm);
  }
  ncclResult_t ncclCommDestroy(ncclComm_t comm) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclCommDestroy(comm);
    return nccl_->CommDestroy(comm);
  }
  ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclCommGetAsyncError(comm, error);
    return nccl_->CommGetAsyncError(comm, error);
  }
  ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclCommCount(comm, count);
    return nccl_->CommCount(comm, count);
  }
  ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclCommUserRank(comm, rank);
    return nccl_->CommUserRank(comm, rank);
  }
  ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclCommCuDevice(comm, device);
    ncclResult_t r = nccl_->CommCuDevice(comm, device);
    if (r == ncclSuccess && device != nullptr) *device = 0;  // the application's ordinal
    return r;
  }
  ncclResult_t ncclGroupStart() override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclGroupStart();
    return nccl_->GroupStart();
  }
  ncclResult_t ncclGroupEnd() override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclGroupEnd();
    return nccl_->GroupEnd();
  }
  ncclResult_t ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                             ncclComm_t comm, cudaStream_t stream) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclAllReduce(s, r, n, t, op, comm, stream);
    return nccl_->AllReduce(s, r, n, t, op, comm, stream);
  }
  ncclResult_t ncclAllGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t comm,
                             cudaStream_t stream) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclAllGather(s, r, n, t, comm, stream);
    return nccl_->AllGather(s, r, n, t, comm, stream);
  }
  ncclResult_t ncclBroadcast(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                             ncclComm_t comm, cudaStream_t stream) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclBroadcast(s, r, n, t, root, comm, stream);
    return nccl_->Broadcast(s, r, n, t, root, comm, stream);
  }
  ncclResult_t ncclBcast(void* buff, size_t n, ncclDataType_t t, int root, ncclComm_t comm,
                         cudaStream_t stream) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclBroadcast(buff, buff, n, t, root, comm, stream);
    return nccl_->Broadcast(buff, buff, n, t, root, comm, stream);
  }
  ncclResult_t ncclReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                          int root, ncclComm_t comm, cudaStream_t stream) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclReduce(s, r, n, t, op, root, comm, stream);
    return nccl_->Reduce(s, r, n, t, op, root, comm, stream);
  }
  ncclResult_t ncclReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t,
                                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclReduceScatter(s, r, n, t, op, comm, stream);
    return nccl_->ReduceScatter(s, r, n, t, op, comm, stream);
  }
  ncclResult_t ncclAlltoAll(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t comm,
                            cudaStream_t stream) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclAlltoAll(s, r, n, t, comm, stream);
    return nccl_->AlltoAll(s, r, n, t, comm, stream);
  }
  ncclResult_t ncclGather(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                          ncclComm_t comm, cudaStream_t stream) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclGather(s, r, n, t, root, comm, stream);
    return nccl_->Gather(s, r, n, t, root, comm, stream);
  }
  ncclResult_t ncclScatter(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                           ncclComm_t comm, cudaStream_t stream) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclScatter(s, r, n, t, root, comm, stream);
    return nccl_->Scatter(s, r, n, t, root, comm, stream);
  }
  ncclResult_t ncclSend(const void* s, size_t n, ncclDataType_t t, int peer, ncclComm_t comm,
                        cudaStream_t stream) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclSend(s, n, t, peer, comm, stream);
    return nccl_->Send(s, n, t, peer, comm, stream);
  }
  ncclResult_t ncclRecv(void* r, size_t n, ncclDataType_t t, int peer, ncclComm_t comm,
                        cudaStream_t stream) override {
    Bind();
    if (gloo_) return gloo_->nccl().ncclRecv(r, n, t, peer, comm, stream);
    return nccl_->Recv(r, n, t, peer, comm, stream);
  }

  // --- api::BackendApi ---------------------------------------------------------
  // The application sees one device, ordinal 0 (the shim answers
  // cudaSetDevice/cudaGetDevice that way): this agent's GPU.
  cudaError_t cudaGetDeviceCount(int* count) override {
    if (count == nullptr) return cudaErrorInvalidValue;
    *count = 1;
    return cudaSuccess;
  }
  cudaError_t cudaSetDeviceFlags(unsigned int flags) override {
    Bind();
    return ::cudaSetDeviceFlags(flags);
  }
  cudaError_t cudaGetDeviceFlags(unsigned int* flags) override {
    Bind();
    return ::cudaGetDeviceFlags(flags);
  }
  cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) override {
    Bind();
    if (device != 0) return cudaErrorInvalidDevice;
    return ::cudaGetDeviceProperties(prop, device_);
  }
  cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) override {
    Bind();
    if (device != 0) return cudaErrorInvalidDevice;
    return ::cudaDeviceGetAttribute(value, attr, device_);
  }
  cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer) override {
    Bind();
    if (device != 0 || peer != 0) return cudaErrorInvalidDevice;
    return ::cudaDeviceCanAccessPeer(can_access, device_, device_);
  }
  // The process's own device is the only one: peer access to it (or to any
  // other ordinal) is what the runtime answers for a peer that is the
  // current device.
  cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) override {
    Bind();
    if (peer != 0) return cudaErrorInvalidDevice;
    cudaError_t e = ::cudaDeviceEnablePeerAccess(device_, flags);
    if (e != cudaSuccess) (void)::cudaGetLastError();
    return e;
  }
  cudaError_t PciBusId(char* id, int len, int device) override {
    Bind();
    if (device != 0) return cudaErrorInvalidDevice;
    return ::cudaDeviceGetPCIBusId(id, len, device_);
  }
  cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) override {
    Bind();
    return ::cudaDeviceGetStreamPriorityRange(least, greatest);
  }
  cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) override {
    Bind();
    if (device != 0) return cudaErrorInvalidDevice;
    return ::cudaDeviceGetDefaultMemPool(pool, device_);
  }
  cudaError_t cudaDeviceSynchronize() override;
  cudaError_t SynchronizeDevice() override { return DeviceSynchronize(/*whole=*/true); }
  cudaError_t DeviceSynchronize(bool whole);
  cudaError_t cudaDriverGetVersion(int* version) override {
    Bind();
    return ::cudaDriverGetVersion(version);
  }
  cudaError_t cudaRuntimeGetVersion(int* version) override {
    Bind();
    return ::cudaRuntimeGetVersion(version);
  }
  cudaError_t cudaMemGetInfo(size_t* free, size_t* total) override {
    Bind();
    return ::cudaMemGetInfo(free, total);
  }
  cudaError_t cudaProfilerStart() override {
    Bind();
    return ::cudaProfilerStart();
  }
  cudaError_t cudaProfilerStop() override {
    Bind();
    return ::cudaProfilerStop();
  }
  cudaError_t cudaDeviceSetLimit(cudaLimit limit, size_t value) override {
    Bind();
    return ::cudaDeviceSetLimit(limit, value);
  }
  cudaError_t cudaDeviceGetLimit(size_t* value, cudaLimit limit) override {
    Bind();
    return ::cudaDeviceGetLimit(value, limit);
  }

  cudaError_t cudaMalloc(void** ptr, size_t size) override;
  cudaError_t cudaFree(void* ptr) override;
  cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) override;
  cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) override;
  cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                      void* value) override {
    Bind();
    return ::cudaMemPoolSetAttribute(pool, attr, value);
  }
  cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                      void* value) override {
    Bind();
    return ::cudaMemPoolGetAttribute(pool, attr, value);
  }
  cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) override {
    Bind();
    return ::cudaMemPoolTrimTo(pool, keep);
  }
  // Device ordinal 0 is this agent's GPU; other devices do not exist here.
  cudaError_t MemPoolSetAccess(cudaMemPool_t pool, const cudaMemAccessDesc* descs,
                               size_t count) override {
    Bind();
    if (count > 0 && descs == nullptr) return cudaErrorInvalidValue;
    std::vector<cudaMemAccessDesc> mapped(descs, descs + count);
    for (cudaMemAccessDesc& d : mapped) {
      if (d.location.type == cudaMemLocationTypeDevice) {
        if (d.location.id != 0) return cudaErrorInvalidDevice;
        d.location.id = device_;
      }
    }
    return ::cudaMemPoolSetAccess(pool, mapped.data(), mapped.size());
  }
  cudaError_t cudaMemset(void* ptr, int value, size_t count) override;
  cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) override;
  cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attributes,
                                       const void* ptr) override;

  cudaError_t cudaStreamCreate(cudaStream_t* stream) override {
    return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
  }
  cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) override {
    Bind();
    cudaError_t e = ::cudaStreamCreateWithFlags(stream, flags);
    if (e == cudaSuccess) Track(&streams_, *stream);
    if (e == cudaSuccess) WaitForSnapshot(*stream);
    return e;
  }
  cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags,
                                           int priority) override {
    Bind();
    cudaError_t e = ::cudaStreamCreateWithPriority(stream, flags, priority);
    if (e == cudaSuccess) Track(&streams_, *stream);
    if (e == cudaSuccess) WaitForSnapshot(*stream);
    return e;
  }
  cudaError_t cudaStreamDestroy(cudaStream_t stream) override {
    Bind();
    if (!Untrack(&streams_, stream)) return cudaErrorInvalidResourceHandle;
    {
      absl::MutexLock lock(&hash_mu_);
      if (auto it = hash_streams_.find(stream); it != hash_streams_.end()) {
        ::cudaStreamDestroy(it->second);  // its work finishes first
        hash_streams_.erase(it);
      }
    }
    return ::cudaStreamDestroy(stream);
  }
  cudaError_t cudaStreamSynchronize(cudaStream_t stream) override;
  cudaError_t cudaStreamQuery(cudaStream_t stream) override {
    Bind();
    return ::cudaStreamQuery(stream);
  }
  cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority) override {
    Bind();
    return ::cudaStreamGetPriority(stream, priority);
  }
  cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) override {
    Bind();
    return ::cudaStreamGetFlags(stream, flags);
  }
  cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                  unsigned int flags) override {
    Bind();
    GateEvent(event);
    return ::cudaStreamWaitEvent(stream, event, flags);
  }

  cudaError_t cudaEventCreate(cudaEvent_t* event) override {
    return cudaEventCreateWithFlags(event, cudaEventDefault);
  }
  cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) override {
    Bind();
    cudaError_t e = ::cudaEventCreateWithFlags(event, flags);
    if (e == cudaSuccess) Track(&events_, *event);
    return e;
  }
  cudaError_t cudaEventDestroy(cudaEvent_t event) override {
    Bind();
    if (!Untrack(&events_, event)) return cudaErrorInvalidResourceHandle;
    return ::cudaEventDestroy(event);
  }
  cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) override {
    Bind();
    const cudaError_t e = ::cudaEventRecord(event, stream);
    if (e == cudaSuccess) NoteEventRecord(event, stream);
    return e;
  }
  cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                       unsigned int flags) override {
    Bind();
    const cudaError_t e = ::cudaEventRecordWithFlags(event, stream, flags);
    if (e == cudaSuccess) NoteEventRecord(event, stream);
    return e;
  }
  cudaError_t cudaEventQuery(cudaEvent_t event) override {
    Bind();
    GateEvent(event);
    return ::cudaEventQuery(event);
  }
  cudaError_t cudaEventSynchronize(cudaEvent_t event) override {
    Bind();
    GateEvent(event);
    CudaNccl::SyncScope sync(nccl_.get());
    return Settled(sync, ::cudaEventSynchronize(event));
  }
  cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) override {
    Bind();
    return ::cudaEventElapsedTime(ms, start, end);
  }

  cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* func) override;
  cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) override;
  cudaError_t cudaFuncSetCacheConfig(const void* func, enum cudaFuncCache config) override;
  cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
      int* num_blocks, const void* func, int block_size, size_t dynamic_smem,
      unsigned int flags) override;

  cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) override {
    Bind();
    return ::cudaStreamBeginCapture(stream, mode);
  }
  cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) override {
    Bind();
    cudaError_t e = ::cudaStreamEndCapture(stream, graph);
    if (e == cudaSuccess && graph != nullptr && *graph != nullptr) Track(&graphs_, *graph);
    return e;
  }
  cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                    cudaStreamCaptureStatus* status) override {
    Bind();
    return ::cudaStreamIsCapturing(stream, status);
  }
  cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) override {
    Bind();
    return ::cudaThreadExchangeStreamCaptureMode(mode);
  }
  cudaError_t cudaGraphCreate(cudaGraph_t* graph, unsigned int flags) override {
    Bind();
    cudaError_t e = ::cudaGraphCreate(graph, flags);
    if (e == cudaSuccess) Track(&graphs_, *graph);
    return e;
  }
  cudaError_t cudaGraphDestroy(cudaGraph_t graph) override {
    Bind();
    if (!Untrack(&graphs_, graph)) return cudaErrorInvalidValue;
    ReleaseGraphMemory(&graph_memory_, graph);
    return ::cudaGraphDestroy(graph);
  }
  cudaError_t cudaGraphClone(cudaGraph_t* clone, cudaGraph_t original) override {
    Bind();
    cudaError_t e = ::cudaGraphClone(clone, original);
    if (e == cudaSuccess) {
      Track(&graphs_, *clone);
      ShareGraphMemory(original, &graph_memory_, *clone);
    }
    return e;
  }
  cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                   unsigned long long flags) override {
    Bind();
    cudaError_t e = ::cudaGraphInstantiate(exec, graph, flags);
    if (e == cudaSuccess) {
      Track(&execs_, *exec);
      ShareGraphMemory(graph, &exec_memory_, *exec);
    }
    return e;
  }
  cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph,
                                            unsigned long long flags) override {
    Bind();
    cudaError_t e = ::cudaGraphInstantiateWithFlags(exec, graph, flags);
    if (e == cudaSuccess) {
      Track(&execs_, *exec);
      ShareGraphMemory(graph, &exec_memory_, *exec);
    }
    return e;
  }
  cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) override {
    Bind();
    return ::cudaGraphLaunch(exec, stream);
  }
  cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) override {
    Bind();
    if (!Untrack(&execs_, exec)) return cudaErrorInvalidValue;
    ReleaseGraphMemory(&exec_memory_, exec);
    return ::cudaGraphExecDestroy(exec);
  }

  // Validates a kernel node's launch and builds its driver parameters
  // (`params` keeps the argument pointers alive for the call).
  cudaError_t KernelNodeParams(const KernelInfo& kernel, dim3 grid, dim3 block,
                               size_t shared_bytes, const void* packed_args,
                               std::vector<void*>* params, CUDA_KERNEL_NODE_PARAMS* kp);
  // Graphs built node by node: the runtime's graphs, kernel nodes through the
  // driver (kernels are CUfunctions). Graph memory comes from the fixed
  // device range, not from the runtime's pools: an alloc node allocates when
  // it is added (so its address is deterministic and replayable) and becomes
  // an empty node of the runtime's graph; a free node becomes an empty node
  // too (it orders, nothing more). The memory lives as long as a graph or
  // executable holding it (the graph, its clones, their executables), or
  // until the application frees it with cudaFree/cudaFreeAsync; it goes back
  // to the allocator at the next device-wide synchronization after that
  // (a launch may still be using it), a point fixed by the call sequence.
  cudaError_t AddKernelNode(cudaGraphNode_t* node, cudaGraph_t graph,
                            const std::vector<cudaGraphNode_t>& deps, const KernelInfo& kernel,
                            dim3 grid, dim3 block, size_t shared_bytes,
                            const void* packed_args) override;
  cudaError_t AddMemsetNode(cudaGraphNode_t* node, cudaGraph_t graph,
                            const std::vector<cudaGraphNode_t>& deps,
                            const cudaMemsetParams& params) override;
  cudaError_t AddMemcpyNode1D(cudaGraphNode_t* node, cudaGraph_t graph,
                              const std::vector<cudaGraphNode_t>& deps, void* dst,
                              const void* src, size_t count, cudaMemcpyKind kind) override;
  cudaError_t AddHostNode(cudaGraphNode_t* node, cudaGraph_t graph,
                          const std::vector<cudaGraphNode_t>& deps,
                          std::function<void()> fn) override;
  cudaError_t AddEmptyNode(cudaGraphNode_t* node, cudaGraph_t graph,
                           const std::vector<cudaGraphNode_t>& deps) override {
    Bind();
    return ::cudaGraphAddEmptyNode(node, graph, deps.data(), deps.size());
  }
  cudaError_t AddMemAllocNode(cudaGraphNode_t* node, cudaGraph_t graph,
                              const std::vector<cudaGraphNode_t>& deps, size_t bytesize,
                              void** dptr) override;
  cudaError_t AddMemFreeNode(cudaGraphNode_t* node, cudaGraph_t graph,
                             const std::vector<cudaGraphNode_t>& deps, void* dptr) override;
  cudaError_t AddChildGraphNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                const std::vector<cudaGraphNode_t>& deps,
                                cudaGraph_t child) override;
  cudaError_t AddEventNode(cudaGraphNode_t* node, cudaGraph_t graph,
                           const std::vector<cudaGraphNode_t>& deps, cudaEvent_t event,
                           bool record) override {
    Bind();
    {
      absl::MutexLock lock(&mu_);
      if (!events_.contains(event)) return cudaErrorInvalidResourceHandle;
    }
    return record ? ::cudaGraphAddEventRecordNode(node, graph, deps.data(), deps.size(), event)
                  : ::cudaGraphAddEventWaitNode(node, graph, deps.data(), deps.size(), event);
  }
  // The runtime's conditional node; its bodies belong to it (not tracked
  // as graphs: the application cannot destroy them, Reset leaves them to
  // their parent).
  cudaError_t AddConditionalNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                 const std::vector<cudaGraphNode_t>& deps,
                                 cudaGraphConditionalHandle handle,
                                 cudaGraphConditionalNodeType type, unsigned int size,
                                 std::vector<cudaGraph_t>* bodies) override {
    Bind();
    cudaGraphNodeParams p = {};
    p.type = cudaGraphNodeTypeConditional;
    p.conditional.handle = handle;
    p.conditional.type = type;
    p.conditional.size = size;
    cudaError_t e = ::cudaGraphAddNode(node, graph, deps.data(), nullptr, deps.size(), &p);
    if (e != cudaSuccess) return e;
    if (p.conditional.phGraph_out == nullptr) return cudaErrorUnknown;
    bodies->assign(p.conditional.phGraph_out, p.conditional.phGraph_out + size);
    return cudaSuccess;
  }
  // The runtime's handle: a replay compares it with the journaled one (the
  // application passes it to kernels, where it cannot be translated).
  cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle* handle,
                                               cudaGraph_t graph, unsigned int default_value,
                                               unsigned int flags) override {
    Bind();
    return ::cudaGraphConditionalHandleCreate(handle, graph, default_value, flags);
  }
  cudaError_t GraphGetNodes(cudaGraph_t graph, std::vector<cudaGraphNode_t>* nodes) override;
  // The runtime's own description, through a private temporary file.
  cudaError_t GraphDebugDot(cudaGraph_t graph, unsigned int flags, std::string* dot) override {
    Bind();
    char path[] = "/tmp/revenant-graph-dot-XXXXXX";
    const int fd = ::mkstemp(path);
    if (fd < 0) return cudaErrorOperatingSystem;
    ::close(fd);
    cudaError_t e = ::cudaGraphDebugDotPrint(graph, path, flags);
    if (e == cudaSuccess) {
      FILE* f = std::fopen(path, "r");
      if (f == nullptr) {
        e = cudaErrorOperatingSystem;
      } else {
        char buf[4096];
        size_t n = 0;
        dot->clear();
        while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) dot->append(buf, n);
        std::fclose(f);
      }
    }
    ::unlink(path);
    return e;
  }
  cudaError_t GraphNodeGetDependencies(cudaGraphNode_t node,
                                       std::vector<cudaGraphNode_t>* deps) override {
    Bind();
    size_t n = 0;
    cudaError_t e = ::cudaGraphNodeGetDependencies(node, nullptr, nullptr, &n);
    if (e != cudaSuccess) return e;
    deps->assign(n, nullptr);
    if (n == 0) return cudaSuccess;
    return ::cudaGraphNodeGetDependencies(node, deps->data(), nullptr, &n);
  }
  cudaError_t ExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                      const KernelInfo& kernel, dim3 grid, dim3 block,
                                      size_t shared_bytes, const void* packed_args) override;
  cudaError_t ExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph,
                         cudaGraphExecUpdateResultInfo* info) override {
    Bind();
    return ::cudaGraphExecUpdate(exec, graph, info);
  }
  cudaError_t BeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                  const std::vector<cudaGraphNode_t>& deps,
                                  cudaStreamCaptureMode mode) override {
    Bind();
    return ::cudaStreamBeginCaptureToGraph(stream, graph, deps.data(), nullptr, deps.size(),
                                           mode);
  }
  cudaError_t GetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status,
                             unsigned long long* id, cudaGraph_t* graph,
                             std::vector<cudaGraphNode_t>* deps) override;
  cudaError_t UpdateCaptureDependencies(cudaStream_t stream,
                                        const std::vector<cudaGraphNode_t>& deps,
                                        unsigned int flags) override {
    Bind();
    std::vector<cudaGraphNode_t> copy = deps;
    return ::cudaStreamUpdateCaptureDependencies(stream, copy.data(), nullptr, copy.size(),
                                                 flags);
  }

 private:
  struct PendingFree {
    uint64_t addr;
    cudaStream_t stream;
    // Released only by a device-wide synchronization (graph memory: any
    // stream may still run a launch that uses it).
    bool device_wide = false;
  };
  // Graph memory held by each graph or executable (addresses; the same
  // address may be held by several: a graph, its clones and executables).
  template <typename H>
  using GraphMemory = absl::flat_hash_map<H, std::vector<uint64_t>>;
  struct Mapping {
    uint64_t start;
    uint64_t size;
    CUmemGenericAllocationHandle handle;
  };

  CudaBackend(const Driver& drv, int device, CUcontext ctx, DeviceRange range, uint64_t gran,
              const std::string& job_dir, const CudaNcclOptions& nccl_options,
              int launch_graph_max)
      : launch_batch_max_(launch_graph_max), drv_(drv), device_(device), ctx_(ctx), range_(range), granularity_(gran),
        nccl_(std::make_unique<CudaNccl>(device, job_dir, nccl_options)),
        allocator_(range.base, range.size), mapped_end_(range.base),
        snapshot_spare_mib_(knobs::Int(knobs::Id::kSnapshotDeviceSpareMib, 0, 1 << 20)) {}

  // REVENANT_SNAPSHOT_DEVICE_SPARE_MIB unset: at most this, and at most 1 %
  // of the device's memory: the device memory a job may lose to Revenant is
  // bounded by 512 MiB and 1 % (docs/performance.md), and the rest of the
  // agent took 68 MiB more than PyTorch's own process (mlp_ddp on an H100).
  static constexpr size_t kDefaultSpareCap = size_t{384} << 20;

  // A synchronization's result: the abort's error (cuda_nccl.h), else the
  // first failed Gloo unit's since the last synchronization (cuda_gloo.h).
  cudaError_t Settled(const CudaNccl::SyncScope& sync, cudaError_t e) const {
    e = sync.Result(e);
    if (e == cudaSuccess && gloo_) e = gloo_->TakeDeferredError();
    return e;
  }
  // cuBLAS: the real library on this device's context, on the agent's
  // streams (the dispatcher translated the handles); CUBLAS_STATUS_NOT_INITIALIZED
  // when libcublas cannot be loaded.
#define REVENANT_CUDA_BLAS_ROW(name, params, args)          \
  cublasStatus_t name params override {                     \
    Bind();                                                 \
    if (!blas_.Load()) return CUBLAS_STATUS_NOT_INITIALIZED; \
    GateBlas args;                                          \
    return blas_.name args;                                 \
  }
  REVENANT_CUBLAS_ROWS(REVENANT_CUDA_BLAS_ROW)
#undef REVENANT_CUDA_BLAS_ROW
  // The driver rows: the real driver on this device's context and the
  // agent's streams (the dispatcher translated them; CUstream is cudaStream_t).
#define REVENANT_CUDA_DRIVER_ROW(name, params, args)       \
  CUresult name params override {                          \
    Bind();                                                \
    driver_rows_.Load();                                   \
    if (driver_rows_.name == nullptr) return CUDA_ERROR_NOT_SUPPORTED; \
    return driver_rows_.name args;                         \
  }
  REVENANT_DRIVER_ROWS(REVENANT_CUDA_DRIVER_ROW)
#undef REVENANT_CUDA_DRIVER_ROW
  // cuBLASLt: the real library alike, after the agent's own checks of what
  // the library would take on trust (LtGuard).
#define REVENANT_CUDA_BLASLT_ROW(name, params, args)                                  \
  cublasStatus_t name params override {                                               \
    Bind();                                                                           \
    if (!blas_lt_.Load()) return CUBLAS_STATUS_NOT_INITIALIZED;                       \
    if (cublasStatus_t s = LtGuard args) return s;                                    \
    GateLt args;                                                                      \
    return [&](auto... a) { return LtCall(blas_lt_.name, a...); } args;               \
  }
  REVENANT_CUBLASLT_ROWS(REVENANT_CUDA_BLASLT_ROW)
#undef REVENANT_CUDA_BLASLT_ROW
  // cuBLASLt library handles: the library hands out one context for every
  // cublasLtCreate of a process (the same pointer), which the application's
  // distinct handles must not share a fate with. So each cublasLtHandle_t
  // the agent hands out is an LtHandle of its own over one real handle,
  // made on first use and kept for the agent's life. A cuBLAS handle in its
  // place (the dispatcher translates either) goes to the library as it is:
  // a cublasHandle_t is a cublasLtHandle_t, as cuBLAS documents.
  struct LtHandle {
    cublasLtHandle_t real;
  };
  template <typename F, typename... A>
  cublasStatus_t LtCall(F f, A... a) {
    return f(LtReal(a)...);
  }
  cublasStatus_t LtCall(cublasStatus_t (*create)(cublasLtHandle_t*), cublasLtHandle_t* out) {
    if (out == nullptr) return create(nullptr);
    absl::MutexLock lock(&mu_);
    if (lt_real_ == nullptr) {
      if (cublasStatus_t s = create(&lt_real_)) {
        lt_real_ = nullptr;
        return s;
      }
    }
    auto* h = new LtHandle{lt_real_};
    lt_handles_.insert(h);
    *out = reinterpret_cast<cublasLtHandle_t>(h);
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t LtCall(cublasStatus_t (*)(cublasLtHandle_t), cublasLtHandle_t handle) {
    absl::MutexLock lock(&mu_);
    auto* h = reinterpret_cast<LtHandle*>(handle);
    if (lt_handles_.erase(h) == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasLtHandle_t LtReal(cublasLtHandle_t handle) {
    absl::MutexLock lock(&mu_);
    auto* h = reinterpret_cast<LtHandle*>(handle);
    return lt_handles_.contains(h) ? h->real : handle;
  }
  template <typename T>
  static T LtReal(T v) {
    return v;
  }
  // Nothing to check for most rows.
  template <typename... Args>
  static cublasStatus_t LtGuard(Args...) {
    return CUBLAS_STATUS_SUCCESS;
  }
  // An emulation descriptor is a host object of the library the application
  // cannot have made here (its functions are refused): a pointer to one
  // would be dereferenced by the library.
  static cublasStatus_t LtGuard(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t attr,
                                const void* buf, size_t size) {
    if (attr != CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR || buf == nullptr ||
        size != sizeof(void*)) {
      return CUBLAS_STATUS_SUCCESS;
    }
    void* emulation = nullptr;
    std::memcpy(&emulation, buf, sizeof(emulation));
    return emulation == nullptr ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
  }
  // cuDNN: the real library on this device's context, as cuBLAS (handles
  // and descriptors translated by the dispatcher or agent/hooks_cudnn.cc);
  // CUDNN_STATUS_NOT_INITIALIZED when libcudnn cannot be loaded.
#define REVENANT_CUDA_DNN_ROW(name, params, args)            \
  cudnnStatus_t name params override {                       \
    Bind();                                                  \
    if (!dnn_.Load()) return CUDNN_STATUS_NOT_INITIALIZED;   \
    [&](auto&... a) { DnnGuard(#name, a...); } args;          \
    return dnn_.name args;                                   \
  }
  REVENANT_CUDNN_ROWS(REVENANT_CUDA_DNN_ROW)
#undef REVENANT_CUDA_DNN_ROW
  // Nothing to adjust for most rows.
  template <typename... Args>
  void DnnGuard(const char*, Args&...) {}
  // cudnnSetDropoutDescriptor writes its random state into `states`. A
  // replacement replays it from the setup log even when the application
  // freed that memory later (the allocation is compacted away, the
  // descriptor's calls are not): the state is then not initialized (cuDNN
  // sets only the probability for null states), never written into memory
  // that is no longer mapped. (A first call with such memory, which would
  // fault natively, is treated alike, with the same log line.)
  void DnnGuard(const char* api, cudnnDropoutDescriptor_t, cudnnHandle_t, float, void*& states,
                size_t& size, unsigned long long) {
    if (std::strcmp(api, "cudnnSetDropoutDescriptor") != 0 || states == nullptr) return;
    bool live = false;
    {
      absl::MutexLock lock(&mu_);
      live = DeviceAccessible(states, size);
    }
    if (live) return;
    REVENANT_LOG(WARNING, "cuda-backend")
        << api << ": states [" << states << ", +" << size
        << ") are not live device memory (freed since, in a replay): the descriptor is set "
           "without initializing them";
    states = nullptr;
    size = 0;
  }
  size_t DnnGetVersion() override { return dnn_.Load() ? dnn_.cudnnGetVersion() : 0; }
  size_t DnnGetCudartVersion() override {
    return dnn_.Load() ? dnn_.cudnnGetCudartVersion() : 0;
  }
  void DnnGetLastErrorString(char* message, size_t max_size) override {
    if (!dnn_.Load()) {
      std::snprintf(message, max_size, "the agent cannot load libcudnn.so.9");
      return;
    }
    dnn_.cudnnGetLastErrorString(message, max_size);
  }
  cudnnStatus_t DnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                       cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType,
                                       int64_t elementCount,
                                       const void* arrayOfElements) override {
    Bind();
    if (!dnn_.Load()) return CUDNN_STATUS_NOT_INITIALIZED;
    return dnn_.cudnnBackendSetAttribute(descriptor, attributeName, attributeType, elementCount,
                                         arrayOfElements);
  }
  cudnnStatus_t DnnBackendGetAttribute(cudnnBackendDescriptor_t descriptor,
                                       cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType,
                                       int64_t requestedElementCount, int64_t* elementCount,
                                       void* arrayOfElements) override {
    Bind();
    if (!dnn_.Load()) return CUDNN_STATUS_NOT_INITIALIZED;
    return dnn_.cudnnBackendGetAttribute(descriptor, attributeName, attributeType,
                                         requestedElementCount, elementCount, arrayOfElements);
  }
  bool DevicePointers(api::HandleKind kind, uint64_t handle) override {
    if (kind == api::HandleKind::kLtMatmulDesc) {
      if (!blas_lt_.Load()) return false;
      int32_t mode = CUBLASLT_POINTER_MODE_HOST;
      size_t written = 0;
      return blas_lt_.cublasLtMatmulDescGetAttribute(
                 reinterpret_cast<cublasLtMatmulDesc_t>(handle), CUBLASLT_MATMUL_DESC_POINTER_MODE,
                 &mode, sizeof(mode), &written) == CUBLAS_STATUS_SUCCESS &&
             mode == CUBLASLT_POINTER_MODE_DEVICE;
    }
    if (kind != api::HandleKind::kBlasHandle || !blas_.Load()) return false;
    cublasPointerMode_t mode = CUBLAS_POINTER_MODE_HOST;
    return blas_.cublasGetPointerMode_v2(reinterpret_cast<cublasHandle_t>(handle), &mode) ==
               CUBLAS_STATUS_SUCCESS &&
           mode == CUBLAS_POINTER_MODE_DEVICE;
  }

  // Makes the device and its primary context current on the calling thread
  // (the agent calls from one executor thread per client).
  void Bind() const {
    thread_local const CudaBackend* bound = nullptr;
    if (bound == this) return;
    ::cudaSetDevice(device_);
    drv_.cuCtxSetCurrent(ctx_);
    bound = this;
  }

  template <typename T>
  void Track(absl::flat_hash_set<T>* set, T v) {
    absl::MutexLock lock(&mu_);
    set->insert(v);
  }
  template <typename T>
  bool Untrack(absl::flat_hash_set<T>* set, T v) {
    absl::MutexLock lock(&mu_);
    return set->erase(v) == 1;
  }

  bool InDeviceRange(const void* p) const {
    const uint64_t a = Addr(p);
    return a >= range_.base && a - range_.base < range_.size;
  }
  bool IsSharedHost(const void* p, size_t n) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const uint64_t a = Addr(p);
    auto it = shared_host_.upper_bound(a);
    if (it == shared_host_.begin()) return false;
    --it;
    const uint64_t end = it->first + it->second;
    return a < end && n <= end - a;
  }
  // [p, p + n) inside one live allocation of the device range.
  bool InLiveAllocation(const void* p, size_t n) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return InDeviceRange(p) && allocator_.Contains(Addr(p), n);
  }
  bool DeviceAccessible(const void* p, size_t n) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (p == nullptr) return false;
    if (InDeviceRange(p)) return InLiveAllocation(p, n);
    return IsSharedHost(p, n) || IsSymbol(p, n);
  }
  // One side of a copy of n bytes: a device side must be a live allocation
  // or shared host memory; anything inside the device range is checked
  // whatever the copy's kind says.
  bool CopySideValid(const void* p, bool device, size_t n) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !(device || InDeviceRange(p)) || DeviceAccessible(p, n);
  }
  // Inside a module variable found by GetSymbol.
  bool IsSymbol(const void* p, size_t n) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const uint64_t a = Addr(p);
    auto it = symbols_.upper_bound(a);
    if (it == symbols_.begin()) return false;
    --it;
    const uint64_t end = it->first + it->second;
    return a < end && n <= end - a;
  }
  bool KnownKernel(const void* func) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return kernels_.contains(static_cast<CUfunction>(const_cast<void*>(func)));
  }

  cudaError_t AllocateLocked(void** ptr, size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Maps physical memory up to `end` (exclusive).
  cudaError_t EnsureMappedLocked(uint64_t end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnmapAllLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns the pending stream-ordered frees of `stream` (all when
  // `all`) to the allocator. Called only after a synchronize that covers them.
  void ReleasePendingFrees(cudaStream_t stream, bool all) ABSL_LOCKS_EXCLUDED(mu_);
  bool IsCapturing(cudaStream_t stream) const;
  // Allocation (`ptr`) or free (`freed`) on a capturing stream: a graph
  // memory node of the capture (CaptureMemoryNode in the .cc).
  cudaError_t CaptureMemoryNode(cudaStream_t stream, size_t size, void** ptr, void* freed);
  // Graph memory: `to` (a clone or an executable) holds what `from` holds;
  // `holder` (destroyed) holds nothing any more, and memory nothing holds
  // goes back at the next device-wide synchronization.
  template <typename H>
  void ShareGraphMemory(cudaGraph_t from, GraphMemory<H>* map, H to) ABSL_LOCKS_EXCLUDED(mu_);
  template <typename H>
  void ReleaseGraphMemory(GraphMemory<H>* map, H holder) ABSL_LOCKS_EXCLUDED(mu_);
  // The application freed graph memory itself: no graph releases it again
  // (nor, once the address is reused, the memory of another graph).
  void ForgetGraphMemoryLocked(uint64_t addr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Captured uploads (MemcpyCaptured): the device-to-host copies run on a
  // stream of their own (the other copy engine), each chunk after its
  // upload (chunk_event_), and the application's stream waits for the end
  // (end_event_). Created on first use; the executor thread only.
  cudaStream_t capture_stream_ = nullptr;
  cudaEvent_t capture_chunk_event_ = nullptr;
  cudaEvent_t capture_end_event_ = nullptr;
  // Held uploads' hashes (MemcpyHeld): the table's memory mapped for the
  // device, the kernel (content_hash.cu), one pair of scratch words per
  // table slot (64 bytes each). Set up by RegisterHashWords; without them
  // nothing is hashed.
  char* hash_base_ = nullptr;
  size_t hash_size_ = 0;
  CUdeviceptr hash_base_device_ = 0;
  CUmodule hash_module_ = nullptr;
  CUfunction hash_fn_ = nullptr;
  // A one-rank collective's copy (CudaNccl::SetDeviceCopy): the copy kernel
  // (device_copy.cu), loaded by LoadDeviceCopy when the backend is created
  // (a first load costs ~0.15 ms, which the first collective would pay);
  // where it does not load, no copy is offered to DeviceCopy.
  bool LoadDeviceCopy();
  bool DeviceCopy(void* dst, const void* src, size_t bytes, cudaStream_t stream);
  CUmodule copy_module_ = nullptr;
  CUfunction copy_fn_ = nullptr;
  // The piece kernel (MemcpyHeld, uploads of kHashPiecesFrom and more,
  // unless REVENANT_HASH_PIECES=0): each piece hashed on a stream of the agent's
  // behind its part of the copy, so that the hash runs beside the rest of
  // the copy; null where it is off, did not load or disagreed with the CPU
  // (the whole upload hashed after it).
  CUfunction hash_piece_fn_ = nullptr;
  static constexpr size_t kHashPiecesFrom = size_t{64} << 20;
  static constexpr int kHashPieces = 8;
  // One such stream per stream of the application that uploads (never one
  // shared: a stream would wait for another's copies), and the pieces'
  // events; the executor's (MemcpyHeld, cudaStreamDestroy).
  absl::Mutex hash_mu_;
  absl::flat_hash_map<cudaStream_t, cudaStream_t> hash_streams_ ABSL_GUARDED_BY(hash_mu_);
  std::vector<cudaEvent_t> hash_events_;
  unsigned long long* hash_scratch_ = nullptr;
  struct {
    void* device = nullptr;
    void* host = nullptr;
    cudaStream_t stream = nullptr;
  } hash_check_memory_;
  // Boundary snapshot copies (QueueSnapshotCopies): their stream, the event
  // each live stream's work so far is marked with (fence), and the copies'
  // end, which every stream waits for (streams created later too: see
  // WaitForSnapshot). Created on first use; the executor thread only.
  cudaStream_t snapshot_stream_ = nullptr;
  cudaEvent_t snapshot_fence_event_ = nullptr;
  cudaEvent_t snapshot_end_event_ = nullptr;
  void WaitForSnapshot(cudaStream_t stream) {
    if (snapshot_end_event_ != nullptr) (void)::cudaStreamWaitEvent(stream, snapshot_end_event_, 0);
  }
  // The snapshots' device spare (REVENANT_SNAPSHOT_DEVICE_SPARE_MIB): copies
  // that fit go device to device first, the streams wait for those, and the
  // spare drains to the host behind on snapshot_stream_ (the next snapshot's
  // copies into it queue after the drain). Made at the first asynchronous
  // snapshot, at most the knob's MiB (or kDefaultSpareCap and 1 % of the
  // device) and its live bytes; given back
  // (GiveBackSnapshotSpare) when the application's memory runs out. The
  // executor thread only.
  const std::optional<int64_t> snapshot_spare_mib_;  // the knob, if set (0: no spare)
  void* snapshot_spare_ = nullptr;
  size_t snapshot_spare_bytes_ = 0;
  bool snapshot_spare_tried_ = false;
  bool snapshot_spare_given_back_ = false;
  void EnsureSnapshotSpare(size_t live_bytes);
  bool GiveBackSnapshotSpare();
  // Recorded after the spare's drain: while it is not reached, the
  // application's device synchronization waits for its own streams one by
  // one instead of the device (which would wait for the drain too).
  cudaEvent_t snapshot_drained_event_ = nullptr;
  bool SpareDraining() const {
    return snapshot_drained_event_ != nullptr &&
           ::cudaEventQuery(snapshot_drained_event_) == cudaErrorNotReady;
  }
  cudaError_t SynchronizeApplicationStreams();

  // Launches held back (LaunchKernelMayHold), all on held_stream_, their
  // packed arguments copied into held_args_; issued by FlushLaunches as one
  // graph of a chain of kernel nodes. The executor's thread only.
  struct HeldLaunch {
    const KernelInfo* kernel = nullptr;
    dim3 grid, block;
    unsigned int shared_bytes = 0;
    size_t args = 0;  // offset into held_args_
  };
  // The executable graph that issues a batch of `n` launches: a chain of n
  // kernel nodes, instantiated once per n and given each batch's kernels and
  // arguments with cuGraphExecKernelNodeSetParams.
  struct LaunchGraph {
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    std::vector<CUgraphNode> nodes;
  };
  cudaError_t IssueHeldAsGraph(const std::vector<CUDA_KERNEL_NODE_PARAMS>& kps);
  void DestroyLaunchGraph(LaunchGraph* g);
  const int launch_batch_max_;  // BackendOptions::launch_graph_max
  std::vector<HeldLaunch> held_;
  std::vector<char> held_args_;
  CUstream held_stream_ = nullptr;
  std::vector<LaunchGraph> launch_graphs_;  // [n - 2]
  uint64_t held_batches_ = 0, held_launches_ = 0, held_fallbacks_ = 0;

  const Driver drv_;
  const int device_;
  const CUcontext ctx_;
  DriverRows driver_rows_;
  const DeviceRange range_;
  const uint64_t granularity_;
  std::unique_ptr<CudaNccl> nccl_;  // reset first at destruction: aborts what is left
  std::unique_ptr<CudaGloo> gloo_;  // --collectives=gloo: serves the NCCL rows instead
  // The error of collectives a call waited for (GateStream), until the
  // session takes it (TakeCollectiveError). The executor's thread only.
  int32_t collective_error_ = 0;
  CudaBlas blas_;
  CudaBlasLt blas_lt_;
  cublasLtHandle_t lt_real_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::flat_hash_set<LtHandle*> lt_handles_ ABSL_GUARDED_BY(mu_);
  CudaDnn dnn_;

  mutable absl::Mutex mu_;
  FixedRangeAllocator allocator_ ABSL_GUARDED_BY(mu_);
  uint64_t mapped_end_ ABSL_GUARDED_BY(mu_);
  std::vector<Mapping> mappings_ ABSL_GUARDED_BY(mu_);
  std::vector<PendingFree> pending_frees_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, uint64_t> shared_host_ ABSL_GUARDED_BY(mu_);  // start -> size
  absl::flat_hash_set<cudaStream_t> streams_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<cudaEvent_t> events_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<cudaGraph_t> graphs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<cudaGraphExec_t> execs_ ABSL_GUARDED_BY(mu_);
  struct Module {
    CUmodule module = nullptr;
    std::string image;  // kept alive as long as the module
  };
  absl::flat_hash_map<uint64_t, Module> modules_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<CUfunction> kernels_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, uint64_t> symbols_ ABSL_GUARDED_BY(mu_);  // module variables: start -> size
  // Functions of host nodes (a graph and its clones and executables may run them).
  std::vector<std::unique_ptr<std::function<void()>>> host_node_fns_ ABSL_GUARDED_BY(mu_);
  GraphMemory<cudaGraph_t> graph_memory_ ABSL_GUARDED_BY(mu_);
  GraphMemory<cudaGraphExec_t> exec_memory_ ABSL_GUARDED_BY(mu_);
  // Graph memory address -> how many graphs and executables hold it.
  absl::flat_hash_map<uint64_t, int> graph_memory_refs_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const BackendOptions& options) {
  int count = 0;
  cudaError_t e = ::cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    return absl::UnavailableError(absl::StrCat("no usable GPU: cudaGetDeviceCount says ",
                                               e == cudaSuccess ? "0 devices"
                                                                : ::cudaGetErrorString(e)));
  }
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", options.device, " does not exist (", count, " GPUs)"));
  }
  e = ::cudaSetDevice(options.device);
  if (e == cudaSuccess) e = ::cudaInitDevice(options.device, 0, 0);
  if (e == cudaSuccess) e = ::cudaFree(nullptr);  // the primary context is current now
  if (e != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat("cannot initialize GPU ", options.device, ": ",
                                               ::cudaGetErrorString(e)));
  }
  Driver drv;
  if (absl::Status s = drv.Load(); !s.ok()) return s;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUresult r = drv.cuDeviceGet(&dev, options.device);
  if (r == CUDA_SUCCESS) r = drv.cuDevicePrimaryCtxRetain(&ctx, dev);
  if (r == CUDA_SUCCESS) r = drv.cuCtxSetCurrent(ctx);
  if (r != CUDA_SUCCESS) {
    return absl::UnavailableError(absl::StrCat("primary context of GPU ", options.device,
                                               ": driver error ", static_cast<int>(r)));
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t gran = 0;
  r = drv.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS || gran == 0) {
    return absl::UnavailableError(absl::StrCat("cuMemGetAllocationGranularity: driver error ",
                                               static_cast<int>(r)));
  }
  const uint64_t granularity = std::max<uint64_t>(gran, kChunk);

  DeviceRange range = options.device_range;
  if (range.base == 0) range.base = kDefaultDeviceBase + uint64_t(options.rank) * kRankStride;
  if (range.size == 0) range.size = kDefaultDeviceSize;
  if (range.base % granularity != 0 || range.size % granularity != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device range 0x", absl::Hex(range.base), " + ", range.size,
        " is not aligned to the allocation granularity ", granularity));
  }
  CUdeviceptr got = 0;
  r = drv.cuMemAddressReserve(&got, range.size, granularity, range.base, 0);
  if (r != CUDA_SUCCESS || got != range.base) {
    if (r == CUDA_SUCCESS) drv.cuMemAddressFree(got, range.size);
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot reserve the device range [0x", absl::Hex(range.base), ", 0x",
        absl::Hex(range.base + range.size), ") of rank ", options.rank,
        r == CUDA_SUCCESS ? absl::StrCat(": the driver placed it at 0x", absl::Hex(got))
                          : absl::StrCat(": driver error ", static_cast<int>(r)),
        "; something else occupies these addresses (another agent of the same rank?)"));
  }
  // A shared GPU's NCCL_HOSTID before the environment is logged.
  if (options.gpu_shared && options.collectives == "nccl") {
    CudaNccl::ConfigureSharedGpu(options.rank);
  }
  CudaNccl::LogEnvironment();
  REVENANT_LOG(DEBUG, kLog) << absl::StrCat("GPU ", options.device, ": device range 0x",
                                          absl::Hex(range.base), " + ", range.size >> 20,
                                          " MiB");
  CudaNcclOptions nccl_options = CudaNcclOptions::From(options);
  nccl_options.gpu_shared = false;  // configured above
  auto backend = std::unique_ptr<CudaBackend>(new CudaBackend(
      drv, options.device, ctx, range, granularity, options.job_dir, nccl_options,
      options.launch_graph_max));
  {
    CudaBackend* b = backend.get();
    b->nccl_->SetStateAccess(
        [b] {
          absl::MutexLock lock(&b->mu_);
          return b->allocator_.Allocations();
        },
        range.base);
    if (knobs::Bool(knobs::Id::kNcclOneRankKernel).value_or(true) && b->LoadDeviceCopy()) {
      b->nccl_->SetDeviceCopy([b](void* dst, const void* src, size_t bytes, cudaStream_t stream) {
        return b->DeviceCopy(dst, src, bytes, stream);
      });
    }
  }
  if (options.collectives == "gloo") {
    CudaBackend* b = backend.get();
    CudaGlooHooks hooks;
    hooks.accessible = [b](const void* p, size_t n) {
      absl::MutexLock lock(&b->mu_);
      return b->DeviceAccessible(p, n);
    };
    hooks.known_stream = [b](cudaStream_t s) {
      absl::MutexLock lock(&b->mu_);
      return b->streams_.contains(s);
    };
    hooks.live_allocations = [b] {
      absl::MutexLock lock(&b->mu_);
      return b->allocator_.Allocations();
    };
    absl::StatusOr<std::unique_ptr<CudaGloo>> g = CudaGloo::Create(options, range, hooks);
    if (!g.ok()) return g.status();
    backend->gloo_ = std::move(*g);
  }
  return backend;
}

CudaBackend::~CudaBackend() {
  Bind();
  gloo_.reset();  // opens every gate its units hold
  nccl_.reset();
  nccl_ = std::make_unique<CudaNccl>(device_, "");  // Reset() below may still sync
  Reset();
  if (snapshot_spare_ != nullptr) ::cudaFree(snapshot_spare_);
  Bind();
  drv_.cuMemAddressFree(range_.base, range_.size);
}

// --- Memory -------------------------------------------------------------------------

cudaError_t CudaBackend::EnsureMappedLocked(uint64_t end) {
  if (end <= mapped_end_) return cudaSuccess;
  const uint64_t size = (end - mapped_end_ + granularity_ - 1) / granularity_ * granularity_;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device_;
  CUmemGenericAllocationHandle h = 0;
  CUresult r = drv_.cuMemCreate(&h, size, &prop, 0);
  if (r != CUDA_SUCCESS) {
    REVENANT_LOG(DEBUG, kLog) << "cuMemCreate(" << size << "): " << static_cast<int>(r);
    return cudaErrorMemoryAllocation;
  }
  r = drv_.cuMemMap(mapped_end_, size, 0, h, 0);
  if (r != CUDA_SUCCESS) {
    drv_.cuMemRelease(h);
    REVENANT_LOG(WARNING, kLog) << absl::StrCat("cuMemMap at 0x", absl::Hex(mapped_end_), ": ",
                                             static_cast<int>(r));
    return cudaErrorMemoryAllocation;
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = drv_.cuMemSetAccess(mapped_end_, size, &access, 1);
  if (r != CUDA_SUCCESS) {
    drv_.cuMemUnmap(mapped_end_, size);
    drv_.cuMemRelease(h);
    REVENANT_LOG(WARNING, kLog) << "cuMemSetAccess: " << static_cast<int>(r);
    return cudaErrorMemoryAllocation;
  }
  mappings_.push_back(Mapping{mapped_end_, size, h});
  mapped_end_ += size;
  return cudaSuccess;
}

void CudaBackend::UnmapAllLocked() {
  for (const Mapping& m : mappings_) {
    drv_.cuMemUnmap(m.start, m.size);
    drv_.cuMemRelease(m.handle);
  }
  mappings_.clear();
  mapped_end_ = range_.base;
}

cudaError_t CudaBackend::AllocateLocked(void** ptr, size_t size) {
  absl::StatusOr<uint64_t> addr = allocator_.Allocate(size);
  if (!addr.ok() && addr.status().code() == absl::StatusCode::kResourceExhausted &&
      !pending_frees_.empty()) {
    // Memory freed in stream order may be what is missing: wait for it (a
    // point fixed by the call sequence, so a replay allocates identically).
    mu_.Unlock();
    ::cudaDeviceSynchronize();
    ReleasePendingFrees(nullptr, /*all=*/true);
    mu_.Lock();
    addr = allocator_.Allocate(size);
  }
  if (!addr.ok()) {
    REVENANT_LOG(DEBUG, kLog) << "allocation of " << size << " bytes: " << addr.status();
    return cudaErrorMemoryAllocation;
  }
  const uint64_t rounded = (size + allocator_.alignment() - 1) / allocator_.alignment() *
                           allocator_.alignment();
  cudaError_t mapped = EnsureMappedLocked(*addr + rounded);
  if (mapped == cudaErrorMemoryAllocation && snapshot_spare_ != nullptr) {
    // The snapshots' device spare gives way to the application.
    mu_.Unlock();
    const bool given = GiveBackSnapshotSpare();
    mu_.Lock();
    if (given) mapped = EnsureMappedLocked(*addr + rounded);
  }
  if (mapped != cudaSuccess) {
    (void)allocator_.Free(*addr);
    return mapped;
  }
  *ptr = reinterpret_cast<void*>(*addr);
  return cudaSuccess;
}

void CudaBackend::ReleasePendingFrees(cudaStream_t stream, bool all) {
  absl::MutexLock lock(&mu_);
  auto released = [&](const PendingFree& f) {
    if (!all && (f.device_wide || f.stream != stream)) return false;
    (void)allocator_.Free(f.addr);
    return true;
  };
  pending_frees_.erase(std::remove_if(pending_frees_.begin(), pending_frees_.end(), released),
                       pending_frees_.end());
}

bool CudaBackend::IsCapturing(cudaStream_t stream) const {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  return ::cudaStreamIsCapturing(stream, &st) == cudaSuccess &&
         st != cudaStreamCaptureStatusNone;
}

cudaError_t CudaBackend::cudaMalloc(void** ptr, size_t size) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  Bind();
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  absl::MutexLock lock(&mu_);
  return AllocateLocked(ptr, size);
}

cudaError_t CudaBackend::cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  Bind();
  // cudaFree synchronizes the device: no queued work still uses the block,
  // and every stream-ordered free queued so far is complete.
  cudaError_t sync = ::cudaDeviceSynchronize();
  {
    absl::MutexLock lock(&mu_);
    for (const PendingFree& f : pending_frees_) {
      if (f.addr == Addr(ptr)) return cudaErrorInvalidValue;  // already freed (async)
    }
    if (!allocator_.Free(Addr(ptr)).ok()) return cudaErrorInvalidValue;
    ForgetGraphMemoryLocked(Addr(ptr));
  }
  ReleasePendingFrees(nullptr, /*all=*/true);
  return sync;
}

// Captured stream-ordered allocation (cudaMallocAsync/cudaFreeAsync on a
// capturing stream) becomes graph memory, as an explicit alloc or free node
// (AddMemAllocNode): memory from the fixed range now, an empty node after
// the capture's current dependencies, which then become that node.
cudaError_t CudaBackend::CaptureMemoryNode(cudaStream_t stream, size_t size, void** ptr,
                                           void* freed) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  size_t n = 0;
  cudaError_t e = ::cudaStreamGetCaptureInfo(stream, &status, nullptr, &graph, &deps, nullptr, &n);
  if (e != cudaSuccess) return e;
  if (status != cudaStreamCaptureStatusActive || graph == nullptr) {
    return cudaErrorStreamCaptureInvalidated;
  }
  const std::vector<cudaGraphNode_t> dep_list(deps, deps + n);
  void* p = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (ptr != nullptr) {
      // Growing the fixed range maps memory (cuMemCreate, cuMemMap), which a
      // global-mode capture forbids on this thread: relaxed for the call.
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      (void)::cudaThreadExchangeStreamCaptureMode(&mode);
      const cudaError_t a = AllocateLocked(&p, size);
      (void)::cudaThreadExchangeStreamCaptureMode(&mode);
      if (a != cudaSuccess) return a;
    } else if (!graph_memory_refs_.contains(Addr(freed))) {
      // Only graph memory may be freed by a node (AddMemFreeNode).
      return cudaErrorInvalidValue;
    }
  }
  cudaGraphNode_t node = nullptr;
  e = ::cudaGraphAddEmptyNode(&node, graph, dep_list.data(), dep_list.size());
  if (e == cudaSuccess) {
    e = ::cudaStreamUpdateCaptureDependencies(stream, &node, nullptr, 1,
                                              cudaStreamSetCaptureDependencies);
  }
  absl::MutexLock lock(&mu_);
  if (e != cudaSuccess) {
    if (p != nullptr) (void)allocator_.Free(Addr(p));  // never handed out
    return e;
  }
  if (ptr != nullptr) {
    graph_memory_[graph].push_back(Addr(p));
    graph_memory_refs_[Addr(p)] = 1;
    *ptr = p;
  }
  return cudaSuccess;
}

cudaError_t CudaBackend::cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  Bind();
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  if (IsCapturing(stream)) return CaptureMemoryNode(stream, size, ptr, nullptr);
  // Allocated at once: valid for the stream's later work, which is all that
  // stream-ordered allocation promises.
  absl::MutexLock lock(&mu_);
  return AllocateLocked(ptr, size);
}

cudaError_t CudaBackend::cudaFreeAsync(void* ptr, cudaStream_t stream) {
  if (ptr == nullptr) return cudaSuccess;
  Bind();
  if (IsCapturing(stream)) return CaptureMemoryNode(stream, 0, nullptr, ptr);
  absl::MutexLock lock(&mu_);
  if (allocator_.SizeOf(Addr(ptr)) == 0) return cudaErrorInvalidValue;
  for (const PendingFree& f : pending_frees_) {
    if (f.addr == Addr(ptr)) return cudaErrorInvalidValue;
  }
  pending_frees_.push_back(PendingFree{Addr(ptr), stream});
  ForgetGraphMemoryLocked(Addr(ptr));
  return cudaSuccess;
}

cudaError_t CudaBackend::cudaMemset(void* ptr, int value, size_t count) {
  Bind();
  if (count == 0) return cudaSuccess;
  {
    absl::MutexLock lock(&mu_);
    if (!DeviceAccessible(ptr, count)) return cudaErrorInvalidValue;
  }
  return ::cudaMemset(ptr, value, count);
}

cudaError_t CudaBackend::cudaMemsetAsync(void* ptr, int value, size_t count,
                                         cudaStream_t stream) {
  Bind();
  if (count == 0) return cudaSuccess;
  {
    absl::MutexLock lock(&mu_);
    if (!DeviceAccessible(ptr, count)) return cudaErrorInvalidValue;
  }
  GateStream(stream);
  return ::cudaMemsetAsync(ptr, value, count, stream);
}

cudaError_t CudaBackend::cudaPointerGetAttributes(struct cudaPointerAttributes* attributes,
                                                  const void* ptr) {
  if (attributes == nullptr) return cudaErrorInvalidValue;
  Bind();
  if (InDeviceRange(ptr)) {
    absl::MutexLock lock(&mu_);
    if (!allocator_.Contains(Addr(ptr), 0)) {
      // Reserved but not allocated: what CUDA says of memory it never gave out.
      *attributes = cudaPointerAttributes{};
      attributes->type = cudaMemoryTypeUnregistered;
      attributes->device = -2;
      attributes->hostPointer = const_cast<void*>(ptr);
      return cudaSuccess;
    }
  }
  return ::cudaPointerGetAttributes(attributes, ptr);
}

cudaError_t CudaBackend::Memcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
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
  Bind();
  if (count == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  {
    absl::MutexLock lock(&mu_);
    if (!CopySideValid(dst, dst_device, count) || !CopySideValid(src, src_device, count)) {
      return cudaErrorInvalidValue;
    }
    // A destination the agent owns (reply buffer, staging area) must be
    // written before returning.
    if (!InDeviceRange(dst) && !IsSharedHost(dst, count)) async = false;
  }
  GateStream(stream);
  // An asynchronous copy from private (pageable) bytes is safe: CUDA stages a
  // pageable source before cudaMemcpyAsync returns.
  if (async) return ::cudaMemcpyAsync(dst, src, count, kind, stream);
  CudaNccl::SyncScope sync(nccl_.get());
  if (stream == nullptr) return Settled(sync, ::cudaMemcpy(dst, src, count, kind));
  cudaError_t e = ::cudaMemcpyAsync(dst, src, count, kind, stream);
  if (e != cudaSuccess) return e;
  return Settled(sync, ::cudaStreamSynchronize(stream));
}

cudaError_t CudaBackend::MemcpyCaptured(void* dst, const void* src, size_t count,
                                        cudaStream_t stream, bool async, void* capture,
                                        uint64_t* done, uint64_t tag, bool* captured) {
  *captured = false;
  Bind();
  if (count == 0) return cudaSuccess;
  GateStream(stream);
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (::cudaStreamIsCapturing(stream, &capturing) != cudaSuccess ||
      capturing != cudaStreamCaptureStatusNone) {
    (void)::cudaGetLastError();
    // Into a graph (or an invalid stream, which Memcpy reports): a node
    // reads its source when the graph runs; nothing to capture now.
    return Memcpy(dst, src, count, cudaMemcpyHostToDevice, stream, async);
  }
  if (dst == nullptr || src == nullptr || capture == nullptr || done == nullptr)
    return cudaErrorInvalidValue;
  {
    absl::MutexLock lock(&mu_);
    if (!DeviceAccessible(dst, count) || !IsSharedHost(src, count) ||
        !IsSharedHost(capture, count) || !IsSharedHost(done, sizeof(*done))) {
      return cudaErrorInvalidValue;
    }
  }
  if (capture_stream_ == nullptr) {
    cudaError_t e = ::cudaStreamCreateWithFlags(&capture_stream_, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = ::cudaEventCreateWithFlags(&capture_chunk_event_, cudaEventDisableTiming);
    if (e == cudaSuccess) e = ::cudaEventCreateWithFlags(&capture_end_event_, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      REVENANT_LOG(ERROR, kLog) << "captured uploads: no stream or event: "
                                << ::cudaGetErrorString(e);
      return e;
    }
  }
  void* done_device = nullptr;
  if (cudaError_t e = ::cudaHostGetDevicePointer(&done_device, done, 0); e != cudaSuccess) return e;
  // Chunks of 1-8 MiB (about 16 per upload): the capture of the last one is
  // what the critical path gains. An event may be recorded again once a
  // stream waits for it (the wait takes its state at the call).
  const size_t chunk =
      std::min<size_t>(8ull << 20, std::max<size_t>(1ull << 20, (count / 16 + 65535) & ~size_t{65535}));
  char* d = static_cast<char*>(dst);
  const char* h = static_cast<const char*>(src);
  char* c = static_cast<char*>(capture);
  for (size_t off = 0; off < count; off += chunk) {
    const size_t n = std::min(chunk, count - off);
    cudaError_t e = ::cudaMemcpyAsync(d + off, h + off, n, cudaMemcpyHostToDevice, stream);
    if (e == cudaSuccess) e = ::cudaEventRecord(capture_chunk_event_, stream);
    if (e == cudaSuccess) e = ::cudaStreamWaitEvent(capture_stream_, capture_chunk_event_, 0);
    if (e == cudaSuccess)
      e = ::cudaMemcpyAsync(c + off, d + off, n, cudaMemcpyDeviceToHost, capture_stream_);
    if (e != cudaSuccess) return e;
  }
  if (drv_.cuStreamWriteValue64(capture_stream_, reinterpret_cast<CUdeviceptr>(done_device), tag,
                                0) != CUDA_SUCCESS) {
    return cudaErrorUnknown;
  }
  cudaError_t e = ::cudaEventRecord(capture_end_event_, capture_stream_);
  if (e == cudaSuccess) e = ::cudaStreamWaitEvent(stream, capture_end_event_, 0);
  if (e != cudaSuccess) return e;
  *captured = true;
  if (async) return cudaSuccess;
  CudaNccl::SyncScope sync(nccl_.get());
  return Settled(sync, ::cudaStreamSynchronize(stream));
}

bool CudaBackend::RegisterHashWords(void* base, size_t size) {
  Bind();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t registered = (size + page - 1) / page * page;  // the mapping's whole pages
  const size_t slots = size / 64;
  auto fail = [&](const std::string& what) {
    (void)::cudaGetLastError();
    hash_fn_ = nullptr;
    REVENANT_LOG(WARNING, kLog) << "held uploads: " << what
                                << ": the device cannot hash them, so uploads are captured instead";
    return false;
  };
  if (cudaError_t e = ::cudaHostRegister(base, registered, cudaHostRegisterMapped);
      e != cudaSuccess) {
    return fail(std::string("the table cannot be mapped for the device (") +
                ::cudaGetErrorString(e) + ")");
  }
  void* device = nullptr;
  if (::cudaHostGetDevicePointer(&device, base, 0) != cudaSuccess) {
    return fail("no device address for the table");
  }
  if (drv_.cuModuleLoadData(&hash_module_, kContentHashPtx) != CUDA_SUCCESS ||
      drv_.cuModuleGetFunction(&hash_fn_, hash_module_, "revenant_content_hash") != CUDA_SUCCESS) {
    return fail("the hash kernel does not load on this device");
  }
  // REVENANT_HASH_PIECES=0: every upload hashed whole, after its copy.
  if (!knobs::Bool(knobs::Id::kHashPieces).value_or(true) ||
      drv_.cuModuleGetFunction(&hash_piece_fn_, hash_module_, "revenant_content_hash_piece") !=
          CUDA_SUCCESS) {
    hash_piece_fn_ = nullptr;
  }
  // Nothing here waits for the application's work on the device (a
  // collective waiting for its peers, say): a stream of the agent's own,
  // synchronized alone, and nothing freed (cudaFree synchronizes the
  // device). What the check used is kept for the agent's life.
  cudaStream_t stream = nullptr;
  void* scratch = nullptr;
  if (::cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
      ::cudaMalloc(&scratch, slots * 2 * sizeof(unsigned long long)) != cudaSuccess ||
      ::cudaMemsetAsync(scratch, 0, slots * 2 * sizeof(unsigned long long), stream) != cudaSuccess) {
    return fail("no stream or device memory for the hash's scratch");
  }
  hash_scratch_ = static_cast<unsigned long long*>(scratch);
  hash_check_memory_.stream = stream;
  if (absl::Status s = CheckDeviceHash(stream); !s.ok()) return fail(std::string(s.message()));
  hash_base_ = static_cast<char*>(base);
  hash_size_ = size;
  hash_base_device_ = reinterpret_cast<CUdeviceptr>(device);
  REVENANT_LOG(INFO, kLog) << "held uploads: hashed by the device"
                           << (hash_piece_fn_ != nullptr
                                   ? ", from 64 MiB in pieces beside their copy"
                                   : ", after the whole copy");
  return true;
}

bool CudaBackend::LoadDeviceCopy() {
  if (CUresult r = drv_.cuModuleLoadData(&copy_module_, kDeviceCopyFatbin);
      r != CUDA_SUCCESS ||
      (r = drv_.cuModuleGetFunction(&copy_fn_, copy_module_, "revenant_device_copy")) !=
          CUDA_SUCCESS) {
    copy_fn_ = nullptr;
    REVENANT_LOG(WARNING, kLog) << "the agent's copy kernel does not load on this device (CUDA "
                                   "driver error "
                                << static_cast<int>(r)
                                << "): one-rank collectives are copied with cudaMemcpyAsync";
    return false;
  }
  return true;
}

bool CudaBackend::DeviceCopy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  // 16-byte words, both sides inside live allocations of the device range
  // (memory a kernel may touch; anything else, host memory say, is
  // cudaMemcpyAsync's to copy or refuse).
  if (bytes == 0 || ((Addr(dst) | Addr(src) | bytes) & 15) != 0) return false;
  {
    absl::MutexLock lock(&mu_);
    if (!InLiveAllocation(dst, bytes) || !InLiveAllocation(src, bytes)) return false;
  }
  const void* from = src;
  void* to = dst;
  unsigned long long words = bytes / 16;
  void* args[] = {&from, &to, &words};
  // 4 words a thread, at most 264 blocks of 256 threads (a grid-stride loop
  // beyond).
  const unsigned blocks = static_cast<unsigned>(
      std::min<unsigned long long>(264, std::max<unsigned long long>(1, words / (256 * 4))));
  return drv_.cuLaunchKernel(copy_fn_, blocks, 1, 1, 256, 1, 1, 0,
                             reinterpret_cast<CUstream>(stream), args, nullptr) == CUDA_SUCCESS;
}

bool CudaBackend::LaunchHash(const void* data, size_t count, unsigned long long* scratch,
                             CUdeviceptr out, cudaStream_t stream) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  unsigned long long n = count;
  void* args[] = {&p, &n, &scratch, &out};
  return LaunchHashKernel(hash_fn_, n, args, stream);
}

bool CudaBackend::LaunchHashKernel(CUfunction fn, unsigned long long bytes, void** args,
                                   cudaStream_t stream) {
  // 16 words a thread at least, at most 1024 blocks of 256 threads.
  const unsigned blocks = static_cast<unsigned>(std::min<unsigned long long>(
      1024, std::max<unsigned long long>(1, (bytes + 7) / 8 / (256 * 16))));
  return drv_.cuLaunchKernel(fn, blocks, 1, 1, 256, 1, 1, 0, reinterpret_cast<CUstream>(stream),
                             args, nullptr) == CUDA_SUCCESS;
}

bool CudaBackend::LaunchHashPiece(const void* data, size_t count, uint64_t first_word,
                                  unsigned long long* scratch, CUdeviceptr out, uint64_t finish_n,
                                  cudaStream_t stream) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  unsigned long long n = count, first = first_word, finish = finish_n;
  void* args[] = {&p, &n, &first, &scratch, &out, &finish};
  return LaunchHashKernel(hash_piece_fn_, n, args, stream);
}

absl::Status CudaBackend::CheckDeviceHash(cudaStream_t stream) {
  // The kernel must agree with the CPU's ContentHash (a copy out compares
  // the two): an aligned range of 32 blocks with a partial last word, and an
  // unaligned one of one block, against the same bytes on the CPU.
  const size_t n = (1u << 20) + 13;
  std::vector<unsigned char> bytes(n + 8);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 131 + (i >> 9));
  void* d = nullptr;
  void* out = nullptr;
  std::string why;
  if (::cudaMalloc(&d, bytes.size()) != cudaSuccess ||
      ::cudaHostAlloc(&out, 2 * sizeof(uint64_t), cudaHostAllocMapped) != cudaSuccess) {
    why = "no memory for its check";
  } else if (::cudaMemcpyAsync(d, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream) !=
                 cudaSuccess ||
             ::cudaStreamSynchronize(stream) != cudaSuccess) {
    why = "its check's upload failed";
  } else {
    void* out_device = nullptr;
    (void)::cudaHostGetDevicePointer(&out_device, out, 0);
    struct Case {
      size_t offset, count;
    };
    for (const Case c : {Case{0, n}, Case{3, 4101}}) {
      static_cast<uint64_t*>(out)[0] = 0;
      if (!LaunchHash(static_cast<unsigned char*>(d) + c.offset, c.count, hash_scratch_,
                      reinterpret_cast<CUdeviceptr>(out_device), stream) ||
          ::cudaStreamSynchronize(stream) != cudaSuccess) {
        why = "its check did not run";
        break;
      }
      const uint64_t want = ContentHash(bytes.data() + c.offset, c.count);
      const uint64_t got = static_cast<uint64_t*>(out)[0];
      if (got != want) {
        why = absl::StrFormat("the device's hash of %zu bytes at offset %zu is %016x, the CPU's %016x",
                              c.count, c.offset, got, want);
        break;
      }
    }
    // The piece kernel: the aligned range in three pieces (the last with
    // the partial word) must hash as the whole; else uploads are hashed
    // whole after their copy.
    if (why.empty() && hash_piece_fn_ != nullptr) {
      static_cast<uint64_t*>(out)[0] = 0;
      const size_t cuts[] = {0, 256 << 10, 768 << 10, n};
      bool ran = true;
      for (int k = 0; k < 3 && ran; ++k) {
        ran = LaunchHashPiece(static_cast<unsigned char*>(d) + cuts[k], cuts[k + 1] - cuts[k],
                              cuts[k] / 8, hash_scratch_,
                              reinterpret_cast<CUdeviceptr>(out_device), k == 2 ? n : 0, stream);
      }
      ran = ran && ::cudaStreamSynchronize(stream) == cudaSuccess;
      const uint64_t want = ContentHash(bytes.data(), n);
      const uint64_t got = static_cast<uint64_t*>(out)[0];
      if (!ran || got != want) {
        REVENANT_LOG(WARNING, kLog) << absl::StrFormat(
            "held uploads: the piece hash kernel %s (%016x against the CPU's %016x): large "
            "uploads are hashed whole after their copy",
            ran ? "disagrees" : "did not run", got, want);
        hash_piece_fn_ = nullptr;
        (void)::cudaGetLastError();
        // Whatever a failed piece left in the scratch words.
        ClearHashScratch(hash_scratch_, stream);
      }
    }
  }
  (void)::cudaGetLastError();
  hash_check_memory_.device = d;
  hash_check_memory_.host = out;
  return why.empty() ? absl::OkStatus() : absl::InternalError("the hash kernel: " + why);
}

cudaError_t CudaBackend::MemcpyHeld(void* dst, const void* src, size_t count, cudaStream_t stream,
                                    bool async, uint64_t* hash_words, uint64_t tag, bool* hashed) {
  *hashed = false;
  const char* words = reinterpret_cast<const char*>(hash_words);
  const bool can_hash = hash_fn_ != nullptr && count != 0 && words >= hash_base_ &&
                        words + 2 * sizeof(uint64_t) <= hash_base_ + hash_size_;
  if (!can_hash || IsCapturing(stream)) {
    return Memcpy(dst, src, count, cudaMemcpyHostToDevice, stream, async);
  }
  const size_t offset = static_cast<size_t>(words - hash_base_);
  CUdeviceptr out = hash_base_device_ + offset;
  unsigned long long* const scratch = hash_scratch_ + (offset / 64) * 2;
  bool copied = false, hash_queued = false;
  if (hash_piece_fn_ != nullptr && count >= kHashPiecesFrom) {
    if (cudaError_t e = MemcpyHeldInPieces(dst, src, count, stream, scratch, out, &copied,
                                           &hash_queued);
        e != cudaSuccess) {
      return e;
    }
  }
  if (!copied) {
    if (cudaError_t e = Memcpy(dst, src, count, cudaMemcpyHostToDevice, stream, true);
        e != cudaSuccess) {
      return e;
    }
    // The hash behind the copy. A copy the checks above let through was
    // valid: a failure now is the device's.
    hash_queued = LaunchHash(dst, count, scratch, out, stream);
  }
  // The tag behind the hash.
  if (hash_queued && drv_.cuStreamWriteValue64(reinterpret_cast<CUstream>(stream),
                                               out + sizeof(uint64_t), tag, 0) == CUDA_SUCCESS) {
    *hashed = true;
  } else {
    (void)::cudaGetLastError();
    REVENANT_LOG(WARNING, kLog) << "held uploads: the hash of request " << tag
                                << " could not be queued (its copy out goes unchecked)";
  }
  if (async) return cudaSuccess;
  CudaNccl::SyncScope sync(nccl_.get());
  return Settled(sync, ::cudaStreamSynchronize(stream));
}

void CudaBackend::ClearHashScratch(unsigned long long* scratch, cudaStream_t stream) {
  (void)::cudaStreamSynchronize(stream);
  (void)::cudaMemsetAsync(scratch, 0, 2 * sizeof(unsigned long long), stream);
  (void)::cudaStreamSynchronize(stream);
}

cudaError_t CudaBackend::MemcpyHeldInPieces(void* dst, const void* src, size_t count,
                                            cudaStream_t stream, unsigned long long* scratch,
                                            CUdeviceptr out, bool* queued, bool* hashed) {
  *queued = *hashed = false;
  Bind();
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  {
    // The whole copy checked as Memcpy checks it, before any piece is queued.
    absl::MutexLock lock(&mu_);
    if (!InDeviceRange(dst)) return cudaSuccess;  // not the device's: copied whole
    if (!CopySideValid(dst, true, count) || !CopySideValid(src, false, count)) {
      return cudaErrorInvalidValue;
    }
  }
  cudaStream_t hs = nullptr;
  {
    absl::MutexLock lock(&hash_mu_);
    auto it = hash_streams_.find(stream);
    if (it != hash_streams_.end()) {
      hs = it->second;
    } else if (::cudaStreamCreateWithFlags(&hs, cudaStreamNonBlocking) == cudaSuccess) {
      hash_streams_.emplace(stream, hs);
    } else {
      (void)::cudaGetLastError();
      return cudaSuccess;  // copied and hashed whole
    }
  }
  while (hash_events_.size() < kHashPieces + 1) {
    cudaEvent_t ev = nullptr;
    if (::cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
      (void)::cudaGetLastError();
      return cudaSuccess;
    }
    hash_events_.push_back(ev);
  }
  GateStream(stream);
  // Pieces of whole words: the piece kernel numbers a piece's words from
  // its first byte.
  const size_t piece = ((count + kHashPieces - 1) / kHashPieces + 7) / 8 * 8;
  char* const d = static_cast<char*>(dst);
  const char* const h = static_cast<const char*>(src);
  bool hash_ok = true;
  int k = 0;
  for (size_t at = 0; at < count; at += piece, ++k) {
    const size_t n = std::min(piece, count - at);
    if (cudaError_t e = ::cudaMemcpyAsync(d + at, h + at, n, cudaMemcpyHostToDevice, stream);
        e != cudaSuccess) {
      if (at == 0) return e;  // nothing queued
      // Pieces already queued: the device's failure; the hash is given up.
      *queued = true;
      hash_ok = false;
      ClearHashScratch(scratch, hs);
      return e;
    }
    if (hash_ok) {
      hash_ok = ::cudaEventRecord(hash_events_[k], stream) == cudaSuccess &&
                ::cudaStreamWaitEvent(hs, hash_events_[k], 0) == cudaSuccess &&
                LaunchHashPiece(d + at, n, at / 8, scratch, out, at + n == count ? count : 0, hs);
    }
  }
  *queued = true;
  // The stream goes on once the last piece is hashed (nothing after the
  // upload may write the destination before the hash read it).
  if (hash_ok) {
    hash_ok = ::cudaEventRecord(hash_events_[kHashPieces], hs) == cudaSuccess &&
              ::cudaStreamWaitEvent(stream, hash_events_[kHashPieces], 0) == cudaSuccess;
  }
  if (!hash_ok) {
    // Whatever part of the hash was queued may be left in the scratch
    // words: cleared behind it, before the slot's next hash.
    (void)::cudaGetLastError();
    ClearHashScratch(scratch, hs);
    (void)::cudaGetLastError();
    return cudaSuccess;
  }
  *hashed = true;
  return cudaSuccess;
}

cudaError_t CudaBackend::QueueSnapshotCopies(const std::vector<SnapshotCopy>& copies,
                                             uint64_t* done, uint64_t tag,
                                             const SnapshotTurns* turns) {
  Bind();
  std::vector<cudaStream_t> live;
  {
    absl::MutexLock lock(&mu_);
    if (!SnapshotCopiesValid(
            copies, done, turns, [this](const void* p, size_t n) { return DeviceAccessible(p, n); },
            [this](const void* p, size_t n) { return IsSharedHost(p, n); })) {
      return cudaErrorInvalidValue;
    }
    live.assign(streams_.begin(), streams_.end());
  }
  // A stream being captured cannot be fenced from outside its graph (nor,
  // in global mode, may the legacy stream be used): copy synchronously.
  for (cudaStream_t s : live) {
    if (IsCapturing(s)) return cudaErrorNotSupported;
  }
  live.push_back(cudaStreamLegacy);
  live.push_back(cudaStreamPerThread);
  if (snapshot_stream_ == nullptr) {
    cudaError_t e = ::cudaStreamCreateWithFlags(&snapshot_stream_, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = ::cudaEventCreateWithFlags(&snapshot_fence_event_, cudaEventDisableTiming);
    if (e == cudaSuccess) e = ::cudaEventCreateWithFlags(&snapshot_end_event_, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      REVENANT_LOG(ERROR, kLog) << "boundary snapshots: no stream or event: "
                                << ::cudaGetErrorString(e);
      return e;
    }
  }
  void* done_device = nullptr;
  if (cudaError_t e = ::cudaHostGetDevicePointer(&done_device, done, 0); e != cudaSuccess) return e;
  // After the work queued so far on every stream (a wait takes the event's
  // state at the call, so one event serves every stream in turn).
  for (cudaStream_t s : live) {
    cudaError_t e = ::cudaEventRecord(snapshot_fence_event_, s);
    if (e == cudaSuccess) e = ::cudaStreamWaitEvent(snapshot_stream_, snapshot_fence_event_, 0);
    if (e != cudaSuccess) return e;
  }
  void* filled_device = nullptr;
  void* drained_device = nullptr;
  if (turns != nullptr) {
    cudaError_t e = ::cudaHostGetDevicePointer(&filled_device, turns->filled, 0);
    if (e == cudaSuccess) {
      e = ::cudaHostGetDevicePointer(&drained_device, const_cast<uint64_t*>(turns->drained), 0);
    }
    if (e != cudaSuccess) return e;
  }
  // The device spare takes copies first (device to device), and the
  // application's streams wait only for the copies out of its memory.
  // Straight into registered files: the copies that fit go to the spare,
  // the rest to the host, and the spare drains to the host behind. Staged:
  // the last copies that fit (spare_from on) go to the spare, so that the
  // streams wait for the turns before them only; the turns after copy out
  // of the spare into the staging buffers while the application runs.
  struct Spared {
    size_t copy;
    size_t offset;
  };
  std::vector<Spared> spared;
  size_t spare_from = copies.size();
  if (snapshot_spare_mib_.value_or(1) > 0) {
    size_t live_bytes = 0;
    for (const SnapshotCopy& c : copies) live_bytes += c.count;
    EnsureSnapshotSpare(live_bytes);
  }
  auto spare_at = [](size_t used) { return (used + 255) & ~size_t{255}; };
  if (snapshot_spare_ != nullptr) {
    if (turns != nullptr) {
      for (size_t need = 0; spare_from > 0; --spare_from) {
        const size_t n = spare_at(copies[spare_from - 1].count);
        if (need + n > snapshot_spare_bytes_) break;
        need += n;
      }
    }
    // Straight: every copy that fits; staged: those from spare_from on (all fit).
    size_t used = 0;
    for (size_t c = turns != nullptr ? spare_from : 0; c < copies.size(); ++c) {
      const size_t n = copies[c].count;
      if (n == 0 || used + n > snapshot_spare_bytes_) continue;
      cudaError_t e = ::cudaMemcpyAsync(static_cast<char*>(snapshot_spare_) + used, copies[c].src,
                                        n, cudaMemcpyDeviceToDevice, snapshot_stream_);
      if (e != cudaSuccess) return e;
      spared.push_back(Spared{c, used});
      used = spare_at(used + n);
    }
  }
  // Everything queued later, on any stream, waits for the copies out of
  // the application's memory (not for the spare's drain).
  bool released = false;
  auto release = [&]() -> cudaError_t {
    released = true;
    cudaError_t e = ::cudaEventRecord(snapshot_end_event_, snapshot_stream_);
    for (cudaStream_t s : live) {
      if (e == cudaSuccess) e = ::cudaStreamWaitEvent(s, snapshot_end_event_, 0);
    }
    return e;
  };
  if (turns != nullptr && spare_from == 0) {
    if (cudaError_t e = release(); e != cudaSuccess) return e;
  }
  size_t next_spared = 0;
  // Staged: turn t's copies after the caller drained turn t - 2 (the same
  // staging buffer), then t + 1 stored for the caller's threads.
  const size_t n_turns = turns != nullptr ? turns->ends.size() : 1;
  for (size_t t = 0, c = 0; t < n_turns; ++t) {
    if (turns != nullptr && t >= 2 &&
        drv_.cuStreamWaitValue64(snapshot_stream_, reinterpret_cast<CUdeviceptr>(drained_device),
                                 t - 1, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS) {
      return cudaErrorUnknown;
    }
    const size_t end = turns != nullptr ? turns->ends[t] : copies.size();
    for (; c < end; ++c) {
      const void* src = copies[c].src;
      if (copies[c].count != 0 && next_spared < spared.size() && spared[next_spared].copy == c) {
        src = static_cast<const char*>(snapshot_spare_) + spared[next_spared++].offset;
        // Straight into the file: drained below, after the release.
        if (turns == nullptr) continue;
      }
      if (copies[c].count != 0) {
        cudaError_t e = ::cudaMemcpyAsync(copies[c].dst, src, copies[c].count,
                                          cudaMemcpyDeviceToHost, snapshot_stream_);
        if (e != cudaSuccess) return e;
      }
      if (turns != nullptr && c + 1 == spare_from) {
        if (cudaError_t e = release(); e != cudaSuccess) return e;
      }
    }
    if (turns != nullptr &&
        drv_.cuStreamWriteValue64(snapshot_stream_, reinterpret_cast<CUdeviceptr>(filled_device),
                                  t + 1, 0) != CUDA_SUCCESS) {
      return cudaErrorUnknown;
    }
  }
  if (!released) {
    if (cudaError_t e = release(); e != cudaSuccess) return e;
  }
  cudaError_t e = cudaSuccess;
  if (turns == nullptr) {
    for (const Spared& sp : spared) {
      e = ::cudaMemcpyAsync(copies[sp.copy].dst, static_cast<char*>(snapshot_spare_) + sp.offset,
                            copies[sp.copy].count, cudaMemcpyDeviceToHost, snapshot_stream_);
      if (e != cudaSuccess) return e;
    }
  }
  if (!spared.empty()) {
    // The application's device synchronization waits for its own streams
    // until this is reached (SpareDraining).
    if (snapshot_drained_event_ == nullptr) {
      e = ::cudaEventCreateWithFlags(&snapshot_drained_event_, cudaEventDisableTiming);
      if (e != cudaSuccess) {
        snapshot_drained_event_ = nullptr;
        return e;
      }
    }
    if (e = ::cudaEventRecord(snapshot_drained_event_, snapshot_stream_); e != cudaSuccess) return e;
  }
  if (drv_.cuStreamWriteValue64(snapshot_stream_, reinterpret_cast<CUdeviceptr>(done_device), tag,
                                0) != CUDA_SUCCESS) {
    return cudaErrorUnknown;
  }
  return cudaSuccess;
}

void CudaBackend::EnsureSnapshotSpare(size_t live_bytes) {
  if (snapshot_spare_tried_ || snapshot_spare_given_back_) return;
  snapshot_spare_tried_ = true;
  size_t cap = snapshot_spare_mib_.has_value() ? static_cast<size_t>(*snapshot_spare_mib_) << 20
                                                : kDefaultSpareCap;
  if (!snapshot_spare_mib_.has_value()) {
    size_t free_bytes = 0, total = 0;
    if (::cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
      (void)::cudaGetLastError();
      total = 0;
    }
    cap = std::min(cap, (total / 100) & ~size_t{(2u << 20) - 1});
  }
  const size_t want = std::min(cap, (live_bytes + (2u << 20) - 1) & ~size_t{(2u << 20) - 1});
  if (want == 0) return;
  if (cudaError_t e = ::cudaMalloc(&snapshot_spare_, want); e != cudaSuccess) {
    (void)::cudaGetLastError();
    snapshot_spare_ = nullptr;
    REVENANT_LOG(WARNING, kLog) << "asynchronous snapshots: no device spare of " << (want >> 20)
                                << " MiB (REVENANT_SNAPSHOT_DEVICE_SPARE_MIB): "
                                << ::cudaGetErrorString(e)
                                << "; the application's streams wait for the copies to the host";
    return;
  }
  snapshot_spare_bytes_ = want;
  REVENANT_LOG(INFO, kLog) << "asynchronous snapshots: a device spare of " << (want >> 20)
                           << " MiB (of " << ((live_bytes + (1u << 20) - 1) >> 20)
                           << " MiB live) takes the copies first";
}

cudaError_t CudaBackend::SynchronizeApplicationStreams() {
  // Every stream the application's work may be on: those it made, the
  // legacy and per-thread streams, the held launches' and the captured
  // uploads' (the snapshot copies out of its memory end before any of them
  // goes on: they wait for snapshot_end_event_).
  std::vector<cudaStream_t> streams;
  {
    absl::MutexLock lock(&mu_);
    streams.assign(streams_.begin(), streams_.end());
  }
  streams.push_back(cudaStreamLegacy);
  streams.push_back(cudaStreamPerThread);
  if (held_stream_ != nullptr) streams.push_back(reinterpret_cast<cudaStream_t>(held_stream_));
  if (capture_stream_ != nullptr) streams.push_back(capture_stream_);
  cudaError_t first = cudaSuccess;
  for (cudaStream_t s : streams) {
    const cudaError_t e = ::cudaStreamSynchronize(s);
    if (first == cudaSuccess && e != cudaSuccess) first = e;
  }
  return first;
}

bool CudaBackend::GiveBackSnapshotSpare() {
  if (snapshot_spare_ == nullptr || snapshot_spare_given_back_) return false;
  snapshot_spare_given_back_ = true;
  // Its last drain must be over before the memory goes.
  (void)::cudaStreamSynchronize(snapshot_stream_);
  ::cudaFree(snapshot_spare_);
  REVENANT_LOG(WARNING, kLog) << "asynchronous snapshots: the device spare of "
                              << (snapshot_spare_bytes_ >> 20)
                              << " MiB given back for an allocation of the application; the "
                                 "streams wait for the copies to the host from now on";
  snapshot_spare_ = nullptr;
  snapshot_spare_bytes_ = 0;
  return true;
}

cudaError_t CudaBackend::RegisterSharedHost(void* addr, size_t size, unsigned int) {
  if (addr == nullptr || size == 0 || InDeviceRange(addr)) return cudaErrorInvalidValue;
  Bind();
  {
    absl::MutexLock lock(&mu_);
    const uint64_t a = Addr(addr);
    auto next = shared_host_.lower_bound(a);
    if (next != shared_host_.end() && next->first < a + size) {
      return cudaErrorHostMemoryAlreadyRegistered;
    }
    if (next != shared_host_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second > a) return cudaErrorHostMemoryAlreadyRegistered;
    }
  }
  // Fault every page in writable before pinning it: the application's file
  // is usually fresh (holes), and the pinned pages must be the very pages
  // the application writes afterwards. MADV_POPULATE_WRITE (Linux 5.14)
  // leaves the contents alone, on several threads for a large range (about
  // twice as fast as cudaHostRegister faulting them on one; already
  // resident pages cost a walk); older kernels just skip this.
  (void)PopulateWritable(addr, size);
  cudaError_t e =
      ::cudaHostRegister(addr, size, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (e != cudaSuccess) return e;
  absl::MutexLock lock(&mu_);
  shared_host_[Addr(addr)] = size;
  return cudaSuccess;
}

cudaError_t CudaBackend::UnregisterSharedHost(void* addr) {
  Bind();
  {
    absl::MutexLock lock(&mu_);
    auto it = shared_host_.find(Addr(addr));
    if (it == shared_host_.end()) return cudaErrorHostMemoryNotRegistered;
    shared_host_.erase(it);
  }
  return ::cudaHostUnregister(addr);
}

cudaError_t CudaBackend::EnqueueHostCallback(cudaStream_t stream, std::function<void()> fn) {
  if (!fn) return cudaErrorInvalidValue;
  Bind();
  auto* heap = new std::function<void()>(std::move(fn));
  cudaError_t e = ::cudaLaunchHostFunc(stream, HostFuncTrampoline, heap);
  if (e != cudaSuccess) delete heap;
  return e;
}

// --- Synchronization -------------------------------------------------------------------

cudaError_t CudaBackend::cudaDeviceSynchronize() { return DeviceSynchronize(/*whole=*/false); }

cudaError_t CudaBackend::DeviceSynchronize(bool whole) {
  Bind();
  CudaNccl::SyncScope sync(nccl_.get());
  cudaError_t e = Settled(sync, !whole && SpareDraining() ? SynchronizeApplicationStreams()
                                                          : ::cudaDeviceSynchronize());
  ReleasePendingFrees(nullptr, /*all=*/true);
  return e;
}

cudaError_t CudaBackend::cudaStreamSynchronize(cudaStream_t stream) {
  Bind();
  CudaNccl::SyncScope sync(nccl_.get());
  cudaError_t e = Settled(sync, ::cudaStreamSynchronize(stream));
  if (e == cudaSuccess) ReleasePendingFrees(stream, /*all=*/false);
  return e;
}

// --- Modules and launches ----------------------------------------------------------------

absl::Status CudaBackend::LoadModule(uint64_t module_key, absl::string_view image) {
  Bind();
  absl::MutexLock lock(&mu_);
  if (modules_.contains(module_key)) return absl::OkStatus();
  if (image.size() < 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("module ", module_key, ": no fat binary image (", image.size(), " bytes)"));
  }
  Module m;
  m.image.assign(image.data(), image.size());  // aligned, and alive as long as the module
  // nvcc's modules are fat binaries; the application's own (cuModuleLoadData
  // through the driver API: run-time compiled cubins or PTX) load as such.
  uint32_t magic = 0;
  std::memcpy(&magic, m.image.data(), sizeof(magic));
  const bool fatbin = magic == 0xBA55ED50u;
  CUresult r = fatbin ? drv_.cuModuleLoadFatBinary(&m.module, m.image.data())
                      : drv_.cuModuleLoadData(&m.module, m.image.data());
  if (r != CUDA_SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat(fatbin ? "cuModuleLoadFatBinary" : "cuModuleLoadData",
                                                   " of module ", module_key,
                                                   " (", image.size(), " bytes): driver error ",
                                                   static_cast<int>(r)));
  }
  modules_.emplace(module_key, std::move(m));
  return absl::OkStatus();
}

absl::StatusOr<KernelInfo> CudaBackend::GetKernel(uint64_t module_key,
                                                  const std::string& mangled_name) {
  Bind();
  absl::MutexLock lock(&mu_);
  auto it = modules_.find(module_key);
  if (it == modules_.end()) {
    return absl::NotFoundError(absl::StrCat("module ", module_key, " is not loaded"));
  }
  CUfunction f = nullptr;
  CUresult r = drv_.cuModuleGetFunction(&f, it->second.module, mangled_name.c_str());
  if (r != CUDA_SUCCESS) {
    return absl::NotFoundError(absl::StrCat("kernel ", mangled_name, " is not in module ",
                                            module_key, " (driver error ", static_cast<int>(r),
                                            ")"));
  }
  KernelInfo info;
  info.handle = f;
  for (size_t i = 0;; ++i) {
    size_t offset = 0, size = 0;
    if (drv_.cuFuncGetParamInfo(f, i, &offset, &size) != CUDA_SUCCESS) break;
    info.params.push_back({static_cast<uint32_t>(offset), static_cast<uint32_t>(size)});
    info.args_size = std::max<uint32_t>(info.args_size, static_cast<uint32_t>(offset + size));
  }
  kernels_.insert(f);
  return info;
}

cudaError_t CudaBackend::LaunchKernel(const KernelInfo& kernel, dim3 grid, dim3 block,
                                      size_t shared_bytes, cudaStream_t stream,
                                      const void* packed_args, bool cooperative) {
  Bind();
  // Held launches go first; their error is this call's unless it has its own.
  const int32_t held_error = FlushLaunches();
  const cudaError_t e =
      LaunchNow(kernel, grid, block, shared_bytes, stream, packed_args, cooperative);
  return e != cudaSuccess ? e : static_cast<cudaError_t>(held_error);
}

cudaError_t CudaBackend::LaunchNow(const KernelInfo& kernel, dim3 grid, dim3 block,
                                   size_t shared_bytes, cudaStream_t stream,
                                   const void* packed_args, bool cooperative) {
  GateStream(stream);
  {
    absl::MutexLock lock(&mu_);
    if (!KnownKernel(kernel.handle)) return cudaErrorInvalidDeviceFunction;
  }
  if (!kernel.params.empty() && packed_args == nullptr) return cudaErrorInvalidValue;
  // The driver copies the parameters during the call: pointers into the
  // packed buffer (valid during this call) are enough.
  constexpr size_t kInline = 64;
  void* inline_params[kInline];
  std::vector<void*> heap_params;
  void** params = inline_params;
  if (kernel.params.size() > kInline) {
    heap_params.resize(kernel.params.size());
    params = heap_params.data();
  }
  KernelParamPointers(kernel, packed_args, params);
  auto f = static_cast<CUfunction>(const_cast<void*>(kernel.handle));
  auto s = reinterpret_cast<CUstream>(stream);
  const auto smem = static_cast<unsigned int>(shared_bytes);
  if (shared_bytes > 0xffffffffull) return cudaErrorInvalidValue;
  CUresult r =
      cooperative
          ? drv_.cuLaunchCooperativeKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                           smem, s, kernel.params.empty() ? nullptr : params)
          : drv_.cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem, s,
                                kernel.params.empty() ? nullptr : params, nullptr);
  // A refused launch is reported by its return value only; make sure the
  // runtime of this thread does not hand it out again with a later call.
  if (r != CUDA_SUCCESS) (void)::cudaGetLastError();
  return FromCu(r);
}

cudaError_t CudaBackend::LaunchKernelEx(const KernelInfo& kernel, dim3 grid, dim3 block,
                                        size_t shared_bytes, cudaStream_t stream,
                                        const void* packed_args,
                                        const std::vector<cudaLaunchAttribute>& attrs) {
  Bind();
  const int32_t held_error = FlushLaunches();
  const cudaError_t e = LaunchExNow(kernel, grid, block, shared_bytes, stream, packed_args, attrs);
  return e != cudaSuccess ? e : static_cast<cudaError_t>(held_error);
}

cudaError_t CudaBackend::LaunchExNow(const KernelInfo& kernel, dim3 grid, dim3 block,
                                     size_t shared_bytes, cudaStream_t stream,
                                     const void* packed_args,
                                     const std::vector<cudaLaunchAttribute>& attrs) {
  static_assert(sizeof(cudaLaunchAttribute) == sizeof(CUlaunchAttribute),
                "the runtime's and the driver's launch attributes share their layout");
  Bind();
  GateStream(stream);
  {
    absl::MutexLock lock(&mu_);
    if (!KnownKernel(kernel.handle)) return cudaErrorInvalidDeviceFunction;
  }
  if (!kernel.params.empty() && packed_args == nullptr) return cudaErrorInvalidValue;
  if (shared_bytes > 0xffffffffull) return cudaErrorInvalidValue;
  std::vector<void*> params(kernel.params.size());
  KernelParamPointers(kernel, packed_args, params.data());
  // Attribute ids and values are the driver's (cudaLaunchAttributeID mirrors
  // CUlaunchAttributeID; cudaEvent_t is a CUevent).
  std::vector<CUlaunchAttribute> cu(attrs.size());
  if (!attrs.empty()) std::memcpy(cu.data(), attrs.data(), attrs.size() * sizeof(CUlaunchAttribute));
  CUlaunchConfig cfg = {};
  cfg.gridDimX = grid.x;
  cfg.gridDimY = grid.y;
  cfg.gridDimZ = grid.z;
  cfg.blockDimX = block.x;
  cfg.blockDimY = block.y;
  cfg.blockDimZ = block.z;
  cfg.sharedMemBytes = static_cast<unsigned int>(shared_bytes);
  cfg.hStream = reinterpret_cast<CUstream>(stream);
  cfg.attrs = cu.empty() ? nullptr : cu.data();
  cfg.numAttrs = static_cast<unsigned int>(cu.size());
  CUresult r = drv_.cuLaunchKernelEx(&cfg, static_cast<CUfunction>(const_cast<void*>(kernel.handle)),
                                     params.empty() ? nullptr : params.data(), nullptr);
  if (r != CUDA_SUCCESS) (void)::cudaGetLastError();
  return FromCu(r);
}

absl::StatusOr<Backend::Symbol> CudaBackend::GetSymbol(uint64_t module_key,
                                                       const std::string& name) {
  Bind();
  absl::MutexLock lock(&mu_);
  auto it = modules_.find(module_key);
  if (it == modules_.end()) {
    return absl::NotFoundError(absl::StrCat("module ", module_key, " is not loaded"));
  }
  CUdeviceptr dptr = 0;
  size_t bytes = 0;
  CUresult r = drv_.cuModuleGetGlobal(&dptr, &bytes, it->second.module, name.c_str());
  if (r != CUDA_SUCCESS) {
    return absl::NotFoundError(absl::StrCat("device variable ", name, " is not in module ",
                                            module_key, " (driver error ", static_cast<int>(r),
                                            ")"));
  }
  symbols_[dptr] = bytes;
  Symbol sym;
  sym.address = reinterpret_cast<void*>(dptr);
  sym.size = bytes;
  return sym;
}

// --- Graphs built node by node --------------------------------------------------------------

// Held launches (LaunchKernelMayHold). A launch is held only while the
// executor has further requests in hand, so nothing stays held while it
// waits for the application: the next request either joins the batch (a
// plain launch on the same stream) or the executor flushes it first.
cudaError_t CudaBackend::LaunchKernelMayHold(const KernelInfo& kernel, dim3 grid, dim3 block,
                                             size_t shared_bytes, cudaStream_t stream,
                                             const void* packed_args, bool more_requests) {
  Bind();
  const auto s = reinterpret_cast<CUstream>(stream);
  if (launch_batch_max_ < 2 || shared_bytes > 0xffffffffull ||
      (!more_requests && held_.empty())) {
    return LaunchKernel(kernel, grid, block, shared_bytes, stream, packed_args, false);
  }
  int32_t held_error = 0;
  if (!held_.empty() && s != held_stream_) held_error = FlushLaunches();
  if (held_.empty()) {
    // A capturing stream records launches into the application's graph: a
    // graph launch there would not be what it asked for.
    CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!more_requests || drv_.cuStreamIsCapturing(s, &capturing) != CUDA_SUCCESS ||
        capturing != CU_STREAM_CAPTURE_STATUS_NONE) {
      const cudaError_t e =
          LaunchNow(kernel, grid, block, shared_bytes, stream, packed_args, false);
      return e != cudaSuccess ? e : static_cast<cudaError_t>(held_error);
    }
  }
  GateStream(stream);
  {
    absl::MutexLock lock(&mu_);
    if (!KnownKernel(kernel.handle)) {
      if (held_error == 0) held_error = FlushLaunches();
      return cudaErrorInvalidDeviceFunction;
    }
  }
  if (!kernel.params.empty() && packed_args == nullptr) {
    if (held_error == 0) held_error = FlushLaunches();
    return cudaErrorInvalidValue;
  }
  HeldLaunch h;
  h.kernel = &kernel;
  h.grid = grid;
  h.block = block;
  h.shared_bytes = static_cast<unsigned int>(shared_bytes);
  h.args = held_args_.size();
  if (kernel.args_size > 0) {
    const char* a = static_cast<const char*>(packed_args);
    held_args_.insert(held_args_.end(), a, a + kernel.args_size);
  }
  held_.push_back(h);
  held_stream_ = s;
  if (!more_requests || static_cast<int>(held_.size()) >= launch_batch_max_) {
    const int32_t e = FlushLaunches();
    if (held_error == 0) held_error = e;
  }
  return static_cast<cudaError_t>(held_error);
}

int32_t CudaBackend::FlushLaunches() {
  if (held_.empty()) return 0;
  Bind();
  const size_t n = held_.size();
  // The driver copies the parameters when a node is added or updated and a
  // launch when it is made: pointers into held_args_ are enough.
  size_t params = 0;
  for (const HeldLaunch& h : held_) params += h.kernel->params.size();
  std::vector<void*> pointers(params);
  std::vector<CUDA_KERNEL_NODE_PARAMS> kps(n);
  size_t next = 0;
  for (size_t i = 0; i < n; ++i) {
    const HeldLaunch& h = held_[i];
    kps[i] = DriverKernelParams(*h.kernel, h.grid, h.block, h.shared_bytes,
                                held_args_.data() + h.args, pointers.data() + next);
    next += h.kernel->params.size();
  }
  cudaError_t e = n >= 2 ? IssueHeldAsGraph(kps) : cudaErrorNotSupported;
  if (n >= 2 && e == cudaSuccess) {
    ++held_batches_;
    held_launches_ += n;
  } else {
    // One launch, or a batch the graph could not take (a launch the driver
    // refuses, a kernel a node cannot update to): each launch on its own,
    // which gives each its own error, as natively.
    if (n >= 2) ++held_fallbacks_;
    e = cudaSuccess;
    for (size_t i = 0; i < n; ++i) {
      const CUDA_KERNEL_NODE_PARAMS& kp = kps[i];
      const CUresult r = drv_.cuLaunchKernel(kp.func, kp.gridDimX, kp.gridDimY, kp.gridDimZ,
                                             kp.blockDimX, kp.blockDimY, kp.blockDimZ,
                                             kp.sharedMemBytes, held_stream_, kp.kernelParams,
                                             nullptr);
      if (r != CUDA_SUCCESS && e == cudaSuccess) e = FromCu(r);
    }
  }
  if (e != cudaSuccess) {
    (void)::cudaGetLastError();
    REVENANT_LOG(DEBUG, kLog) << "a held launch failed with " << static_cast<int>(e);
  }
  held_.clear();
  held_args_.clear();
  held_stream_ = nullptr;
  return e;
}

cudaError_t CudaBackend::IssueHeldAsGraph(const std::vector<CUDA_KERNEL_NODE_PARAMS>& kps) {
  const size_t n = kps.size();
  if (launch_graphs_.size() < n - 1) launch_graphs_.resize(n - 1);
  LaunchGraph& g = launch_graphs_[n - 2];
  bool ready = g.exec != nullptr;
  for (size_t i = 0; ready && i < n; ++i) {
    ready = drv_.cuGraphExecKernelNodeSetParams(g.exec, g.nodes[i], &kps[i]) == CUDA_SUCCESS;
  }
  if (!ready) {
    // First use of this size, or an update the executable cannot take: a
    // new chain from this batch.
    DestroyLaunchGraph(&g);
    if (drv_.cuGraphCreate(&g.graph, 0) != CUDA_SUCCESS) {
      g.graph = nullptr;
      return cudaErrorNotSupported;
    }
    g.nodes.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (drv_.cuGraphAddKernelNode(&g.nodes[i], g.graph, i == 0 ? nullptr : &g.nodes[i - 1],
                                    i == 0 ? 0 : 1, &kps[i]) != CUDA_SUCCESS) {
        DestroyLaunchGraph(&g);
        return cudaErrorNotSupported;
      }
    }
    if (drv_.cuGraphInstantiateWithFlags(&g.exec, g.graph, 0) != CUDA_SUCCESS) {
      g.exec = nullptr;
      DestroyLaunchGraph(&g);
      return cudaErrorNotSupported;
    }
  }
  if (drv_.cuGraphLaunch(g.exec, held_stream_) != CUDA_SUCCESS) {
    DestroyLaunchGraph(&g);
    return cudaErrorNotSupported;
  }
  return cudaSuccess;
}

void CudaBackend::DestroyLaunchGraph(LaunchGraph* g) {
  if (g->exec != nullptr) (void)drv_.cuGraphExecDestroy(g->exec);
  if (g->graph != nullptr) (void)drv_.cuGraphDestroy(g->graph);
  (void)::cudaGetLastError();
  *g = LaunchGraph{};
}

cudaError_t CudaBackend::KernelNodeParams(const KernelInfo& kernel, dim3 grid, dim3 block,
                                          size_t shared_bytes, const void* packed_args,
                                          std::vector<void*>* params,
                                          CUDA_KERNEL_NODE_PARAMS* kp) {
  Bind();
  {
    absl::MutexLock lock(&mu_);
    if (!KnownKernel(kernel.handle)) return cudaErrorInvalidDeviceFunction;
  }
  if (!kernel.params.empty() && packed_args == nullptr) return cudaErrorInvalidValue;
  if (shared_bytes > 0xffffffffull) return cudaErrorInvalidValue;
  params->resize(kernel.params.size());
  *kp = DriverKernelParams(kernel, grid, block, shared_bytes, packed_args, params->data());
  return cudaSuccess;
}

cudaError_t CudaBackend::AddKernelNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                       const std::vector<cudaGraphNode_t>& deps,
                                       const KernelInfo& kernel, dim3 grid, dim3 block,
                                       size_t shared_bytes, const void* packed_args) {
  std::vector<void*> params;
  CUDA_KERNEL_NODE_PARAMS kp;
  if (cudaError_t e = KernelNodeParams(kernel, grid, block, shared_bytes, packed_args, &params, &kp);
      e != cudaSuccess) {
    return e;
  }
  CUgraphNode n = nullptr;
  CUresult r = drv_.cuGraphAddKernelNode(&n, reinterpret_cast<CUgraph>(graph),
                                         reinterpret_cast<const CUgraphNode*>(deps.data()),
                                         deps.size(), &kp);
  if (r != CUDA_SUCCESS) return FromCu(r);
  *node = reinterpret_cast<cudaGraphNode_t>(n);
  return cudaSuccess;
}

cudaError_t CudaBackend::ExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                 const KernelInfo& kernel, dim3 grid, dim3 block,
                                                 size_t shared_bytes, const void* packed_args) {
  std::vector<void*> params;
  CUDA_KERNEL_NODE_PARAMS kp;
  if (cudaError_t e = KernelNodeParams(kernel, grid, block, shared_bytes, packed_args, &params, &kp);
      e != cudaSuccess) {
    return e;
  }
  return FromCu(drv_.cuGraphExecKernelNodeSetParams(reinterpret_cast<CUgraphExec>(exec),
                                                    reinterpret_cast<CUgraphNode>(node), &kp));
}

cudaError_t CudaBackend::AddMemsetNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                       const std::vector<cudaGraphNode_t>& deps,
                                       const cudaMemsetParams& p) {
  Bind();
  if (p.width == 0 || p.height == 0 || (p.elementSize != 1 && p.elementSize != 2 &&
                                        p.elementSize != 4)) {
    return cudaErrorInvalidValue;
  }
  const size_t row = p.width * p.elementSize;
  const size_t pitch = p.height > 1 ? p.pitch : row;
  if (pitch < row) return cudaErrorInvalidValue;
  {
    absl::MutexLock lock(&mu_);
    if (!DeviceAccessible(p.dst, pitch * (p.height - 1) + row)) return cudaErrorInvalidValue;
  }
  return ::cudaGraphAddMemsetNode(node, graph, deps.data(), deps.size(), &p);
}

cudaError_t CudaBackend::AddMemcpyNode1D(cudaGraphNode_t* node, cudaGraph_t graph,
                                         const std::vector<cudaGraphNode_t>& deps, void* dst,
                                         const void* src, size_t count, cudaMemcpyKind kind) {
  Bind();
  if (count == 0 || dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  {
    // Both sides stay valid for every launch: device memory or shared host memory.
    absl::MutexLock lock(&mu_);
    if (!DeviceAccessible(dst, count) || !DeviceAccessible(src, count)) {
      return cudaErrorInvalidValue;
    }
  }
  return ::cudaGraphAddMemcpyNode1D(node, graph, deps.data(), deps.size(), dst, src, count, kind);
}

cudaError_t CudaBackend::AddHostNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                     const std::vector<cudaGraphNode_t>& deps,
                                     std::function<void()> fn) {
  if (!fn) return cudaErrorInvalidValue;
  Bind();
  auto heap = std::make_unique<std::function<void()>>(std::move(fn));
  cudaHostNodeParams hp = {};
  hp.fn = HostNodeTrampoline;
  hp.userData = heap.get();
  cudaError_t e = ::cudaGraphAddHostNode(node, graph, deps.data(), deps.size(), &hp);
  if (e == cudaSuccess) {
    absl::MutexLock lock(&mu_);
    host_node_fns_.push_back(std::move(heap));
  }
  return e;
}

cudaError_t CudaBackend::AddMemAllocNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                         const std::vector<cudaGraphNode_t>& deps,
                                         size_t bytesize, void** dptr) {
  if (node == nullptr || dptr == nullptr || bytesize == 0) return cudaErrorInvalidValue;
  Bind();
  void* p = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (!graphs_.contains(graph)) return cudaErrorInvalidValue;
    // From the fixed range, now: the same sequence of calls gives the same
    // address in a replacement agent, and copies and memsets accept it.
    if (cudaError_t e = AllocateLocked(&p, bytesize); e != cudaSuccess) return e;
  }
  cudaError_t e = ::cudaGraphAddEmptyNode(node, graph, deps.data(), deps.size());
  absl::MutexLock lock(&mu_);
  if (e != cudaSuccess) {
    (void)allocator_.Free(Addr(p));  // never handed out
    return e;
  }
  graph_memory_[graph].push_back(Addr(p));
  graph_memory_refs_[Addr(p)] = 1;
  *dptr = p;
  return cudaSuccess;
}

cudaError_t CudaBackend::AddChildGraphNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                           const std::vector<cudaGraphNode_t>& deps,
                                           cudaGraph_t child) {
  Bind();
  {
    absl::MutexLock lock(&mu_);
    // The runtime would clone our alloc and free nodes as the empty nodes
    // they are, the memory staying with `child`: refused as CUDA refuses
    // cloning memory nodes.
    auto held = graph_memory_.find(child);
    if (held != graph_memory_.end() && !held->second.empty()) return cudaErrorInvalidValue;
  }
  return ::cudaGraphAddChildGraphNode(node, graph, deps.data(), deps.size(), child);
}

cudaError_t CudaBackend::AddMemFreeNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                        const std::vector<cudaGraphNode_t>& deps, void* dptr) {
  if (node == nullptr) return cudaErrorInvalidValue;
  Bind();
  {
    absl::MutexLock lock(&mu_);
    // Only graph memory (of this or another graph) may be freed by a node.
    if (!graph_memory_refs_.contains(Addr(dptr))) return cudaErrorInvalidValue;
  }
  return ::cudaGraphAddEmptyNode(node, graph, deps.data(), deps.size());
}

template <typename H>
void CudaBackend::ShareGraphMemory(cudaGraph_t from, GraphMemory<H>* map, H to) {
  absl::MutexLock lock(&mu_);
  auto it = graph_memory_.find(from);
  if (it == graph_memory_.end() || it->second.empty()) return;
  // A copy: inserting `to` may rehash `map`, which is graph_memory_ itself
  // for a clone, and invalidate `it`.
  const std::vector<uint64_t> from_held = it->second;
  std::vector<uint64_t>& held = (*map)[to];
  for (uint64_t a : from_held) {
    auto ref = graph_memory_refs_.find(a);
    if (ref == graph_memory_refs_.end()) continue;
    ++ref->second;
    held.push_back(a);
  }
}

template <typename H>
void CudaBackend::ReleaseGraphMemory(GraphMemory<H>* map, H holder) {
  absl::MutexLock lock(&mu_);
  auto it = map->find(holder);
  if (it == map->end()) return;
  for (uint64_t a : it->second) {
    auto ref = graph_memory_refs_.find(a);
    if (ref == graph_memory_refs_.end() || --ref->second > 0) continue;
    graph_memory_refs_.erase(ref);
    // A launch of an executable holding it may still run on any stream.
    pending_frees_.push_back(PendingFree{a, nullptr, /*device_wide=*/true});
  }
  map->erase(it);
}

void CudaBackend::ForgetGraphMemoryLocked(uint64_t addr) {
  if (graph_memory_refs_.erase(addr) == 0) return;
  auto drop = [addr](auto* map) {
    for (auto& [holder, held] : *map) {
      held.erase(std::remove(held.begin(), held.end(), addr), held.end());
    }
  };
  drop(&graph_memory_);
  drop(&exec_memory_);
}

cudaError_t CudaBackend::GraphGetNodes(cudaGraph_t graph, std::vector<cudaGraphNode_t>* nodes) {
  Bind();
  size_t n = 0;
  cudaError_t e = ::cudaGraphGetNodes(graph, nullptr, &n);
  if (e != cudaSuccess) return e;
  nodes->assign(n, nullptr);
  if (n == 0) return cudaSuccess;
  e = ::cudaGraphGetNodes(graph, nodes->data(), &n);
  nodes->resize(n);
  return e;
}

cudaError_t CudaBackend::GetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                        unsigned long long* id, cudaGraph_t* graph,
                                        std::vector<cudaGraphNode_t>* deps) {
  Bind();
  const cudaGraphNode_t* d = nullptr;
  size_t n = 0;
  cudaError_t e = ::cudaStreamGetCaptureInfo(stream, status, id, graph, &d, nullptr, &n);
  if (e != cudaSuccess) return e;
  if (deps != nullptr) deps->assign(d, d == nullptr ? d : d + n);
  return cudaSuccess;
}

cudaError_t CudaBackend::cudaFuncGetAttributes(struct cudaFuncAttributes* attr,
                                               const void* func) {
  if (attr == nullptr) return cudaErrorInvalidValue;
  Bind();
  {
    absl::MutexLock lock(&mu_);
    if (!KnownKernel(func)) return cudaErrorInvalidDeviceFunction;
  }
  auto f = static_cast<CUfunction>(const_cast<void*>(func));
  *attr = cudaFuncAttributes{};
  int v = 0;
  auto get = [&](CUfunction_attribute a, auto* field) -> CUresult {
    CUresult r = drv_.cuFuncGetAttribute(&v, a, f);
    if (r == CUDA_SUCCESS) *field = static_cast<std::remove_pointer_t<decltype(field)>>(v);
    return r;
  };
  CUresult r = get(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &attr->sharedSizeBytes);
  if (r == CUDA_SUCCESS) r = get(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, &attr->constSizeBytes);
  if (r == CUDA_SUCCESS) r = get(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, &attr->localSizeBytes);
  if (r == CUDA_SUCCESS)
    r = get(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &attr->maxThreadsPerBlock);
  if (r == CUDA_SUCCESS) r = get(CU_FUNC_ATTRIBUTE_NUM_REGS, &attr->numRegs);
  if (r == CUDA_SUCCESS) r = get(CU_FUNC_ATTRIBUTE_PTX_VERSION, &attr->ptxVersion);
  if (r == CUDA_SUCCESS) r = get(CU_FUNC_ATTRIBUTE_BINARY_VERSION, &attr->binaryVersion);
  if (r == CUDA_SUCCESS) r = get(CU_FUNC_ATTRIBUTE_CACHE_MODE_CA, &attr->cacheModeCA);
  if (r == CUDA_SUCCESS)
    r = get(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, &attr->maxDynamicSharedSizeBytes);
  if (r == CUDA_SUCCESS)
    r = get(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, &attr->preferredShmemCarveout);
  return FromCu(r);
}

cudaError_t CudaBackend::cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr,
                                              int value) {
  Bind();
  {
    absl::MutexLock lock(&mu_);
    if (!KnownKernel(func)) return cudaErrorInvalidDeviceFunction;
  }
  // cudaFuncAttribute and CUfunction_attribute number the settable
  // attributes alike (max dynamic shared memory = 8 ... cluster scheduling
  // policy = 15).
  if (attr < cudaFuncAttributeMaxDynamicSharedMemorySize || attr >= cudaFuncAttributeMax) {
    return cudaErrorInvalidValue;
  }
  return FromCu(drv_.cuFuncSetAttribute(static_cast<CUfunction>(const_cast<void*>(func)),
                                        static_cast<CUfunction_attribute>(attr), value));
}

cudaError_t CudaBackend::cudaFuncSetCacheConfig(const void* func, enum cudaFuncCache config) {
  Bind();
  {
    absl::MutexLock lock(&mu_);
    if (!KnownKernel(func)) return cudaErrorInvalidDeviceFunction;
  }
  // cudaFuncCache and CUfunc_cache number the preferences alike.
  return FromCu(drv_.cuFuncSetCacheConfig(static_cast<CUfunction>(const_cast<void*>(func)),
                                          static_cast<CUfunc_cache>(config)));
}

cudaError_t CudaBackend::cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int* num_blocks, const void* func, int block_size, size_t dynamic_smem, unsigned int flags) {
  if (num_blocks == nullptr) return cudaErrorInvalidValue;
  Bind();
  {
    absl::MutexLock lock(&mu_);
    if (!KnownKernel(func)) return cudaErrorInvalidDeviceFunction;
  }
  return FromCu(drv_.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
      num_blocks, static_cast<CUfunction>(const_cast<void*>(func)), block_size, dynamic_smem,
      flags));
}

// --- Reset ---------------------------------------------------------------------------------

cudaError_t CudaBackend::Reset() {
  Bind();
  (void)FlushLaunches();
  ::cudaDeviceSynchronize();
  for (LaunchGraph& g : launch_graphs_) DestroyLaunchGraph(&g);
  launch_graphs_.clear();
  absl::MutexLock lock(&mu_);
  for (cudaGraphExec_t x : execs_) ::cudaGraphExecDestroy(x);
  execs_.clear();
  for (cudaGraph_t g : graphs_) ::cudaGraphDestroy(g);
  graphs_.clear();
  host_node_fns_.clear();
  graph_memory_.clear();
  exec_memory_.clear();
  graph_memory_refs_.clear();
  for (cudaEvent_t ev : events_) ::cudaEventDestroy(ev);
  events_.clear();
  for (cudaStream_t s : streams_) ::cudaStreamDestroy(s);
  streams_.clear();
  {
    // The hash streams of the streams just destroyed (and of the legacy
    // ones: made again on the next held upload).
    absl::MutexLock hash_lock(&hash_mu_);
    for (auto& [app, hs] : hash_streams_) ::cudaStreamDestroy(hs);
    hash_streams_.clear();
  }
  kernels_.clear();
  symbols_.clear();
  for (auto& [key, m] : modules_) drv_.cuModuleUnload(m.module);
  modules_.clear();
  pending_frees_.clear();
  allocator_.Clear();
  // Physical memory goes back; the reservation (and so the addresses) stays.
  UnmapAllLocked();
  // Shared host ranges stay: the agent owns those mappings and unregisters
  // them itself.
  (void)::cudaGetLastError();
  return cudaSuccess;
}

}  // namespace
}  // namespace cuda

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const BackendOptions& options) {
  absl::StatusOr<std::unique_ptr<cuda::CudaBackend>> b = cuda::CudaBackend::Create(options);
  if (!b.ok()) return b.status();
  return std::unique_ptr<Backend>(std::move(*b));
}

}  // namespace agent
}  // namespace revenant

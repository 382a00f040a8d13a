// Backend: what executes forwarded calls on a device.
//
// Two implementations: `host` (agent/backends/host: a CPU device with CUDA
// semantics, used by CI and every test without a GPU) and `cuda` (the real
// runtime, driver and NCCL). A Backend is the generated api::BackendApi
// (one virtual per generated row, in the API's own signature, handles
// already translated to the backend's objects) plus the operations that
// hand-written hooks need: modules and launches, copies whose host side the
// agent prepared, host memory shared with the application, host callbacks.
//
//   std::unique_ptr<Backend> b = MakeHostBackend(options);
//   cudaStream_t s;  b->cudaStreamCreate(&s);
//   b->Memcpy(dst, src, n, cudaMemcpyHostToDevice, s, /*async=*/true);
//   b->cudaStreamSynchronize(s);
//
// Threading: the agent calls a Backend from one executor thread per client;
// a backend may run work on threads of its own (streams run concurrently)
// and must make the calls below safe against that work.
#ifndef REVENANT_AGENT_BACKEND_H_
#define REVENANT_AGENT_BACKEND_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "api/backend_api.h"

namespace revenant {
namespace agent {

// Where device memory lives: [base, base + size) in the agent's (and, for
// the cuda backend, the GPU's unified) address space. Fixed, so a
// replacement agent maps the same addresses and device pointers held by the
// application (also inside device data) stay valid.
struct DeviceRange {
  uint64_t base = 0;
  uint64_t size = 0;
};

struct BackendOptions {
  int rank = 0;
  int device = 0;             // GPU ordinal (cuda backend)
  // Other ranks of the job use the same GPU on purpose (cuda backend: real
  // NCCL then gets an NCCL_HOSTID per rank, cuda_nccl.h).
  bool gpu_shared = false;
  DeviceRange device_range;   // 0 = the backend's default for `rank`
  // Host kernel libraries (host backend): REVENANT_HOST_KERNELS entries.
  std::vector<std::string> host_kernel_libraries;
  // This rank's job directory (/dev/shm/revenant-<job>/rank<r>); its parent
  // holds the job's recovery epoch file.
  std::string job_dir;
  // How long a survivor whose collective failed waits for the job's next
  // recovery epoch before failing the collective; 0: no recovery.
  double recovery_timeout_s = 0;
  // A named crash point of the testing variant (--chaos_in_recovery): called
  // when this agent starts recovering a communicator as a survivor, it kills
  // the agent (a failure during recovery). Unset in revenant-agent.
  std::function<void()> crash_in_recovery;
  // Collective engine behind the NCCL rows (cuda backend): "nccl" (the real
  // libnccl) or "gloo" (Gloo staged through pinned host memory, so several
  // ranks can share one GPU). The host backend always uses Gloo.
  std::string collectives = "nccl";
  // Whether the agent journals (--journal). Without a journal nothing is
  // replayed, so collective results are not kept for a replay.
  bool journal = true;
  // The most launches the cuda backend holds back and issues as one graph
  // (--launch_graph_max; Backend::LaunchKernelMayHold); below 2: none held.
  int launch_graph_max = 64;
};

// Where a replayed request comes from (Backend::SetReplayPhase).
enum class ReplayPhase { kNone, kSetupLog, kMinibatchLog };

// One kernel as the backend knows it.
struct KernelInfo {
  const void* handle = nullptr;  // opaque backend object, passed to LaunchKernel
  struct Param {
    uint32_t offset = 0;
    uint32_t size = 0;
  };
  std::vector<Param> params;      // in declaration order
  uint32_t args_size = 0;         // bytes of a packed argument buffer
};

class Backend : public api::BackendApi {
 public:
  ~Backend() override = default;

  virtual const char* name() const = 0;
  virtual DeviceRange device_range() const = 0;

  // --- Modules and launches -------------------------------------------------
  // Loads a module image (an nvcc fat binary as registered by the
  // application; the host backend ignores the image and uses its kernel
  // libraries). `module_key` is stable across a replay.
  virtual absl::Status LoadModule(uint64_t module_key, absl::string_view image) = 0;
  // Finds a kernel of a loaded module by its mangled name. kNotFound (with a
  // message saying what to do) when the backend cannot run it.
  virtual absl::StatusOr<KernelInfo> GetKernel(uint64_t module_key,
                                               const std::string& mangled_name) = 0;
  // Enqueues a launch on `stream`. `packed_args` (args_size bytes, every
  // parameter at its offset) is only valid during the call. Returns the
  // launch's immediate error (configuration, invalid stream...).
  virtual cudaError_t LaunchKernel(const KernelInfo& kernel, dim3 grid, dim3 block,
                                   size_t shared_bytes, cudaStream_t stream,
                                   const void* packed_args, bool cooperative) = 0;

  // A plain launch (no attributes, not cooperative) that the backend may
  // hold back and issue later together with the launches after it on the
  // same stream (the cuda backend: as one CUDA graph, which costs the CPU a
  // fraction of a launch per kernel), when `more_requests`: the executor has
  // further requests in hand, so that the next one either joins the held
  // launches or issues them (FlushLaunches) before it runs. Held launches
  // are issued before any other call of the backend that launches, and
  // FlushLaunches issues them; the executor calls it before every request
  // that is not such a launch and before a boundary. Returns the launch's
  // immediate error, or the first error of held launches this call issued.
  // The default launches at once.
  virtual cudaError_t LaunchKernelMayHold(const KernelInfo& kernel, dim3 grid, dim3 block,
                                          size_t shared_bytes, cudaStream_t stream,
                                          const void* packed_args, bool more_requests) {
    (void)more_requests;
    return LaunchKernel(kernel, grid, block, shared_bytes, stream, packed_args, false);
  }
  // Issues the launches LaunchKernelMayHold held back, in their order.
  // Returns the first launch error among them (0: none): the executor keeps
  // it as the application's next deferred error, as it keeps an
  // asynchronous launch's own.
  virtual int32_t FlushLaunches() { return 0; }
  // What the backend did that the agent's exit report shows (one line; empty:
  // nothing to say).
  virtual std::string StatsAtExit() const { return std::string(); }

  // cudaLaunchKernelExC: a launch with launch attributes (event handles in
  // them already translated to the backend's). The default serves a launch
  // without attributes and refuses any attribute.
  virtual cudaError_t LaunchKernelEx(const KernelInfo& kernel, dim3 grid, dim3 block,
                                     size_t shared_bytes, cudaStream_t stream,
                                     const void* packed_args,
                                     const std::vector<cudaLaunchAttribute>& attrs) {
    if (!attrs.empty()) return cudaErrorNotSupported;
    return LaunchKernel(kernel, grid, block, shared_bytes, stream, packed_args, false);
  }

  // cudaThreadExchangeStreamCaptureMode on the executor: the calls a stream
  // capture forbids depend on the mode of the thread that makes them, and
  // the executor makes every application thread's calls.
  virtual cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
    (void)mode;
    return cudaErrorNotSupported;
  }
  // cudaDeviceGetPCIBusId of device `device` into `id` (`len` bytes, the
  // hook's own buffer).
  virtual cudaError_t PciBusId(char* id, int len, int device) {
    (void)id; (void)len; (void)device;
    return cudaErrorNotSupported;
  }
  // cudaMemPoolSetAccess; `count` entries of `descs` are readable (the hook
  // took the count from the request's bytes).
  virtual cudaError_t MemPoolSetAccess(cudaMemPool_t pool, const cudaMemAccessDesc* descs,
                                       size_t count) {
    (void)pool; (void)descs; (void)count;
    return cudaErrorNotSupported;
  }

  // A `__device__` (or `__constant__`) variable of a loaded module, found by
  // the device name nvcc passes to __cudaRegisterVar. Its storage is device
  // memory the backend's copies accept from then on (Memcpy's checks), at an
  // address that is not in the fixed device range and may differ in a
  // replacement agent. kNotFound (with what to do) when the module lacks it.
  struct Symbol {
    void* address = nullptr;
    size_t size = 0;
  };
  virtual absl::StatusOr<Symbol> GetSymbol(uint64_t module_key, const std::string& name) {
    (void)module_key;
    return absl::UnimplementedError("this backend has no device variables: " + name);
  }

  // --- NCCL's own buffers ---------------------------------------------------------
  // ncclMemAlloc / ncclMemFree: device memory from the fixed range, as
  // cudaMalloc's, so that a replacement agent replaying the journal has the
  // buffer at the same address (the journal counts these rows as
  // allocations). Native NCCL 2.28 maps cuMem memory for the first, but the
  // application can only tell by the address, which must not change here.
  // Its codes: a null out-pointer fails in its cudaMalloc fallback
  // (ncclUnhandledCudaError), size 0 succeeds with a null pointer,
  // ncclMemFree(NULL) succeeds, a pointer it did not allocate and a failed
  // allocation are ncclUnhandledCudaError.
  ncclResult_t ncclMemAlloc(void** ptr, size_t size) override {
    if (ptr == nullptr) return ncclUnhandledCudaError;
    return cudaMalloc(ptr, size) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
  }
  ncclResult_t ncclMemFree(void* ptr) override {
    if (ptr == nullptr) return ncclSuccess;
    return cudaFree(ptr) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
  }
  // Buffer registration is an optimization NCCL may skip: with local
  // registration off it answers a null handle, and deregistering a null
  // handle succeeds. Both backends answer so (the communicator checked by
  // its own ncclCommCount), so collectives on registered buffers run as on
  // any buffer and no backend handle reaches the application (it would not
  // survive a replacement agent). Windows alike: a null window, as where
  // symmetric memory is unavailable.
  ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                void** handle) override {
    (void)buff; (void)size;
    int n = 0;
    if (ncclResult_t r = ncclCommCount(comm, &n); r != ncclSuccess) return r;
    if (handle == nullptr) return ncclInvalidArgument;
    *handle = nullptr;
    return ncclSuccess;
  }
  ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) override {
    int n = 0;
    if (ncclResult_t r = ncclCommCount(comm, &n); r != ncclSuccess) return r;
    return handle == nullptr ? ncclSuccess : ncclInvalidUsage;  // "could not find handle"
  }
  ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                      int winFlags) override {
    (void)buff; (void)size; (void)winFlags;
    int n = 0;
    if (ncclResult_t r = ncclCommCount(comm, &n); r != ncclSuccess) return r;
    if (win == nullptr) return ncclInvalidArgument;
    *win = nullptr;
    return ncclSuccess;
  }
  ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) override {
    int n = 0;
    if (ncclResult_t r = ncclCommCount(comm, &n); r != ncclSuccess) return r;
    return win == nullptr ? ncclSuccess : ncclInvalidUsage;
  }

  // --- Copies -----------------------------------------------------------------
  // A copy whose host side the agent already resolved to memory it can touch:
  // request bytes (H2D from pageable memory, valid during the call only, so an
  // asynchronous copy must take its own copy of them), the staging area or
  // reply buffer (D2H to pageable memory: `async` is then false and the copy
  // is complete when this returns), or host memory shared with the
  // application (pinned: read/written in place, in stream order).
  // Device pointers are checked against live allocations; a bad one gives
  // cudaErrorInvalidValue, never a fault in the agent.
  virtual cudaError_t Memcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                             cudaStream_t stream, bool async) = 0;
  // An upload from shared host memory (`src`) to device memory (`dst`), as
  // Memcpy, whose bytes the device also copies back into `capture` (journal
  // memory registered with RegisterSharedHost) behind the upload; once all
  // of them are there it stores `tag` into *done (8 bytes of registered
  // memory). Work the application queues on `stream` later runs after the
  // capture (it cannot overwrite `dst` before it was read back). On a
  // stream being captured into a graph the upload becomes a node as with
  // Memcpy, and nothing is captured (the node reads `src` at its launch).
  // *captured: whether the capture was queued. docs/journal_format.md,
  // "Captured uploads".
  virtual cudaError_t MemcpyCaptured(void* dst, const void* src, size_t count,
                                     cudaStream_t stream, bool async, void* capture,
                                     uint64_t* done, uint64_t tag, bool* captured) = 0;

  // A held upload (common/upload_hold.h): as Memcpy from shared host
  // memory `src` to device memory `dst`, then the device's ContentHash
  // (common/content_hash.h) of `dst` into hash_words[0] and, after it,
  // `tag` into hash_words[1], in stream order behind the copy (the hash
  // words lie in memory given to RegisterHashWords). A copy out of the hold
  // later tells by them whether the source still held those bytes. On a
  // stream being captured into a graph, or without a way to hash, nothing
  // is hashed (*hashed false) and the copy is Memcpy's.
  virtual cudaError_t MemcpyHeld(void* dst, const void* src, size_t count, cudaStream_t stream,
                                 bool async, uint64_t* hash_words, uint64_t tag, bool* hashed) {
    (void)hash_words, (void)tag;
    *hashed = false;
    return Memcpy(dst, src, count, cudaMemcpyHostToDevice, stream, async);
  }
  // Whether `stream` is being captured into a graph (a copy on it becomes a
  // node that reads its source whenever the graph runs).
  virtual bool StreamCapturing(cudaStream_t stream) {
    (void)stream;
    return false;
  }
  // The table of held uploads' memory (the hash words MemcpyHeld fills):
  // mapped for the device where it needs that. Once, before MemcpyHeld.
  // False when this backend cannot hash held uploads: the agent captures
  // them then (an unchecked hold could replay a source changed unseen).
  virtual bool RegisterHashWords(void* base, size_t size) {
    (void)base, (void)size;
    return false;
  }

  // Asynchronous boundary snapshot copies (agent/snapshot.h). Queues the
  // device-to-host copies `copies` (destinations in memory registered with
  // RegisterSharedHost) on a stream of the backend's own, ordered after all
  // work queued so far on every stream, then stores `tag` into *done (8
  // bytes of registered memory) once they all completed. Until then every
  // later operation on any stream (streams created meanwhile included) and
  // every free waits for the copies on the device; the caller does not
  // block. kNotSupported: the caller copies synchronously instead (also
  // while a stream is being captured into a graph).
  //
  // With `turns` (staged snapshots, agent/snapshot.h): the copies go in
  // turns into two staging buffers that the caller's threads drain into the
  // snapshot file. Turn t is copies [ends[t-1], ends[t]) (ends[-1] = 0, the
  // last end copies.size()); once its copies completed the device stores
  // t + 1 into *filled; turn t >= 2 (the buffer of turn t - 2 again) starts
  // only once *drained >= t - 1 (the caller stores t + 1 there after
  // draining turn t). All three words are registered shared host memory.
  // The caller must store a value past every turn into *drained if it stops
  // draining (the device would wait forever, and with it every stream).
  struct SnapshotCopy {
    const void* src = nullptr;
    void* dst = nullptr;
    size_t count = 0;
  };
  struct SnapshotTurns {
    std::vector<size_t> ends;
    uint64_t* filled = nullptr;
    const uint64_t* drained = nullptr;
  };
  virtual cudaError_t QueueSnapshotCopies(const std::vector<SnapshotCopy>& copies,
                                          uint64_t* done, uint64_t tag,
                                          const SnapshotTurns* turns = nullptr) {
    (void)copies, (void)done, (void)tag, (void)turns;
    return cudaErrorNotSupported;
  }
  // Waits for everything queued on the device, the backend's own streams
  // included (QueueSnapshotCopies' copies and whatever follows them there):
  // what the agent waits on before it reads a snapshot's done word. The
  // application's cudaDeviceSynchronize may return earlier (the cuda
  // backend's, while its snapshot spare drains to the host).
  virtual cudaError_t SynchronizeDevice() { return cudaDeviceSynchronize(); }

  // --- Host memory shared with the application --------------------------------
  // The agent has mapped [addr, addr + size) at the application's address;
  // the backend makes it usable for copies and (cuda) device access.
  virtual cudaError_t RegisterSharedHost(void* addr, size_t size, unsigned int flags) = 0;
  virtual cudaError_t UnregisterSharedHost(void* addr) = 0;

  // --- Host callbacks ---------------------------------------------------------
  // Runs `fn` in stream order on `stream` (after all earlier work, before
  // all later work). `fn` returns once the application ran the callback.
  virtual cudaError_t EnqueueHostCallback(cudaStream_t stream,
                                          std::function<void()> fn) = 0;

  // --- Graphs built node by node -------------------------------------------------
  // Backend handles throughout (the agent translated the virtual ones).
  // `deps` are nodes of `graph` the new node runs after. Every operation
  // answers cudaErrorNotSupported unless the backend implements it.
  virtual cudaError_t AddKernelNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                    const std::vector<cudaGraphNode_t>& deps,
                                    const KernelInfo& kernel, dim3 grid, dim3 block,
                                    size_t shared_bytes, const void* packed_args) {
    (void)node; (void)graph; (void)deps; (void)kernel; (void)grid; (void)block;
    (void)shared_bytes; (void)packed_args;
    return cudaErrorNotSupported;
  }
  virtual cudaError_t AddMemsetNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                    const std::vector<cudaGraphNode_t>& deps,
                                    const cudaMemsetParams& params) {
    (void)node; (void)graph; (void)deps; (void)params;
    return cudaErrorNotSupported;
  }
  // Host sides are memory the agent may touch (shared with the application).
  virtual cudaError_t AddMemcpyNode1D(cudaGraphNode_t* node, cudaGraph_t graph,
                                      const std::vector<cudaGraphNode_t>& deps, void* dst,
                                      const void* src, size_t count, cudaMemcpyKind kind) {
    (void)node; (void)graph; (void)deps; (void)dst; (void)src; (void)count; (void)kind;
    return cudaErrorNotSupported;
  }
  // `fn` runs each time the node runs and returns once the application ran
  // its host function (as EnqueueHostCallback's).
  virtual cudaError_t AddHostNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                  const std::vector<cudaGraphNode_t>& deps,
                                  std::function<void()> fn) {
    (void)node; (void)graph; (void)deps; (void)fn;
    return cudaErrorNotSupported;
  }
  virtual cudaError_t AddEmptyNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                   const std::vector<cudaGraphNode_t>& deps) {
    (void)node; (void)graph; (void)deps;
    return cudaErrorNotSupported;
  }
  // Device memory owned by the graph; *dptr is its address.
  virtual cudaError_t AddMemAllocNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                      const std::vector<cudaGraphNode_t>& deps, size_t bytesize,
                                      void** dptr) {
    (void)node; (void)graph; (void)deps; (void)bytesize; (void)dptr;
    return cudaErrorNotSupported;
  }
  virtual cudaError_t AddMemFreeNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                     const std::vector<cudaGraphNode_t>& deps, void* dptr) {
    (void)node; (void)graph; (void)deps; (void)dptr;
    return cudaErrorNotSupported;
  }
  // Runs a copy of `child` (taken now, as CUDA clones it) each time the
  // node runs.
  virtual cudaError_t AddChildGraphNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                        const std::vector<cudaGraphNode_t>& deps,
                                        cudaGraph_t child) {
    (void)node; (void)graph; (void)deps; (void)child;
    return cudaErrorNotSupported;
  }
  // Records `event` (`record`) or waits for it each time the node runs.
  virtual cudaError_t AddEventNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                   const std::vector<cudaGraphNode_t>& deps, cudaEvent_t event,
                                   bool record) {
    (void)node; (void)graph; (void)deps; (void)event; (void)record;
    return cudaErrorNotSupported;
  }
  // An if/while/switch node on `handle` (cudaGraphConditionalHandleCreate's
  // value); `bodies` gets its `size` body graphs, owned by the node, which
  // the application then populates.
  virtual cudaError_t AddConditionalNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                         const std::vector<cudaGraphNode_t>& deps,
                                         cudaGraphConditionalHandle handle,
                                         cudaGraphConditionalNodeType type, unsigned int size,
                                         std::vector<cudaGraph_t>* bodies) {
    (void)node; (void)graph; (void)deps; (void)handle; (void)type; (void)size; (void)bodies;
    return cudaErrorNotSupported;
  }
  // The graph's nodes in creation order (captured work included).
  virtual cudaError_t GraphGetNodes(cudaGraph_t graph, std::vector<cudaGraphNode_t>* nodes) {
    (void)graph; (void)nodes;
    return cudaErrorNotSupported;
  }
  // The nodes `node` depends on (its graph's order of edges).
  virtual cudaError_t GraphNodeGetDependencies(cudaGraphNode_t node,
                                               std::vector<cudaGraphNode_t>* deps) {
    (void)node; (void)deps;
    return cudaErrorNotSupported;
  }
  // A Graphviz description of `graph` (cudaGraphDebugDotPrint's `flags`).
  virtual cudaError_t GraphDebugDot(cudaGraph_t graph, unsigned int flags, std::string* dot) {
    (void)graph; (void)flags; (void)dot;
    return cudaErrorNotSupported;
  }
  // New parameters for kernel node `node` (of the graph `exec` came from).
  virtual cudaError_t ExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                              const KernelInfo& kernel, dim3 grid, dim3 block,
                                              size_t shared_bytes, const void* packed_args) {
    (void)exec; (void)node; (void)kernel; (void)grid; (void)block; (void)shared_bytes;
    (void)packed_args;
    return cudaErrorNotSupported;
  }
  // Takes the parameters of `graph` (same topology) into `exec`.
  virtual cudaError_t ExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph,
                                 cudaGraphExecUpdateResultInfo* info) {
    (void)exec; (void)graph; (void)info;
    return cudaErrorNotSupported;
  }
  // Stream capture appended to an existing graph after `deps`.
  virtual cudaError_t BeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                          const std::vector<cudaGraphNode_t>& deps,
                                          cudaStreamCaptureMode mode) {
    (void)stream; (void)graph; (void)deps; (void)mode;
    return cudaErrorNotSupported;
  }
  // `graph` and `deps` are set only while the stream captures.
  virtual cudaError_t GetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                     unsigned long long* id, cudaGraph_t* graph,
                                     std::vector<cudaGraphNode_t>* deps) {
    (void)stream; (void)status; (void)id; (void)graph; (void)deps;
    return cudaErrorNotSupported;
  }
  // flags: cudaStreamAddCaptureDependencies or cudaStreamSetCaptureDependencies.
  virtual cudaError_t UpdateCaptureDependencies(cudaStream_t stream,
                                                const std::vector<cudaGraphNode_t>& deps,
                                                unsigned int flags) {
    (void)stream; (void)deps; (void)flags;
    return cudaErrorNotSupported;
  }

  // --- cuDNN rows with hand-written dispatch (agent/hooks_cudnn.cc) -----------
  // Descriptors and handles are the backend's own: the hook translated the
  // descriptor and every element of a CUDNN_TYPE_BACKEND_DESCRIPTOR or
  // CUDNN_TYPE_HANDLE array. The arrays hold exactly `elementCount`
  // (SetAttribute) or `requestedElementCount` (GetAttribute) elements of the
  // type's size (api/dnn_args.h), or are null as the application passed them.
  // The defaults stand for a backend without cuDNN: versions 0, not supported.
  virtual size_t DnnGetVersion() { return 0; }
  virtual size_t DnnGetCudartVersion() { return 0; }
  // Writes a NUL-terminated message of at most `max_size` bytes (max_size > 0).
  virtual void DnnGetLastErrorString(char* message, size_t max_size) {
    (void)max_size;
    message[0] = '\0';
  }
  virtual cudnnStatus_t DnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                               cudnnBackendAttributeName_t attributeName,
                                               cudnnBackendAttributeType_t attributeType,
                                               int64_t elementCount,
                                               const void* arrayOfElements) {
    (void)descriptor; (void)attributeName; (void)attributeType; (void)elementCount;
    (void)arrayOfElements;
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  virtual cudnnStatus_t DnnBackendGetAttribute(cudnnBackendDescriptor_t descriptor,
                                               cudnnBackendAttributeName_t attributeName,
                                               cudnnBackendAttributeType_t attributeType,
                                               int64_t requestedElementCount,
                                               int64_t* elementCount, void* arrayOfElements) {
    (void)descriptor; (void)attributeName; (void)attributeType; (void)requestedElementCount;
    (void)elementCount; (void)arrayOfElements;
    return CUDNN_STATUS_NOT_SUPPORTED;
  }

  // --- Replay ---------------------------------------------------------------------
  // The next device allocation must land at `addr` (a replacement agent
  // restoring the address the application holds). Backends whose allocator
  // is not FixedRangeAllocator ignore it.
  virtual void ExpectNextAllocation(uint64_t addr) { (void)addr; }
  // The requests that follow come from the setup log (collectives there are
  // history: skipped), the minibatch log, or the application (kNone).
  virtual void SetReplayPhase(ReplayPhase phase) { (void)phase; }
  // A replacement joins the job's recovery after replaying its setup log:
  // it receives the replicated device state from a survivor and the results
  // of the collectives the survivors completed in the current minibatch.
  // *behind is set when the survivors are already past minibatch
  // `minibatch` (the rest of it is then skipped). kUnimplemented for
  // backends without collectives.
  virtual absl::Status JoinRecovery(uint64_t minibatch, bool* behind) {
    (void)minibatch;
    (void)behind;
    return absl::UnimplementedError("this backend has no collectives to recover through");
  }
  // The agent's own buffers that device-to-host copies land in (the reply
  // slots): a backend may pin them, which makes a small copy into them
  // about 1 us faster than into pageable memory. Not shared host memory:
  // a copy into them still completes before its request is answered.
  virtual void PinAgentBuffer(void* addr, size_t size) {
    (void)addr;
    (void)size;
  }
  virtual void UnpinAgentBuffer(void* addr) { (void)addr; }
  // Before the executor runs the application's request `id`: a backend that
  // leaves work in flight past its call (real NCCL's deferred collective
  // fence, cuda_nccl.h) waits for it here unless `id` may run behind it.
  // Returns an NCCL error of that work (0: none), which the application
  // sees at its next synchronous NCCL call.
  virtual int32_t BeforeRequest(api::ApiId id) {
    (void)id;
    return 0;
  }
  // After the executor ran a request: an NCCL error of work in flight that
  // the request's own call waited for (0: none), as BeforeRequest's.
  virtual int32_t TakeCollectiveError() { return 0; }
  // A minibatch boundary (collective ordinals restart per minibatch).
  virtual void MarkBoundary(uint64_t minibatch) { (void)minibatch; }
  // A replacement restored its state at the boundary of `minibatch` from a
  // boundary snapshot (agent/snapshot.h), before JoinRecovery: when every
  // member of a communicator is such a replacement at the same minibatch,
  // the recovery needs no survivor.
  virtual void NoteStateRestored(uint64_t minibatch) { (void)minibatch; }

  // --- Validation (agent/validator.h) ------------------------------------------
  // Live device allocations as (start, requested size), by address.
  virtual std::vector<std::pair<uint64_t, uint64_t>> DeviceAllocations() { return {}; }
  // The validator replays the current minibatch (since the last
  // MarkBoundary) to check it reproduces the same device state; its
  // collectives must not run again. Between these calls every collective
  // unit takes the receive buffers its first run produced instead of
  // running. kUnimplemented: the backend keeps no results (the validator then
  // skips minibatches with collectives). EndValidationReplay is called once
  // the device synchronized; kDataLoss when a replayed unit had no result.
  virtual absl::Status BeginValidationReplay() {
    return absl::UnimplementedError("this backend keeps no collective results to replay from");
  }
  virtual absl::Status EndValidationReplay() { return absl::OkStatus(); }

  // --- Device state -------------------------------------------------------------
  // Drops every allocation, stream, event, graph and module (cudaDeviceReset).
  virtual cudaError_t Reset() = 0;

 protected:
  // What QueueSnapshotCopies checks before it queues anything: `done` is a
  // word of shared host memory and every copy (empty ones aside) reads device
  // memory the backend holds into shared host memory. `device_accessible`
  // and `shared_host` are the backend's own tests, (pointer, bytes) -> bool.
  // With `turns`: their words shared host memory, their ends ascending up
  // to copies.size().
  template <typename DeviceAccessible, typename SharedHost>
  static bool SnapshotCopiesValid(const std::vector<SnapshotCopy>& copies, const uint64_t* done,
                                  const SnapshotTurns* turns, DeviceAccessible&& device_accessible,
                                  SharedHost&& shared_host) {
    if (done == nullptr || !shared_host(done, sizeof(*done))) return false;
    if (turns != nullptr) {
      if (turns->filled == nullptr || turns->drained == nullptr ||
          !shared_host(turns->filled, sizeof(uint64_t)) ||
          !shared_host(turns->drained, sizeof(uint64_t)) || turns->ends.empty() ||
          turns->ends.back() != copies.size()) {
        return false;
      }
      for (size_t t = 1; t < turns->ends.size(); ++t) {
        if (turns->ends[t] < turns->ends[t - 1]) return false;
      }
    }
    for (const SnapshotCopy& c : copies) {
      if (c.count == 0) continue;
      if (c.src == nullptr || c.dst == nullptr || !device_accessible(c.src, c.count) ||
          !shared_host(c.dst, c.count)) {
        return false;
      }
    }
    return true;
  }
};

// Factories (agent/backends/host/host_backend.cc, agent/backends/cuda/...).
absl::StatusOr<std::unique_ptr<Backend>> MakeHostBackend(const BackendOptions& options);

}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_BACKEND_H_

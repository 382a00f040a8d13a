// HostBackend: a CPU device with CUDA semantics, the backend of CI and of
// every test that runs without a GPU.
//
//   BackendOptions options;
//   options.host_kernel_libraries = {"/path/libmy_host_kernels.so"};
//   absl::StatusOr<std::unique_ptr<Backend>> b = MakeHostBackend(options);
//   void* p;  (*b)->cudaMalloc(&p, 1 << 20);          // inside device_range()
//   cudaStream_t s;  (*b)->cudaStreamCreate(&s);
//   (*b)->Memcpy(p, host, n, cudaMemcpyHostToDevice, s, /*async=*/true);
//   (*b)->cudaStreamSynchronize(s);
//
// Device memory is one anonymous mapping of the whole device range at its
// fixed address (pages cost nothing until touched) sub-allocated by a
// FixedRangeAllocator, so the same calls give the same device pointers in a
// replacement agent. Kernels run on the CPU through host kernel libraries
// (hostkernel/loader.h).
//
// Streams (host_stream.h): each runs its work in order on a thread of its
// own. Stream 0, cudaStreamLegacy and cudaStreamPerThread all name the
// legacy default stream: its work waits for all earlier work of blocking
// streams, and later work of blocking streams waits for it. (A per-thread
// default stream would be per application thread; the agent serves one
// client's calls in order, so treating it as the legacy stream only adds
// ordering, never removes any.)
//
// Errors found while asynchronous work runs (a kernel failing on its worker)
// are deferred: the next cudaStreamSynchronize of that stream, the next
// cudaEventSynchronize of an event recorded on it, or the next
// cudaDeviceSynchronize / TakeDeferredError returns them, once each.
//
// Stream-ordered frees (cudaFreeAsync) return memory to the allocator only at
// points fixed by the call sequence (a synchronize that covers the stream,
// cudaFree, an allocation that would otherwise fail), never when a worker
// happens to run, so allocation stays deterministic.
//
// cuBLAS (host_blas.cc): the GEMM/GEMV/dot rows run OpenBLAS (column-major,
// as cuBLAS) on the device memory, in stream order on the handle's stream;
// cublasGemmEx and cublasGemmStridedBatchedEx run fp32 (CUBLAS_COMPUTE_32F)
// and fp64 (CUBLAS_COMPUTE_64F), cublasSgemmEx fp32, and they refuse every
// other type combination with CUBLAS_STATUS_NOT_SUPPORTED and one log line;
// complex GEMM/GEMV/dot and the triangular solves run in single and double. Math modes are kept
// and reported but change nothing (the CPU computes in the full precision).
//
// cuBLASLt (host_blaslt.cc): handles and descriptors are plain objects
// keeping every attribute; cublasLtMatmul runs OpenBLAS on column-major
// CUDA_R_32F / CUDA_R_64F matrices (A, B, C, D and the scale type alike,
// compute 32F / 64F), transposes, plain and strided batches, C apart from or
// equal to D, the epilogues DEFAULT, RELU, BIAS, RELU_BIAS, GELU and
// GELU_BIAS, alpha/beta in host or device memory; everything else is
// CUBLAS_STATUS_NOT_SUPPORTED with one log line, answered first by
// cublasLtMatmulAlgoGetHeuristic (which offers one algorithm, needing no
// workspace, for what runs).
//
// cuDNN (host_dnn.cc): the host backend has no cuDNN. Handles, backend
// descriptors and the legacy descriptors (tensor, filter, convolution,
// activation, pooling, dropout, RNN, RNN data, CTC loss, spatial
// transformer) can be created and destroyed (handles also given a stream and
// queried), with cuDNN's codes for bad input, so applications and tests get
// past their setup; setting and reading the legacy descriptors, finalizing,
// executing, the attribute calls, every legacy computation and query
// (convolutions, batch norm, pooling, RNN, CTC loss, spatial transformer,
// workspace sizes, algorithm heuristics) answer
// CUDNN_STATUS_NOT_SUPPORTED with one log line each, and
// cudnnGetLastErrorString says why. cudnnGetVersion, cudnnGetCudartVersion
// and cudnnGetProperty answer the versions of the headers the agent was
// built with (the API the rows follow).
//
// Thread safety: all methods may be called from several threads.
#ifndef REVENANT_AGENT_BACKENDS_HOST_HOST_BACKEND_H_
#define REVENANT_AGENT_BACKENDS_HOST_HOST_BACKEND_H_

#include <cublasLt.h>
#include <cublas_api.h>
#include <cudnn.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "agent/allocator.h"
#include "agent/backend.h"
#include "agent/backends/host/host_stream.h"
#include "api/library_rows.h"
#include "hostkernel/loader.h"

namespace revenant {
namespace agent {
namespace host {

// The default device range: 64 GiB per rank from 0x200000000000 (rank r at
// base + r * 64 GiB), so agents of several ranks never collide even in one
// address space.
inline constexpr uint64_t kDefaultDeviceBase = 0x200000000000ull;
inline constexpr uint64_t kDefaultDeviceSize = 64ull << 30;

// Stream priorities reported by cudaDeviceGetStreamPriorityRange (as on real
// GPUs: lower numbers are higher priorities).
inline constexpr int kLeastStreamPriority = 0;
inline constexpr int kGreatestStreamPriority = -5;

class HostBackend : public Backend {
 public:
  // Maps the device range (fails with kAlreadyExists when something already
  // occupies it) and loads the host kernel libraries (a missing or broken
  // library fails here, not at the first launch).
  static absl::StatusOr<std::unique_ptr<HostBackend>> Create(const BackendOptions& options);

  // Finishes all queued work, then unmaps the device range.
  ~HostBackend() override;

  // The first error that asynchronous work hit since the last time one was
  // taken, cudaSuccess if none; clears every pending deferred error.
  cudaError_t TakeDeferredError();

  // --- Backend -----------------------------------------------------------------
  const char* name() const override { return "host"; }
  DeviceRange device_range() const override { return range_; }
  absl::Status LoadModule(uint64_t module_key, absl::string_view image) override;
  absl::StatusOr<KernelInfo> GetKernel(uint64_t module_key,
                                       const std::string& mangled_name) override;
  cudaError_t LaunchKernel(const KernelInfo& kernel, dim3 grid, dim3 block, size_t shared_bytes,
                           cudaStream_t stream, const void* packed_args,
                           bool cooperative) override;
  // Held launches, as the cuda backend's (Backend::LaunchKernelMayHold):
  // their operations (configuration checked, arguments copied) wait here
  // and are queued on their stream, in order, by FlushLaunches. Nothing
  // runs faster for it on the CPU; the host backend holds them so that the
  // executor's flush rules run under every host-backend test.
  cudaError_t LaunchKernelMayHold(const KernelInfo& kernel, dim3 grid, dim3 block,
                                  size_t shared_bytes, cudaStream_t stream,
                                  const void* packed_args, bool more_requests) override;
  int32_t FlushLaunches() override;
  std::string StatsAtExit() const override;
  // Attributes as api/launch_attributes.h says (the rest refused, logged).
  cudaError_t LaunchKernelEx(const KernelInfo& kernel, dim3 grid, dim3 block,
                             size_t shared_bytes, cudaStream_t stream, const void* packed_args,
                             const std::vector<cudaLaunchAttribute>& attrs) override;
  // The storage of a REVENANT_HOST_DEVICE_VARIABLE of the kernel libraries.
  absl::StatusOr<Symbol> GetSymbol(uint64_t module_key, const std::string& name) override;
  cudaError_t Memcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                     cudaStream_t stream, bool async) override;
  cudaError_t MemcpyCaptured(void* dst, const void* src, size_t count, cudaStream_t stream,
                             bool async, void* capture, uint64_t* done, uint64_t tag,
                             bool* captured) override;
  cudaError_t MemcpyHeld(void* dst, const void* src, size_t count, cudaStream_t stream, bool async,
                         uint64_t* hash_words, uint64_t tag, bool* hashed) override;
  bool StreamCapturing(cudaStream_t stream) override;
  bool RegisterHashWords(void* base, size_t size) override {
    (void)base, (void)size;
    return true;  // the executor hashes host memory as it is
  }
  cudaError_t QueueSnapshotCopies(const std::vector<SnapshotCopy>& copies, uint64_t* done,
                                  uint64_t tag, const SnapshotTurns* turns = nullptr) override;
  cudaError_t RegisterSharedHost(void* addr, size_t size, unsigned int flags) override;
  cudaError_t UnregisterSharedHost(void* addr) override;
  cudaError_t EnqueueHostCallback(cudaStream_t stream, std::function<void()> fn) override;
  cudaError_t Reset() override;
  void ExpectNextAllocation(uint64_t addr) override;
  std::vector<std::pair<uint64_t, uint64_t>> DeviceAllocations() override {
    return LiveAllocations();
  }

  // --- api::BackendApi ---------------------------------------------------------
  cudaError_t cudaGetDeviceCount(int* count) override;
  cudaError_t cudaSetDeviceFlags(unsigned int flags) override;
  cudaError_t cudaGetDeviceFlags(unsigned int* flags) override;
  cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) override;
  cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) override;
  cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer) override;
  cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) override;
  cudaError_t PciBusId(char* id, int len, int device) override;
  cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) override;
  cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) override;
  cudaError_t cudaDeviceSynchronize() override;
  cudaError_t cudaDriverGetVersion(int* version) override;
  cudaError_t cudaRuntimeGetVersion(int* version) override;
  cudaError_t cudaMemGetInfo(size_t* free, size_t* total) override;
  cudaError_t cudaProfilerStart() override;
  cudaError_t cudaProfilerStop() override;
  cudaError_t cudaDeviceSetLimit(cudaLimit limit, size_t value) override;
  cudaError_t cudaDeviceGetLimit(size_t* value, cudaLimit limit) override;

  cudaError_t cudaMalloc(void** ptr, size_t size) override;
  cudaError_t cudaFree(void* ptr) override;
  cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) override;
  cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) override;
  cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                      void* value) override;
  cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                      void* value) override;
  cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t min_bytes_to_keep) override;
  cudaError_t MemPoolSetAccess(cudaMemPool_t pool, const cudaMemAccessDesc* descs,
                               size_t count) override;
  cudaError_t cudaMemset(void* ptr, int value, size_t count) override;
  cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) override;
  cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attributes,
                                       const void* ptr) override;

  cudaError_t cudaStreamCreate(cudaStream_t* stream) override;
  cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) override;
  cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags,
                                           int priority) override;
  cudaError_t cudaStreamDestroy(cudaStream_t stream) override;
  cudaError_t cudaStreamSynchronize(cudaStream_t stream) override;
  cudaError_t cudaStreamQuery(cudaStream_t stream) override;
  cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority) override;
  cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) override;
  cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                  unsigned int flags) override;

  cudaError_t cudaEventCreate(cudaEvent_t* event) override;
  cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) override;
  cudaError_t cudaEventDestroy(cudaEvent_t event) override;
  cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) override;
  cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                       unsigned int flags) override;
  cudaError_t cudaEventQuery(cudaEvent_t event) override;
  cudaError_t cudaEventSynchronize(cudaEvent_t event) override;
  cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) override;

  cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* func) override;
  cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) override;
  cudaError_t cudaFuncSetCacheConfig(const void* func, enum cudaFuncCache config) override;
  cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
      int* num_blocks, const void* func, int block_size, size_t dynamic_smem,
      unsigned int flags) override;

  // Graphs by stream capture: a capturing stream appends its work to the
  // graph instead of running it; launching an instantiated graph runs that
  // work, in capture order, as one operation of the launch stream. Other
  // streams join a capture by waiting on an event recorded in it (fork) and
  // the origin waits on theirs (join), as with CUDA. Captured host-to-device
  // copies from pageable memory keep the bytes of capture time. Not
  // captured (cudaErrorStreamCaptureUnsupported): synchronous copies,
  // stream-ordered allocation, waits on events recorded outside the capture,
  // and capture of the legacy default stream.
  cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) override;
  cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) override;
  cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                    cudaStreamCaptureStatus* status) override;
  cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) override;
  cudaError_t cudaGraphCreate(cudaGraph_t* graph, unsigned int flags) override;
  cudaError_t cudaGraphDestroy(cudaGraph_t graph) override;
  cudaError_t cudaGraphClone(cudaGraph_t* clone, cudaGraph_t original) override;
  cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                   unsigned long long flags) override;
  cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph,
                                            unsigned long long flags) override;
  cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) override;
  cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) override;

  // Graphs built node by node: a graph is a DAG of nodes in creation order
  // (a node can only depend on nodes that exist, so creation order is a
  // topological order); work captured into a graph becomes nodes too, each
  // after the capture's current dependencies. Instantiating snapshots the
  // nodes' operations in that order; a launch runs them one after another as
  // one operation of the launch stream (a valid schedule of the DAG). Memory
  // of alloc nodes is allocated when the node is added and stays until the
  // last graph or executable holding it is destroyed (free nodes only order).
  // Memcpy nodes reach device memory and host memory shared with the
  // application only.
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
                           const std::vector<cudaGraphNode_t>& deps) override;
  cudaError_t AddMemAllocNode(cudaGraphNode_t* node, cudaGraph_t graph,
                              const std::vector<cudaGraphNode_t>& deps, size_t bytesize,
                              void** dptr) override;
  cudaError_t AddMemFreeNode(cudaGraphNode_t* node, cudaGraph_t graph,
                             const std::vector<cudaGraphNode_t>& deps, void* dptr) override;
  // A child graph node runs a copy of the child taken now; a child with
  // memory nodes is refused (cudaErrorInvalidValue), as CUDA refuses to
  // clone them.
  cudaError_t AddChildGraphNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                const std::vector<cudaGraphNode_t>& deps,
                                cudaGraph_t child) override;
  // An event record node makes each launch a new record of the event,
  // complete once the steps before it ran; a wait node waits, where it
  // runs, for the event's latest record as of the launch (as
  // cudaStreamWaitEvent at the launch would).
  cudaError_t AddEventNode(cudaGraphNode_t* node, cudaGraph_t graph,
                           const std::vector<cudaGraphNode_t>& deps, cudaEvent_t event,
                           bool record) override;
  // Conditional nodes: the handle is its index among its root graph's
  // handles (tagged), the same in a replacement that replays the graph's
  // handle creations, whatever else it replays; kernels set the condition
  // with cudaGraphSetConditional, which host kernel libraries resolve to
  // revenant_host_set_conditional in the agent: it writes the running
  // launch's value (a thread-local of the stream's worker; a kernel of a
  // cooperative launch, run on other threads, cannot set one). Bodies are
  // graphs of their own (for the Add*Node rows), owned by the node's graph.
  cudaError_t AddConditionalNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                 const std::vector<cudaGraphNode_t>& deps,
                                 cudaGraphConditionalHandle handle,
                                 cudaGraphConditionalNodeType type, unsigned int size,
                                 std::vector<cudaGraph_t>* bodies) override;
  cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle* handle,
                                               cudaGraph_t graph, unsigned int default_value,
                                               unsigned int flags) override;
  cudaError_t GraphGetNodes(cudaGraph_t graph, std::vector<cudaGraphNode_t>* nodes) override;
  cudaError_t GraphNodeGetDependencies(cudaGraphNode_t node,
                                       std::vector<cudaGraphNode_t>* deps) override;
  // Nodes (creation order, kind) and edges; `flags` select nothing more here.
  cudaError_t GraphDebugDot(cudaGraph_t graph, unsigned int flags, std::string* dot) override;
  cudaError_t ExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                      const KernelInfo& kernel, dim3 grid, dim3 block,
                                      size_t shared_bytes, const void* packed_args) override;
  cudaError_t ExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph,
                         cudaGraphExecUpdateResultInfo* info) override;
  cudaError_t BeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                  const std::vector<cudaGraphNode_t>& deps,
                                  cudaStreamCaptureMode mode) override;
  cudaError_t GetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status,
                             unsigned long long* id, cudaGraph_t* graph,
                             std::vector<cudaGraphNode_t>* deps) override;
  cudaError_t UpdateCaptureDependencies(cudaStream_t stream,
                                        const std::vector<cudaGraphNode_t>& deps,
                                        unsigned int flags) override;

  // cuBLAS (host_blas.cc).
  bool DevicePointers(api::HandleKind kind, uint64_t handle) override;
#define REVENANT_HOST_BLAS_ROW(name, params, args) cublasStatus_t name params override;
  REVENANT_CUBLAS_ROWS(REVENANT_HOST_BLAS_ROW)
  // cuBLASLt (host_blaslt.cc).
  REVENANT_CUBLASLT_ROWS(REVENANT_HOST_BLAS_ROW)
#undef REVENANT_HOST_BLAS_ROW

  // The driver rows with no runtime equivalent (host_driver.cc): 32-bit
  // memsets and the stream memory operations, in stream order. A wait on a
  // value polls the word (sleeping between looks, from 2 us up to 1 ms) on
  // the stream's worker, bounded by REVENANT_COLLECTIVE_TIMEOUT_S; past it
  // the stream fails with cudaErrorLaunchTimeout (deferred, as a kernel's).
#define REVENANT_HOST_DRIVER_ROW(name, params, args) CUresult name params override;
  REVENANT_DRIVER_ROWS(REVENANT_HOST_DRIVER_ROW)
#undef REVENANT_HOST_DRIVER_ROW
  // cuDNN (host_dnn.cc).
  cudnnStatus_t cudnnGetProperty(libraryPropertyType type, int* value) override;
  cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) override;
  cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) override;
  cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId) override;
  cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* streamId) override;
  cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t descriptorType,
                                             cudnnBackendDescriptor_t* descriptor) override;
  cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) override;
  cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) override;
  cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t executionPlan,
                                    cudnnBackendDescriptor_t variantPack) override;
  cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* desc) override;
  cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc) override;
  cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t tensorDesc,
                                           cudnnDataType_t dataType, int nbDims,
                                           const int* dimA, const int* strideA) override;
  cudnnStatus_t cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t tensorDesc,
                                           int nbDimsRequested, cudnnDataType_t* dataType,
                                           int* nbDims, int* dimA, int* strideA) override;
  cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* desc) override;
  cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t desc) override;
  cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t filterDesc,
                                           cudnnDataType_t dataType, cudnnTensorFormat_t format,
                                           int nbDims, const int* filterDimA) override;
  cudnnStatus_t cudnnGetFilterNdDescriptor(const cudnnFilterDescriptor_t filterDesc,
                                           int nbDimsRequested, cudnnDataType_t* dataType,
                                           cudnnTensorFormat_t* format, int* nbDims,
                                           int* filterDimA) override;
  cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* desc) override;
  cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t desc) override;
  cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t convDesc,
                                                int arrayLength, const int* padA,
                                                const int* filterStrideA, const int* dilationA,
                                                cudnnConvolutionMode_t mode,
                                                cudnnDataType_t computeType) override;
  cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc,
                                              int groupCount) override;
  cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc,
                                            cudnnMathType_t mathType) override;
  cudnnStatus_t cudnnCreateActivationDescriptor(cudnnActivationDescriptor_t* desc) override;
  cudnnStatus_t cudnnDestroyActivationDescriptor(cudnnActivationDescriptor_t desc) override;
  cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t activationDesc,
                                             cudnnActivationMode_t mode,
                                             cudnnNanPropagation_t reluNanOpt,
                                             double coef) override;
  cudnnStatus_t cudnnCreatePoolingDescriptor(cudnnPoolingDescriptor_t* desc) override;
  cudnnStatus_t cudnnDestroyPoolingDescriptor(cudnnPoolingDescriptor_t desc) override;
  cudnnStatus_t cudnnCreateDropoutDescriptor(cudnnDropoutDescriptor_t* desc) override;
  cudnnStatus_t cudnnDestroyDropoutDescriptor(cudnnDropoutDescriptor_t desc) override;
  cudnnStatus_t cudnnCreateRNNDescriptor(cudnnRNNDescriptor_t* desc) override;
  cudnnStatus_t cudnnDestroyRNNDescriptor(cudnnRNNDescriptor_t desc) override;
  cudnnStatus_t cudnnCreateRNNDataDescriptor(cudnnRNNDataDescriptor_t* desc) override;
  cudnnStatus_t cudnnDestroyRNNDataDescriptor(cudnnRNNDataDescriptor_t desc) override;
  cudnnStatus_t cudnnCreateCTCLossDescriptor(cudnnCTCLossDescriptor_t* desc) override;
  cudnnStatus_t cudnnDestroyCTCLossDescriptor(cudnnCTCLossDescriptor_t desc) override;
  cudnnStatus_t cudnnCreateSpatialTransformerDescriptor(
      cudnnSpatialTransformerDescriptor_t* desc) override;
  cudnnStatus_t cudnnDestroySpatialTransformerDescriptor(
      cudnnSpatialTransformerDescriptor_t desc) override;
  // Every other cuDNN row: CUDNN_STATUS_NOT_SUPPORTED, one log line per
  // function, cudnnGetLastErrorString saying why.
  cudnnStatus_t DnnUnsupported(const char* api) override { return DnnNotSupported(api); }
  size_t DnnGetVersion() override;
  size_t DnnGetCudartVersion() override;
  void DnnGetLastErrorString(char* message, size_t max_size) override;
  cudnnStatus_t DnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                       cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType,
                                       int64_t elementCount,
                                       const void* arrayOfElements) override;
  cudnnStatus_t DnnBackendGetAttribute(cudnnBackendDescriptor_t descriptor,
                                       cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType,
                                       int64_t requestedElementCount, int64_t* elementCount,
                                       void* arrayOfElements) override;

 protected:
  // What Create does before constructing: picks the device range (the
  // default for options.rank), loads the host kernel libraries and maps the
  // range. For subclasses' factories.
  static absl::Status PrepareDevice(const BackendOptions& options, DeviceRange* range,
                                    std::unique_ptr<hostkernel::HostKernelRegistry>* registry);
  // For subclasses (host_collectives.h): `range` is already mapped, as
  // Create maps it; the destructor unmaps it.
  HostBackend(DeviceRange range, std::unique_ptr<hostkernel::HostKernelRegistry> registry,
              int launch_graph_max);
  // Queues `op` on `stream` in stream order; an error it returns becomes a
  // deferred error of that stream, as a failing kernel's does.
  cudaError_t EnqueueFallible(cudaStream_t stream, HostStream::Op op) {
    return Enqueue(stream, std::move(op), nullptr);
  }
  // Live device allocations (start, size), for state transfer on recovery.
  std::vector<std::pair<uint64_t, uint64_t>> LiveAllocations() {
    std::lock_guard<std::mutex> lock(mu_);
    return allocator_.Allocations();
  }

 private:
  struct Event {
    unsigned int flags = 0;
    std::shared_ptr<Marker> marker;  // the latest record; null before the first
    HostStream* stream = nullptr;    // where it was recorded (identity only)
    // Recorded into this graph by a capturing stream (a fork point), or null.
    const void* captured_in = nullptr;
  };
  // A cuBLAS handle (cublasHandle_t is a BlasHandle*).
  struct BlasHandle {
    cudaStream_t stream = nullptr;
    cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
    cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
    void* workspace = nullptr;
    size_t workspace_size = 0;
  };
  // A cuBLASLt handle or descriptor (cublasLtHandle_t, cublasLtMatmulDesc_t,
  // cublasLtMatrixLayout_t and cublasLtMatmulPreference_t are LtObject*):
  // its kind and every attribute's value, as bytes by attribute id.
  struct LtObject {
    api::HandleKind kind = api::HandleKind::kNone;
    std::map<int, std::vector<char>> attributes;
  };
  // What a cublasLtMatmul runs (host_blaslt.cc).
  struct LtPlan;
  // A cuDNN handle (cudnnHandle_t is a DnnHandle*) and a backend descriptor
  // (cudnnBackendDescriptor_t is a DnnDescriptor*).
  struct DnnHandle {
    cudaStream_t stream = nullptr;
  };
  struct DnnDescriptor {
    cudnnBackendDescriptorType_t type;
  };
  // A legacy descriptor (tensor, filter, convolution, activation: the
  // cudnn*Descriptor_t is a DnnLegacyDescriptor*).
  struct DnnLegacyDescriptor {
    api::HandleKind kind;
  };
  cudnnStatus_t DnnCreateLegacy(api::HandleKind kind, void** desc);
  cudnnStatus_t DnnDestroyLegacy(api::HandleKind kind, void* desc, const char* api);
  // A cuDNN call the host backend cannot serve: CUDNN_STATUS_NOT_SUPPORTED,
  // one log line per function, the message for cudnnGetLastErrorString.
  cudnnStatus_t DnnNotSupported(const char* api);
  // A refused cuDNN call: `status`, the message for cudnnGetLastErrorString.
  cudnnStatus_t DnnFail(cudnnStatus_t status, const std::string& message);
  // One GEMM family call, strides 0 for a single GEMM.
  struct GemmArgs {
    cublasOperation_t transa, transb;
    int m, n, k;
    const void* alpha;
    const void* a;
    int lda;
    long long stride_a;
    const void* b;
    int ldb;
    long long stride_b;
    const void* beta;
    void* c;
    int ldc;
    long long stride_c;
    int batch_count;
  };
  struct PendingFree {
    uint64_t addr;
    HostStream* stream;  // identity only
    std::shared_ptr<Marker> marker;
  };
  struct FuncAttrs {
    int max_dynamic_shared = 48 << 10;
    int carveout = -1;
  };
  struct MemPool {
    std::map<int, uint64_t> attrs;
  };
  enum class NodeKind {
    kCaptured, kKernel, kMemset, kMemcpy, kHost, kEmpty, kMemAlloc, kMemFree,
    kChild, kEventRecord, kEventWait, kConditional
  };
  // What one node does when its graph runs.
  struct Step {
    NodeKind kind = NodeKind::kEmpty;
    HostStream::Op op;  // empty: an ordering point only
    // Event nodes: the event (identity only: resolved at each launch, a
    // destroyed one is skipped).
    Event* event = nullptr;
    // Child graph nodes: the child's steps as they were when the node was
    // added (CUDA clones the child graph).
    std::shared_ptr<const std::vector<Step>> child;
    // Conditional nodes: the handle's index in its root graph, the kind of
    // node and the bodies' steps (taken at instantiation: the application
    // populates the body graphs after adding the node).
    uint32_t cond_index = 0;
    cudaGraphConditionalNodeType cond_type = cudaGraphCondTypeIf;
    std::vector<std::shared_ptr<const std::vector<Step>>> bodies;
  };
  // Per launch: the marker each event step sets (records: a new record of
  // the event) or waits for (waits: the event's latest record at launch).
  using LaunchEvents = absl::flat_hash_map<const Step*, std::shared_ptr<Marker>>;
  struct Graph;
  struct Node : Step {
    std::vector<size_t> deps;  // creation indices of the nodes it runs after
    std::vector<Graph*> body_graphs;  // a conditional node's bodies (owned by graphs_)
  };
  // A conditional handle of a root graph (cudaGraphConditionalHandleCreate).
  struct CondHandle {
    unsigned int default_value = 0;
    bool assign_default = false;
  };
  // An executable's condition values (handle index -> value), read and
  // written by the kernels of its launches (revenant_host_set_conditional).
  struct CondValues {
    std::vector<CondHandle> handles;
    std::unique_ptr<unsigned int[]> values;
  };
  struct Graph {
    // In creation order, which is a topological order; captured calls arrive
    // in an order their dependencies allow.
    std::vector<std::unique_ptr<Node>> nodes;
    absl::flat_hash_map<const Node*, size_t> index;  // node -> creation index
    HostStream* origin = nullptr;  // the stream that began the capture
    std::vector<size_t> capture_deps;  // while captured into: what the next node follows
    unsigned long long capture_id = 0;
    std::vector<uint64_t> allocs;  // memory of its alloc nodes (graph_allocs_ counts holders)
    // A conditional node's body: the graph it belongs to (it cannot be
    // destroyed by itself and goes with that graph); null for other graphs.
    Graph* owner = nullptr;
    std::vector<CondHandle> cond_handles;  // root graphs only
  };
  struct GraphExec {
    // Copied on change: a launch in flight keeps the steps it started with.
    std::shared_ptr<const std::vector<Step>> steps;
    std::shared_ptr<CondValues> cond;  // null: no conditional handles
    // The graph it came from: node -> creation index, kinds and edges.
    absl::flat_hash_map<const Node*, size_t> index;
    std::vector<NodeKind> kinds;
    std::vector<std::vector<size_t>> deps;
    std::vector<uint64_t> allocs;
  };

  // The stream object for an application stream value, null if not live.
  HostStream* ResolveStream(cudaStream_t stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Event* ResolveEvent(cudaEvent_t event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues `op` on `s` with the legacy default stream's ordering added.
  std::shared_ptr<Marker> EnqueueLocked(HostStream* s, std::vector<std::shared_ptr<Marker>> deps,
                                        HostStream::Op op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Resolves and queues; cudaErrorInvalidResourceHandle for a bad stream.
  cudaError_t Enqueue(cudaStream_t stream, HostStream::Op op, std::shared_ptr<Marker>* done);
  // Waits for all work queued so far, without taking deferred errors.
  void WaitAll() ABSL_LOCKS_EXCLUDED(mu_);
  // Frees the pending stream-ordered frees whose work is complete, or only
  // those of `stream` when it is not null.
  void ReleasePendingFrees(HostStream* stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // allocator_.Free plus returning the freed pages to the OS.
  absl::Status FreeBlock(uint64_t addr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // May release `lock` (held on mu_) to wait for stream-ordered frees.
  cudaError_t AllocateLocked(std::unique_lock<std::mutex>& lock, void** ptr, size_t size);
  // Whether [p, p + n) is device memory the device may touch (a live
  // allocation or shared host memory).
  bool DeviceAccessible(const void* p, size_t n) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool InDeviceRange(const void* p) const;
  bool IsSharedHost(const void* p, size_t n) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reaps retired streams whose workers exited.
  void ReapRetired() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deferred errors.
  void RecordError(HostStream* stream, cudaError_t err);
  cudaError_t TakeStreamError(HostStream* stream);
  bool KnownKernel(const void* func) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Capturing(HostStream* s) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The graph for a handle, null if not live.
  Graph* ResolveGraph(cudaGraph_t graph) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Creation indices of `deps` in `g`; false if one is not a node of `g`.
  bool DepIndices(const Graph* g, const std::vector<cudaGraphNode_t>& deps,
                  std::vector<size_t>* out) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends a node to `g` and returns it.
  Node* AddNodeLocked(Graph* g, NodeKind kind, std::vector<size_t> deps, HostStream::Op op)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Resolves, checks and appends (the common part of the Add*Node calls).
  cudaError_t AddChecked(cudaGraphNode_t* node, cudaGraph_t graph,
                         const std::vector<cudaGraphNode_t>& deps, NodeKind kind,
                         HostStream::Op op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks a launch and builds the operation that runs it.
  cudaError_t KernelOpLocked(const KernelInfo& kernel, dim3 grid, dim3 block,
                             size_t shared_bytes, const void* packed_args, bool cooperative,
                             HostStream::Op* op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The steps of `g`'s nodes, in creation order.
  static std::shared_ptr<std::vector<Step>> StepsOf(const Graph& g);
  // Binds the event steps of `steps` (children included) for a launch on
  // `s`: each record step becomes the event's latest record.
  void BindEventsLocked(const std::vector<Step>& steps, HostStream* s, LaunchEvents* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs a launch's steps in order; the first error is the launch's.
  // `cond` (may be null): the executable's condition values.
  static cudaError_t RunSteps(const std::vector<Step>& steps, const LaunchEvents& events,
                              CondValues* cond);
  // The graph whose conditional handles `g` uses (itself, or the root of
  // the bodies it is nested in).
  static Graph* RootOf(Graph* g);
  // Whether `g` or one of its bodies has a conditional node.
  static bool HasConditional(const Graph& g);
  // Destroys a graph's conditional bodies, recursively (from graphs_).
  void EraseBodiesLocked(Graph* g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops one holder of each graph allocation; frees those nobody holds.
  void ReleaseGraphAllocsLocked(const std::vector<uint64_t>& allocs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // cuBLAS: the handle's state (a copy), or NOT_INITIALIZED for one that is
  // not live; the scalar read at run time (host pointers read now).
  cublasStatus_t BlasState(cublasHandle_t handle, BlasHandle* state);
  template <typename T>
  cublasStatus_t Gemm(const char* api, cublasHandle_t handle, const GemmArgs& g);
  template <typename T>
  cublasStatus_t Gemv(const char* api, cublasHandle_t handle, cublasOperation_t trans, int m,
                      int n, const T* alpha, const T* a, int lda, const T* x, int incx,
                      const T* beta, T* y, int incy);
  // `conj`: the complex dotc (x conjugated); ignored for real types.
  template <typename T>
  cublasStatus_t Dot(const char* api, cublasHandle_t handle, int n, const T* x, int incx,
                     const T* y, int incy, T* result, bool conj);
  template <typename T>
  cublasStatus_t Trsm(const char* api, cublasHandle_t handle, cublasSideMode_t side,
                      cublasFillMode_t uplo, cublasOperation_t trans, cublasDiagType_t diag,
                      int m, int n, const T* alpha, const T* a, int lda, T* b, int ldb);
  cublasStatus_t GemmEx(const char* api, cublasHandle_t handle, const GemmArgs& g,
                        cudaDataType a_type, cudaDataType b_type, cudaDataType c_type,
                        cublasComputeType_t compute_type);
  // cuBLASLt: a new object of `kind` with its attributes' defaults (then
  // `init` sets those the create call gives), and the generic setter/getter.
  cublasStatus_t LtCreate(api::HandleKind kind, void** out,
                          const std::vector<std::pair<int, int64_t>>& init);
  cublasStatus_t LtDestroy(api::HandleKind kind, void* object);
  cublasStatus_t LtSetAttribute(api::HandleKind kind, void* object, int attr, const void* buf,
                                size_t size);
  cublasStatus_t LtGetAttribute(api::HandleKind kind, void* object, int attr, void* buf,
                                size_t size, size_t* written);
  // An attribute's value, sign-extended from its size (0 if absent).
  static int64_t LtAttr(const LtObject& o, int id);
  // Whether `handle` is a live cublasLtCreate handle or cuBLAS handle.
  bool LtHandleLiveLocked(const void* handle) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The live object `p` of `kind`, or null.
  const LtObject* LtFindLocked(api::HandleKind kind, const void* p) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks a matmul's descriptor and layouts and fills `plan`, or answers
  // the status cuBLASLt would (NOT_SUPPORTED, one log line, for what the
  // host backend does not run).
  cublasStatus_t LtPlanLocked(const char* api, cublasLtMatmulDesc_t desc,
                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, LtPlan* plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // LtPlanLocked's steps once the types are checked: the descriptor's
  // attributes (epilogue, pointer mode, operations; every other one at its
  // default), then the layouts' shapes, leading dimensions and batches.
  static cublasStatus_t LtPlanDescriptor(const char* api, const LtObject& op, int64_t type,
                                         LtPlan* plan);
  static cublasStatus_t LtPlanShapes(const char* api, const LtObject* const layouts[4],
                                     LtPlan* plan);
  template <typename T>
  cublasStatus_t LtMatmul(const LtPlan& plan, const void* alpha, const void* a, const void* b,
                          const void* beta, const void* c, void* d, cudaStream_t stream);
  bool LtDevicePointers(uint64_t desc);

  // Ends the capture of graph `g` on every stream that joined it.
  void EndCaptureLocked(Graph* g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DeviceRange range_;
  const std::unique_ptr<hostkernel::HostKernelRegistry> registry_;  // null: no libraries
  const int num_cpus_;

  // Queues the held launches on their stream (LaunchKernelMayHold).
  void FlushHeldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable std::mutex mu_;
  const int launch_batch_max_;  // BackendOptions::launch_graph_max
  std::vector<std::pair<HostStream*, HostStream::Op>> held_ ABSL_GUARDED_BY(mu_);
  uint64_t held_batches_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t held_launches_ ABSL_GUARDED_BY(mu_) = 0;
  FixedRangeAllocator allocator_ ABSL_GUARDED_BY(mu_);
  std::vector<PendingFree> pending_frees_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, uint64_t> shared_host_ ABSL_GUARDED_BY(mu_);  // start -> size
  std::unique_ptr<HostStream> legacy_;  // set in the constructor, never replaced
  // Boundary snapshot copies (QueueSnapshotCopies): their stream, and the
  // marker of the last ones, which every later operation waits for.
  std::unique_ptr<HostStream> snapshot_stream_;
  std::shared_ptr<Marker> snapshot_gate_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<HostStream*, std::unique_ptr<HostStream>> streams_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<HostStream>> retired_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Event*, std::unique_ptr<Event>> events_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> modules_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<const void*, FuncAttrs> kernels_ ABSL_GUARDED_BY(mu_);
  // Device variables handed out by GetSymbol: start -> size (device memory
  // outside the fixed range, see DeviceAccessible).
  std::map<uint64_t, uint64_t> symbols_ ABSL_GUARDED_BY(mu_);
  std::map<int, size_t> limits_ ABSL_GUARDED_BY(mu_);
  unsigned int device_flags_ ABSL_GUARDED_BY(mu_) = 0;
  MemPool default_pool_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Graph*, std::unique_ptr<Graph>> graphs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<GraphExec*, std::unique_ptr<GraphExec>> execs_ ABSL_GUARDED_BY(mu_);
  // Capturing streams and the graph each records into (owned by graphs_).
  absl::flat_hash_map<HostStream*, Graph*> captures_ ABSL_GUARDED_BY(mu_);
  cudaStreamCaptureMode capture_mode_ ABSL_GUARDED_BY(mu_) = cudaStreamCaptureModeGlobal;
  unsigned long long capture_serial_ ABSL_GUARDED_BY(mu_) = 0;
  // Graph-owned allocations -> how many graphs and executables hold each.
  absl::flat_hash_map<uint64_t, int> graph_allocs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<BlasHandle*, std::unique_ptr<BlasHandle>> blas_handles_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<const void*, std::unique_ptr<LtObject>> lt_objects_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<DnnHandle*, std::unique_ptr<DnnHandle>> dnn_handles_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<DnnDescriptor*, std::unique_ptr<DnnDescriptor>> dnn_descriptors_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<DnnLegacyDescriptor*, std::unique_ptr<DnnLegacyDescriptor>> dnn_legacy_
      ABSL_GUARDED_BY(mu_);
  std::string dnn_last_error_ ABSL_GUARDED_BY(mu_);

  std::mutex error_mu_;
  std::vector<std::pair<HostStream*, cudaError_t>> errors_ ABSL_GUARDED_BY(error_mu_);
};

}  // namespace host
}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_BACKENDS_HOST_HOST_BACKEND_H_

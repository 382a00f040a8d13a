// Hand-written shim hooks: host callbacks, device reset, and the graph rows
// whose arguments hold arrays of handles (not forwarded yet).
#include <cuda_runtime_api.h>

#include "api/hook_protocol.h"
#include "shim/call.h"
#include "shim/runtime.h"

namespace {

using revenant::api::ApiId;

cudaError_t SendCallback(ApiId id, cudaStream_t stream, void* fn, void* user_data, uint8_t kind,
                         unsigned int flags) {
  if (fn == nullptr) {
    revenant::shim::SetLastError(cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
  }
  revenant::wire::Sizer sz;
  sz.Put(uint64_t{}); sz.Put(uint64_t{}); sz.Put(uint64_t{}); sz.Put(uint8_t{}); sz.Put(uint32_t{});
  revenant::shim::Call call(id, sz.size());
  if (!call.ok()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  call.args().Put(reinterpret_cast<uint64_t>(stream));
  call.args().Put(reinterpret_cast<uint64_t>(fn));
  call.args().Put(reinterpret_cast<uint64_t>(user_data));
  call.args().Put(kind);
  call.args().Put(static_cast<uint32_t>(flags));
  if (!call.Send()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  return cudaSuccess;
}

cudaError_t NotYet(const char* name) {
  revenant::shim::LogNotSupported(name);
  revenant::shim::SetLastError(cudaErrorNotSupported);
  return cudaErrorNotSupported;
}

}  // namespace

extern "C" REVENANT_EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn,
                                                          void* userData) {
  return SendCallback(ApiId::cudaLaunchHostFunc, stream, reinterpret_cast<void*>(fn), userData,
                      revenant::hooks::kCallbackHostFn, 0);
}

extern "C" REVENANT_EXPORT cudaError_t cudaStreamAddCallback(cudaStream_t stream,
                                                             cudaStreamCallback_t callback,
                                                             void* userData, unsigned int flags) {
  if (flags != 0) {
    revenant::shim::SetLastError(cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
  }
  return SendCallback(ApiId::cudaStreamAddCallback, stream, reinterpret_cast<void*>(callback),
                      userData, revenant::hooks::kCallbackStream, flags);
}

extern "C" REVENANT_EXPORT cudaError_t cudaDeviceReset(void) {
  revenant::shim::Call call(ApiId::cudaDeviceReset, 0);
  if (!call.ok()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  if (!call.Send()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  return static_cast<cudaError_t>(call.status());
}

// Graph rows whose parameters are arrays of node handles or structs holding
// handles and kernel arguments. They need hand-written marshalling; until it
// exists they answer cudaErrorNotSupported with one log line each.
extern "C" REVENANT_EXPORT cudaError_t cudaStreamBeginCaptureToGraph(
    cudaStream_t, cudaGraph_t, const cudaGraphNode_t*, const cudaGraphEdgeData*, size_t,
    cudaStreamCaptureMode) {
  return NotYet("cudaStreamBeginCaptureToGraph");
}
extern "C" REVENANT_EXPORT cudaError_t cudaStreamGetCaptureInfo(
    cudaStream_t, cudaStreamCaptureStatus*, unsigned long long*, cudaGraph_t*,
    const cudaGraphNode_t**, const cudaGraphEdgeData**, size_t*) {
  return NotYet("cudaStreamGetCaptureInfo");
}
extern "C" REVENANT_EXPORT cudaError_t cudaStreamUpdateCaptureDependencies(
    cudaStream_t, cudaGraphNode_t*, const cudaGraphEdgeData*, size_t, unsigned int) {
  return NotYet("cudaStreamUpdateCaptureDependencies");
}
extern "C" REVENANT_EXPORT cudaError_t cudaGraphGetNodes(cudaGraph_t, cudaGraphNode_t*, size_t*) {
  return NotYet("cudaGraphGetNodes");
}
extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddNode(cudaGraphNode_t*, cudaGraph_t,
                                                        const cudaGraphNode_t*,
                                                        const cudaGraphEdgeData*, size_t,
                                                        cudaGraphNodeParams*) {
  return NotYet("cudaGraphAddNode");
}
extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t*, cudaGraph_t,
                                                              const cudaGraphNode_t*, size_t,
                                                              const cudaKernelNodeParams*) {
  return NotYet("cudaGraphAddKernelNode");
}
extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t*, cudaGraph_t,
                                                              const cudaGraphNode_t*, size_t,
                                                              const cudaMemcpy3DParms*) {
  return NotYet("cudaGraphAddMemcpyNode");
}
extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t*, cudaGraph_t,
                                                                const cudaGraphNode_t*, size_t,
                                                                void*, const void*, size_t,
                                                                cudaMemcpyKind) {
  return NotYet("cudaGraphAddMemcpyNode1D");
}
extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t*, cudaGraph_t,
                                                              const cudaGraphNode_t*, size_t,
                                                              const cudaMemsetParams*) {
  return NotYet("cudaGraphAddMemsetNode");
}
extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddHostNode(cudaGraphNode_t*, cudaGraph_t,
                                                            const cudaGraphNode_t*, size_t,
                                                            const cudaHostNodeParams*) {
  return NotYet("cudaGraphAddHostNode");
}
extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t*, cudaGraph_t,
                                                                const cudaGraphNode_t*, size_t,
                                                                cudaMemAllocNodeParams*) {
  return NotYet("cudaGraphAddMemAllocNode");
}
extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t*, cudaGraph_t,
                                                               const cudaGraphNode_t*, size_t,
                                                               void*) {
  return NotYet("cudaGraphAddMemFreeNode");
}
extern "C" REVENANT_EXPORT cudaError_t cudaGraphExecKernelNodeSetParams(
    cudaGraphExec_t, cudaGraphNode_t, const cudaKernelNodeParams*) {
  return NotYet("cudaGraphExecKernelNodeSetParams");
}
extern "C" REVENANT_EXPORT cudaError_t cudaGraphExecUpdate(cudaGraphExec_t, cudaGraph_t,
                                                           cudaGraphExecUpdateResultInfo*) {
  return NotYet("cudaGraphExecUpdate");
}

// Marks a minibatch boundary explicitly (Revenant's own API; a training loop
// may call it after its optimizer step). Asynchronous: one record, no reply.
extern "C" REVENANT_EXPORT void revenantMarkStep(void) {
  revenant::shim::Runtime* rt = revenant::shim::Runtime::Get();
  revenant::transport::ShmClientChannel* ch = rt->Channel();
  if (ch == nullptr) return;
  absl::StatusOr<revenant::transport::RecordWriter> w = ch->BeginRecord(0, rt->CallDeadline());
  if (!w.ok()) return;
  w->header().api_id = revenant::hooks::kMarkStepApiId;
  w->header().reply_slot = -1;
  ch->Commit(std::move(*w));
}

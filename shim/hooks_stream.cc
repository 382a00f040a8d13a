// Hand-written shim hooks: host callbacks, device reset and the step marker
// (the graph rows are in shim/hooks_graph.cc).
#include <cuda_runtime_api.h>

#include "api/hook_protocol.h"
#include "api/hook_structs.h"
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
  // cudaStreamAddCallback's request is laid out as cudaLaunchHostFunc's.
  revenant::hooks::cudaLaunchHostFuncRequest req;
  req.stream = reinterpret_cast<uint64_t>(stream);
  req.fn = reinterpret_cast<uint64_t>(fn);
  req.user_data = reinterpret_cast<uint64_t>(user_data);
  req.kind = kind;
  req.flags = static_cast<uint32_t>(flags);
  revenant::shim::Call call(id, req.Size());
  if (!call.ok()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  req.Encode(call.args());
  if (!call.Send()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  return cudaSuccess;
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
  const revenant::hooks::cudaDeviceResetRequest req;
  revenant::shim::Call call(ApiId::cudaDeviceReset, req.Size());
  if (!call.ok()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  req.Encode(call.args());
  if (!call.Send()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  return static_cast<cudaError_t>(call.status());
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

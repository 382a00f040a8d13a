// The agent side of the hand-written rows (support HOOK). Each decodes the
// layout documented in api/hook_protocol.h; a malformed request answers
// cudaErrorInvalidValue and never touches memory the request may not name.
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

#include "agent/backend.h"
#include "agent/dispatch.h"
#include "agent/session.h"
#include "api/agent_hooks.h"
#include "api/hook_protocol.h"
#include "common/logging.h"

namespace revenant {
namespace agent {
namespace {

Backend* B(DispatchContext& ctx) { return static_cast<Backend*>(ctx.backend); }

// Hooks that need the application connection (shared host memory, staging,
// kernels, callbacks) refuse a request that arrives without one (a
// dispatcher driven outside a session, as in tests and fuzzers).
#define REVENANT_NEED_SESSION(ctx) \
  if ((ctx).session == nullptr) return cudaErrorInvalidValue

bool TranslateStream(DispatchContext& ctx, uint64_t* stream) {
  return ctx.handles->ToBackendRaw(api::HandleKind::kStream, stream);
}

int32_t Copy(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out, bool async_api) {
  REVENANT_NEED_SESSION(ctx);
  uint64_t dst = 0, src = 0, count = 0, stream = 0;
  int32_t kind = 0;
  uint8_t mode = 0;
  if (!in.Get(&dst) || !in.Get(&src) || !in.Get(&count) || !in.Get(&kind) || !in.Get(&stream) ||
      !in.Get(&mode)) {
    return cudaErrorInvalidValue;
  }
  if (!TranslateStream(ctx, &stream)) return cudaErrorInvalidResourceHandle;
  Session* session = ctx.session;
  transport::ShmServerChannel* ch = session->channel();
  const auto k = static_cast<cudaMemcpyKind>(kind);
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  void* d = reinterpret_cast<void*>(dst);
  const void* sp = reinterpret_cast<const void*>(src);
  // Host-side pointers must be shared memory of this session: the device
  // side is checked by the backend.
  auto host_ok = [&](const void* p) {
    return session->IsSharedHost(p, count) ||
           (reinterpret_cast<uint64_t>(p) >= B(ctx)->device_range().base &&
            reinterpret_cast<uint64_t>(p) - B(ctx)->device_range().base <
                B(ctx)->device_range().size);
  };
  switch (mode) {
    case hooks::kDirect:
      if (!host_ok(d) || !host_ok(sp)) return cudaErrorInvalidValue;
      return B(ctx)->Memcpy(d, sp, count, k, s, async_api);
    case hooks::kInlineSource: {
      const char* data = nullptr;
      uint64_t n = 0;
      if (!in.GetBytes(&data, &n) || data == nullptr || n != count) return cudaErrorInvalidValue;
      return B(ctx)->Memcpy(d, data, count, k, s, async_api);
    }
    case hooks::kStagingSource: {
      uint64_t offset = 0;
      if (!in.Get(&offset) || offset > ch->staging_size() || count > ch->staging_size() - offset)
        return cudaErrorInvalidValue;
      return B(ctx)->Memcpy(d, ch->staging() + offset, count, k, s, false);
    }
    case hooks::kReplyDest: {
      char* buf = out.ReserveBytes(count);
      if (buf == nullptr) return cudaErrorInvalidValue;
      return B(ctx)->Memcpy(buf, sp, count, k, s, false);
    }
    case hooks::kStagingDest: {
      uint64_t offset = 0;
      if (!in.Get(&offset) || offset > ch->staging_size() || count > ch->staging_size() - offset)
        return cudaErrorInvalidValue;
      return B(ctx)->Memcpy(ch->staging() + offset, sp, count, k, s, false);
    }
    default:
      return cudaErrorInvalidValue;
  }
}

int32_t LaunchHook(DispatchContext& ctx, wire::Decoder& in, bool cooperative_api) {
  REVENANT_NEED_SESSION(ctx);
  uint64_t function_id = 0, shared = 0, stream = 0;
  dim3 grid, block;
  uint8_t cooperative = 0;
  const char* args = nullptr;
  uint64_t args_size = 0;
  if (!in.Get(&function_id) || !in.Get(&grid) || !in.Get(&block) || !in.Get(&shared) ||
      !in.Get(&stream) || !in.Get(&cooperative) || !in.GetBytes(&args, &args_size)) {
    return cudaErrorInvalidValue;
  }
  uint64_t handle = function_id;
  if (!ctx.handles->ToBackendRaw(api::HandleKind::kFunction, &handle))
    return cudaErrorInvalidDeviceFunction;
  const KernelInfo* kernel = ctx.session->FindKernel(reinterpret_cast<const void*>(handle));
  if (kernel == nullptr) return cudaErrorInvalidDeviceFunction;
  if (args_size != kernel->args_size) return cudaErrorInvalidValue;
  if (!TranslateStream(ctx, &stream)) return cudaErrorInvalidResourceHandle;
  return B(ctx)->LaunchKernel(*kernel, grid, block, shared, reinterpret_cast<cudaStream_t>(stream),
                              args, cooperative != 0 || cooperative_api);
}

int32_t CallbackHook(DispatchContext& ctx, wire::Decoder& in) {
  REVENANT_NEED_SESSION(ctx);
  uint64_t stream = 0, fn = 0, user_data = 0;
  uint8_t kind = 0;
  uint32_t flags = 0;
  if (!in.Get(&stream) || !in.Get(&fn) || !in.Get(&user_data) || !in.Get(&kind) ||
      !in.Get(&flags) || fn == 0 || kind > hooks::kCallbackStream) {
    return cudaErrorInvalidValue;
  }
  const uint64_t virtual_stream = stream;
  if (!TranslateStream(ctx, &stream)) return cudaErrorInvalidResourceHandle;
  Session* session = ctx.session;
  hooks::CallbackRecord rec{};
  rec.fn = fn;
  rec.user_data = user_data;
  rec.stream = virtual_stream;
  rec.kind = kind;
  const bool replayed = session->replaying();
  return B(ctx)->EnqueueHostCallback(reinterpret_cast<cudaStream_t>(stream),
                                     [session, rec, replayed] {
                                       session->RunClientCallback(rec, replayed);
                                     });
}

int32_t NotYet(const char* name) {
  REVENANT_LOG(WARNING, "agent") << name << " is not supported yet";
  return cudaErrorNotSupported;
}

}  // namespace

int32_t Hook_cudaDeviceReset(DispatchContext& ctx, wire::Decoder& in, wire::Encoder&) {
  REVENANT_NEED_SESSION(ctx);
  if (in.remaining() != 0) return cudaErrorInvalidValue;
  ctx.session->ForgetDeviceState();
  return cudaSuccess;
}

int32_t Hook_cudaHostAlloc(DispatchContext& ctx, wire::Decoder& in, wire::Encoder&) {
  REVENANT_NEED_SESSION(ctx);
  uint64_t addr = 0, size = 0;
  uint32_t flags = 0;
  const char* path = nullptr;
  uint64_t path_len = 0;
  if (!in.Get(&addr) || !in.Get(&size) || !in.Get(&flags) || !in.GetBytes(&path, &path_len) ||
      path == nullptr) {
    return cudaErrorInvalidValue;
  }
  return ctx.session->MapSharedHost(addr, size, flags, std::string(path, path_len));
}

int32_t Hook_cudaMallocHost(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  return Hook_cudaHostAlloc(ctx, in, out);
}

int32_t Hook_cudaFreeHost(DispatchContext& ctx, wire::Decoder& in, wire::Encoder&) {
  REVENANT_NEED_SESSION(ctx);
  uint64_t addr = 0;
  if (!in.Get(&addr)) return cudaErrorInvalidValue;
  return ctx.session->UnmapSharedHost(addr);
}

// Answered by the shim (see shim/hooks_memory.cc); an agent that receives
// them reports the request as invalid rather than guessing.
int32_t Hook_cudaHostRegister(DispatchContext&, wire::Decoder&, wire::Encoder&) {
  return cudaErrorInvalidValue;
}
int32_t Hook_cudaHostUnregister(DispatchContext&, wire::Decoder&, wire::Encoder&) {
  return cudaErrorInvalidValue;
}
int32_t Hook_cudaHostGetDevicePointer(DispatchContext&, wire::Decoder&, wire::Encoder&) {
  return cudaErrorInvalidValue;
}

int32_t Hook_cudaMemcpy(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  return Copy(ctx, in, out, false);
}
int32_t Hook_cudaMemcpyAsync(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  return Copy(ctx, in, out, true);
}

int32_t Hook_cudaStreamAddCallback(DispatchContext& ctx, wire::Decoder& in, wire::Encoder&) {
  return CallbackHook(ctx, in);
}
int32_t Hook_cudaLaunchHostFunc(DispatchContext& ctx, wire::Decoder& in, wire::Encoder&) {
  return CallbackHook(ctx, in);
}

int32_t Hook_cudaLaunchKernel(DispatchContext& ctx, wire::Decoder& in, wire::Encoder&) {
  return LaunchHook(ctx, in, false);
}
int32_t Hook_cudaLaunchCooperativeKernel(DispatchContext& ctx, wire::Decoder& in,
                                         wire::Encoder&) {
  return LaunchHook(ctx, in, true);
}
int32_t Hook___cudaLaunchKernel(DispatchContext& ctx, wire::Decoder& in, wire::Encoder&) {
  return LaunchHook(ctx, in, false);
}
int32_t Hook___cudaLaunchKernel_ptsz(DispatchContext& ctx, wire::Decoder& in, wire::Encoder&) {
  return LaunchHook(ctx, in, false);
}

int32_t Hook___cudaRegisterFatBinaryEnd(DispatchContext& ctx, wire::Decoder& in,
                                        wire::Encoder& out) {
  REVENANT_NEED_SESSION(ctx);
  uint64_t module_key = 0;
  bool has_image = false;
  const char* image = nullptr;
  uint64_t image_size = 0;
  const char* name = nullptr;
  uint64_t name_len = 0;
  if (!in.Get(&module_key) || !in.GetFlag(&has_image)) return cudaErrorInvalidValue;
  if (has_image && !in.GetBytes(&image, &image_size)) return cudaErrorInvalidValue;
  if (!in.GetBytes(&name, &name_len) || name == nullptr) return cudaErrorInvalidValue;
  Session* session = ctx.session;
  if (has_image && !session->module_loaded(module_key)) {
    absl::Status s = B(ctx)->LoadModule(module_key, absl::string_view(image ? image : "", image_size));
    if (!s.ok()) {
      REVENANT_LOG(ERROR, "agent") << "module " << module_key << ": " << s;
      return cudaErrorInvalidKernelImage;
    }
    session->set_module_loaded(module_key);
  }
  if (!session->module_loaded(module_key)) return cudaErrorInvalidResourceHandle;
  const std::string mangled(name, name_len);
  absl::StatusOr<KernelInfo> k = B(ctx)->GetKernel(module_key, mangled);
  if (!k.ok()) {
    REVENANT_LOG(ERROR, "agent") << "kernel " << mangled << ": " << k.status();
    return cudaErrorInvalidDeviceFunction;
  }
  session->AddKernel(*k);
  uint64_t id = reinterpret_cast<uint64_t>(k->handle);
  id = ctx.handles->ToVirtualRaw(api::HandleKind::kFunction, id);
  out.Put(id);
  out.Put(k->args_size);
  std::string params;
  for (const KernelInfo::Param& p : k->params) {
    params.append(reinterpret_cast<const char*>(&p.offset), 4);
    params.append(reinterpret_cast<const char*>(&p.size), 4);
  }
  out.PutBytes(params.data(), params.size());
  return cudaSuccess;
}

#define REVENANT_NOT_YET(name)                                                  \
  int32_t Hook_##name(DispatchContext&, wire::Decoder&, wire::Encoder&) {       \
    return NotYet(#name);                                                       \
  }
REVENANT_NOT_YET(cudaStreamBeginCaptureToGraph)
REVENANT_NOT_YET(cudaStreamGetCaptureInfo)
REVENANT_NOT_YET(cudaStreamUpdateCaptureDependencies)
REVENANT_NOT_YET(cudaGraphGetNodes)
REVENANT_NOT_YET(cudaGraphAddNode)
REVENANT_NOT_YET(cudaGraphAddKernelNode)
REVENANT_NOT_YET(cudaGraphAddMemcpyNode)
REVENANT_NOT_YET(cudaGraphAddMemcpyNode1D)
REVENANT_NOT_YET(cudaGraphAddMemsetNode)
REVENANT_NOT_YET(cudaGraphAddHostNode)
REVENANT_NOT_YET(cudaGraphAddMemAllocNode)
REVENANT_NOT_YET(cudaGraphAddMemFreeNode)
REVENANT_NOT_YET(cudaGraphExecKernelNodeSetParams)
REVENANT_NOT_YET(cudaGraphExecUpdate)
#undef REVENANT_NOT_YET

}  // namespace agent
}  // namespace revenant

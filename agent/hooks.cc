// The agent side of the hand-written rows (support HOOK). Each decodes the
// layout documented in api/hook_protocol.h; a malformed request answers
// cudaErrorInvalidValue and never touches memory the request may not name.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/backend.h"
#include "agent/dispatch.h"
#include "agent/session.h"
#include "api/agent_hooks.h"
#include "api/hook_protocol.h"
#include "api/launch_attributes.h"
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

// A copy whose head was read; `symbol_side` names the side the agent
// resolved itself to a module variable (exempt from the host-side check:
// the backend checks it as device memory).
enum class SymbolSide { kNone, kDst, kSrc };
int32_t CopyBody(DispatchContext& ctx, const hooks::CopyHead& h, wire::Decoder& in,
                 wire::Encoder& out, bool async_api, SymbolSide symbol_side) {
  const uint64_t dst = h.dst, src = h.src, count = h.count;
  const int32_t kind = h.kind;
  const uint8_t mode = h.mode;
  uint64_t stream = h.stream;
  if (!TranslateStream(ctx, &stream)) return cudaErrorInvalidResourceHandle;
  Session* session = ctx.session;
  transport::ShmServerChannel* ch = session->channel();
  cudaMemcpyKind k;
  if (!wire::ToEnum(kind, &k)) return cudaErrorInvalidMemcpyDirection;
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  void* d = reinterpret_cast<void*>(dst);
  const void* sp = reinterpret_cast<const void*>(src);
  // Host-side pointers must be shared memory of this session: the device
  // side is checked by the backend.
  auto host_ok = [&](const void* p) {
    if ((symbol_side == SymbolSide::kDst && p == d) || (symbol_side == SymbolSide::kSrc && p == sp))
      return true;
    return session->IsSharedHost(p, count) ||
           (reinterpret_cast<uint64_t>(p) >= B(ctx)->device_range().base &&
            reinterpret_cast<uint64_t>(p) - B(ctx)->device_range().base <
                B(ctx)->device_range().size);
  };
  switch (mode) {
    case hooks::kDirect: {
      if (!host_ok(d) || !host_ok(sp)) return cudaErrorInvalidValue;
      // An upload journaled as a device capture (agent/upload_capture.h).
      const UploadCapturePool::Capture* cap = session->PendingCapture(ctx.seq);
      if (cap == nullptr || cap->size != count) return B(ctx)->Memcpy(d, sp, count, k, s, async_api);
      bool captured = false;
      const cudaError_t e = B(ctx)->MemcpyCaptured(d, sp, count, s, async_api, cap->data,
                                                   cap->done, cap->seq, &captured);
      session->CaptureRan(ctx.seq, e == cudaSuccess && captured);
      return e;
    }
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

int32_t Copy(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out, bool async_api) {
  REVENANT_NEED_SESSION(ctx);
  hooks::CopyHead h;
  if (!hooks::GetCopyHead(in, &h)) return cudaErrorInvalidValue;
  return CopyBody(ctx, h, in, out, async_api, SymbolSide::kNone);
}

// u64 module_key, bytes device_name, u64 offset, then a copy body whose
// symbol side (dst for To, src for From) the agent fills in.
int32_t SymbolCopy(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out, bool to_symbol,
                   bool async_api) {
  REVENANT_NEED_SESSION(ctx);
  uint64_t module_key = 0, offset = 0;
  const char* name = nullptr;
  uint64_t name_len = 0;
  if (!in.Get(&module_key) || !in.GetBytes(&name, &name_len) || name == nullptr ||
      !in.Get(&offset)) {
    return cudaErrorInvalidValue;
  }
  hooks::CopyHead h;
  if (!hooks::GetCopyHead(in, &h)) return cudaErrorInvalidValue;
  if (!ctx.session->module_loaded(module_key)) return cudaErrorInvalidSymbol;
  absl::StatusOr<Backend::Symbol> sym = B(ctx)->GetSymbol(module_key, std::string(name, name_len));
  if (!sym.ok()) {
    REVENANT_LOG(ERROR, "agent") << sym.status();
    return cudaErrorInvalidSymbol;
  }
  if (offset > sym->size || h.count > sym->size - offset) return cudaErrorInvalidValue;
  const uint64_t addr = reinterpret_cast<uint64_t>(sym->address) + offset;
  if (to_symbol) h.dst = addr; else h.src = addr;
  return CopyBody(ctx, h, in, out, async_api, to_symbol ? SymbolSide::kDst : SymbolSide::kSrc);
}

int32_t LaunchHook(DispatchContext& ctx, wire::Decoder& in, bool cooperative_api,
                   bool ex = false) {
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
  if (ex) {
    const char* attr_bytes = nullptr;
    uint64_t attr_size = 0;
    if (!in.GetBytes(&attr_bytes, &attr_size) || attr_size % sizeof(cudaLaunchAttribute) != 0 ||
        attr_size / sizeof(cudaLaunchAttribute) > api::kMaxLaunchAttributes) {
      return cudaErrorInvalidValue;
    }
    std::vector<cudaLaunchAttribute> attrs(attr_size / sizeof(cudaLaunchAttribute));
    // Each id is checked before it is copied into its enum.
    for (size_t i = 0; i < attrs.size(); ++i) {
      std::underlying_type_t<cudaLaunchAttributeID> id = 0;
      std::memcpy(&id, attr_bytes + i * sizeof(cudaLaunchAttribute) + offsetof(cudaLaunchAttribute, id),
                  sizeof(id));
      if (!wire::WireEnum<cudaLaunchAttributeID>::Valid(id)) return cudaErrorInvalidValue;
    }
    if (attr_size > 0) std::memcpy(attrs.data(), attr_bytes, attr_size);
    // Events inside attributes are the application's virtual handles.
    for (cudaLaunchAttribute& a : attrs) {
      cudaEvent_t* ev = nullptr;
      if (a.id == cudaLaunchAttributeProgrammaticEvent) ev = &a.val.programmaticEvent.event;
      if (a.id == cudaLaunchAttributeLaunchCompletionEvent) ev = &a.val.launchCompletionEvent.event;
      if (ev == nullptr) continue;
      uint64_t id = reinterpret_cast<uint64_t>(*ev);
      if (!ctx.handles->ToBackendRaw(api::HandleKind::kEvent, &id))
        return cudaErrorInvalidResourceHandle;
      *ev = reinterpret_cast<cudaEvent_t>(id);
    }
    if (in.remaining() != 0) return cudaErrorInvalidValue;
    return B(ctx)->LaunchKernelEx(*kernel, grid, block, shared,
                                  reinterpret_cast<cudaStream_t>(stream), args, attrs);
  }
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
  const Session::CallbackOrigin origin = session->callback_origin();
  return B(ctx)->EnqueueHostCallback(reinterpret_cast<cudaStream_t>(stream),
                                     [session, rec, origin] {
                                       session->RunClientCallback(rec, origin);
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

// Application memory registered with cudaHostRegister: the shim made its
// pages a shared file, which the agent maps like cudaHostAlloc's (same
// layout: address, size, flags, path); unregistering unmaps it.
int32_t Hook_cudaHostRegister(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  return Hook_cudaHostAlloc(ctx, in, out);
}
int32_t Hook_cudaHostUnregister(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  return Hook_cudaFreeHost(ctx, in, out);
}
// Answered by the shim (see shim/hooks_memory.cc); an agent that receives
// it reports the request as invalid rather than guessing.
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
int32_t Hook_cudaLaunchKernelExC(DispatchContext& ctx, wire::Decoder& in, wire::Encoder&) {
  return LaunchHook(ctx, in, false, /*ex=*/true);
}
int32_t Hook_cudaMemcpyToSymbol(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  return SymbolCopy(ctx, in, out, /*to_symbol=*/true, false);
}
int32_t Hook_cudaMemcpyFromSymbol(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  return SymbolCopy(ctx, in, out, /*to_symbol=*/false, false);
}
int32_t Hook_cudaMemcpyToSymbolAsync(DispatchContext& ctx, wire::Decoder& in,
                                     wire::Encoder& out) {
  return SymbolCopy(ctx, in, out, /*to_symbol=*/true, true);
}
int32_t Hook_cudaMemcpyFromSymbolAsync(DispatchContext& ctx, wire::Decoder& in,
                                       wire::Encoder& out) {
  return SymbolCopy(ctx, in, out, /*to_symbol=*/false, true);
}
int32_t Hook___cudaLaunchKernel(DispatchContext& ctx, wire::Decoder& in, wire::Encoder&) {
  return LaunchHook(ctx, in, false);
}
int32_t Hook___cudaLaunchKernel_ptsz(DispatchContext& ctx, wire::Decoder& in, wire::Encoder&) {
  return LaunchHook(ctx, in, false);
}

namespace {

// A module image the application has in a file it mapped (api/hook_protocol.h).
struct ModuleFile {
  std::string path;
  uint64_t offset = 0, size = 0, dev = 0, ino = 0;
  int64_t mtime_ns = 0;
};

// Reads the image, refusing anything but the very file the application
// described (same device, inode and modification time) and a fat binary
// that starts where it said.
absl::Status ReadModuleFile(const ModuleFile& f, std::string* out) {
  constexpr uint64_t kMaxImage = uint64_t{1} << 30;
  if (f.path.empty() || f.path[0] != '/' || f.path.find('\0') != std::string::npos)
    return absl::InvalidArgumentError("module file: not an absolute path");
  if (f.size < 16 || f.size > kMaxImage)
    return absl::InvalidArgumentError(absl::StrCat("module file ", f.path, ": bad size ", f.size));
  const int fd = open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("module file ", f.path, ": ", strerror(errno)));
  struct stat st {};
  absl::Status s;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    s = absl::InvalidArgumentError(absl::StrCat("module file ", f.path, ": not a regular file"));
  } else if (static_cast<uint64_t>(st.st_dev) != f.dev ||
             static_cast<uint64_t>(st.st_ino) != f.ino ||
             int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec != f.mtime_ns) {
    s = absl::FailedPreconditionError(absl::StrCat(
        "module file ", f.path, " is not the file the application mapped (changed on disk?)"));
  } else if (f.offset + f.size > static_cast<uint64_t>(st.st_size)) {
    s = absl::OutOfRangeError(absl::StrCat("module file ", f.path, ": image past its end"));
  } else {
    out->resize(f.size);
    uint64_t done = 0;
    while (done < f.size) {
      const ssize_t n = pread(fd, out->data() + done, f.size - done, f.offset + done);
      if (n <= 0) {
        s = absl::DataLossError(absl::StrCat("module file ", f.path, ": short read"));
        break;
      }
      done += n;
    }
    uint32_t magic = 0;
    if (s.ok()) std::memcpy(&magic, out->data(), 4);
    if (s.ok() && magic != 0xBA55ED50u)
      s = absl::DataLossError(absl::StrCat("module file ", f.path, ": no fat binary at offset ",
                                           f.offset));
  }
  close(fd);
  return s;
}

// Loads the module if the request carries its image, then finds a kernel
// (reply: id and layout) or a device variable (reply: address and size).
int32_t ModuleRequest(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out,
                      bool variable) {
  REVENANT_NEED_SESSION(ctx);
  uint64_t module_key = 0;
  bool has_image = false, by_file = false;
  const char* image = nullptr;
  uint64_t image_size = 0;
  ModuleFile file;
  const char* name = nullptr;
  uint64_t name_len = 0;
  if (!in.Get(&module_key) || !in.GetFlag(&has_image)) return cudaErrorInvalidValue;
  if (has_image && !in.GetFlag(&by_file)) return cudaErrorInvalidValue;
  if (has_image && by_file) {
    const char* path = nullptr;
    uint64_t path_len = 0;
    if (!in.GetBytes(&path, &path_len) || path == nullptr || !in.Get(&file.offset) ||
        !in.Get(&file.size) || !in.Get(&file.dev) || !in.Get(&file.ino) ||
        !in.Get(&file.mtime_ns)) {
      return cudaErrorInvalidValue;
    }
    file.path.assign(path, path_len);
  } else if (has_image && !in.GetBytes(&image, &image_size)) {
    return cudaErrorInvalidValue;
  }
  if (!in.GetBytes(&name, &name_len) || name == nullptr) return cudaErrorInvalidValue;
  Session* session = ctx.session;
  std::string file_image;
  if (has_image && by_file && !session->module_loaded(module_key)) {
    absl::Status s = ReadModuleFile(file, &file_image);
    if (!s.ok()) {
      REVENANT_LOG(ERROR, "agent") << "module " << module_key << ": " << s;
      return cudaErrorInvalidKernelImage;
    }
    REVENANT_LOG(DEBUG, "agent") << "module " << module_key << ": " << file.size
                                 << " bytes read from " << file.path << " at offset "
                                 << file.offset;
    image = file_image.data();
    image_size = file_image.size();
  }
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
  if (variable) {
    bool want_address = false;
    if (!in.GetFlag(&want_address)) return cudaErrorInvalidValue;
    absl::StatusOr<Backend::Symbol> sym = B(ctx)->GetSymbol(module_key, mangled);
    if (!sym.ok()) {
      REVENANT_LOG(ERROR, "agent") << "device variable " << mangled << ": " << sym.status();
      return cudaErrorInvalidSymbol;
    }
    out.Put(static_cast<uint64_t>(sym->size));
    if (want_address) out.Put(reinterpret_cast<uint64_t>(sym->address));
    return cudaSuccess;
  }
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
}  // namespace

int32_t Hook___cudaRegisterFatBinaryEnd(DispatchContext& ctx, wire::Decoder& in,
                                        wire::Encoder& out) {
  return ModuleRequest(ctx, in, out, /*variable=*/false);
}

// Same layout (the name is the variable's device name) and a flag
// want_address; reply: u64 size [, u64 address]. The address is asked for
// only by cudaGetSymbolAddress: a replay compares it with the journaled one,
// so a replacement agent that has the variable elsewhere fails the recovery
// loudly (the application holds the old address) -- copies by symbol never
// depend on it.
int32_t Hook___cudaRegisterVar(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  return ModuleRequest(ctx, in, out, /*variable=*/true);
}

// --- Graphs (layouts: shim/hooks_graph.cc) ----------------------------------------------

namespace {

// bytes of u64 virtual GRAPH_NODE ids -> backend nodes.
bool GetNodes(DispatchContext& ctx, wire::Decoder& in, std::vector<cudaGraphNode_t>* nodes) {
  const char* data = nullptr;
  uint64_t n = 0;
  if (!in.GetBytes(&data, &n) || n % 8 != 0) return false;
  nodes->clear();
  for (uint64_t i = 0; i < n; i += 8) {
    uint64_t id = 0;
    std::memcpy(&id, data + i, 8);
    if (!ctx.handles->ToBackendRaw(api::HandleKind::kGraphNode, &id)) return false;
    nodes->push_back(reinterpret_cast<cudaGraphNode_t>(id));
  }
  return true;
}

bool GetGraph(DispatchContext& ctx, wire::Decoder& in, cudaGraph_t* graph) {
  uint64_t id = 0;
  if (!in.Get(&id) || !ctx.handles->ToBackendRaw(api::HandleKind::kGraph, &id)) return false;
  *graph = reinterpret_cast<cudaGraph_t>(id);
  return true;
}

// u64 function_id, dim3 grid, dim3 block, u64 shared_bytes, bytes packed_args.
struct KernelParams {
  const KernelInfo* kernel = nullptr;
  dim3 grid, block;
  uint64_t shared = 0;
  const char* args = nullptr;
};
int32_t GetKernelParams(DispatchContext& ctx, wire::Decoder& in, KernelParams* k) {
  uint64_t function_id = 0, args_size = 0;
  if (!in.Get(&function_id) || !in.Get(&k->grid) || !in.Get(&k->block) || !in.Get(&k->shared) ||
      !in.GetBytes(&k->args, &args_size)) {
    return cudaErrorInvalidValue;
  }
  if (!ctx.handles->ToBackendRaw(api::HandleKind::kFunction, &function_id))
    return cudaErrorInvalidDeviceFunction;
  k->kernel = ctx.session->FindKernel(reinterpret_cast<const void*>(function_id));
  if (k->kernel == nullptr) return cudaErrorInvalidDeviceFunction;
  if (args_size != k->kernel->args_size) return cudaErrorInvalidValue;
  return cudaSuccess;
}

// u64 dst, u64 pitch, u32 value, u32 element_size, u64 width, u64 height.
bool GetMemsetParams(wire::Decoder& in, cudaMemsetParams* p) {
  uint64_t dst = 0, pitch = 0, width = 0, height = 0;
  uint32_t value = 0, elem = 0;
  if (!in.Get(&dst) || !in.Get(&pitch) || !in.Get(&value) || !in.Get(&elem) || !in.Get(&width) ||
      !in.Get(&height)) {
    return false;
  }
  *p = cudaMemsetParams{};
  p->dst = reinterpret_cast<void*>(dst);
  p->pitch = pitch;
  p->value = value;
  p->elementSize = elem;
  p->width = width;
  p->height = height;
  return true;
}

// The application's host function, run through the callback ring each time
// the node runs (as cudaLaunchHostFunc's).
std::function<void()> HostNodeFn(DispatchContext& ctx, uint64_t fn, uint64_t user_data) {
  Session* session = ctx.session;
  hooks::CallbackRecord rec{};
  rec.fn = fn;
  rec.user_data = user_data;
  rec.kind = hooks::kCallbackHostFn;
  return [session, rec] { session->RunClientCallback(rec, session->host_node_origin()); };
}

// A created node: its virtual id as an 8-byte field (the journal keys the
// created handle on the reply's first byte field, as for generated rows).
uint64_t PutNode(DispatchContext& ctx, wire::Encoder& out, cudaGraphNode_t node) {
  const uint64_t id =
      ctx.handles->RegisterNew(api::HandleKind::kGraphNode, reinterpret_cast<uint64_t>(node));
  out.PutBytes(&id, sizeof(id));
  return id;
}

// The most bodies of a conditional node (the shim refuses more).
constexpr uint32_t kMaxConditionalBodies = 256;

// The node-specific part of cudaGraphAdd*Node after graph and dependencies.
int32_t AddNodeOfType(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out,
                      cudaGraph_t graph, const std::vector<cudaGraphNode_t>& deps,
                      cudaGraphNodeType type) {
  cudaGraphNode_t node = nullptr;
  cudaError_t err = cudaErrorInvalidValue;
  void* dptr = nullptr;
  switch (type) {
    case cudaGraphNodeTypeKernel: {
      KernelParams k;
      if (int32_t e = GetKernelParams(ctx, in, &k); e != cudaSuccess) return e;
      err = B(ctx)->AddKernelNode(&node, graph, deps, *k.kernel, k.grid, k.block, k.shared,
                                  k.args);
      break;
    }
    case cudaGraphNodeTypeMemset: {
      cudaMemsetParams p;
      if (!GetMemsetParams(in, &p)) return cudaErrorInvalidValue;
      err = B(ctx)->AddMemsetNode(&node, graph, deps, p);
      break;
    }
    case cudaGraphNodeTypeMemcpy: {
      uint64_t dst = 0, src = 0, count = 0;
      int32_t kind = 0;
      if (!in.Get(&dst) || !in.Get(&src) || !in.Get(&count) || !in.Get(&kind))
        return cudaErrorInvalidValue;
      // Host sides must be memory shared with the application (the backend
      // checks the device sides).
      auto host_ok = [&](uint64_t p) {
        const DeviceRange r = B(ctx)->device_range();
        return (p >= r.base && p - r.base < r.size) ||
               ctx.session->IsSharedHost(reinterpret_cast<const void*>(p), count);
      };
      if (!host_ok(dst) || !host_ok(src)) return cudaErrorInvalidValue;
      cudaMemcpyKind k;
      if (!wire::ToEnum(kind, &k)) return cudaErrorInvalidMemcpyDirection;
      err = B(ctx)->AddMemcpyNode1D(&node, graph, deps, reinterpret_cast<void*>(dst),
                                    reinterpret_cast<const void*>(src), count, k);
      break;
    }
    case cudaGraphNodeTypeHost: {
      uint64_t fn = 0, user_data = 0;
      if (!in.Get(&fn) || !in.Get(&user_data) || fn == 0) return cudaErrorInvalidValue;
      err = B(ctx)->AddHostNode(&node, graph, deps, HostNodeFn(ctx, fn, user_data));
      break;
    }
    case cudaGraphNodeTypeEmpty:
      err = B(ctx)->AddEmptyNode(&node, graph, deps);
      break;
    case cudaGraphNodeTypeMemAlloc: {
      uint64_t bytesize = 0;
      if (!in.Get(&bytesize)) return cudaErrorInvalidValue;
      err = B(ctx)->AddMemAllocNode(&node, graph, deps, bytesize, &dptr);
      break;
    }
    case cudaGraphNodeTypeMemFree: {
      uint64_t p = 0;
      if (!in.Get(&p)) return cudaErrorInvalidValue;
      err = B(ctx)->AddMemFreeNode(&node, graph, deps, reinterpret_cast<void*>(p));
      break;
    }
    case cudaGraphNodeTypeGraph: {
      cudaGraph_t child = nullptr;
      if (!GetGraph(ctx, in, &child)) return cudaErrorInvalidValue;
      err = B(ctx)->AddChildGraphNode(&node, graph, deps, child);
      break;
    }
    case cudaGraphNodeTypeEventRecord:
    case cudaGraphNodeTypeWaitEvent: {
      uint64_t event = 0;
      if (!in.Get(&event)) return cudaErrorInvalidValue;
      if (!ctx.handles->ToBackendRaw(api::HandleKind::kEvent, &event))
        return cudaErrorInvalidResourceHandle;
      err = B(ctx)->AddEventNode(&node, graph, deps, reinterpret_cast<cudaEvent_t>(event),
                                 type == cudaGraphNodeTypeEventRecord);
      break;
    }
    case cudaGraphNodeTypeConditional: {
      uint64_t handle = 0;
      int32_t cond_type = 0;
      uint32_t size = 0;
      cudaGraphConditionalNodeType ct;
      if (!in.Get(&handle) || !in.Get(&cond_type) || !in.Get(&size) ||
          !wire::ToEnum(cond_type, &ct) || size == 0 || size > kMaxConditionalBodies) {
        return cudaErrorInvalidValue;
      }
      std::vector<cudaGraph_t> bodies;
      err = B(ctx)->AddConditionalNode(&node, graph, deps, handle, ct, size, &bodies);
      if (err != cudaSuccess) return err;
      if (bodies.size() != size) return cudaErrorUnknown;
      const uint64_t id = PutNode(ctx, out, node);
      out.Put(uint64_t{0});  // where an alloc node's reply has its address
      // The bodies' ids follow from the node's, which a replay restores
      // (the journal keys the row on the node): so are theirs.
      std::vector<uint64_t> ids;
      for (uint32_t i = 0; i < size; ++i) {
        ids.push_back(ctx.handles->RegisterDerived(
            api::HandleKind::kGraph, reinterpret_cast<uint64_t>(bodies[i]), id, i));
      }
      out.PutBytes(ids.data(), ids.size() * sizeof(uint64_t));
      return cudaSuccess;
    }
    default:
      return NotYet("cudaGraphAddNode of this node type");
  }
  if (err != cudaSuccess) return err;
  PutNode(ctx, out, node);
  if (type == cudaGraphNodeTypeMemAlloc) out.Put(reinterpret_cast<uint64_t>(dptr));
  return cudaSuccess;
}

// u64 graph, bytes deps, then the node's parameters.
int32_t AddNodeHook(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out,
                    cudaGraphNodeType type) {
  REVENANT_NEED_SESSION(ctx);
  cudaGraph_t graph = nullptr;
  std::vector<cudaGraphNode_t> deps;
  if (!GetGraph(ctx, in, &graph) || !GetNodes(ctx, in, &deps)) return cudaErrorInvalidValue;
  return AddNodeOfType(ctx, in, out, graph, deps, type);
}

}  // namespace

// u64 stream, u64 graph, bytes deps, i32 mode.
int32_t Hook_cudaStreamBeginCaptureToGraph(DispatchContext& ctx, wire::Decoder& in,
                                           wire::Encoder&) {
  uint64_t stream = 0;
  cudaGraph_t graph = nullptr;
  std::vector<cudaGraphNode_t> deps;
  int32_t mode = 0;
  if (!in.Get(&stream) || !GetGraph(ctx, in, &graph) || !GetNodes(ctx, in, &deps) ||
      !in.Get(&mode)) {
    return cudaErrorInvalidValue;
  }
  cudaStreamCaptureMode m;
  if (!wire::ToEnum(mode, &m)) return cudaErrorInvalidValue;
  if (!TranslateStream(ctx, &stream)) return cudaErrorInvalidResourceHandle;
  return B(ctx)->BeginCaptureToGraph(reinterpret_cast<cudaStream_t>(stream), graph, deps, m);
}

// u64 stream, flag want_graph; reply: i32 status, u64 id, u64 graph (0 unless
// asked for and capturing), bytes deps (u64 node ids).
int32_t Hook_cudaStreamGetCaptureInfo(DispatchContext& ctx, wire::Decoder& in,
                                      wire::Encoder& out) {
  uint64_t stream = 0;
  bool want_graph = false;
  if (!in.Get(&stream) || !in.GetFlag(&want_graph)) return cudaErrorInvalidValue;
  if (!TranslateStream(ctx, &stream)) return cudaErrorInvalidResourceHandle;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  cudaGraph_t graph = nullptr;
  std::vector<cudaGraphNode_t> deps;
  cudaError_t err = B(ctx)->GetCaptureInfo(reinterpret_cast<cudaStream_t>(stream), &status, &id,
                                           &graph, &deps);
  if (err != cudaSuccess) return err;
  out.Put(static_cast<int32_t>(status));
  out.Put(static_cast<uint64_t>(id));
  uint64_t g = 0;
  if (want_graph && graph != nullptr) {
    g = ctx.handles->ToVirtualRaw(api::HandleKind::kGraph, reinterpret_cast<uint64_t>(graph));
  }
  out.Put(g);
  std::vector<uint64_t> ids;
  for (cudaGraphNode_t n : deps) {
    ids.push_back(
        ctx.handles->ToVirtualRaw(api::HandleKind::kGraphNode, reinterpret_cast<uint64_t>(n)));
  }
  out.PutBytes(ids.data(), ids.size() * 8);
  return cudaSuccess;
}

// u64 stream, bytes deps, u32 flags.
int32_t Hook_cudaStreamUpdateCaptureDependencies(DispatchContext& ctx, wire::Decoder& in,
                                                 wire::Encoder&) {
  uint64_t stream = 0;
  std::vector<cudaGraphNode_t> deps;
  uint32_t flags = 0;
  if (!in.Get(&stream) || !GetNodes(ctx, in, &deps) || !in.Get(&flags))
    return cudaErrorInvalidValue;
  if (!TranslateStream(ctx, &stream)) return cudaErrorInvalidResourceHandle;
  return B(ctx)->UpdateCaptureDependencies(reinterpret_cast<cudaStream_t>(stream), deps, flags);
}

// u64 graph, u64 capacity; reply: u64 count (all nodes), bytes ids (at most
// capacity, creation order).
int32_t Hook_cudaGraphGetNodes(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  cudaGraph_t graph = nullptr;
  uint64_t capacity = 0;
  if (!GetGraph(ctx, in, &graph) || !in.Get(&capacity)) return cudaErrorInvalidValue;
  std::vector<cudaGraphNode_t> nodes;
  if (cudaError_t err = B(ctx)->GraphGetNodes(graph, &nodes); err != cudaSuccess) return err;
  out.Put(static_cast<uint64_t>(nodes.size()));
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < nodes.size() && i < capacity; ++i) {
    ids.push_back(ctx.handles->ToVirtualRaw(api::HandleKind::kGraphNode,
                                            reinterpret_cast<uint64_t>(nodes[i])));
  }
  out.PutBytes(ids.data(), ids.size() * 8);
  return cudaSuccess;
}

int32_t Hook_cudaDeviceGetPCIBusId(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  int32_t device = 0;
  if (!in.Get(&device) || in.remaining() != 0) return cudaErrorInvalidValue;
  char id[hooks::kPciBusIdBytes] = {0};
  cudaError_t err = B(ctx)->PciBusId(id, sizeof(id), device);
  if (err != cudaSuccess) return err;
  id[sizeof(id) - 1] = '\0';
  out.PutBytes(id, std::strlen(id) + 1);
  return cudaSuccess;
}

int32_t Hook_cudaMemPoolSetAccess(DispatchContext& ctx, wire::Decoder& in, wire::Encoder&) {
  uint64_t pool = 0;
  const char* data = nullptr;
  uint64_t n = 0;
  if (!in.Get(&pool) || !in.GetBytes(&data, &n) || n % sizeof(cudaMemAccessDesc) != 0 ||
      in.remaining() != 0) {
    return cudaErrorInvalidValue;
  }
  if (!ctx.handles->ToBackendRaw(api::HandleKind::kMemPool, &pool))
    return cudaErrorInvalidResourceHandle;
  std::vector<cudaMemAccessDesc> descs(n / sizeof(cudaMemAccessDesc));
  if (n > 0) std::memcpy(descs.data(), data, n);
  return B(ctx)->MemPoolSetAccess(reinterpret_cast<cudaMemPool_t>(pool), descs.data(),
                                      descs.size());
}

// u64 node, u64 capacity; reply: u64 count, bytes ids (at most capacity).
int32_t Hook_cudaGraphNodeGetDependencies(DispatchContext& ctx, wire::Decoder& in,
                                          wire::Encoder& out) {
  uint64_t node = 0, capacity = 0;
  if (!in.Get(&node) || !in.Get(&capacity)) return cudaErrorInvalidValue;
  if (!ctx.handles->ToBackendRaw(api::HandleKind::kGraphNode, &node)) return cudaErrorInvalidValue;
  std::vector<cudaGraphNode_t> deps;
  cudaError_t err = B(ctx)->GraphNodeGetDependencies(reinterpret_cast<cudaGraphNode_t>(node), &deps);
  if (err != cudaSuccess) return err;
  out.Put(static_cast<uint64_t>(deps.size()));
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < deps.size() && i < capacity; ++i) {
    ids.push_back(ctx.handles->ToVirtualRaw(api::HandleKind::kGraphNode,
                                            reinterpret_cast<uint64_t>(deps[i])));
  }
  out.PutBytes(ids.data(), ids.size() * 8);
  return cudaSuccess;
}

// u64 graph, u32 flags; reply: bytes dot (the shim writes the file).
int32_t Hook_cudaGraphDebugDotPrint(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  cudaGraph_t graph = nullptr;
  uint32_t flags = 0;
  if (!GetGraph(ctx, in, &graph) || !in.Get(&flags)) return cudaErrorInvalidValue;
  std::string dot;
  if (cudaError_t err = B(ctx)->GraphDebugDot(graph, flags, &dot); err != cudaSuccess) return err;
  char* buf = out.ReserveBytes(dot.size());
  if (buf == nullptr) {
    REVENANT_LOG(ERROR, "agent") << "cudaGraphDebugDotPrint: the graph's description ("
                                 << dot.size() << " bytes) does not fit in a reply";
    return cudaErrorNotSupported;
  }
  std::memcpy(buf, dot.data(), dot.size());
  return cudaSuccess;
}

// u64 graph, bytes deps, i32 type, then the parameters of that type (as the
// Add*Node rows); reply: bytes node (one u64) [, u64 dptr for an alloc node].
int32_t Hook_cudaGraphAddNode(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  REVENANT_NEED_SESSION(ctx);
  cudaGraph_t graph = nullptr;
  std::vector<cudaGraphNode_t> deps;
  int32_t type = 0;
  cudaGraphNodeType t;
  if (!GetGraph(ctx, in, &graph) || !GetNodes(ctx, in, &deps) || !in.Get(&type) ||
      !wire::ToEnum(type, &t))
    return cudaErrorInvalidValue;
  return AddNodeOfType(ctx, in, out, graph, deps, t);
}
int32_t Hook_cudaGraphAddKernelNode(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  return AddNodeHook(ctx, in, out, cudaGraphNodeTypeKernel);
}
int32_t Hook_cudaGraphAddMemcpyNode1D(DispatchContext& ctx, wire::Decoder& in,
                                      wire::Encoder& out) {
  return AddNodeHook(ctx, in, out, cudaGraphNodeTypeMemcpy);
}
int32_t Hook_cudaGraphAddMemsetNode(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  return AddNodeHook(ctx, in, out, cudaGraphNodeTypeMemset);
}
int32_t Hook_cudaGraphAddHostNode(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  return AddNodeHook(ctx, in, out, cudaGraphNodeTypeHost);
}
int32_t Hook_cudaGraphAddMemAllocNode(DispatchContext& ctx, wire::Decoder& in,
                                      wire::Encoder& out) {
  return AddNodeHook(ctx, in, out, cudaGraphNodeTypeMemAlloc);
}
int32_t Hook_cudaGraphAddMemFreeNode(DispatchContext& ctx, wire::Decoder& in,
                                     wire::Encoder& out) {
  return AddNodeHook(ctx, in, out, cudaGraphNodeTypeMemFree);
}
int32_t Hook_cudaGraphAddChildGraphNode(DispatchContext& ctx, wire::Decoder& in,
                                        wire::Encoder& out) {
  return AddNodeHook(ctx, in, out, cudaGraphNodeTypeGraph);
}
int32_t Hook_cudaGraphAddEventRecordNode(DispatchContext& ctx, wire::Decoder& in,
                                         wire::Encoder& out) {
  return AddNodeHook(ctx, in, out, cudaGraphNodeTypeEventRecord);
}
int32_t Hook_cudaGraphAddEventWaitNode(DispatchContext& ctx, wire::Decoder& in,
                                       wire::Encoder& out) {
  return AddNodeHook(ctx, in, out, cudaGraphNodeTypeWaitEvent);
}
// A contiguous 3D copy, sent by the shim as a 1D one (shim/hooks_graph.cc).
int32_t Hook_cudaGraphAddMemcpyNode(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  return AddNodeHook(ctx, in, out, cudaGraphNodeTypeMemcpy);
}

// u64 exec, u64 node, kernel parameters.
int32_t Hook_cudaGraphExecKernelNodeSetParams(DispatchContext& ctx, wire::Decoder& in,
                                              wire::Encoder&) {
  REVENANT_NEED_SESSION(ctx);
  uint64_t exec = 0, node = 0;
  if (!in.Get(&exec) || !in.Get(&node)) return cudaErrorInvalidValue;
  if (!ctx.handles->ToBackendRaw(api::HandleKind::kGraphExec, &exec) ||
      !ctx.handles->ToBackendRaw(api::HandleKind::kGraphNode, &node)) {
    return cudaErrorInvalidValue;
  }
  KernelParams k;
  if (int32_t e = GetKernelParams(ctx, in, &k); e != cudaSuccess) return e;
  return B(ctx)->ExecKernelNodeSetParams(reinterpret_cast<cudaGraphExec_t>(exec),
                                         reinterpret_cast<cudaGraphNode_t>(node), *k.kernel,
                                         k.grid, k.block, k.shared, k.args);
}

// u64 exec, u64 graph; reply (also on failure): i32 result, u64 error_node,
// u64 error_from_node.
int32_t Hook_cudaGraphExecUpdate(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  uint64_t exec = 0;
  cudaGraph_t graph = nullptr;
  if (!in.Get(&exec) || !GetGraph(ctx, in, &graph)) return cudaErrorInvalidValue;
  if (!ctx.handles->ToBackendRaw(api::HandleKind::kGraphExec, &exec)) return cudaErrorInvalidValue;
  cudaGraphExecUpdateResultInfo info{};
  info.result = cudaGraphExecUpdateError;
  cudaError_t err = B(ctx)->ExecUpdate(reinterpret_cast<cudaGraphExec_t>(exec), graph, &info);
  auto node_id = [&](cudaGraphNode_t n) -> uint64_t {
    return n == nullptr ? 0
                        : ctx.handles->ToVirtualRaw(api::HandleKind::kGraphNode,
                                                    reinterpret_cast<uint64_t>(n));
  };
  out.Put(static_cast<int32_t>(info.result));
  out.Put(node_id(info.errorNode));
  out.Put(node_id(info.errorFromNode));
  return err;
}

}  // namespace agent
}  // namespace revenant

// The agent side of the hand-written rows (support HOOK). Each decodes its
// request struct (api/hook_structs.h, from the row's `request` fields) and
// encodes its reply struct; a malformed request answers
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
#include "api/hook_structs.h"
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

// A decoded copy request (cudaMemcpyRequest or cudaMemcpyToSymbolRequest:
// head, data, staging_offset), answered with `Reply`; `symbol_side` names the
// side the agent resolved itself to a module variable (exempt from the
// host-side check: the backend checks it as device memory).
enum class SymbolSide { kNone, kDst, kSrc };
template <typename Reply, typename Request>
int32_t CopyBody(DispatchContext& ctx, const Request& r, wire::Encoder& out, bool async_api,
                 SymbolSide symbol_side) {
  const hooks::CopyHead& h = r.head;
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
      // The device is about to write shared host memory: held uploads from
      // there are copied out first (common/upload_hold.h).
      if (session->holding() && session->IsSharedHost(d, count)) session->CopyOutHolds(d, count);
      // An upload journaled as a device capture (agent/upload_capture.h).
      const UploadCapturePool::Capture* cap = session->PendingCapture(ctx.seq);
      if (cap == nullptr || cap->size != count) return B(ctx)->Memcpy(d, sp, count, k, s, async_api);
      if (cap->held) {
        // Held: the application's shim keeps the source write-protected
        // until its bytes are copied out; the copy runs alone, and the
        // device hashes what it received (a copy out checks the source).
        const uint64_t seq = cap->seq;
        if (B(ctx)->StreamCapturing(s)) {
          // A graph node, which reads its source whenever the graph runs:
          // a replay copies from the source too, nothing is held.
          session->HeldIntoGraph(seq);
          return B(ctx)->Memcpy(d, sp, count, k, s, async_api);
        }
        // (No hash words: every slot was taken and the bytes are in the
        // place already; MemcpyHeld then only copies.)
        bool hashed = false;
        const cudaError_t e =
            B(ctx)->MemcpyHeld(d, sp, count, s, async_api, cap->hash_words, seq, &hashed);
        session->HeldRan(seq, e == cudaSuccess && hashed);
        return e;
      }
      bool captured = false;
      const cudaError_t e = B(ctx)->MemcpyCaptured(d, sp, count, s, async_api, cap->data,
                                                   cap->done, cap->seq, &captured);
      session->CaptureRan(ctx.seq, e == cudaSuccess && captured);
      return e;
    }
    case hooks::kInlineSource: {
      if (r.data.data == nullptr || r.data.size != count) return cudaErrorInvalidValue;
      return B(ctx)->Memcpy(d, r.data.data, count, k, s, async_api);
    }
    case hooks::kStagingSource: {
      const uint64_t offset = r.staging_offset;
      if (offset > ch->staging_size() || count > ch->staging_size() - offset)
        return cudaErrorInvalidValue;
      return B(ctx)->Memcpy(d, ch->staging() + offset, count, k, s, false);
    }
    case hooks::kReplyDest: {
      Reply reply;
      reply.data = wire::Bytes::Reserved(count);
      reply.Encode(out, r);
      if (reply.data.fill == nullptr) return cudaErrorInvalidValue;
      return B(ctx)->Memcpy(reply.data.fill, sp, count, k, s, false);
    }
    case hooks::kStagingDest: {
      const uint64_t offset = r.staging_offset;
      if (offset > ch->staging_size() || count > ch->staging_size() - offset)
        return cudaErrorInvalidValue;
      return B(ctx)->Memcpy(ch->staging() + offset, sp, count, k, s, false);
    }
    default:
      return cudaErrorInvalidValue;
  }
}

int32_t Copy(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out, bool async_api) {
  REVENANT_NEED_SESSION(ctx);
  hooks::cudaMemcpyRequest r;
  if (!r.Decode(in)) return cudaErrorInvalidValue;
  return CopyBody<hooks::cudaMemcpyReply>(ctx, r, out, async_api, SymbolSide::kNone);
}

// A copy whose symbol side (dst for To, src for From) the agent fills in.
int32_t SymbolCopy(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out, bool to_symbol,
                   bool async_api) {
  REVENANT_NEED_SESSION(ctx);
  hooks::cudaMemcpyToSymbolRequest r;
  if (!r.Decode(in) || r.device_name.data == nullptr) return cudaErrorInvalidValue;
  if (!ctx.session->module_loaded(r.module_key)) return cudaErrorInvalidSymbol;
  absl::StatusOr<Backend::Symbol> sym =
      B(ctx)->GetSymbol(r.module_key, std::string(r.device_name.data, r.device_name.size));
  if (!sym.ok()) {
    REVENANT_LOG(ERROR, "agent") << sym.status();
    return cudaErrorInvalidSymbol;
  }
  const uint64_t offset = r.offset;
  if (offset > sym->size || r.head.count > sym->size - offset) return cudaErrorInvalidValue;
  const uint64_t addr = reinterpret_cast<uint64_t>(sym->address) + offset;
  if (to_symbol) r.head.dst = addr; else r.head.src = addr;
  return CopyBody<hooks::cudaMemcpyToSymbolReply>(
      ctx, r, out, async_api, to_symbol ? SymbolSide::kDst : SymbolSide::kSrc);
}

int32_t LaunchHook(DispatchContext& ctx, wire::Decoder& in, bool cooperative_api,
                   bool ex = false) {
  REVENANT_NEED_SESSION(ctx);
  hooks::cudaLaunchKernelExCRequest r;
  if (ex) {
    if (!r.Decode(in)) return cudaErrorInvalidValue;
  } else {
    hooks::cudaLaunchKernelRequest plain;
    if (!plain.Decode(in)) return cudaErrorInvalidValue;
    r.launch = plain.launch;
  }
  const hooks::LaunchParams& l = r.launch;
  const dim3 grid = l.grid, block = l.block;
  const uint64_t shared = l.shared_bytes;
  uint64_t stream = l.stream;
  const char* args = l.args.data;
  uint64_t handle = l.function_id;
  if (!ctx.handles->ToBackendRaw(api::HandleKind::kFunction, &handle))
    return cudaErrorInvalidDeviceFunction;
  const KernelInfo* kernel = ctx.session->FindKernel(reinterpret_cast<const void*>(handle));
  if (kernel == nullptr) return cudaErrorInvalidDeviceFunction;
  if (l.args.size != kernel->args_size) return cudaErrorInvalidValue;
  if (!TranslateStream(ctx, &stream)) return cudaErrorInvalidResourceHandle;
  // A kernel given a pointer into a held upload's source may write it
  // through mapped memory: its bytes are copied out first.
  if (ctx.session->holding()) ctx.session->CopyOutHoldsNamedIn(args, l.args.size);
  if (ex) {
    const char* attr_bytes = r.attrs.data;
    const uint64_t attr_size = r.attrs.size;
    if (attr_size % sizeof(cudaLaunchAttribute) != 0 ||
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
  if (l.cooperative != 0 || cooperative_api) {
    return B(ctx)->LaunchKernel(*kernel, grid, block, shared,
                                reinterpret_cast<cudaStream_t>(stream), args, true);
  }
  return B(ctx)->LaunchKernelMayHold(*kernel, grid, block, shared,
                                     reinterpret_cast<cudaStream_t>(stream), args,
                                     ctx.more_requests);
}

int32_t CallbackHook(DispatchContext& ctx, wire::Decoder& in) {
  REVENANT_NEED_SESSION(ctx);
  hooks::cudaLaunchHostFuncRequest r;
  if (!r.Decode(in) || r.fn == 0 || r.kind > hooks::kCallbackStream) return cudaErrorInvalidValue;
  const uint64_t fn = r.fn, user_data = r.user_data;
  const uint8_t kind = r.kind;
  uint64_t stream = r.stream;
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
  hooks::cudaDeviceResetRequest r;
  if (!r.Decode(in) || in.remaining() != 0) return cudaErrorInvalidValue;
  ctx.session->ForgetDeviceState();
  return cudaSuccess;
}

int32_t Hook_cudaHostAlloc(DispatchContext& ctx, wire::Decoder& in, wire::Encoder&) {
  REVENANT_NEED_SESSION(ctx);
  hooks::cudaHostAllocRequest r;
  if (!r.Decode(in) || r.path.data == nullptr) return cudaErrorInvalidValue;
  return ctx.session->MapSharedHost(r.addr, r.size, r.flags, std::string(r.path.data, r.path.size));
}

int32_t Hook_cudaMallocHost(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  return Hook_cudaHostAlloc(ctx, in, out);
}

int32_t Hook_cudaFreeHost(DispatchContext& ctx, wire::Decoder& in, wire::Encoder&) {
  REVENANT_NEED_SESSION(ctx);
  hooks::cudaFreeHostRequest r;
  if (!r.Decode(in)) return cudaErrorInvalidValue;
  return ctx.session->UnmapSharedHost(r.addr);
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

// A module image the application has in a file it mapped (hooks::ModuleImage).
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
  // A variable's request is a kernel's plus want_address.
  hooks::__cudaRegisterVarRequest var;
  hooks::__cudaRegisterFatBinaryEndRequest fn;
  if (variable ? !var.Decode(in) : !fn.Decode(in)) return cudaErrorInvalidValue;
  const hooks::ModuleImage& m = variable ? var.module : fn.module;
  const wire::Bytes& name_bytes = variable ? var.device_name : fn.mangled_name;
  const uint64_t module_key = m.module_key;
  const bool has_image = m.has_image, by_file = m.has_image && m.by_file;
  const char* image = m.image.data;
  uint64_t image_size = m.image.size;
  if (by_file && m.path.data == nullptr) return cudaErrorInvalidValue;
  if (name_bytes.data == nullptr) return cudaErrorInvalidValue;
  ModuleFile file;
  if (by_file) {
    file.path.assign(m.path.data, m.path.size);
    file.offset = m.offset;
    file.size = m.size;
    file.dev = m.st_dev;
    file.ino = m.st_ino;
    file.mtime_ns = m.mtime_ns;
  }
  const char* name = name_bytes.data;
  const uint64_t name_len = name_bytes.size;
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
    absl::StatusOr<Backend::Symbol> sym = B(ctx)->GetSymbol(module_key, mangled);
    if (!sym.ok()) {
      REVENANT_LOG(ERROR, "agent") << "device variable " << mangled << ": " << sym.status();
      return cudaErrorInvalidSymbol;
    }
    hooks::__cudaRegisterVarReply reply;
    reply.size = static_cast<uint64_t>(sym->size);
    reply.address = reinterpret_cast<uint64_t>(sym->address);
    reply.Encode(out, var);
    return cudaSuccess;
  }
  absl::StatusOr<KernelInfo> k = B(ctx)->GetKernel(module_key, mangled);
  if (!k.ok()) {
    REVENANT_LOG(ERROR, "agent") << "kernel " << mangled << ": " << k.status();
    return cudaErrorInvalidDeviceFunction;
  }
  session->AddKernel(*k);
  hooks::__cudaRegisterFatBinaryEndReply reply;
  reply.function_id =
      ctx.handles->ToVirtualRaw(api::HandleKind::kFunction, reinterpret_cast<uint64_t>(k->handle));
  reply.args_size = k->args_size;
  std::string params;
  for (const KernelInfo::Param& p : k->params) {
    params.append(reinterpret_cast<const char*>(&p.offset), 4);
    params.append(reinterpret_cast<const char*>(&p.size), 4);
  }
  reply.params = wire::Bytes::Of(params.data(), params.size());
  reply.Encode(out);
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

// --- Graphs (requests and replies: api/hook_structs.h) --------------------------------

namespace {

// u64 virtual GRAPH_NODE ids -> backend nodes.
bool NodesOf(DispatchContext& ctx, const wire::Bytes& ids, std::vector<cudaGraphNode_t>* nodes) {
  if (ids.size % 8 != 0) return false;
  nodes->clear();
  for (uint64_t i = 0; i < ids.size; i += 8) {
    uint64_t id = 0;
    std::memcpy(&id, ids.data + i, 8);
    if (!ctx.handles->ToBackendRaw(api::HandleKind::kGraphNode, &id)) return false;
    nodes->push_back(reinterpret_cast<cudaGraphNode_t>(id));
  }
  return true;
}

bool GraphOf(DispatchContext& ctx, uint64_t id, cudaGraph_t* graph) {
  if (!ctx.handles->ToBackendRaw(api::HandleKind::kGraph, &id)) return false;
  *graph = reinterpret_cast<cudaGraph_t>(id);
  return true;
}

// Backend nodes -> u64 virtual GRAPH_NODE ids (at most `max`).
std::vector<uint64_t> NodeIds(DispatchContext& ctx, const std::vector<cudaGraphNode_t>& nodes,
                              size_t max = SIZE_MAX) {
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < nodes.size() && i < max; ++i) {
    ids.push_back(ctx.handles->ToVirtualRaw(api::HandleKind::kGraphNode,
                                            reinterpret_cast<uint64_t>(nodes[i])));
  }
  return ids;
}

// A kernel node's parameters, its kernel found.
struct KernelParams {
  const KernelInfo* kernel = nullptr;
  dim3 grid, block;
  uint64_t shared = 0;
  const char* args = nullptr;
};
int32_t KernelOf(DispatchContext& ctx, const hooks::KernelNodeParams& p, KernelParams* k) {
  uint64_t function_id = p.function_id;
  k->grid = p.grid;
  k->block = p.block;
  k->shared = p.shared_bytes;
  k->args = p.args.data;
  if (!ctx.handles->ToBackendRaw(api::HandleKind::kFunction, &function_id))
    return cudaErrorInvalidDeviceFunction;
  k->kernel = ctx.session->FindKernel(reinterpret_cast<const void*>(function_id));
  if (k->kernel == nullptr) return cudaErrorInvalidDeviceFunction;
  if (p.args.size != k->kernel->args_size) return cudaErrorInvalidValue;
  return cudaSuccess;
}

cudaMemsetParams MemsetOf(const hooks::MemsetNodeParams& m) {
  cudaMemsetParams p{};
  p.dst = reinterpret_cast<void*>(m.dst);
  p.pitch = m.pitch;
  p.value = m.value;
  p.elementSize = m.element_size;
  p.width = m.width;
  p.height = m.height;
  return p;
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

// The most bodies of a conditional node (the shim refuses more).
constexpr uint32_t kMaxConditionalBodies = 256;

// A created node: its virtual id (the journal keys the created handle on the
// reply's first byte field, as for generated rows), an alloc node's address,
// a conditional node's bodies (their ids follow from the node's, which a
// replay restores: so are theirs).
struct AddedNode {
  uint64_t id = 0;
  uint64_t dptr = 0;
  std::vector<uint64_t> bodies;
};

// Adds a node of `n.type` with the parameters of that type in `n` (every
// cudaGraphAdd*Node row's request, as cudaGraphAddNode's).
int32_t AddNodeOfType(DispatchContext& ctx, const hooks::cudaGraphAddNodeRequest& n,
                      cudaGraphNodeType type, AddedNode* added) {
  REVENANT_NEED_SESSION(ctx);
  cudaGraph_t graph = nullptr;
  std::vector<cudaGraphNode_t> deps;
  if (!GraphOf(ctx, n.graph, &graph) || !NodesOf(ctx, n.deps, &deps)) return cudaErrorInvalidValue;
  cudaGraphNode_t node = nullptr;
  cudaError_t err = cudaErrorInvalidValue;
  void* dptr = nullptr;
  std::vector<cudaGraph_t> bodies;
  switch (type) {
    case cudaGraphNodeTypeKernel: {
      KernelParams k;
      if (int32_t e = KernelOf(ctx, n.kernel, &k); e != cudaSuccess) return e;
      err = B(ctx)->AddKernelNode(&node, graph, deps, *k.kernel, k.grid, k.block, k.shared,
                                  k.args);
      break;
    }
    case cudaGraphNodeTypeMemset:
      err = B(ctx)->AddMemsetNode(&node, graph, deps, MemsetOf(n.memset));
      break;
    case cudaGraphNodeTypeMemcpy: {
      const uint64_t dst = n.copy.dst, src = n.copy.src, count = n.copy.count;
      // Host sides must be memory shared with the application (the backend
      // checks the device sides).
      auto host_ok = [&](uint64_t p) {
        const DeviceRange r = B(ctx)->device_range();
        return (p >= r.base && p - r.base < r.size) ||
               ctx.session->IsSharedHost(reinterpret_cast<const void*>(p), count);
      };
      if (!host_ok(dst) || !host_ok(src)) return cudaErrorInvalidValue;
      cudaMemcpyKind k;
      if (!wire::ToEnum(n.copy.kind, &k)) return cudaErrorInvalidMemcpyDirection;
      err = B(ctx)->AddMemcpyNode1D(&node, graph, deps, reinterpret_cast<void*>(dst),
                                    reinterpret_cast<const void*>(src), count, k);
      break;
    }
    case cudaGraphNodeTypeHost:
      if (n.host.fn == 0) return cudaErrorInvalidValue;
      err = B(ctx)->AddHostNode(&node, graph, deps, HostNodeFn(ctx, n.host.fn, n.host.user_data));
      break;
    case cudaGraphNodeTypeEmpty:
      err = B(ctx)->AddEmptyNode(&node, graph, deps);
      break;
    case cudaGraphNodeTypeMemAlloc:
      err = B(ctx)->AddMemAllocNode(&node, graph, deps, n.bytesize, &dptr);
      break;
    case cudaGraphNodeTypeMemFree:
      err = B(ctx)->AddMemFreeNode(&node, graph, deps, reinterpret_cast<void*>(n.dptr));
      break;
    case cudaGraphNodeTypeGraph: {
      cudaGraph_t child = nullptr;
      if (!GraphOf(ctx, n.child, &child)) return cudaErrorInvalidValue;
      err = B(ctx)->AddChildGraphNode(&node, graph, deps, child);
      break;
    }
    case cudaGraphNodeTypeEventRecord:
    case cudaGraphNodeTypeWaitEvent: {
      uint64_t event = n.event;
      if (!ctx.handles->ToBackendRaw(api::HandleKind::kEvent, &event))
        return cudaErrorInvalidResourceHandle;
      err = B(ctx)->AddEventNode(&node, graph, deps, reinterpret_cast<cudaEvent_t>(event),
                                 type == cudaGraphNodeTypeEventRecord);
      break;
    }
    case cudaGraphNodeTypeConditional: {
      const uint32_t size = n.conditional.size;
      cudaGraphConditionalNodeType ct;
      if (!wire::ToEnum(n.conditional.type, &ct) || size == 0 || size > kMaxConditionalBodies)
        return cudaErrorInvalidValue;
      err = B(ctx)->AddConditionalNode(&node, graph, deps, n.conditional.handle, ct, size,
                                       &bodies);
      if (err != cudaSuccess) return err;
      if (bodies.size() != size) return cudaErrorUnknown;
      break;
    }
    default:
      return NotYet("cudaGraphAddNode of this node type");
  }
  if (err != cudaSuccess) return err;
  added->id =
      ctx.handles->RegisterNew(api::HandleKind::kGraphNode, reinterpret_cast<uint64_t>(node));
  added->dptr = reinterpret_cast<uint64_t>(dptr);
  for (uint32_t i = 0; i < bodies.size(); ++i) {
    added->bodies.push_back(ctx.handles->RegisterDerived(
        api::HandleKind::kGraph, reinterpret_cast<uint64_t>(bodies[i]), added->id, i));
  }
  return cudaSuccess;
}

// A cudaGraphAdd*Node row whose reply is the node alone: `Request` has graph,
// deps and the parameters `set` copies into cudaGraphAddNode's request.
template <typename Request, typename Reply, typename Set>
int32_t AddNodeRow(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out,
                   cudaGraphNodeType type, Set set) {
  REVENANT_NEED_SESSION(ctx);
  Request r;
  if (!r.Decode(in)) return cudaErrorInvalidValue;
  hooks::cudaGraphAddNodeRequest n;
  n.graph = r.graph;
  n.deps = r.deps;
  n.type = type;
  set(r, &n);
  AddedNode added;
  if (int32_t e = AddNodeOfType(ctx, n, type, &added); e != cudaSuccess) return e;
  Reply reply;
  reply.node = wire::Bytes::Of(&added.id, sizeof(added.id));
  reply.Encode(out);
  return cudaSuccess;
}

}  // namespace

int32_t Hook_cudaStreamBeginCaptureToGraph(DispatchContext& ctx, wire::Decoder& in,
                                           wire::Encoder&) {
  hooks::cudaStreamBeginCaptureToGraphRequest r;
  cudaGraph_t graph = nullptr;
  std::vector<cudaGraphNode_t> deps;
  if (!r.Decode(in) || !GraphOf(ctx, r.graph, &graph) || !NodesOf(ctx, r.deps, &deps))
    return cudaErrorInvalidValue;
  cudaStreamCaptureMode m;
  if (!wire::ToEnum(r.mode, &m)) return cudaErrorInvalidValue;
  uint64_t stream = r.stream;
  if (!TranslateStream(ctx, &stream)) return cudaErrorInvalidResourceHandle;
  return B(ctx)->BeginCaptureToGraph(reinterpret_cast<cudaStream_t>(stream), graph, deps, m);
}

int32_t Hook_cudaStreamGetCaptureInfo(DispatchContext& ctx, wire::Decoder& in,
                                      wire::Encoder& out) {
  hooks::cudaStreamGetCaptureInfoRequest r;
  if (!r.Decode(in)) return cudaErrorInvalidValue;
  uint64_t stream = r.stream;
  if (!TranslateStream(ctx, &stream)) return cudaErrorInvalidResourceHandle;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  cudaGraph_t graph = nullptr;
  std::vector<cudaGraphNode_t> deps;
  cudaError_t err = B(ctx)->GetCaptureInfo(reinterpret_cast<cudaStream_t>(stream), &status, &id,
                                           &graph, &deps);
  if (err != cudaSuccess) return err;
  hooks::cudaStreamGetCaptureInfoReply reply;
  reply.status = static_cast<int32_t>(status);
  reply.id = static_cast<uint64_t>(id);
  if (r.want_graph && graph != nullptr) {
    reply.graph =
        ctx.handles->ToVirtualRaw(api::HandleKind::kGraph, reinterpret_cast<uint64_t>(graph));
  }
  const std::vector<uint64_t> ids = NodeIds(ctx, deps);
  reply.deps = wire::Bytes::Of(ids.data(), ids.size() * 8);
  reply.Encode(out);
  return cudaSuccess;
}

int32_t Hook_cudaStreamUpdateCaptureDependencies(DispatchContext& ctx, wire::Decoder& in,
                                                 wire::Encoder&) {
  hooks::cudaStreamUpdateCaptureDependenciesRequest r;
  std::vector<cudaGraphNode_t> deps;
  if (!r.Decode(in) || !NodesOf(ctx, r.deps, &deps)) return cudaErrorInvalidValue;
  uint64_t stream = r.stream;
  if (!TranslateStream(ctx, &stream)) return cudaErrorInvalidResourceHandle;
  return B(ctx)->UpdateCaptureDependencies(reinterpret_cast<cudaStream_t>(stream), deps, r.flags);
}

// All nodes counted, at most capacity ids (creation order).
int32_t Hook_cudaGraphGetNodes(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  hooks::cudaGraphGetNodesRequest r;
  cudaGraph_t graph = nullptr;
  if (!r.Decode(in) || !GraphOf(ctx, r.of, &graph)) return cudaErrorInvalidValue;
  std::vector<cudaGraphNode_t> nodes;
  if (cudaError_t err = B(ctx)->GraphGetNodes(graph, &nodes); err != cudaSuccess) return err;
  hooks::cudaGraphGetNodesReply reply;
  reply.count = static_cast<uint64_t>(nodes.size());
  const std::vector<uint64_t> ids = NodeIds(ctx, nodes, r.capacity);
  reply.ids = wire::Bytes::Of(ids.data(), ids.size() * 8);
  reply.Encode(out);
  return cudaSuccess;
}

int32_t Hook_cudaDeviceGetPCIBusId(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  hooks::cudaDeviceGetPCIBusIdRequest r;
  if (!r.Decode(in) || in.remaining() != 0) return cudaErrorInvalidValue;
  char id[hooks::kPciBusIdBytes] = {0};
  cudaError_t err = B(ctx)->PciBusId(id, sizeof(id), r.device);
  if (err != cudaSuccess) return err;
  id[sizeof(id) - 1] = '\0';
  hooks::cudaDeviceGetPCIBusIdReply reply;
  reply.id = wire::Bytes::Of(id, std::strlen(id) + 1);
  reply.Encode(out);
  return cudaSuccess;
}

// The executor takes the application thread's mode on (it runs every
// thread's calls); the reply holds the executor's previous mode (the shim
// answers the thread's own).
int32_t Hook_cudaThreadExchangeStreamCaptureMode(DispatchContext& ctx, wire::Decoder& in,
                                                 wire::Encoder& out) {
  hooks::cudaThreadExchangeStreamCaptureModeRequest r;
  if (!r.Decode(in) || in.remaining() != 0) return cudaErrorInvalidValue;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  if (r.has_mode) {
    // An out-of-range value goes to CUDA as it came: CUDA answers it.
    std::memcpy(&mode, &r.mode, sizeof(mode));
  }
  cudaError_t err = B(ctx)->cudaThreadExchangeStreamCaptureMode(r.has_mode ? &mode : nullptr);
  if (err != cudaSuccess) return err;
  hooks::cudaThreadExchangeStreamCaptureModeReply reply;
  reply.previous = static_cast<int32_t>(mode);
  reply.Encode(out);
  return cudaSuccess;
}

int32_t Hook_cudaMemPoolSetAccess(DispatchContext& ctx, wire::Decoder& in, wire::Encoder&) {
  hooks::cudaMemPoolSetAccessRequest r;
  if (!r.Decode(in) || r.descs.size % sizeof(cudaMemAccessDesc) != 0 || in.remaining() != 0)
    return cudaErrorInvalidValue;
  uint64_t pool = r.pool;
  if (!ctx.handles->ToBackendRaw(api::HandleKind::kMemPool, &pool))
    return cudaErrorInvalidResourceHandle;
  std::vector<cudaMemAccessDesc> descs(r.descs.size / sizeof(cudaMemAccessDesc));
  if (r.descs.size > 0) std::memcpy(descs.data(), r.descs.data, r.descs.size);
  return B(ctx)->MemPoolSetAccess(reinterpret_cast<cudaMemPool_t>(pool), descs.data(),
                                  descs.size());
}

// At most capacity ids, all counted.
int32_t Hook_cudaGraphNodeGetDependencies(DispatchContext& ctx, wire::Decoder& in,
                                          wire::Encoder& out) {
  hooks::cudaGraphNodeGetDependenciesRequest r;
  if (!r.Decode(in)) return cudaErrorInvalidValue;
  uint64_t node = r.of;
  if (!ctx.handles->ToBackendRaw(api::HandleKind::kGraphNode, &node)) return cudaErrorInvalidValue;
  std::vector<cudaGraphNode_t> deps;
  cudaError_t err = B(ctx)->GraphNodeGetDependencies(reinterpret_cast<cudaGraphNode_t>(node), &deps);
  if (err != cudaSuccess) return err;
  hooks::cudaGraphNodeGetDependenciesReply reply;
  reply.count = static_cast<uint64_t>(deps.size());
  const std::vector<uint64_t> ids = NodeIds(ctx, deps, r.capacity);
  reply.ids = wire::Bytes::Of(ids.data(), ids.size() * 8);
  reply.Encode(out);
  return cudaSuccess;
}

// The shim writes the file.
int32_t Hook_cudaGraphDebugDotPrint(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  hooks::cudaGraphDebugDotPrintRequest r;
  cudaGraph_t graph = nullptr;
  if (!r.Decode(in) || !GraphOf(ctx, r.graph, &graph)) return cudaErrorInvalidValue;
  std::string dot;
  if (cudaError_t err = B(ctx)->GraphDebugDot(graph, r.flags, &dot); err != cudaSuccess) return err;
  hooks::cudaGraphDebugDotPrintReply reply;
  reply.dot = wire::Bytes::Reserved(dot.size());
  reply.Encode(out);
  if (reply.dot.fill == nullptr) {
    REVENANT_LOG(ERROR, "agent") << "cudaGraphDebugDotPrint: the graph's description ("
                                 << dot.size() << " bytes) does not fit in a reply";
    return cudaErrorNotSupported;
  }
  std::memcpy(reply.dot.fill, dot.data(), dot.size());
  return cudaSuccess;
}

// The node's type, then the parameters of that type; an alloc node's reply
// has its address, a conditional node's a 0 there and the bodies' ids.
int32_t Hook_cudaGraphAddNode(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  REVENANT_NEED_SESSION(ctx);
  hooks::cudaGraphAddNodeRequest r;
  cudaGraphNodeType t;
  if (!r.Decode(in) || !wire::ToEnum(r.type, &t)) return cudaErrorInvalidValue;
  AddedNode added;
  if (int32_t e = AddNodeOfType(ctx, r, t, &added); e != cudaSuccess) return e;
  hooks::cudaGraphAddNodeReply reply;
  reply.node = wire::Bytes::Of(&added.id, sizeof(added.id));
  reply.dptr = added.dptr;
  reply.bodies = wire::Bytes::Of(added.bodies.data(), added.bodies.size() * sizeof(uint64_t));
  reply.Encode(out, r);
  return cudaSuccess;
}
int32_t Hook_cudaGraphAddKernelNode(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  using R = hooks::cudaGraphAddKernelNodeRequest;
  return AddNodeRow<R, hooks::cudaGraphAddKernelNodeReply>(
      ctx, in, out, cudaGraphNodeTypeKernel,
      [](const R& r, hooks::cudaGraphAddNodeRequest* n) { n->kernel = r.kernel; });
}
int32_t Hook_cudaGraphAddMemcpyNode1D(DispatchContext& ctx, wire::Decoder& in,
                                      wire::Encoder& out) {
  using R = hooks::cudaGraphAddMemcpyNode1DRequest;
  return AddNodeRow<R, hooks::cudaGraphAddMemcpyNode1DReply>(
      ctx, in, out, cudaGraphNodeTypeMemcpy,
      [](const R& r, hooks::cudaGraphAddNodeRequest* n) { n->copy = r.copy; });
}
int32_t Hook_cudaGraphAddMemsetNode(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  using R = hooks::cudaGraphAddMemsetNodeRequest;
  return AddNodeRow<R, hooks::cudaGraphAddMemsetNodeReply>(
      ctx, in, out, cudaGraphNodeTypeMemset,
      [](const R& r, hooks::cudaGraphAddNodeRequest* n) { n->memset = r.memset; });
}
int32_t Hook_cudaGraphAddHostNode(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  using R = hooks::cudaGraphAddHostNodeRequest;
  return AddNodeRow<R, hooks::cudaGraphAddHostNodeReply>(
      ctx, in, out, cudaGraphNodeTypeHost,
      [](const R& r, hooks::cudaGraphAddNodeRequest* n) { n->host = r.host; });
}
int32_t Hook_cudaGraphAddMemAllocNode(DispatchContext& ctx, wire::Decoder& in,
                                      wire::Encoder& out) {
  REVENANT_NEED_SESSION(ctx);
  hooks::cudaGraphAddMemAllocNodeRequest r;
  if (!r.Decode(in)) return cudaErrorInvalidValue;
  hooks::cudaGraphAddNodeRequest n;
  n.graph = r.graph;
  n.deps = r.deps;
  n.type = cudaGraphNodeTypeMemAlloc;
  n.bytesize = r.bytesize;
  AddedNode added;
  if (int32_t e = AddNodeOfType(ctx, n, cudaGraphNodeTypeMemAlloc, &added); e != cudaSuccess)
    return e;
  hooks::cudaGraphAddMemAllocNodeReply reply;
  reply.node = wire::Bytes::Of(&added.id, sizeof(added.id));
  reply.dptr = added.dptr;
  reply.Encode(out);
  return cudaSuccess;
}
int32_t Hook_cudaGraphAddMemFreeNode(DispatchContext& ctx, wire::Decoder& in,
                                     wire::Encoder& out) {
  using R = hooks::cudaGraphAddMemFreeNodeRequest;
  return AddNodeRow<R, hooks::cudaGraphAddMemFreeNodeReply>(
      ctx, in, out, cudaGraphNodeTypeMemFree,
      [](const R& r, hooks::cudaGraphAddNodeRequest* n) { n->dptr = r.dptr; });
}
int32_t Hook_cudaGraphAddChildGraphNode(DispatchContext& ctx, wire::Decoder& in,
                                        wire::Encoder& out) {
  using R = hooks::cudaGraphAddChildGraphNodeRequest;
  return AddNodeRow<R, hooks::cudaGraphAddChildGraphNodeReply>(
      ctx, in, out, cudaGraphNodeTypeGraph,
      [](const R& r, hooks::cudaGraphAddNodeRequest* n) { n->child = r.child; });
}
int32_t Hook_cudaGraphAddEventRecordNode(DispatchContext& ctx, wire::Decoder& in,
                                         wire::Encoder& out) {
  using R = hooks::cudaGraphAddEventRecordNodeRequest;
  return AddNodeRow<R, hooks::cudaGraphAddEventRecordNodeReply>(
      ctx, in, out, cudaGraphNodeTypeEventRecord,
      [](const R& r, hooks::cudaGraphAddNodeRequest* n) { n->event = r.event; });
}
int32_t Hook_cudaGraphAddEventWaitNode(DispatchContext& ctx, wire::Decoder& in,
                                       wire::Encoder& out) {
  using R = hooks::cudaGraphAddEventWaitNodeRequest;
  return AddNodeRow<R, hooks::cudaGraphAddEventWaitNodeReply>(
      ctx, in, out, cudaGraphNodeTypeWaitEvent,
      [](const R& r, hooks::cudaGraphAddNodeRequest* n) { n->event = r.event; });
}
// A contiguous 3D copy, sent by the shim as a 1D one (shim/hooks_graph.cc).
int32_t Hook_cudaGraphAddMemcpyNode(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  using R = hooks::cudaGraphAddMemcpyNodeRequest;
  return AddNodeRow<R, hooks::cudaGraphAddMemcpyNodeReply>(
      ctx, in, out, cudaGraphNodeTypeMemcpy,
      [](const R& r, hooks::cudaGraphAddNodeRequest* n) { n->copy = r.copy; });
}

int32_t Hook_cudaGraphExecKernelNodeSetParams(DispatchContext& ctx, wire::Decoder& in,
                                              wire::Encoder&) {
  REVENANT_NEED_SESSION(ctx);
  hooks::cudaGraphExecKernelNodeSetParamsRequest r;
  if (!r.Decode(in)) return cudaErrorInvalidValue;
  uint64_t exec = r.exec, node = r.node;
  if (!ctx.handles->ToBackendRaw(api::HandleKind::kGraphExec, &exec) ||
      !ctx.handles->ToBackendRaw(api::HandleKind::kGraphNode, &node)) {
    return cudaErrorInvalidValue;
  }
  KernelParams k;
  if (int32_t e = KernelOf(ctx, r.kernel, &k); e != cudaSuccess) return e;
  return B(ctx)->ExecKernelNodeSetParams(reinterpret_cast<cudaGraphExec_t>(exec),
                                         reinterpret_cast<cudaGraphNode_t>(node), *k.kernel,
                                         k.grid, k.block, k.shared, k.args);
}

// The reply goes back also on failure.
int32_t Hook_cudaGraphExecUpdate(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  hooks::cudaGraphExecUpdateRequest r;
  cudaGraph_t graph = nullptr;
  if (!r.Decode(in) || !GraphOf(ctx, r.graph, &graph)) return cudaErrorInvalidValue;
  uint64_t exec = r.exec;
  if (!ctx.handles->ToBackendRaw(api::HandleKind::kGraphExec, &exec)) return cudaErrorInvalidValue;
  cudaGraphExecUpdateResultInfo info{};
  info.result = cudaGraphExecUpdateError;
  cudaError_t err = B(ctx)->ExecUpdate(reinterpret_cast<cudaGraphExec_t>(exec), graph, &info);
  auto node_id = [&](cudaGraphNode_t n) -> uint64_t {
    return n == nullptr ? 0
                        : ctx.handles->ToVirtualRaw(api::HandleKind::kGraphNode,
                                                    reinterpret_cast<uint64_t>(n));
  };
  hooks::cudaGraphExecUpdateReply reply;
  reply.result = static_cast<int32_t>(info.result);
  reply.error_node = node_id(info.errorNode);
  reply.error_from_node = node_id(info.errorFromNode);
  reply.Encode(out);
  return err;
}

}  // namespace agent
}  // namespace revenant

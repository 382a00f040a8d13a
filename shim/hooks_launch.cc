// Hand-written shim hooks for modules and kernel launches, nvcc's and the
// driver API's (modules of run-time compiled kernels: at the end).
//
// nvcc's generated code registers every module and kernel from static
// constructors (__cudaRegisterFatBinary, __cudaRegisterFunction), before
// main and before the agent is reached; the shim only records them. A kernel
// is resolved with the agent on its first use (the module image travels
// then, once): the agent answers the kernel's id and parameter layout, and
// every launch after that is one asynchronous record with the arguments
// packed at the reported offsets.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api/hook_protocol.h"
#include "api/hook_structs.h"
#include "api/launch_attributes.h"
#include "common/knobs.h"
#include "common/logging.h"
#include "shim/call.h"
#include "shim/driver_status.h"
#include "shim/runtime.h"

namespace revenant {
namespace shim {
namespace {

struct Module {
  uint64_t key = 0;
  const void* image = nullptr;
  size_t image_size = 0;
  bool sent = false;
  // A module the application loaded itself (cuModuleLoadData): the image is
  // a copy (the application may free its own), and its functions by name.
  std::string owned_image;
  std::map<std::string, struct Function*> by_name;
};

struct Function {
  Module* module = nullptr;
  const void* host_fun = nullptr;
  std::string name;
  bool resolved = false;
  int32_t error = 0;  // why it cannot launch, once resolved
  // Resolved without error, every field below filled: launches read them
  // without the registry's lock from then on.
  std::atomic<bool> ready{false};
  uint64_t id = 0;
  uint32_t args_size = 0;
  std::vector<std::pair<uint32_t, uint32_t>> params;  // offset, size
  // Dynamic shared memory a launch may ask for: 48 KiB unless raised with
  // cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize).
  size_t max_dynamic_shared = 48 << 10;
};

// A `__device__` variable: found in the agent's module on first use.
struct Variable {
  Module* module = nullptr;
  std::string name;     // device name
  uint64_t host_size = 0;  // the size nvcc registered
  bool resolved = false;
  int32_t error = 0;
  uint64_t size = 0;
  bool address_known = false;  // asked for by cudaGetSymbolAddress only
  uint64_t address = 0;        // in the agent
};

struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<Module>> modules;
  std::map<const void*, std::unique_ptr<Function>> functions;  // by host stub
  std::map<const void*, std::unique_ptr<Variable>> variables;  // by host shadow
};

Registry& Reg() {
  static Registry* r = new Registry();
  return *r;
}

struct LaunchConfig {
  dim3 grid;
  dim3 block;
  size_t shared = 0;
  cudaStream_t stream = nullptr;
};
thread_local std::vector<LaunchConfig> tls_configs;

// Where a module image lies in a file the process mapped (a library's or the
// executable's read-only segment), so the agent reads it there instead of
// receiving it through the ring.
struct ImageFile {
  std::string path;
  uint64_t offset = 0;
  uint64_t dev = 0, ino = 0;
  int64_t mtime_ns = 0;
};

bool FindImageFile(const void* image, size_t size, ImageFile* out) {
  struct Query {
    uintptr_t addr;
    size_t size;
    ImageFile* out;
    bool found;
  } q{reinterpret_cast<uintptr_t>(image), size, out, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        auto* q = static_cast<Query*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
          if (q->addr < start || q->addr + q->size > start + ph.p_filesz) continue;
          q->out->offset = q->addr - start + ph.p_offset;
          if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') {
            q->out->path = info->dlpi_name;
          } else {
            char buf[PATH_MAX];
            const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
            if (n <= 0) return 1;
            q->out->path.assign(buf, n);
          }
          q->found = true;
          return 1;
        }
        return 0;
      },
      &q);
  if (!q.found || out->path.empty() || out->path[0] != '/') return false;
  struct stat st {};
  if (stat(out->path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  if (out->offset + size > static_cast<uint64_t>(st.st_size)) return false;
  out->dev = st.st_dev;
  out->ino = st.st_ino;
  out->mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  return true;
}

// Images up to this size travel in the request; larger ones by reference
// to their file when they lie in one (PyTorch's largest modules are ~7 MB,
// past the ring's per-request limit).
size_t InlineImageBytes() {
  static const size_t bytes =
      size_t(knobs::Int(knobs::Id::kInlineImageKib, 0, 1 << 20).value_or(1024)) << 10;
  return bytes;
}

// How a module request carries its module (hooks::ModuleImage): nothing
// once sent, else the image inline or a reference to its file.
struct ImageForm {
  bool send = false;
  bool by_file = false;
  ImageFile file;
};
ImageForm ImageFormOf(const Module* m) {
  ImageForm f;
  f.send = !m->sent;
  f.by_file = f.send && m->image_size > InlineImageBytes() &&
              FindImageFile(m->image, m->image_size, &f.file);
  return f;
}
// The module part of a registration request.
hooks::ModuleImage ImageOf(const Module* m, const ImageForm& f) {
  hooks::ModuleImage img;
  img.module_key = m->key;
  img.has_image = f.send;
  if (!f.send) return img;
  img.by_file = f.by_file;
  if (f.by_file) {
    img.path = wire::Bytes::Of(f.file.path.data(), f.file.path.size());
    img.offset = f.file.offset;
    img.size = uint64_t{m->image_size};
    img.st_dev = f.file.dev;
    img.st_ino = f.file.ino;
    img.mtime_ns = f.file.mtime_ns;
  } else {
    img.image = wire::Bytes::Of(m->image, m->image_size);
  }
  return img;
}

// Sends the module (first time) and asks for `f`'s id and layout.
// Caller holds Reg().mu.
void Resolve(Function* f) {
  if (f->resolved) return;
  Module* m = f->module;
  const ImageForm form = ImageFormOf(m);
  hooks::__cudaRegisterFatBinaryEndRequest req;
  req.module = ImageOf(m, form);
  req.mangled_name = wire::Bytes::Of(f->name.data(), f->name.size());
  Call call(api::ApiId::__cudaRegisterFatBinaryEnd, req.Size());
  if (!call.ok()) {
    f->error = call.FailureStatus(cudaErrorDevicesUnavailable);
    return;  // not resolved: retried on the next use
  }
  req.Encode(call.args());
  if (!call.Send()) {
    f->error = call.FailureStatus(cudaErrorDevicesUnavailable);
    return;
  }
  m->sent = true;
  f->resolved = true;
  f->error = call.status();
  if (f->error != 0) {
    REVENANT_LOG(ERROR, "shim") << "kernel " << f->name << " cannot run on this agent ("
                                << cudaGetErrorName(static_cast<cudaError_t>(f->error))
                                << "); see the agent's log";
    return;
  }
  hooks::__cudaRegisterFatBinaryEndReply reply;
  if (!reply.Decode(call.reply()) || reply.params.size % 8 != 0) {
    f->error = cudaErrorInvalidDeviceFunction;
    return;
  }
  f->id = reply.function_id;
  f->args_size = reply.args_size;
  const char* params = reply.params.data;
  for (uint64_t i = 0; i < reply.params.size; i += 8) {
    uint32_t off, size;
    std::memcpy(&off, params + i, 4);
    std::memcpy(&size, params + i + 4, 4);
    f->params.emplace_back(off, size);
  }
  f->ready.store(true, std::memory_order_release);
}

// Sends the module (first time) and asks for `v`'s size, and its address
// when `want_address`. Caller holds Reg().mu.
void ResolveVariable(Variable* v, bool want_address) {
  if (v->resolved && (!want_address || v->address_known || v->error != 0)) return;
  Module* m = v->module;
  const ImageForm form = ImageFormOf(m);
  hooks::__cudaRegisterVarRequest req;
  req.module = ImageOf(m, form);
  req.device_name = wire::Bytes::Of(v->name.data(), v->name.size());
  req.want_address = want_address;
  Call call(api::ApiId::__cudaRegisterVar, req.Size());
  if (!call.ok()) {
    v->error = call.FailureStatus(cudaErrorDevicesUnavailable);
    return;
  }
  req.Encode(call.args());
  if (!call.Send()) {
    if (!v->resolved) v->error = call.FailureStatus(cudaErrorDevicesUnavailable);
    return;
  }
  m->sent = true;
  v->resolved = true;
  v->error = call.status();
  if (v->error != 0) {
    REVENANT_LOG(ERROR, "shim") << "device variable " << v->name
                                << " cannot be reached on this agent ("
                                << cudaGetErrorName(static_cast<cudaError_t>(v->error))
                                << "); see the agent's log";
    return;
  }
  hooks::__cudaRegisterVarReply reply;
  if (!reply.Decode(call.reply(), req)) {
    v->error = cudaErrorInvalidSymbol;
    return;
  }
  v->size = reply.size;
  if (want_address) v->address = reply.address;
  if (want_address) v->address_known = true;
}

// Bumped whenever a registration may replace a Function (so a cached
// pointer to the old one is not used).
std::atomic<uint64_t> g_functions_generation{0};

// The last kernel this thread launched by host stub: a training loop's
// launches alternate among few kernels, and this skips the registry's lock
// and lookup for repeats.
struct LastLaunched {
  const void* host_fun = nullptr;
  Function* f = nullptr;
  uint64_t generation = 0;
};
thread_local LastLaunched tls_last_launched;

Function* FindFunction(const void* host_fun) {
  const uint64_t generation = g_functions_generation.load(std::memory_order_acquire);
  LastLaunched& last = tls_last_launched;
  if (last.host_fun == host_fun && last.generation == generation && last.f != nullptr) {
    return last.f;
  }
  Registry& reg = Reg();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.functions.find(host_fun);
  if (it == reg.functions.end()) return nullptr;
  Function* f = it->second.get();
  Resolve(f);
  if (f->ready.load(std::memory_order_acquire)) last = LastLaunched{host_fun, f, generation};
  return f;
}

cudaError_t Fail(cudaError_t e) {
  SetLastError(e);
  return e;
}

// Packs `args` (one pointer per parameter) at `f`'s layout.
cudaError_t PackArgs(const Function& f, void** args, std::vector<char>* packed) {
  packed->assign(f.args_size, 0);
  for (size_t i = 0; i < f.params.size(); ++i) {
    if (args == nullptr || args[i] == nullptr) return cudaErrorInvalidValue;
    std::memcpy(packed->data() + f.params[i].first, args[i], f.params[i].second);
  }
  return cudaSuccess;
}

// `attrs` (cudaLaunchKernelExC only, else empty): travel after the
// arguments; the host backend's refusals are answered here, at the call.
cudaError_t Launch(Function* f, dim3 grid, dim3 block, void** args, size_t shared,
                   cudaStream_t stream, bool cooperative,
                   const cudaLaunchAttribute* attrs = nullptr, unsigned num_attrs = 0,
                   bool ex = false) {
  if (f == nullptr) return Fail(cudaErrorInvalidDeviceFunction);
  if (!f->resolved) return Fail(static_cast<cudaError_t>(f->error ? f->error : cudaErrorDevicesUnavailable));
  if (f->error != 0) return Fail(static_cast<cudaError_t>(f->error));
  // The checks CUDA makes at launch time, answered here so the error comes
  // back from the launch itself (the launch is asynchronous to the agent).
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0 || threads > 1024 ||
      block.z > 64 || grid.y > 65535 || grid.z > 65535) {
    return Fail(cudaErrorInvalidValue);  // what CUDA 13 answers (measured on an H200)
  }
  if (shared > f->max_dynamic_shared) return Fail(cudaErrorInvalidValue);
  if (ex) {
    if (num_attrs > 0 && attrs == nullptr) return Fail(cudaErrorInvalidValue);
    if (num_attrs > api::kMaxLaunchAttributes) {
      REVENANT_LOG(ERROR, "shim") << "cudaLaunchKernelExC of " << f->name << ": " << num_attrs
                                  << " launch attributes, at most " << api::kMaxLaunchAttributes
                                  << " are supported";
      return Fail(cudaErrorNotSupported);
    }
    if (Runtime::Get()->agent().backend == "host") {
      bool coop = false;
      std::string why;
      const cudaError_t e = api::CheckHostLaunchAttributes(attrs, num_attrs, grid, &coop, &why);
      if (e != cudaSuccess) {
        REVENANT_LOG(ERROR, "shim") << "cudaLaunchKernelExC of " << f->name << " refused ("
                                    << cudaGetErrorName(e) << "): " << why;
        return Fail(e);
      }
    }
  }
  const size_t attr_bytes = ex ? size_t{num_attrs} * sizeof(cudaLaunchAttribute) : 0;
  // The arguments are packed straight into the request (PackArgs' layout):
  // their field is reserved and filled after encoding.
  for (size_t i = 0; i < f->params.size(); ++i) {
    if (args == nullptr || args[i] == nullptr) return Fail(cudaErrorInvalidValue);
  }
  // cudaLaunchKernel's and cudaLaunchCooperativeKernel's request is the
  // launch alone; cudaLaunchKernelExC's adds the attributes.
  hooks::cudaLaunchKernelExCRequest req;
  hooks::cudaLaunchKernelRequest plain;
  hooks::LaunchParams& l = ex ? req.launch : plain.launch;
  l.function_id = f->id;
  l.grid = grid;
  l.block = block;
  l.shared_bytes = static_cast<uint64_t>(shared);
  l.stream = reinterpret_cast<uint64_t>(stream);
  l.cooperative = static_cast<uint8_t>(cooperative);
  l.args = f->args_size > 0 ? wire::Bytes::Reserved(f->args_size) : wire::Bytes::Of(nullptr, 0);
  if (ex) req.attrs = wire::Bytes::Of(attrs, attr_bytes);
  Call call(ex            ? api::ApiId::cudaLaunchKernelExC
            : cooperative ? api::ApiId::cudaLaunchCooperativeKernel
                          : api::ApiId::cudaLaunchKernel,
            ex ? req.Size() : plain.Size());
  if (!call.ok()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  if (ex) req.Encode(call.args()); else plain.Encode(call.args());
  if (char* packed = l.args.fill) {
    std::memset(packed, 0, f->args_size);
    for (size_t i = 0; i < f->params.size(); ++i) {
      std::memcpy(packed + f->params[i].first, args[i], f->params[i].second);
    }
  }
  if (!call.Send()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  return cudaSuccess;
}

}  // namespace

// Resolves the kernel of `host_stub` and packs `args` at its parameter
// layout, exactly as a launch does (graph kernel nodes reuse it). Must be
// called with no Call open: resolving may make a call of its own.
cudaError_t PackKernelArgs(const void* host_stub, void** args, uint64_t* function_id,
                           std::vector<char>* packed) {
  Function* f = FindFunction(host_stub);
  if (f == nullptr) return cudaErrorInvalidDeviceFunction;
  if (!f->resolved) {
    return static_cast<cudaError_t>(f->error ? f->error : cudaErrorDevicesUnavailable);
  }
  if (f->error != 0) return static_cast<cudaError_t>(f->error);
  *function_id = f->id;
  return PackArgs(*f, args, packed);
}

int32_t ResolveSymbol(const void* symbol, SymbolRef* out, bool want_address) {
  Registry& reg = Reg();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.variables.find(symbol);
  if (it == reg.variables.end()) return cudaErrorInvalidSymbol;
  Variable* v = it->second.get();
  ResolveVariable(v, want_address);
  if (!v->resolved) return v->error ? v->error : cudaErrorDevicesUnavailable;
  if (v->error != 0) return v->error;
  if (want_address && !v->address_known) return cudaErrorDevicesUnavailable;
  out->module_key = v->module->key;
  out->name = v->name;
  out->address = v->address;
  out->size = v->size;
  return cudaSuccess;
}

uint64_t FunctionToWire(const void* host_stub) {
  Function* f = FindFunction(host_stub);
  return f != nullptr && f->resolved && f->error == 0 ? f->id : 0;
}

int32_t FunctionError(const void* host_stub) {
  Function* f = FindFunction(host_stub);
  if (f == nullptr || (f->resolved && f->error == 0)) return 0;
  const int32_t e = f->error != 0 ? f->error : cudaErrorDevicesUnavailable;
  SetLastError(e);
  return e;
}

}  // namespace shim
}  // namespace revenant

using revenant::shim::Function;
using revenant::shim::Module;

namespace {
// nvcc's wrapper around the fat binary and the fat binary's own header.
struct FatbinWrapper {
  int magic;  // 0x466243b1
  int version;
  const void* data;
  void* filename_or_fatbins;
};
struct FatbinHeader {
  uint32_t magic;  // 0xBA55ED50
  uint16_t version;
  uint16_t header_size;
  uint64_t fat_size;
};
}  // namespace

extern "C" REVENANT_EXPORT void** __cudaRegisterFatBinary(void* fatCubin) {
  auto& reg = revenant::shim::Reg();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto m = std::make_unique<Module>();
  m->key = reg.modules.size() + 1;
  const auto* w = static_cast<const FatbinWrapper*>(fatCubin);
  if (w != nullptr && w->magic == 0x466243b1 && w->data != nullptr) {
    const auto* h = static_cast<const FatbinHeader*>(w->data);
    if (h->magic == 0xBA55ED50) {
      m->image = h;
      m->image_size = h->header_size + h->fat_size;
    }
  }
  if (m->image == nullptr) {
    REVENANT_LOG(WARNING, "shim") << "module " << m->key << " has no recognizable fat binary";
  }
  reg.modules.push_back(std::move(m));
  // The handle nvcc keeps is a pointer to our module record.
  return reinterpret_cast<void**>(reg.modules.back().get());
}

extern "C" REVENANT_EXPORT void __cudaRegisterFatBinaryEnd(void** /*fatCubinHandle*/) {}

extern "C" REVENANT_EXPORT void __cudaUnregisterFatBinary(void** /*fatCubinHandle*/) {
  // At exit. The agent forgets the process's modules when it disconnects;
  // the records stay valid for launches from other exit handlers.
}

extern "C" REVENANT_EXPORT void __cudaRegisterFunction(void** fatCubinHandle, const char* hostFun,
                                                       char* /*deviceFun*/,
                                                       const char* deviceName, int, uint3*,
                                                       uint3*, dim3*, dim3*, int*) {
  auto& reg = revenant::shim::Reg();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto f = std::make_unique<Function>();
  f->module = reinterpret_cast<Module*>(fatCubinHandle);
  f->host_fun = hostFun;
  f->name = deviceName != nullptr ? deviceName : "";
  revenant::shim::g_functions_generation.fetch_add(1, std::memory_order_acq_rel);
  reg.functions[hostFun] = std::move(f);
}

// Records the variable; it is found in the agent's module on first use by
// cudaMemcpyToSymbol & co. (the host shadow `hostVar` is how the
// application names it).
extern "C" REVENANT_EXPORT void __cudaRegisterVar(void** fatCubinHandle, char* hostVar, char*,
                                                  const char* deviceName, int, size_t size, int,
                                                  int) {
  if (hostVar == nullptr || deviceName == nullptr) return;
  auto& reg = revenant::shim::Reg();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto v = std::make_unique<revenant::shim::Variable>();
  v->module = reinterpret_cast<Module*>(fatCubinHandle);
  v->name = deviceName;
  v->host_size = size;
  reg.variables[hostVar] = std::move(v);
}

extern "C" REVENANT_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* func) {
  if (kernel == nullptr) return cudaErrorInvalidValue;
  auto& reg = revenant::shim::Reg();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.functions.find(func);
  if (it == reg.functions.end()) return cudaErrorInvalidDeviceFunction;
  // Resolution waits for the first launch: this runs from a static
  // initializer of the launch stub, possibly before the agent is reached.
  *kernel = reinterpret_cast<cudaKernel_t>(it->second.get());
  return cudaSuccess;
}

extern "C" REVENANT_EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim,
                                                                size_t sharedMem,
                                                                struct CUstream_st* stream) {
  revenant::shim::tls_configs.push_back({gridDim, blockDim, sharedMem, stream});
  return 0;
}

extern "C" REVENANT_EXPORT cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim,
                                                                  size_t* sharedMem,
                                                                  void* stream) {
  auto& configs = revenant::shim::tls_configs;
  if (configs.empty()) return cudaErrorMissingConfiguration;
  const auto c = configs.back();
  configs.pop_back();
  *gridDim = c.grid;
  *blockDim = c.block;
  *sharedMem = c.shared;
  *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}

namespace {
cudaError_t LaunchByKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                           size_t shared, cudaStream_t stream) {
  auto* f = reinterpret_cast<Function*>(kernel);
  if (f != nullptr && !f->ready.load(std::memory_order_acquire)) {
    auto& reg = revenant::shim::Reg();
    std::lock_guard<std::mutex> lock(reg.mu);
    revenant::shim::Resolve(f);
  }
  return revenant::shim::Launch(f, grid, block, args, shared, stream, false);
}
}  // namespace

extern "C" REVENANT_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim,
                                                          dim3 blockDim, void** args,
                                                          size_t sharedMem, cudaStream_t stream) {
  return LaunchByKernel(kernel, gridDim, blockDim, args, sharedMem, stream);
}

extern "C" REVENANT_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim,
                                                               dim3 blockDim, void** args,
                                                               size_t sharedMem,
                                                               cudaStream_t stream) {
  if (stream == nullptr) stream = cudaStreamPerThread;
  return LaunchByKernel(kernel, gridDim, blockDim, args, sharedMem, stream);
}

extern "C" REVENANT_EXPORT cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim,
                                                        dim3 blockDim, void** args,
                                                        size_t sharedMem, cudaStream_t stream) {
  return revenant::shim::Launch(revenant::shim::FindFunction(func), gridDim, blockDim, args,
                                sharedMem, stream, false);
}

extern "C" REVENANT_EXPORT cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 gridDim,
                                                                   dim3 blockDim, void** args,
                                                                   size_t sharedMem,
                                                                   cudaStream_t stream) {
  return revenant::shim::Launch(revenant::shim::FindFunction(func), gridDim, blockDim, args,
                                sharedMem, stream, true);
}

// cudaLaunchKernelEx (cuda_runtime.h) is a template over this one.
extern "C" REVENANT_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config,
                                                           const void* func, void** args) {
  if (config == nullptr) {
    revenant::shim::SetLastError(cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
  }
  revenant::shim::Function* f = revenant::shim::FindFunction(func);
  if (f == nullptr) {
    // What the runtime answers for an address that is no kernel's (measured
    // on an H200, driver 580): it takes `func` for a cudaKernel_t.
    revenant::shim::SetLastError(cudaErrorInvalidResourceHandle);
    return cudaErrorInvalidResourceHandle;
  }
  return revenant::shim::Launch(f, config->gridDim,
                                config->blockDim, args, config->dynamicSmemBytes, config->stream,
                                false, config->attrs, config->numAttrs, /*ex=*/true);
}

extern "C" REVENANT_EXPORT cudaError_t cudaFuncSetAttribute(const void* func,
                                                            cudaFuncAttribute attr, int value) {
  revenant::hooks::cudaFuncSetAttributeRequest req;
  req.func = revenant::shim::FunctionToWire(func);
  req.attr = static_cast<int32_t>(attr);
  req.value = value;
  revenant::shim::Call call(revenant::api::ApiId::cudaFuncSetAttribute, req.Size());
  if (!call.ok()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  req.Encode(call.args());
  if (!call.Send()) return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
  if (call.status() == 0 && attr == cudaFuncAttributeMaxDynamicSharedMemorySize && value >= 0) {
    auto& reg = revenant::shim::Reg();
    std::lock_guard<std::mutex> lock(reg.mu);
    auto it = reg.functions.find(func);
    if (it != reg.functions.end()) it->second->max_dynamic_shared = static_cast<size_t>(value);
  }
  return static_cast<cudaError_t>(call.status());
}

// --- Modules and launches through the driver API ----------------------------------
//
// cuModuleLoadData(Ex) records a module the application made (an NVRTC
// cubin, PTX, a fat binary): the shim keeps a copy of the image, which goes
// to the agent with the first cuModuleGetFunction of the module, as nvcc's
// modules do (so a bad image fails there, not at the load). A CUfunction is
// the shim's record of the kernel, registered under its own address as the
// kernel's "host stub": launches, attributes and occupancy go through the
// runtime rows (journaled and replayed as theirs). The host backend runs such
// a kernel from its host kernel libraries by name, as any kernel.

namespace {

using revenant::shim::CuFromRuntime;
using revenant::shim::KeepLastError;

// The size of a module image: a fat binary's header says it, an ELF cubin's
// section and program headers bound it, anything else is PTX text.
size_t ImageSize(const void* image) {
  const auto* b = static_cast<const unsigned char*>(image);
  uint32_t magic = 0;
  std::memcpy(&magic, b, 4);
  if (magic == 0xBA55ED50u) {
    const auto* h = static_cast<const FatbinHeader*>(image);
    return h->header_size + h->fat_size;
  }
  if (b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F' && b[4] == 2 /* 64-bit */) {
    uint64_t shoff = 0, phoff = 0;
    uint16_t phentsize = 0, phnum = 0, shentsize = 0, shnum = 0;
    std::memcpy(&phoff, b + 0x20, 8);
    std::memcpy(&shoff, b + 0x28, 8);
    std::memcpy(&phentsize, b + 0x36, 2);
    std::memcpy(&phnum, b + 0x38, 2);
    std::memcpy(&shentsize, b + 0x3a, 2);
    std::memcpy(&shnum, b + 0x3c, 2);
    uint64_t end = std::max<uint64_t>(shoff + uint64_t{shentsize} * shnum,
                                      phoff + uint64_t{phentsize} * phnum);
    return static_cast<size_t>(std::max<uint64_t>(end, 64));
  }
  return std::strlen(static_cast<const char*>(image)) + 1;
}

CUresult LoadModule(CUmodule* module, const void* image) {
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& reg = revenant::shim::Reg();
  auto m = std::make_unique<Module>();
  m->owned_image.assign(static_cast<const char*>(image), ImageSize(image));
  std::lock_guard<std::mutex> lock(reg.mu);
  m->key = reg.modules.size() + 1;
  m->image = m->owned_image.data();
  m->image_size = m->owned_image.size();
  *module = reinterpret_cast<CUmodule>(m.get());
  reg.modules.push_back(std::move(m));
  return CUDA_SUCCESS;
}

// The module record of a handle the shim gave out, or null.
Module* FindModule(CUmodule hmod) {
  auto& reg = revenant::shim::Reg();
  for (const auto& m : reg.modules)
    if (reinterpret_cast<CUmodule>(m.get()) == hmod && !m->owned_image.empty()) return m.get();
  return nullptr;
}

// A CUfunction the shim gave out (registered under its own address).
Function* FindDriverFunction(CUfunction f) {
  if (f == nullptr) return nullptr;
  auto& reg = revenant::shim::Reg();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.functions.find(reinterpret_cast<const void*>(f));
  return it == reg.functions.end() ? nullptr : it->second.get();
}

}  // namespace

extern "C" REVENANT_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  return LoadModule(module, image);
}

// JIT options are the agent's driver's business: they are not forwarded.
extern "C" REVENANT_EXPORT CUresult cuModuleLoadDataEx(CUmodule* module, const void* image,
                                                       unsigned int numOptions,
                                                       CUjit_option* options,
                                                       void** optionValues) {
  if (numOptions > 0 && (options == nullptr || optionValues == nullptr))
    return CUDA_ERROR_INVALID_VALUE;
  return LoadModule(module, image);
}

extern "C" REVENANT_EXPORT CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod,
                                                        const char* name) {
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& reg = revenant::shim::Reg();
  std::lock_guard<std::mutex> lock(reg.mu);
  Module* m = FindModule(hmod);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  Function* f = nullptr;
  if (auto it = m->by_name.find(name); it != m->by_name.end()) {
    f = it->second;
  } else {
    auto made = std::make_unique<Function>();
    made->module = m;
    made->name = name;
    made->host_fun = made.get();
    f = made.get();
    revenant::shim::g_functions_generation.fetch_add(1, std::memory_order_acq_rel);
    reg.functions[f] = std::move(made);
    m->by_name[name] = f;
  }
  {
    KeepLastError keep;
    revenant::shim::Resolve(f);
  }
  if (!f->resolved) return CuFromRuntime(static_cast<cudaError_t>(f->error));
  switch (f->error) {
    case 0:
      *hfunc = reinterpret_cast<CUfunction>(f);
      return CUDA_SUCCESS;
    case cudaErrorInvalidKernelImage:
      return CUDA_ERROR_INVALID_IMAGE;
    case cudaErrorInvalidDeviceFunction:
      return CUDA_ERROR_NOT_FOUND;
    default:
      return CuFromRuntime(static_cast<cudaError_t>(f->error));
  }
}

// The agent keeps the module until the process disconnects; its functions
// stay valid for the launches already queued.
extern "C" REVENANT_EXPORT CUresult cuModuleUnload(CUmodule hmod) {
  auto& reg = revenant::shim::Reg();
  std::lock_guard<std::mutex> lock(reg.mu);
  return FindModule(hmod) == nullptr ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

extern "C" REVENANT_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX,
                                                   unsigned int gridDimY, unsigned int gridDimZ,
                                                   unsigned int blockDimX, unsigned int blockDimY,
                                                   unsigned int blockDimZ,
                                                   unsigned int sharedMemBytes, CUstream hStream,
                                                   void** kernelParams, void** extra) {
  Function* fn = FindDriverFunction(f);
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const dim3 grid(gridDimX, gridDimY, gridDimZ), block(blockDimX, blockDimY, blockDimZ);
  KeepLastError keep;
  if (extra == nullptr) {
    return CuFromRuntime(revenant::shim::Launch(fn, grid, block, kernelParams, sharedMemBytes,
                                                reinterpret_cast<cudaStream_t>(hStream), false));
  }
  // The packed form: CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE, END.
  if (kernelParams != nullptr) return CUDA_ERROR_INVALID_VALUE;
  const void* buffer = nullptr;
  size_t size = 0;
  bool have_size = false;
  for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (i > 64) return CUDA_ERROR_INVALID_VALUE;
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      buffer = extra[i + 1];
    } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      if (extra[i + 1] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      size = *static_cast<const size_t*>(extra[i + 1]);
      have_size = true;
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (buffer == nullptr || !have_size || !fn->resolved || fn->error != 0 || size < fn->args_size)
    return CUDA_ERROR_INVALID_VALUE;
  // Launch packs from one pointer per parameter: point into the buffer.
  std::vector<void*> args(fn->params.size());
  for (size_t i = 0; i < fn->params.size(); ++i)
    args[i] = const_cast<char*>(static_cast<const char*>(buffer) + fn->params[i].first);
  return CuFromRuntime(revenant::shim::Launch(fn, grid, block, args.data(), sharedMemBytes,
                                              reinterpret_cast<cudaStream_t>(hStream), false));
}

extern "C" REVENANT_EXPORT CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute attrib,
                                                       CUfunction hfunc) {
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Function* fn = FindDriverFunction(hfunc);
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  cudaFuncAttributes a{};
  {
    KeepLastError keep;
    cudaError_t e = cudaFuncGetAttributes(&a, fn);
    if (e != cudaSuccess) return CuFromRuntime(e);
  }
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = a.maxThreadsPerBlock; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = static_cast<int>(a.sharedSizeBytes); break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = static_cast<int>(a.constSizeBytes); break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = static_cast<int>(a.localSizeBytes); break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = a.numRegs; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = a.ptxVersion; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = a.binaryVersion; break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = a.cacheModeCA; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = a.maxDynamicSharedSizeBytes; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = a.preferredShmemCarveout; break;
    default:
      revenant::shim::LogNotSupported("cuFuncGetAttribute of this attribute");
      return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

// CUfunction_attribute and cudaFuncAttribute share their numbering for the
// settable attributes (from the maximum dynamic shared memory on).
extern "C" REVENANT_EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc,
                                                       CUfunction_attribute attrib, int value) {
  Function* fn = FindDriverFunction(hfunc);
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (attrib < CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ||
      static_cast<int>(attrib) >= static_cast<int>(cudaFuncAttributeMax))
    return CUDA_ERROR_INVALID_VALUE;
  KeepLastError keep;
  return CuFromRuntime(cudaFuncSetAttribute(fn, static_cast<cudaFuncAttribute>(attrib), value));
}

extern "C" REVENANT_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(
    int* numBlocks, CUfunction func, int blockSize, size_t dynamicSMemSize) {
  if (numBlocks == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Function* fn = FindDriverFunction(func);
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  KeepLastError keep;
  return CuFromRuntime(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
      numBlocks, fn, blockSize, dynamicSMemSize, 0));
}

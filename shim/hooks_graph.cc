// Hand-written shim hooks of the graph rows whose arguments hold arrays of
// node handles or structs holding handles, host functions and kernel
// arguments. The agent side is in agent/hooks.cc.
//
// Layouts (wire fields, api/wire.h). `deps` is one byte field of u64 virtual
// GRAPH_NODE ids (as the application holds them); `kernel` is u64
// function_id, dim3 grid, dim3 block, u64 shared_bytes, bytes packed_args
// (packed at the kernel's parameter layout, as a launch packs them);
// `memset` is u64 dst, u64 pitch, u32 value, u32 element_size, u64 width,
// u64 height; `memcpy` is u64 dst, u64 src, u64 count, i32 kind; `host` is
// u64 fn, u64 user_data (the function runs in the application, through the
// callback ring, each time the node runs); `alloc` is u64 bytesize; `free` is
// u64 dptr; `child` is u64 graph (the virtual GRAPH id to clone); `event`
// (record and wait nodes) is u64 event (a virtual EVENT id); `conditional`
// is u64 handle, i32 type, u32 size. A created node comes back as a byte
// field holding its u64 id.
//
//   cudaGraphAdd{Kernel,Memset,MemcpyNode1D,Host,MemAlloc,MemFree,ChildGraph,
//   EventRecord,EventWait}Node, and cudaGraphAddMemcpyNode of a contiguous 3D
//   copy (as `memcpy`):
//       u64 graph, deps, <params>; reply: bytes node [, u64 dptr (alloc)]
//   cudaGraphAddNode:  u64 graph, deps, i32 type, <params of that type>;
//       a conditional node's reply is bytes node, u64 0 (where an alloc
//       node's reply has its address), bytes bodies (u64 virtual GRAPH ids,
//       `size` of them)
//   cudaGraphGetNodes: u64 graph, u64 capacity; reply: u64 count, bytes ids
//   cudaGraphNodeGetDependencies: u64 node, u64 capacity; reply: u64 count,
//       bytes ids (at most capacity)
//   cudaGraphDebugDotPrint: u64 graph, u32 flags; reply: bytes dot
//   cudaGraphExecKernelNodeSetParams: u64 exec, u64 node, kernel
//   cudaGraphExecUpdate: u64 exec, u64 graph;
//       reply (also on failure): i32 result, u64 error_node, u64 error_from_node
//   cudaStreamBeginCaptureToGraph: u64 stream, u64 graph, deps, i32 mode
//   cudaStreamGetCaptureInfo: u64 stream, flag want_graph;
//       reply: i32 status, u64 id, u64 graph, bytes deps
//   cudaStreamUpdateCaptureDependencies: u64 stream, deps, u32 flags
//
// Kernels are resolved (FunctionToWire / PackKernelArgs) before a Call is
// opened: an open Call holds the request ring, and resolving makes a call.
// Edge data (cudaGraphEdgeData) other than the default is not supported.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "shim/call.h"
#include "shim/runtime.h"

namespace revenant {
namespace shim {
// shim/hooks_launch.cc
cudaError_t PackKernelArgs(const void* host_stub, void** args, uint64_t* function_id,
                           std::vector<char>* packed);
}  // namespace shim
}  // namespace revenant

namespace {

using revenant::api::ApiId;
using revenant::shim::Call;

cudaError_t Fail(cudaError_t e) {
  revenant::shim::SetLastError(e);
  return e;
}

cudaError_t Unreachable(const Call& call) {
  return static_cast<cudaError_t>(call.FailureStatus(cudaErrorDevicesUnavailable));
}

cudaError_t NotSupported(const char* what) {
  revenant::shim::LogNotSupported(what);
  return Fail(cudaErrorNotSupported);
}

// Edge data: only the default (all zero: a full dependency) is supported.
bool DefaultEdges(const cudaGraphEdgeData* edges, size_t n) {
  if (edges == nullptr) return true;
  const cudaGraphEdgeData zero{};
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(&edges[i], &zero, sizeof(zero)) != 0) return false;
  }
  return true;
}

uint64_t Wire(const void* handle) { return reinterpret_cast<uint64_t>(handle); }

struct Kernel {
  uint64_t id = 0;
  dim3 grid, block;
  uint64_t shared = 0;
  std::vector<char> packed;

  template <typename W>
  void Encode(W& w) const {
    w.Put(id);
    w.Put(grid);
    w.Put(block);
    w.Put(shared);
    w.PutBytes(packed.data(), packed.size());
  }
};

cudaError_t PrepareKernel(const cudaKernelNodeParams* p, Kernel* k) {
  if (p == nullptr || p->func == nullptr) return cudaErrorInvalidValue;
  if (p->extra != nullptr) return cudaErrorNotSupported;
  cudaError_t e = revenant::shim::PackKernelArgs(p->func, p->kernelParams, &k->id, &k->packed);
  if (e != cudaSuccess) return e;
  k->grid = p->gridDim;
  k->block = p->blockDim;
  k->shared = p->sharedMemBytes;
  // An empty byte field must still be present (not null).
  if (k->packed.empty()) k->packed.reserve(1);
  return cudaSuccess;
}

struct Memset {
  cudaMemsetParams p;
  template <typename W>
  void Encode(W& w) const {
    w.Put(Wire(p.dst));
    w.Put(static_cast<uint64_t>(p.pitch));
    w.Put(static_cast<uint32_t>(p.value));
    w.Put(static_cast<uint32_t>(p.elementSize));
    w.Put(static_cast<uint64_t>(p.width));
    w.Put(static_cast<uint64_t>(p.height));
  }
};

struct Memcpy1D {
  void* dst;
  const void* src;
  size_t count;
  cudaMemcpyKind kind;
  template <typename W>
  void Encode(W& w) const {
    w.Put(Wire(dst));
    w.Put(Wire(src));
    w.Put(static_cast<uint64_t>(count));
    w.Put(static_cast<int32_t>(kind));
  }
};

// A 3D copy (cudaMemcpy3DParms) between pitched pointers that is one
// contiguous run of bytes on both sides -- a 1D copy written as 3D, or whole
// rows and slices -- is a 1D copy node; a strided one (rows or slices with
// gaps) and one involving CUDA arrays are refused: cudaErrorNotSupported
// with one log line, in *why.
cudaError_t Memcpy3DAs1D(const cudaMemcpy3DParms* p, Memcpy1D* out, const char** why) {
  *why = nullptr;
  if (p == nullptr) return cudaErrorInvalidValue;
  if (p->srcArray != nullptr || p->dstArray != nullptr) {
    *why = "a graph memcpy node with a CUDA array";
    return cudaErrorNotSupported;
  }
  const uint64_t w = p->extent.width, h = p->extent.height, d = p->extent.depth;
  if (w == 0 || h == 0 || d == 0) return cudaErrorInvalidValue;
  bool contiguous = true;
  auto side = [&](const cudaPitchedPtr& pp, const cudaPos& pos, uint64_t* base) {
    if (pp.ptr == nullptr || pp.pitch < w || pos.x > pp.pitch - w) return false;
    const uint64_t pitch = pp.pitch, slice = pp.pitch * pp.ysize;
    if (d > 1 && (pp.ysize < h || pos.y > pp.ysize - h)) return false;
    *base = reinterpret_cast<uint64_t>(pp.ptr) + pos.z * slice + pos.y * pitch + pos.x;
    if (h > 1 && pitch != w) contiguous = false;
    if (d > 1 && slice != w * h) contiguous = false;
    return true;
  };
  uint64_t dst = 0, src = 0;
  if (!side(p->dstPtr, p->dstPos, &dst) || !side(p->srcPtr, p->srcPos, &src)) {
    return cudaErrorInvalidValue;
  }
  if (!contiguous) {
    *why = "a graph memcpy node of a strided 2D/3D copy (rows or slices with gaps)";
    return cudaErrorNotSupported;
  }
  *out = Memcpy1D{reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), w * h * d,
                  p->kind};
  return cudaSuccess;
}

struct Host {
  cudaHostNodeParams p;
  template <typename W>
  void Encode(W& w) const {
    w.Put(Wire(reinterpret_cast<const void*>(p.fn)));
    w.Put(Wire(p.userData));
  }
};

struct Scalar {
  uint64_t v;
  template <typename W>
  void Encode(W& w) const {
    w.Put(v);
  }
};

struct Nothing {
  template <typename W>
  void Encode(W&) const {}
};

struct Conditional {
  uint64_t handle;
  int32_t type;
  uint32_t size;
  template <typename W>
  void Encode(W& w) const {
    w.Put(handle);
    w.Put(type);
    w.Put(size);
  }
};

// The most bodies a conditional node may have here (a switch node's cases).
constexpr uint32_t kMaxConditionalBodies = 256;

// Encodes the dependency array; an empty one as a present, empty field.
template <typename W>
void EncodeNodes(W& w, const cudaGraphNode_t* nodes, size_t n) {
  static const uint64_t kNone = 0;
  w.PutBytes(n == 0 ? static_cast<const void*>(&kNone) : static_cast<const void*>(nodes),
             n * sizeof(uint64_t));
}

// One node-adding call: graph, deps, [type], params; reply: node [, dptr].
// `bodies` (conditional nodes): where the body graphs' ids go, `bodies_n`
// of them expected.
template <typename Params>
cudaError_t AddNodeCall(ApiId id, cudaGraphNode_t* node, cudaGraph_t graph,
                        const cudaGraphNode_t* deps, size_t n, const int32_t* type,
                        const Params& params, void** dptr, cudaGraph_t* bodies = nullptr,
                        uint32_t bodies_n = 0) {
  static_assert(sizeof(cudaGraphNode_t) == sizeof(uint64_t), "node handles are u64 ids");
  if (node == nullptr || (n > 0 && deps == nullptr)) return Fail(cudaErrorInvalidValue);
  revenant::wire::Sizer sz;
  sz.Put(uint64_t{});
  EncodeNodes(sz, deps, n);
  if (type != nullptr) sz.Put(*type);
  params.Encode(sz);
  Call call(id, sz.size());
  if (!call.ok()) return Unreachable(call);
  revenant::wire::Encoder& a = call.args();
  a.Put(Wire(graph));
  EncodeNodes(a, deps, n);
  if (type != nullptr) a.Put(*type);
  params.Encode(a);
  if (!call.Send()) return Unreachable(call);
  if (call.status() != 0) return static_cast<cudaError_t>(call.status());
  revenant::wire::Decoder& r = call.reply();
  const char* data = nullptr;
  uint64_t len = 0;
  if (!r.GetBytes(&data, &len) || data == nullptr || len != sizeof(uint64_t)) {
    return Fail(cudaErrorUnknown);
  }
  std::memcpy(node, data, sizeof(uint64_t));
  if (dptr != nullptr) {
    uint64_t p = 0;
    if (!r.Get(&p)) return Fail(cudaErrorUnknown);
    *dptr = reinterpret_cast<void*>(p);
  }
  if (bodies != nullptr) {
    if (!r.GetBytes(&data, &len) || len != bodies_n * sizeof(uint64_t) || data == nullptr) {
      return Fail(cudaErrorUnknown);
    }
    std::memcpy(bodies, data, len);
  }
  return cudaSuccess;
}

// Connected, and no stream capture this process began is open: every
// stream's capture status is "none", answered without a round trip.
bool NoCaptureOpen() {
  revenant::shim::Runtime* rt = revenant::shim::Runtime::Get();
  return !rt->AnyCaptureActive() && rt->Channel() != nullptr;
}

// Where cudaStreamGetCaptureInfo's dependency array lives: owned here, valid
// until the thread's next call, as the runtime's own array is.
thread_local std::vector<cudaGraphNode_t> tls_capture_deps;

}  // namespace

extern "C" REVENANT_EXPORT cudaError_t cudaStreamBeginCaptureToGraph(
    cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t* dependencies,
    const cudaGraphEdgeData* dependencyData, size_t numDependencies,
    cudaStreamCaptureMode mode) {
  if (numDependencies > 0 && dependencies == nullptr) return Fail(cudaErrorInvalidValue);
  if (!DefaultEdges(dependencyData, numDependencies)) {
    return NotSupported("cudaStreamBeginCaptureToGraph with edge data");
  }
  revenant::wire::Sizer sz;
  sz.Put(uint64_t{});
  sz.Put(uint64_t{});
  EncodeNodes(sz, dependencies, numDependencies);
  sz.Put(int32_t{});
  Call call(ApiId::cudaStreamBeginCaptureToGraph, sz.size());
  if (!call.ok()) return Unreachable(call);
  call.args().Put(Wire(stream));
  call.args().Put(Wire(graph));
  EncodeNodes(call.args(), dependencies, numDependencies);
  call.args().Put(static_cast<int32_t>(mode));
  if (!call.Send()) return Unreachable(call);
  if (call.status() == cudaSuccess) revenant::shim::Runtime::Get()->NoteCaptureBegun(Wire(stream));
  return static_cast<cudaError_t>(call.status());
}

// Capture begin and end as the generated stubs send them, noting which
// streams capture, so that capture-status queries need no round trip while
// none does: PyTorch asks before most allocations and collectives (about 15
// times a training step), and each asked question waited for the agent to
// catch up with every launch queued before it.
extern "C" REVENANT_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream,
                                                              cudaStreamCaptureMode mode) {
  revenant::wire::Sizer sz;
  sz.Put(stream);
  sz.Put(mode);
  Call call(ApiId::cudaStreamBeginCapture, sz.size());
  if (!call.ok()) return Unreachable(call);
  call.args().Put(stream);
  call.args().Put(mode);
  if (!call.Send()) return Unreachable(call);
  if (call.status() == cudaSuccess) revenant::shim::Runtime::Get()->NoteCaptureBegun(Wire(stream));
  return static_cast<cudaError_t>(call.status());
}

extern "C" REVENANT_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream,
                                                            cudaGraph_t* pGraph) {
  revenant::wire::Sizer sz;
  sz.Put(stream);
  sz.PutFlag();
  Call call(ApiId::cudaStreamEndCapture, sz.size());
  if (!call.ok()) return Unreachable(call);
  call.args().Put(stream);
  call.args().PutFlag(pGraph != nullptr);
  if (!call.Send()) return Unreachable(call);
  if (call.executed_status() == 0 && pGraph != nullptr) {
    call.CopyOut(call.reply(), pGraph, sizeof(*pGraph));
  }
  revenant::shim::Runtime::Get()->NoteCaptureEnd(Wire(stream), call.executed_status());
  return static_cast<cudaError_t>(call.status());
}

// No capture begun by this process: every stream's status is "none" (CUDA's
// answer for a valid stream; the agent is still asked for a null status
// pointer, so that it answers the native error).
extern "C" REVENANT_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                                             cudaStreamCaptureStatus* pCaptureStatus) {
  if (pCaptureStatus != nullptr && NoCaptureOpen()) {
    *pCaptureStatus = cudaStreamCaptureStatusNone;
    return cudaSuccess;
  }
  revenant::wire::Sizer sz;
  sz.Put(stream);
  sz.PutFlag();
  Call call(ApiId::cudaStreamIsCapturing, sz.size());
  if (!call.ok()) return Unreachable(call);
  call.args().Put(stream);
  call.args().PutFlag(pCaptureStatus != nullptr);
  if (!call.Send()) return Unreachable(call);
  if (call.executed_status() == 0 && pCaptureStatus != nullptr) {
    call.CopyOut(call.reply(), pCaptureStatus, sizeof(*pCaptureStatus));
  }
  return static_cast<cudaError_t>(call.status());
}

extern "C" REVENANT_EXPORT cudaError_t cudaStreamGetCaptureInfo(
    cudaStream_t stream, cudaStreamCaptureStatus* captureStatus_out,
    unsigned long long* id_out, cudaGraph_t* graph_out,
    const cudaGraphNode_t** dependencies_out, const cudaGraphEdgeData** edgeData_out,
    size_t* numDependencies_out) {
  if (captureStatus_out == nullptr) return Fail(cudaErrorInvalidValue);
  if (NoCaptureOpen()) {
    *captureStatus_out = cudaStreamCaptureStatusNone;
    return cudaSuccess;
  }
  revenant::wire::Sizer sz;
  sz.Put(uint64_t{});
  sz.PutFlag();
  Call call(ApiId::cudaStreamGetCaptureInfo, sz.size());
  if (!call.ok()) return Unreachable(call);
  call.args().Put(Wire(stream));
  call.args().PutFlag(graph_out != nullptr);
  if (!call.Send()) return Unreachable(call);
  if (call.status() != 0) return static_cast<cudaError_t>(call.status());
  revenant::wire::Decoder& r = call.reply();
  int32_t status = 0;
  uint64_t id = 0, graph = 0;
  const char* deps = nullptr;
  uint64_t len = 0;
  if (!r.Get(&status) || !r.Get(&id) || !r.Get(&graph) || !r.GetBytes(&deps, &len) ||
      len % sizeof(uint64_t) != 0) {
    return Fail(cudaErrorUnknown);
  }
  cudaStreamCaptureStatus capture_status;
  if (!revenant::wire::ToEnum(status, &capture_status)) return Fail(cudaErrorUnknown);
  *captureStatus_out = capture_status;
  if (status != cudaStreamCaptureStatusActive) return cudaSuccess;
  if (id_out != nullptr) *id_out = id;
  if (graph_out != nullptr) *graph_out = reinterpret_cast<cudaGraph_t>(graph);
  tls_capture_deps.resize(len / sizeof(uint64_t));
  if (len > 0) std::memcpy(tls_capture_deps.data(), deps, len);
  if (dependencies_out != nullptr) {
    *dependencies_out = tls_capture_deps.empty() ? nullptr : tls_capture_deps.data();
  }
  if (edgeData_out != nullptr) *edgeData_out = nullptr;  // all default edges
  if (numDependencies_out != nullptr) *numDependencies_out = tls_capture_deps.size();
  return cudaSuccess;
}

extern "C" REVENANT_EXPORT cudaError_t cudaStreamUpdateCaptureDependencies(
    cudaStream_t stream, cudaGraphNode_t* dependencies, const cudaGraphEdgeData* dependencyData,
    size_t numDependencies, unsigned int flags) {
  if (numDependencies > 0 && dependencies == nullptr) return Fail(cudaErrorInvalidValue);
  if (!DefaultEdges(dependencyData, numDependencies)) {
    return NotSupported("cudaStreamUpdateCaptureDependencies with edge data");
  }
  revenant::wire::Sizer sz;
  sz.Put(uint64_t{});
  EncodeNodes(sz, dependencies, numDependencies);
  sz.Put(uint32_t{});
  Call call(ApiId::cudaStreamUpdateCaptureDependencies, sz.size());
  if (!call.ok()) return Unreachable(call);
  call.args().Put(Wire(stream));
  EncodeNodes(call.args(), dependencies, numDependencies);
  call.args().Put(static_cast<uint32_t>(flags));
  if (!call.Send()) return Unreachable(call);
  return static_cast<cudaError_t>(call.status());
}

namespace {
// A node list request (u64 graph or node, u64 capacity; reply: u64 count,
// bytes of node ids): cudaGraphGetNodes and cudaGraphNodeGetDependencies.
// `out` null asks for the count only; slots past the ids are nulled.
cudaError_t GetNodeList(ApiId id, uint64_t of, cudaGraphNode_t* out, size_t* num) {
  const uint64_t capacity = out == nullptr ? 0 : *num;
  revenant::wire::Sizer sz;
  sz.Put(uint64_t{});
  sz.Put(uint64_t{});
  Call call(id, sz.size());
  if (!call.ok()) return Unreachable(call);
  call.args().Put(of);
  call.args().Put(capacity);
  if (!call.Send()) return Unreachable(call);
  if (call.status() != 0) return static_cast<cudaError_t>(call.status());
  revenant::wire::Decoder& r = call.reply();
  uint64_t count = 0, len = 0;
  const char* ids = nullptr;
  if (!r.Get(&count) || !r.GetBytes(&ids, &len) || len % sizeof(uint64_t) != 0 ||
      len / sizeof(uint64_t) > capacity) {
    return Fail(cudaErrorUnknown);
  }
  if (out == nullptr) {
    *num = count;
    return cudaSuccess;
  }
  const size_t got = len / sizeof(uint64_t);
  if (got > 0) std::memcpy(out, ids, len);
  for (size_t i = got; i < capacity; ++i) out[i] = nullptr;
  *num = got;
  return cudaSuccess;
}
}  // namespace

extern "C" REVENANT_EXPORT cudaError_t cudaGraphGetNodes(cudaGraph_t graph,
                                                         cudaGraphNode_t* nodes,
                                                         size_t* numNodes) {
  if (numNodes == nullptr) return Fail(cudaErrorInvalidValue);
  return GetNodeList(ApiId::cudaGraphGetNodes, Wire(graph), nodes, numNodes);
}

// Every edge is a default edge (edge data is refused where edges are made),
// so edge data, when asked for, is all zeros.
extern "C" REVENANT_EXPORT cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node,
                                                                    cudaGraphNode_t* deps,
                                                                    cudaGraphEdgeData* edgeData,
                                                                    size_t* numDeps) {
  if (numDeps == nullptr || node == nullptr) return Fail(cudaErrorInvalidValue);
  if (edgeData != nullptr && deps == nullptr) return Fail(cudaErrorInvalidValue);
  const size_t capacity = deps == nullptr ? 0 : *numDeps;
  const cudaError_t err =
      GetNodeList(ApiId::cudaGraphNodeGetDependencies, Wire(node), deps, numDeps);
  if (err == cudaSuccess && edgeData != nullptr) {
    std::memset(edgeData, 0, capacity * sizeof(cudaGraphEdgeData));
  }
  return err;
}

// The agent describes the graph; the file is written here, relative to the
// application's working directory and with its permissions.
extern "C" REVENANT_EXPORT cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char* path,
                                                              unsigned int flags) {
  if (path == nullptr) return Fail(cudaErrorInvalidValue);
  revenant::wire::Sizer sz;
  sz.Put(uint64_t{});
  sz.Put(uint32_t{});
  Call call(ApiId::cudaGraphDebugDotPrint, sz.size());
  if (!call.ok()) return Unreachable(call);
  call.args().Put(Wire(graph));
  call.args().Put(static_cast<uint32_t>(flags));
  if (!call.Send()) return Unreachable(call);
  if (call.status() != 0) return Fail(static_cast<cudaError_t>(call.status()));
  const char* dot = nullptr;
  uint64_t len = 0;
  if (!call.reply().GetBytes(&dot, &len)) return Fail(cudaErrorUnknown);
  FILE* f = std::fopen(path, "w");
  if (f == nullptr) return Fail(cudaErrorOperatingSystem);
  const bool ok = (len == 0 || std::fwrite(dot, 1, len, f) == len);
  if (std::fclose(f) != 0 || !ok) return Fail(cudaErrorOperatingSystem);
  return cudaSuccess;
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddNode(cudaGraphNode_t* pGraphNode,
                                                        cudaGraph_t graph,
                                                        const cudaGraphNode_t* pDependencies,
                                                        const cudaGraphEdgeData* dependencyData,
                                                        size_t numDependencies,
                                                        cudaGraphNodeParams* nodeParams) {
  if (nodeParams == nullptr) return Fail(cudaErrorInvalidValue);
  if (!DefaultEdges(dependencyData, numDependencies)) {
    return NotSupported("cudaGraphAddNode with edge data");
  }
  const int32_t type = nodeParams->type;
  switch (nodeParams->type) {
    case cudaGraphNodeTypeKernel: {
      Kernel k;
      const cudaKernelNodeParams kp{nodeParams->kernel.func, nodeParams->kernel.gridDim,
                                    nodeParams->kernel.blockDim,
                                    nodeParams->kernel.sharedMemBytes,
                                    nodeParams->kernel.kernelParams, nodeParams->kernel.extra};
      if (cudaError_t e = PrepareKernel(&kp, &k); e != cudaSuccess) return Fail(e);
      return AddNodeCall(ApiId::cudaGraphAddNode, pGraphNode, graph, pDependencies,
                         numDependencies, &type, k, nullptr);
    }
    case cudaGraphNodeTypeMemset: {
      Memset m;
      m.p = cudaMemsetParams{};
      m.p.dst = nodeParams->memset.dst;
      m.p.pitch = nodeParams->memset.pitch;
      m.p.value = nodeParams->memset.value;
      m.p.elementSize = nodeParams->memset.elementSize;
      m.p.width = nodeParams->memset.width;
      m.p.height = nodeParams->memset.height;
      return AddNodeCall(ApiId::cudaGraphAddNode, pGraphNode, graph, pDependencies,
                         numDependencies, &type, m, nullptr);
    }
    case cudaGraphNodeTypeHost: {
      if (nodeParams->host.fn == nullptr) return Fail(cudaErrorInvalidValue);
      Host h;
      h.p.fn = nodeParams->host.fn;
      h.p.userData = nodeParams->host.userData;
      return AddNodeCall(ApiId::cudaGraphAddNode, pGraphNode, graph, pDependencies,
                         numDependencies, &type, h, nullptr);
    }
    case cudaGraphNodeTypeMemcpy: {
      Memcpy1D m;
      const char* why = nullptr;
      if (cudaError_t e = Memcpy3DAs1D(&nodeParams->memcpy.copyParams, &m, &why);
          e != cudaSuccess) {
        return why != nullptr ? NotSupported(why) : Fail(e);
      }
      return AddNodeCall(ApiId::cudaGraphAddNode, pGraphNode, graph, pDependencies,
                         numDependencies, &type, m, nullptr);
    }
    case cudaGraphNodeTypeEmpty:
      return AddNodeCall(ApiId::cudaGraphAddNode, pGraphNode, graph, pDependencies,
                         numDependencies, &type, Nothing{}, nullptr);
    case cudaGraphNodeTypeMemAlloc:
      if (nodeParams->alloc.poolProps.location.type != cudaMemLocationTypeDevice ||
          nodeParams->alloc.accessDescCount != 0) {
        return NotSupported("cudaGraphAddNode: alloc node outside the device or with peer access");
      }
      return AddNodeCall(ApiId::cudaGraphAddNode, pGraphNode, graph, pDependencies,
                         numDependencies, &type, Scalar{nodeParams->alloc.bytesize},
                         &nodeParams->alloc.dptr);
    case cudaGraphNodeTypeMemFree:
      return AddNodeCall(ApiId::cudaGraphAddNode, pGraphNode, graph, pDependencies,
                         numDependencies, &type, Scalar{Wire(nodeParams->free.dptr)}, nullptr);
    case cudaGraphNodeTypeGraph:
      // Moving the child into the parent (its handle then owned by the node)
      // is not built: only cloning.
      if (nodeParams->graph.ownership != cudaGraphChildGraphOwnershipClone) {
        return NotSupported("cudaGraphAddNode: a child graph node with ownership moved");
      }
      return AddNodeCall(ApiId::cudaGraphAddNode, pGraphNode, graph, pDependencies,
                         numDependencies, &type, Scalar{Wire(nodeParams->graph.graph)}, nullptr);
    case cudaGraphNodeTypeEventRecord:
      return AddNodeCall(ApiId::cudaGraphAddNode, pGraphNode, graph, pDependencies,
                         numDependencies, &type, Scalar{Wire(nodeParams->eventRecord.event)},
                         nullptr);
    case cudaGraphNodeTypeWaitEvent:
      return AddNodeCall(ApiId::cudaGraphAddNode, pGraphNode, graph, pDependencies,
                         numDependencies, &type, Scalar{Wire(nodeParams->eventWait.event)},
                         nullptr);
    case cudaGraphNodeTypeConditional: {
      // The bodies come back as graph handles in an array the node owns as
      // long as it lives (CUDA's phGraph_out): kept here, never freed (a
      // few bytes per conditional node).
      const cudaConditionalNodeParams& c = nodeParams->conditional;
      if (c.size == 0 || c.size > kMaxConditionalBodies) {
        if (c.size > kMaxConditionalBodies) {
          return NotSupported("cudaGraphAddNode: a conditional node of more than 256 bodies");
        }
        return Fail(cudaErrorInvalidValue);
      }
      auto* bodies = new cudaGraph_t[c.size]();
      void* no_address = nullptr;
      const cudaError_t e = AddNodeCall(
          ApiId::cudaGraphAddNode, pGraphNode, graph, pDependencies, numDependencies, &type,
          Conditional{c.handle, static_cast<int32_t>(c.type), c.size}, &no_address, bodies,
          c.size);
      if (e != cudaSuccess) {
        delete[] bodies;
        return e;
      }
      nodeParams->conditional.phGraph_out = bodies;
      return cudaSuccess;
    }
    case cudaGraphNodeTypeExtSemaphoreSignal:
    case cudaGraphNodeTypeExtSemaphoreWait:
      return NotSupported("cudaGraphAddNode of an external semaphore node");
    default:
      return NotSupported("cudaGraphAddNode of this node type");
  }
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddChildGraphNode(
    cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
    size_t numDependencies, cudaGraph_t childGraph) {
  return AddNodeCall(ApiId::cudaGraphAddChildGraphNode, pGraphNode, graph, pDependencies,
                     numDependencies, nullptr, Scalar{Wire(childGraph)}, nullptr);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddEventRecordNode(
    cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
    size_t numDependencies, cudaEvent_t event) {
  return AddNodeCall(ApiId::cudaGraphAddEventRecordNode, pGraphNode, graph, pDependencies,
                     numDependencies, nullptr, Scalar{Wire(event)}, nullptr);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddEventWaitNode(
    cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
    size_t numDependencies, cudaEvent_t event) {
  return AddNodeCall(ApiId::cudaGraphAddEventWaitNode, pGraphNode, graph, pDependencies,
                     numDependencies, nullptr, Scalar{Wire(event)}, nullptr);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddKernelNode(
    cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
    size_t numDependencies, const cudaKernelNodeParams* pNodeParams) {
  Kernel k;
  if (cudaError_t e = PrepareKernel(pNodeParams, &k); e != cudaSuccess) return Fail(e);
  return AddNodeCall(ApiId::cudaGraphAddKernelNode, pGraphNode, graph, pDependencies,
                     numDependencies, nullptr, k, nullptr);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddMemcpyNode(
    cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
    size_t numDependencies, const cudaMemcpy3DParms* pCopyParams) {
  Memcpy1D m;
  const char* why = nullptr;
  if (cudaError_t e = Memcpy3DAs1D(pCopyParams, &m, &why); e != cudaSuccess) {
    return why != nullptr ? NotSupported(why) : Fail(e);
  }
  return AddNodeCall(ApiId::cudaGraphAddMemcpyNode, pGraphNode, graph, pDependencies,
                     numDependencies, nullptr, m, nullptr);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddMemcpyNode1D(
    cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
    size_t numDependencies, void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return AddNodeCall(ApiId::cudaGraphAddMemcpyNode1D, pGraphNode, graph, pDependencies,
                     numDependencies, nullptr, Memcpy1D{dst, src, count, kind}, nullptr);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddMemsetNode(
    cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
    size_t numDependencies, const cudaMemsetParams* pMemsetParams) {
  if (pMemsetParams == nullptr) return Fail(cudaErrorInvalidValue);
  return AddNodeCall(ApiId::cudaGraphAddMemsetNode, pGraphNode, graph, pDependencies,
                     numDependencies, nullptr, Memset{*pMemsetParams}, nullptr);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddHostNode(
    cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
    size_t numDependencies, const cudaHostNodeParams* pNodeParams) {
  if (pNodeParams == nullptr || pNodeParams->fn == nullptr) return Fail(cudaErrorInvalidValue);
  return AddNodeCall(ApiId::cudaGraphAddHostNode, pGraphNode, graph, pDependencies,
                     numDependencies, nullptr, Host{*pNodeParams}, nullptr);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddMemAllocNode(
    cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
    size_t numDependencies, cudaMemAllocNodeParams* nodeParams) {
  if (nodeParams == nullptr) return Fail(cudaErrorInvalidValue);
  if (nodeParams->poolProps.location.type != cudaMemLocationTypeDevice ||
      nodeParams->accessDescCount != 0) {
    return NotSupported("cudaGraphAddMemAllocNode outside the device or with peer access");
  }
  return AddNodeCall(ApiId::cudaGraphAddMemAllocNode, pGraphNode, graph, pDependencies,
                     numDependencies, nullptr, Scalar{nodeParams->bytesize}, &nodeParams->dptr);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddMemFreeNode(
    cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
    size_t numDependencies, void* dptr) {
  return AddNodeCall(ApiId::cudaGraphAddMemFreeNode, pGraphNode, graph, pDependencies,
                     numDependencies, nullptr, Scalar{Wire(dptr)}, nullptr);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphExecKernelNodeSetParams(
    cudaGraphExec_t hGraphExec, cudaGraphNode_t node, const cudaKernelNodeParams* pNodeParams) {
  Kernel k;
  if (cudaError_t e = PrepareKernel(pNodeParams, &k); e != cudaSuccess) return Fail(e);
  revenant::wire::Sizer sz;
  sz.Put(uint64_t{});
  sz.Put(uint64_t{});
  k.Encode(sz);
  Call call(ApiId::cudaGraphExecKernelNodeSetParams, sz.size());
  if (!call.ok()) return Unreachable(call);
  call.args().Put(Wire(hGraphExec));
  call.args().Put(Wire(node));
  k.Encode(call.args());
  if (!call.Send()) return Unreachable(call);
  return static_cast<cudaError_t>(call.status());
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphExecUpdate(
    cudaGraphExec_t hGraphExec, cudaGraph_t hGraph, cudaGraphExecUpdateResultInfo* resultInfo) {
  revenant::wire::Sizer sz;
  sz.Put(uint64_t{});
  sz.Put(uint64_t{});
  Call call(ApiId::cudaGraphExecUpdate, sz.size());
  if (!call.ok()) return Unreachable(call);
  call.args().Put(Wire(hGraphExec));
  call.args().Put(Wire(hGraph));
  if (!call.Send()) return Unreachable(call);
  revenant::wire::Decoder& r = call.reply();
  uint64_t error_node = 0, error_from = 0;
  cudaGraphExecUpdateResult update_result = cudaGraphExecUpdateError;
  if (r.Get(&update_result) && r.Get(&error_node) && r.Get(&error_from) && resultInfo != nullptr) {
    resultInfo->result = update_result;
    resultInfo->errorNode = reinterpret_cast<cudaGraphNode_t>(error_node);
    resultInfo->errorFromNode = reinterpret_cast<cudaGraphNode_t>(error_from);
  }
  return static_cast<cudaError_t>(call.status());
}

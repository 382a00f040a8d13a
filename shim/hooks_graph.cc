// Hand-written shim hooks of the graph rows whose arguments hold arrays of
// node handles or structs holding handles, host functions and kernel
// arguments. The agent side is in agent/hooks.cc.
//
// Requests and replies are the rows' structs (api/hook_structs.h, from the
// rows' `request`/`reply` fields in api/cuda_runtime.textproto). `deps` is
// one byte field of u64 virtual GRAPH_NODE ids (as the application holds
// them), present even when empty; a kernel node's arguments are packed at
// the kernel's parameter layout, as a launch packs them; a host node's
// function runs in the application, through the callback ring, each time the
// node runs; a created node comes back as a byte field holding its u64 id.
//
// Kernels are resolved (FunctionToWire / PackKernelArgs) before a Call is
// opened: an open Call holds the request ring, and resolving makes a call.
// Edge data (cudaGraphEdgeData) other than the default is not supported.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "api/hook_structs.h"
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

namespace hooks = revenant::hooks;
using revenant::wire::Bytes;

// A kernel node's parameters, with the packed arguments they point to.
struct Kernel {
  uint64_t id = 0;
  dim3 grid, block;
  uint64_t shared = 0;
  std::vector<char> packed;

  hooks::KernelNodeParams Params() const {
    hooks::KernelNodeParams p;
    p.function_id = id;
    p.grid = grid;
    p.block = block;
    p.shared_bytes = shared;
    p.args = Bytes::Of(packed.data(), packed.size());
    return p;
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

hooks::MemsetNodeParams MemsetOf(const cudaMemsetParams& p) {
  hooks::MemsetNodeParams m;
  m.dst = Wire(p.dst);
  m.pitch = static_cast<uint64_t>(p.pitch);
  m.value = static_cast<uint32_t>(p.value);
  m.element_size = static_cast<uint32_t>(p.elementSize);
  m.width = static_cast<uint64_t>(p.width);
  m.height = static_cast<uint64_t>(p.height);
  return m;
}

hooks::Memcpy1DNodeParams Memcpy1DOf(const void* dst, const void* src, size_t count,
                                     cudaMemcpyKind kind) {
  hooks::Memcpy1DNodeParams m;
  m.dst = Wire(dst);
  m.src = Wire(src);
  m.count = static_cast<uint64_t>(count);
  m.kind = static_cast<int32_t>(kind);
  return m;
}

// A 3D copy (cudaMemcpy3DParms) between pitched pointers that is one
// contiguous run of bytes on both sides -- a 1D copy written as 3D, or whole
// rows and slices -- is a 1D copy node; a strided one (rows or slices with
// gaps) and one involving CUDA arrays are refused: cudaErrorNotSupported
// with one log line, in *why.
cudaError_t Memcpy3DAs1D(const cudaMemcpy3DParms* p, hooks::Memcpy1DNodeParams* out,
                         const char** why) {
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
  *out = Memcpy1DOf(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), w * h * d,
                    p->kind);
  return cudaSuccess;
}

hooks::HostNodeParams HostOf(const cudaHostNodeParams& p) {
  hooks::HostNodeParams h;
  h.fn = Wire(reinterpret_cast<const void*>(p.fn));
  h.user_data = Wire(p.userData);
  return h;
}

// The most bodies a conditional node may have here (a switch node's cases).
constexpr uint32_t kMaxConditionalBodies = 256;

// The dependency array; an empty one as a present, empty field.
Bytes DepsOf(const cudaGraphNode_t* nodes, size_t n) {
  static const uint64_t kNone = 0;
  return Bytes::Of(n == 0 ? static_cast<const void*>(&kNone) : static_cast<const void*>(nodes),
                   n * sizeof(uint64_t));
}

// cudaGraphAddNode's reply depends on the request's node type; the other
// rows' replies do not.
bool DecodeNodeReply(hooks::cudaGraphAddNodeReply* reply, revenant::wire::Decoder& in,
                     const hooks::cudaGraphAddNodeRequest& req) {
  return reply->Decode(in, req);
}
template <typename Reply, typename Request>
bool DecodeNodeReply(Reply* reply, revenant::wire::Decoder& in, const Request&) {
  return reply->Decode(in);
}

// One node-adding call: `req` holds the node's parameters (and type, for
// cudaGraphAddNode); graph and dependencies are set here. The reply (the
// node, an alloc node's address, a conditional node's bodies) goes to
// `*reply`.
template <typename Request, typename Reply>
cudaError_t AddNodeCall(ApiId id, cudaGraphNode_t* node, cudaGraph_t graph,
                        const cudaGraphNode_t* deps, size_t n, Request req, Reply* reply) {
  static_assert(sizeof(cudaGraphNode_t) == sizeof(uint64_t), "node handles are u64 ids");
  if (node == nullptr || (n > 0 && deps == nullptr)) return Fail(cudaErrorInvalidValue);
  req.graph = Wire(graph);
  req.deps = DepsOf(deps, n);
  Call call(id, req.Size());
  if (!call.ok()) return Unreachable(call);
  req.Encode(call.args());
  if (!call.Send()) return Unreachable(call);
  if (call.status() != 0) return static_cast<cudaError_t>(call.status());
  if (!DecodeNodeReply(reply, call.reply(), req) || reply->node.data == nullptr ||
      reply->node.size != sizeof(uint64_t)) {
    return Fail(cudaErrorUnknown);
  }
  std::memcpy(node, reply->node.data, sizeof(uint64_t));
  return cudaSuccess;
}

// A row whose reply is the node alone.
template <typename Reply, typename Request>
cudaError_t AddNode(ApiId id, cudaGraphNode_t* node, cudaGraph_t graph,
                    const cudaGraphNode_t* deps, size_t n, Request req) {
  Reply reply;
  return AddNodeCall(id, node, graph, deps, n, std::move(req), &reply);
}

// cudaGraphAddNode of `type` with the parameters `set` puts in its request.
template <typename Set>
cudaError_t AddNodeOfType(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                          size_t n, cudaGraphNodeType type, Set set,
                          hooks::cudaGraphAddNodeReply* reply) {
  hooks::cudaGraphAddNodeRequest req;
  req.type = static_cast<int32_t>(type);
  set(&req);
  return AddNodeCall(ApiId::cudaGraphAddNode, node, graph, deps, n, std::move(req), reply);
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
  hooks::cudaStreamBeginCaptureToGraphRequest req;
  req.stream = Wire(stream);
  req.graph = Wire(graph);
  req.deps = DepsOf(dependencies, numDependencies);
  req.mode = static_cast<int32_t>(mode);
  Call call(ApiId::cudaStreamBeginCaptureToGraph, req.Size());
  if (!call.ok()) return Unreachable(call);
  req.Encode(call.args());
  if (!call.Send()) return Unreachable(call);
  if (call.status() == cudaSuccess) revenant::shim::Runtime::Get()->NoteCaptureBegun(Wire(stream));
  return static_cast<cudaError_t>(call.status());
}

extern "C" REVENANT_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream,
                                                              cudaStreamCaptureMode mode) {
  hooks::cudaStreamBeginCaptureRequest req;
  req.stream = Wire(stream);
  req.mode = static_cast<int32_t>(mode);
  Call call(ApiId::cudaStreamBeginCapture, req.Size());
  if (!call.ok()) return Unreachable(call);
  req.Encode(call.args());
  if (!call.Send()) return Unreachable(call);
  if (call.status() == cudaSuccess) revenant::shim::Runtime::Get()->NoteCaptureBegun(Wire(stream));
  return static_cast<cudaError_t>(call.status());
}

extern "C" REVENANT_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream,
                                                            cudaGraph_t* pGraph) {
  hooks::cudaStreamEndCaptureRequest req;
  req.stream = Wire(stream);
  req.pGraph = pGraph != nullptr;
  Call call(ApiId::cudaStreamEndCapture, req.Size());
  if (!call.ok()) return Unreachable(call);
  req.Encode(call.args());
  if (!call.Send()) return Unreachable(call);
  hooks::cudaStreamEndCaptureReply reply;
  if (call.executed_status() == 0 && pGraph != nullptr && reply.Decode(call.reply(), req)) {
    reply.pGraph.CopyTo(pGraph, sizeof(*pGraph));
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
  hooks::cudaStreamIsCapturingRequest req;
  req.stream = Wire(stream);
  req.pCaptureStatus = pCaptureStatus != nullptr;
  Call call(ApiId::cudaStreamIsCapturing, req.Size());
  if (!call.ok()) return Unreachable(call);
  req.Encode(call.args());
  if (!call.Send()) return Unreachable(call);
  hooks::cudaStreamIsCapturingReply reply;
  if (call.executed_status() == 0 && pCaptureStatus != nullptr && reply.Decode(call.reply(), req)) {
    reply.pCaptureStatus.CopyTo(pCaptureStatus, sizeof(*pCaptureStatus));
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
  hooks::cudaStreamGetCaptureInfoRequest req;
  req.stream = Wire(stream);
  req.want_graph = graph_out != nullptr;
  Call call(ApiId::cudaStreamGetCaptureInfo, req.Size());
  if (!call.ok()) return Unreachable(call);
  req.Encode(call.args());
  if (!call.Send()) return Unreachable(call);
  if (call.status() != 0) return static_cast<cudaError_t>(call.status());
  hooks::cudaStreamGetCaptureInfoReply reply;
  if (!reply.Decode(call.reply()) || reply.deps.size % sizeof(uint64_t) != 0) {
    return Fail(cudaErrorUnknown);
  }
  cudaStreamCaptureStatus capture_status;
  if (!revenant::wire::ToEnum(reply.status, &capture_status)) return Fail(cudaErrorUnknown);
  *captureStatus_out = capture_status;
  if (reply.status != cudaStreamCaptureStatusActive) return cudaSuccess;
  if (id_out != nullptr) *id_out = reply.id;
  if (graph_out != nullptr) *graph_out = reinterpret_cast<cudaGraph_t>(reply.graph);
  tls_capture_deps.resize(reply.deps.size / sizeof(uint64_t));
  if (reply.deps.size > 0) std::memcpy(tls_capture_deps.data(), reply.deps.data, reply.deps.size);
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
  hooks::cudaStreamUpdateCaptureDependenciesRequest req;
  req.stream = Wire(stream);
  req.deps = DepsOf(dependencies, numDependencies);
  req.flags = static_cast<uint32_t>(flags);
  Call call(ApiId::cudaStreamUpdateCaptureDependencies, req.Size());
  if (!call.ok()) return Unreachable(call);
  req.Encode(call.args());
  if (!call.Send()) return Unreachable(call);
  return static_cast<cudaError_t>(call.status());
}

namespace {
// A node list request: cudaGraphGetNodes and cudaGraphNodeGetDependencies
// (one layout: the graph or node, a capacity; the count and at most
// capacity ids back). `out` null asks for the count only; slots past the
// ids are nulled.
cudaError_t GetNodeList(ApiId id, uint64_t of, cudaGraphNode_t* out, size_t* num) {
  hooks::cudaGraphGetNodesRequest req;
  req.of = of;
  req.capacity = out == nullptr ? 0 : *num;
  Call call(id, req.Size());
  if (!call.ok()) return Unreachable(call);
  req.Encode(call.args());
  if (!call.Send()) return Unreachable(call);
  if (call.status() != 0) return static_cast<cudaError_t>(call.status());
  hooks::cudaGraphGetNodesReply reply;
  if (!reply.Decode(call.reply()) || reply.ids.size % sizeof(uint64_t) != 0 ||
      reply.ids.size / sizeof(uint64_t) > req.capacity) {
    return Fail(cudaErrorUnknown);
  }
  if (out == nullptr) {
    *num = reply.count;
    return cudaSuccess;
  }
  const size_t got = reply.ids.size / sizeof(uint64_t);
  if (got > 0) std::memcpy(out, reply.ids.data, reply.ids.size);
  for (size_t i = got; i < req.capacity; ++i) out[i] = nullptr;
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
  hooks::cudaGraphDebugDotPrintRequest req;
  req.graph = Wire(graph);
  req.flags = static_cast<uint32_t>(flags);
  Call call(ApiId::cudaGraphDebugDotPrint, req.Size());
  if (!call.ok()) return Unreachable(call);
  req.Encode(call.args());
  if (!call.Send()) return Unreachable(call);
  if (call.status() != 0) return Fail(static_cast<cudaError_t>(call.status()));
  hooks::cudaGraphDebugDotPrintReply reply;
  if (!reply.Decode(call.reply())) return Fail(cudaErrorUnknown);
  const char* dot = reply.dot.data;
  const uint64_t len = reply.dot.size;
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
  const cudaGraphNodeType type = nodeParams->type;
  hooks::cudaGraphAddNodeReply reply;
  auto add = [&](auto set) {
    return AddNodeOfType(pGraphNode, graph, pDependencies, numDependencies, type, set, &reply);
  };
  using Req = hooks::cudaGraphAddNodeRequest;
  switch (nodeParams->type) {
    case cudaGraphNodeTypeKernel: {
      Kernel k;
      const cudaKernelNodeParams kp{nodeParams->kernel.func, nodeParams->kernel.gridDim,
                                    nodeParams->kernel.blockDim,
                                    nodeParams->kernel.sharedMemBytes,
                                    nodeParams->kernel.kernelParams, nodeParams->kernel.extra};
      if (cudaError_t e = PrepareKernel(&kp, &k); e != cudaSuccess) return Fail(e);
      return add([&](Req* r) { r->kernel = k.Params(); });
    }
    case cudaGraphNodeTypeMemset: {
      cudaMemsetParams m{};
      m.dst = nodeParams->memset.dst;
      m.pitch = nodeParams->memset.pitch;
      m.value = nodeParams->memset.value;
      m.elementSize = nodeParams->memset.elementSize;
      m.width = nodeParams->memset.width;
      m.height = nodeParams->memset.height;
      return add([&](Req* r) { r->memset = MemsetOf(m); });
    }
    case cudaGraphNodeTypeHost: {
      if (nodeParams->host.fn == nullptr) return Fail(cudaErrorInvalidValue);
      cudaHostNodeParams h{};
      h.fn = nodeParams->host.fn;
      h.userData = nodeParams->host.userData;
      return add([&](Req* r) { r->host = HostOf(h); });
    }
    case cudaGraphNodeTypeMemcpy: {
      hooks::Memcpy1DNodeParams m;
      const char* why = nullptr;
      if (cudaError_t e = Memcpy3DAs1D(&nodeParams->memcpy.copyParams, &m, &why);
          e != cudaSuccess) {
        return why != nullptr ? NotSupported(why) : Fail(e);
      }
      return add([&](Req* r) { r->copy = m; });
    }
    case cudaGraphNodeTypeEmpty:
      return add([](Req*) {});
    case cudaGraphNodeTypeMemAlloc: {
      if (nodeParams->alloc.poolProps.location.type != cudaMemLocationTypeDevice ||
          nodeParams->alloc.accessDescCount != 0) {
        return NotSupported("cudaGraphAddNode: alloc node outside the device or with peer access");
      }
      const cudaError_t e = add([&](Req* r) { r->bytesize = nodeParams->alloc.bytesize; });
      if (e == cudaSuccess) nodeParams->alloc.dptr = reinterpret_cast<void*>(reply.dptr);
      return e;
    }
    case cudaGraphNodeTypeMemFree:
      return add([&](Req* r) { r->dptr = Wire(nodeParams->free.dptr); });
    case cudaGraphNodeTypeGraph:
      // Moving the child into the parent (its handle then owned by the node)
      // is not built: only cloning.
      if (nodeParams->graph.ownership != cudaGraphChildGraphOwnershipClone) {
        return NotSupported("cudaGraphAddNode: a child graph node with ownership moved");
      }
      return add([&](Req* r) { r->child = Wire(nodeParams->graph.graph); });
    case cudaGraphNodeTypeEventRecord:
      return add([&](Req* r) { r->event = Wire(nodeParams->eventRecord.event); });
    case cudaGraphNodeTypeWaitEvent:
      return add([&](Req* r) { r->event = Wire(nodeParams->eventWait.event); });
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
      const cudaError_t e = add([&](Req* r) {
        r->conditional.handle = c.handle;
        r->conditional.type = static_cast<int32_t>(c.type);
        r->conditional.size = c.size;
      });
      if (e != cudaSuccess) return e;
      if (reply.bodies.data == nullptr || reply.bodies.size != c.size * sizeof(uint64_t)) {
        return Fail(cudaErrorUnknown);
      }
      auto* bodies = new cudaGraph_t[c.size]();
      std::memcpy(bodies, reply.bodies.data, reply.bodies.size);
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
  hooks::cudaGraphAddChildGraphNodeRequest req;
  req.child = Wire(childGraph);
  return AddNode<hooks::cudaGraphAddChildGraphNodeReply>(
      ApiId::cudaGraphAddChildGraphNode, pGraphNode, graph, pDependencies, numDependencies, req);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddEventRecordNode(
    cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
    size_t numDependencies, cudaEvent_t event) {
  hooks::cudaGraphAddEventRecordNodeRequest req;
  req.event = Wire(event);
  return AddNode<hooks::cudaGraphAddEventRecordNodeReply>(
      ApiId::cudaGraphAddEventRecordNode, pGraphNode, graph, pDependencies, numDependencies, req);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddEventWaitNode(
    cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
    size_t numDependencies, cudaEvent_t event) {
  hooks::cudaGraphAddEventWaitNodeRequest req;
  req.event = Wire(event);
  return AddNode<hooks::cudaGraphAddEventWaitNodeReply>(
      ApiId::cudaGraphAddEventWaitNode, pGraphNode, graph, pDependencies, numDependencies, req);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddKernelNode(
    cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
    size_t numDependencies, const cudaKernelNodeParams* pNodeParams) {
  Kernel k;
  if (cudaError_t e = PrepareKernel(pNodeParams, &k); e != cudaSuccess) return Fail(e);
  hooks::cudaGraphAddKernelNodeRequest req;
  req.kernel = k.Params();
  return AddNode<hooks::cudaGraphAddKernelNodeReply>(
      ApiId::cudaGraphAddKernelNode, pGraphNode, graph, pDependencies, numDependencies, req);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddMemcpyNode(
    cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
    size_t numDependencies, const cudaMemcpy3DParms* pCopyParams) {
  hooks::cudaGraphAddMemcpyNodeRequest req;
  const char* why = nullptr;
  if (cudaError_t e = Memcpy3DAs1D(pCopyParams, &req.copy, &why); e != cudaSuccess) {
    return why != nullptr ? NotSupported(why) : Fail(e);
  }
  return AddNode<hooks::cudaGraphAddMemcpyNodeReply>(
      ApiId::cudaGraphAddMemcpyNode, pGraphNode, graph, pDependencies, numDependencies, req);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddMemcpyNode1D(
    cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
    size_t numDependencies, void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  hooks::cudaGraphAddMemcpyNode1DRequest req;
  req.copy = Memcpy1DOf(dst, src, count, kind);
  return AddNode<hooks::cudaGraphAddMemcpyNode1DReply>(
      ApiId::cudaGraphAddMemcpyNode1D, pGraphNode, graph, pDependencies, numDependencies, req);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddMemsetNode(
    cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
    size_t numDependencies, const cudaMemsetParams* pMemsetParams) {
  if (pMemsetParams == nullptr) return Fail(cudaErrorInvalidValue);
  hooks::cudaGraphAddMemsetNodeRequest req;
  req.memset = MemsetOf(*pMemsetParams);
  return AddNode<hooks::cudaGraphAddMemsetNodeReply>(
      ApiId::cudaGraphAddMemsetNode, pGraphNode, graph, pDependencies, numDependencies, req);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddHostNode(
    cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
    size_t numDependencies, const cudaHostNodeParams* pNodeParams) {
  if (pNodeParams == nullptr || pNodeParams->fn == nullptr) return Fail(cudaErrorInvalidValue);
  hooks::cudaGraphAddHostNodeRequest req;
  req.host = HostOf(*pNodeParams);
  return AddNode<hooks::cudaGraphAddHostNodeReply>(
      ApiId::cudaGraphAddHostNode, pGraphNode, graph, pDependencies, numDependencies, req);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddMemAllocNode(
    cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
    size_t numDependencies, cudaMemAllocNodeParams* nodeParams) {
  if (nodeParams == nullptr) return Fail(cudaErrorInvalidValue);
  if (nodeParams->poolProps.location.type != cudaMemLocationTypeDevice ||
      nodeParams->accessDescCount != 0) {
    return NotSupported("cudaGraphAddMemAllocNode outside the device or with peer access");
  }
  hooks::cudaGraphAddMemAllocNodeRequest req;
  req.bytesize = nodeParams->bytesize;
  hooks::cudaGraphAddMemAllocNodeReply reply;
  const cudaError_t e = AddNodeCall(ApiId::cudaGraphAddMemAllocNode, pGraphNode, graph,
                                    pDependencies, numDependencies, req, &reply);
  if (e == cudaSuccess) nodeParams->dptr = reinterpret_cast<void*>(reply.dptr);
  return e;
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphAddMemFreeNode(
    cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
    size_t numDependencies, void* dptr) {
  hooks::cudaGraphAddMemFreeNodeRequest req;
  req.dptr = Wire(dptr);
  return AddNode<hooks::cudaGraphAddMemFreeNodeReply>(
      ApiId::cudaGraphAddMemFreeNode, pGraphNode, graph, pDependencies, numDependencies, req);
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphExecKernelNodeSetParams(
    cudaGraphExec_t hGraphExec, cudaGraphNode_t node, const cudaKernelNodeParams* pNodeParams) {
  Kernel k;
  if (cudaError_t e = PrepareKernel(pNodeParams, &k); e != cudaSuccess) return Fail(e);
  hooks::cudaGraphExecKernelNodeSetParamsRequest req;
  req.exec = Wire(hGraphExec);
  req.node = Wire(node);
  req.kernel = k.Params();
  Call call(ApiId::cudaGraphExecKernelNodeSetParams, req.Size());
  if (!call.ok()) return Unreachable(call);
  req.Encode(call.args());
  if (!call.Send()) return Unreachable(call);
  return static_cast<cudaError_t>(call.status());
}

extern "C" REVENANT_EXPORT cudaError_t cudaGraphExecUpdate(
    cudaGraphExec_t hGraphExec, cudaGraph_t hGraph, cudaGraphExecUpdateResultInfo* resultInfo) {
  hooks::cudaGraphExecUpdateRequest req;
  req.exec = Wire(hGraphExec);
  req.graph = Wire(hGraph);
  Call call(ApiId::cudaGraphExecUpdate, req.Size());
  if (!call.ok()) return Unreachable(call);
  req.Encode(call.args());
  if (!call.Send()) return Unreachable(call);
  // The reply comes also on failure.
  hooks::cudaGraphExecUpdateReply reply;
  cudaGraphExecUpdateResult update_result = cudaGraphExecUpdateError;
  if (reply.Decode(call.reply()) && revenant::wire::ToEnum(reply.result, &update_result) &&
      resultInfo != nullptr) {
    resultInfo->result = update_result;
    resultInfo->errorNode = reinterpret_cast<cudaGraphNode_t>(reply.error_node);
    resultInfo->errorFromNode = reinterpret_cast<cudaGraphNode_t>(reply.error_from_node);
  }
  return static_cast<cudaError_t>(call.status());
}

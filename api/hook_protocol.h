// Request and reply layouts of the hand-written hooks (rows with support
// HOOK), shared by the shim and the agent. Generated rows need nothing here:
// their layout follows from the parameters (api/wire.h).
//
// Every layout below is a sequence of wire fields (scalar / flag / bytes).
#ifndef REVENANT_API_HOOK_PROTOCOL_H_
#define REVENANT_API_HOOK_PROTOCOL_H_

#include <cstdint>

#include "api/wire.h"

namespace revenant {
namespace hooks {

// cudaMemcpy / cudaMemcpyAsync:
//   u64 dst, u64 src, u64 count, i32 kind, u64 stream, u8 mode,
//   then for kInlineSource: bytes data; for the staging modes: u64 offset.
// The shim resolves the host side of the copy before sending:
enum MemcpyMode : uint8_t {
  kDirect = 0,         // both pointers usable by the agent as they are
                       // (device memory, or host memory shared with it)
  kInlineSource = 1,   // H2D from pageable memory: the bytes travel in the request
  kReplyDest = 2,      // D2H to pageable memory: the bytes come back in the reply
  kStagingDest = 3,    // D2H to pageable memory through the staging area
  kStagingSource = 4,  // H2D from pageable memory through the staging area
};

// The fixed head of a copy request's body (above), up to the mode.
struct CopyHead {
  uint64_t dst = 0, src = 0, count = 0;
  int32_t kind = 0;
  uint64_t stream = 0;
  uint8_t mode = 0;
};
// Reads it from `in` (which then stands at the mode's data); false if the
// body is too short.
inline bool GetCopyHead(wire::Decoder& in, CopyHead* h) {
  return in.Get(&h->dst) && in.Get(&h->src) && in.Get(&h->count) && in.Get(&h->kind) &&
         in.Get(&h->stream) && in.Get(&h->mode);
}

// __cudaRegisterFatBinaryEnd (module load + kernel lookup):
//   u64 module_key, flag has_image, [flag by_file, then either bytes image
//   or (by_file) bytes path, u64 offset, u64 size, u64 st_dev, u64 st_ino,
//   i64 mtime_ns: the image lies in that file the application mapped, which
//   the agent reads after checking it is the same file], bytes mangled_name
// reply: u64 function_id (a FUNCTION handle), u32 args_size, bytes params
// (u32 offset, u32 size per parameter). A kernel the backend cannot run
// answers cudaErrorInvalidDeviceFunction.
//
// __cudaRegisterVar (module load + device variable lookup, on first use):
//   u64 module_key, flag has_image, [bytes image], bytes device_name,
//   flag want_address
// reply: u64 size [, u64 address (want_address: cudaGetSymbolAddress)].
//
// cudaMemcpyToSymbol / FromSymbol / ToSymbolAsync / FromSymbolAsync:
//   u64 module_key, bytes device_name, u64 offset, then a copy body as
//   above whose symbol side (dst for To, src for From) is 0: the agent finds
//   the variable and puts its address there, so a replay finds it wherever
//   a replacement agent has it. Host bytes to a variable always travel
//   inline (kInlineSource); bytes from it come back by kReplyDest or
//   kStagingDest.
//
// cudaLaunchKernel / cudaLaunchCooperativeKernel / __cudaLaunchKernel*:
//   u64 function_id, dim3 grid, dim3 block, u64 shared_bytes, u64 stream,
//   u8 cooperative, bytes packed_args
// cudaLaunchKernelExC: the same, then bytes attrs (cudaLaunchAttribute[],
//   at most api::kMaxLaunchAttributes; event handles are virtual ids)
//
// cudaDeviceGetPCIBusId: i32 device; reply: bytes id (NUL-terminated,
//   at most kPciBusIdBytes)
// cudaMemPoolSetAccess: u64 pool, bytes descs (cudaMemAccessDesc[]; the
//   count is the bytes' length over the entry size, never sent apart)
inline constexpr uint32_t kPciBusIdBytes = 64;
//
// cudaGraphNodeGetDependencies: u64 node, u64 capacity;
//   reply: u64 count, bytes ids (u64 GRAPH_NODE ids, at most capacity)
// cudaGraphDebugDotPrint: u64 graph, u32 flags; reply: bytes dot
//
// cudaLaunchHostFunc / cudaStreamAddCallback:
//   u64 stream, u64 fn, u64 user_data, u8 kind (kCallbackHostFn or
//   kCallbackStream), u32 flags
inline constexpr uint8_t kCallbackHostFn = 0;
inline constexpr uint8_t kCallbackStream = 1;

// The callback ring's record (agent -> application), a plain struct.
struct CallbackRecord {
  uint64_t fn;
  uint64_t user_data;
  uint64_t stream;
  int32_t status;
  uint8_t kind;
  uint8_t pad[3];
};

// revenantMarkStep(): an explicit minibatch boundary. Not a CUDA API, so not
// a row of the table: an asynchronous record with this api id and no body.
inline constexpr uint16_t kMarkStepApiId = 0xFFFE;

// cudaMallocHost / cudaHostAlloc:  u64 addr, u64 size, u32 flags, bytes path
//   (the shim created and mapped the shared file; the agent maps the same
//   file at the same address).
// cudaFreeHost:                    u64 addr
// cudaHostGetDevicePointer:        u64 host_addr, u32 flags; reply: u64 device_addr
// cudaDeviceReset:                 (nothing)

// cuDNN (api/cudnn.textproto; element sizes: api/dnn_args.h):
// cudnnGetVersion / cudnnGetCudartVersion:  (nothing); reply: bytes u64 version
// cudnnGetLastErrorString:   u64 capacity (at most kDnnMaxErrorString);
//   reply: bytes message (NUL-terminated, at most capacity bytes)
// cudnnBackendSetAttribute:  u64 descriptor, i32 name, i32 type, i64 count,
//   bytes elements (count * element size; null for a null array)
// cudnnBackendGetAttribute:  u64 descriptor, i32 name, i32 type,
//   i64 requested, flag has_count, flag has_array, bytes in_elements (the
//   caller's `requested` handles for a descriptor- or handle-typed attribute
//   with an array, else null); reply on success: [bytes i64 count] if
//   has_count, [bytes elements] if has_array (the elements written: all
//   `requested` without a count, else min(requested, count)); handle
//   elements are the caller's virtual handles.
inline constexpr uint64_t kDnnMaxErrorString = 4096;

}  // namespace hooks
}  // namespace revenant

#endif  // REVENANT_API_HOOK_PROTOCOL_H_

// Constants of the hand-written rows' (support HOOK) wire layouts, shared by
// the shim and the agent.
//
// The layouts themselves are the rows' `request` and `reply` fields in
// api/*.textproto (groups of fields several rows share, such as a copy's
// head or a kernel node's parameters, are the `groups` at the end of
// api/cuda_runtime.textproto and api/cuda_nvcc.textproto). apigen turns them
// into one struct per row, `hooks::<row>Request` and `hooks::<row>Reply`
// with Size/Encode/Decode (api/hook_structs.h, //api:hook_structs): the shim
// encodes requests and decodes replies with them, the agent the other way
// round. Generated rows need nothing here: their layout follows from the
// parameters (api/wire.h).
#ifndef REVENANT_API_HOOK_PROTOCOL_H_
#define REVENANT_API_HOOK_PROTOCOL_H_

#include <cstdint>

namespace revenant {
namespace hooks {

// cudaMemcpy / cudaMemcpyAsync and the symbol copies (CopyHead.mode): how
// the shim resolved the host side of the copy before sending.
enum MemcpyMode : uint8_t {
  kDirect = 0,         // both pointers usable by the agent as they are
                       // (device memory, or host memory shared with it)
  kInlineSource = 1,   // H2D from pageable memory: the bytes travel in the request
  kReplyDest = 2,      // D2H to pageable memory: the bytes come back in the reply
  kStagingDest = 3,    // D2H to pageable memory through the staging area
  kStagingSource = 4,  // H2D from pageable memory through the staging area
};
// The symbol copies (cudaMemcpyToSymbol & co.): the symbol side of the copy
// (dst for To, src for From) is 0; the agent finds the variable by module
// and device name and puts its address there, so a replay finds it wherever
// a replacement agent has it. Host bytes to a variable always travel inline
// (kInlineSource); bytes from it come back by kReplyDest or kStagingDest.

// __cudaRegisterFatBinaryEnd: a kernel the backend cannot run answers
// cudaErrorInvalidDeviceFunction. __cudaRegisterVar's address is asked for
// only by cudaGetSymbolAddress (a replay compares it with the journaled one).

// cudaDeviceGetPCIBusId: the most bytes of the id in the reply.
inline constexpr uint32_t kPciBusIdBytes = 64;

// cudaLaunchHostFunc / cudaStreamAddCallback (cudaLaunchHostFuncRequest.kind).
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

// cudnnGetLastErrorString: the most bytes of a message (the request's
// capacity). Element sizes of cudnnBackend{Set,Get}Attribute: api/dnn_args.h.
inline constexpr uint64_t kDnnMaxErrorString = 4096;

}  // namespace hooks
}  // namespace revenant

#endif  // REVENANT_API_HOOK_PROTOCOL_H_

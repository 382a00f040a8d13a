// The agent's dispatch entry point (generated into api/dispatch.cc from the
// API table) and the context every dispatcher and hook receives.
//
//   wire::Decoder in(body, body_size);
//   wire::Encoder out(reply_buffer, reply_capacity);
//   int32_t status = Dispatch(api_id, in, out, ctx);
//   if (status == kNoDispatcher) ...  // the row has no agent side
#ifndef REVENANT_AGENT_DISPATCH_H_
#define REVENANT_AGENT_DISPATCH_H_

#include <cstdint>
#include <limits>

#include "agent/handles.h"
#include "api/traits.h"
#include "api/wire.h"

namespace revenant {
namespace api {
class BackendApi;
}  // namespace api

namespace agent {

class Session;

// Everything a dispatcher may touch while it executes one request. The
// pointers are owned by the agent and outlive the call.
struct DispatchContext {
  api::BackendApi* backend = nullptr;
  HandleTable* handles = nullptr;
  // The application connection the request came from (hooks use it for
  // pinned memory, modules and callbacks); nullptr in unit tests.
  Session* session = nullptr;
  // The sequence number of the request being executed.
  uint64_t seq = 0;
  // The executor has further requests in hand after this one (set for an
  // asynchronous request from the application's ring, never in a replay):
  // a plain launch may be held back (Backend::LaunchKernelMayHold).
  bool more_requests = false;
};

// Returned by Dispatch for ids without an agent side (local or refused rows,
// unknown ids): the caller answers with a bad-request error.
inline constexpr int32_t kNoDispatcher = std::numeric_limits<int32_t>::min();

// Decodes the arguments of `id` from `in`, translates virtual handles,
// calls the backend (or the row's hook) and encodes OUT values to `out`.
// Returns the API's status (cudaError_t / ncclResult_t as int32_t). A
// malformed request gives the library's invalid-value error; it never reads
// outside `in` nor writes outside `out`.
int32_t Dispatch(api::ApiId id, wire::Decoder& in, wire::Encoder& out, DispatchContext& ctx);

}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_DISPATCH_H_

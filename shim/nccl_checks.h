// NCCL checks the shim makes at the call (shim_check / shim_done of the rows
// in api/nccl.textproto), so that the asynchronous NCCL rows (collectives,
// ncclSend/ncclRecv, ncclGroupStart/End) still fail at the call for what the
// application can get wrong locally, with NCCL's own codes:
//   - an unknown or null communicator (one this process did not create, or
//     destroyed/aborted): ncclInvalidArgument;
//   - a data type or reduction operation outside NCCL's built-in ones
//     (custom operations cannot exist: ncclRedOpCreatePreMulSum is refused):
//     ncclInvalidArgument;
//   - a null buffer with count > 0, for the buffers every rank passes (the
//     root-only buffers of broadcast/reduce/gather/scatter are not checked):
//     ncclInvalidArgument;
//   - a root or peer outside [0, nranks) when this process created the
//     communicator with a known size (ncclCommInitRank*): ncclInvalidArgument;
//   - ncclGroupEnd without ncclGroupStart on this thread: ncclInvalidUsage.
// Errors only the agent can see (the engine's) are deferred: the agent
// returns the first one with its reply to the next synchronous NCCL call
// (docs/design.md, "NCCL calls").
//
// Thread safety: the communicator registry is process-wide and locked; the
// group depth is per thread, as NCCL's is.
#ifndef REVENANT_SHIM_NCCL_CHECKS_H_
#define REVENANT_SHIM_NCCL_CHECKS_H_

#include <nccl.h>

#include <cstddef>
#include <cstdint>

namespace revenant {
namespace transport {
class ShmClientChannel;
}  // namespace transport
namespace shim {

// Communicators this process holds. `nranks` < 0: size not known here.
void NcclCommCreated(ncclComm_t comm, int nranks);
void NcclCommGone(ncclComm_t comm);

// A collective or point-to-point call. `has_op`/`has_root`: whether the
// call takes a reduction operation / a root or peer. `a`/`b` are checked
// for null (when count > 0) where `check_a`/`check_b` say so: the buffers
// every rank passes.
int32_t NcclCheckCall(ncclComm_t comm, size_t count, int datatype, bool has_op, int op,
                      bool has_root, int root, const void* a, bool check_a, const void* b,
                      bool check_b);

// ncclCommGetAsyncError answered by the shim (hooks_nccl.cc), when the
// agent's last answer for `comm` was ncclSuccess with the channel's NCCL
// error count unchanged since (REVENANT_SHIM_ANSWERS on; `channel` live):
// kAnswered less than kAsyncErrorAskEveryNanos after that answer;
// kAnsweredAskBehind after it: ncclSuccess too, and the call is sent to the
// agent without waiting (when it finds the communicator failed, the agent bumps the
// count: the next call asks and reports it); the answer's time is renewed.
// kAsk otherwise: the call waits for the agent's answer.
inline constexpr int64_t kAsyncErrorAskEveryNanos = 100 * 1000 * 1000;
enum class AsyncErrorAnswer { kAsk, kAnswered, kAnsweredAskBehind };
AsyncErrorAnswer NcclAsyncErrorAnswer(ncclComm_t comm, const transport::ShmClientChannel* channel);
// After the agent answered it: `errors_before` is the channel's count read
// before asking; `healthy`: the answer was ncclSuccess.
void NcclAsyncErrorAsked(ncclComm_t comm, uint64_t errors_before, bool healthy);

// ncclGroupStart/ncclGroupEnd bookkeeping (per thread).
void NcclGroupStarted();
int32_t NcclCheckGroupEnd();
void NcclGroupEnded();

}  // namespace shim
}  // namespace revenant

#endif  // REVENANT_SHIM_NCCL_CHECKS_H_

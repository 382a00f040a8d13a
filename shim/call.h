// Call: one forwarded API call, as the generated shim stubs make it.
//
// A stub sizes its arguments, opens a Call (which reserves a record in the
// request ring and, for a synchronous row, a reply slot), encodes the
// arguments straight into the ring, sends, and for a synchronous row reads
// OUT values from the reply:
//
//   shim::Call call(api::ApiId::cudaMalloc, sizer.size());
//   if (!call.ok()) return call.FailureStatus(cudaErrorDevicesUnavailable);
//   call.args().Put(size);  call.args().PutFlag(devPtr != nullptr);
//   if (!call.Send()) return call.FailureStatus(cudaErrorDevicesUnavailable);
//   if (call.status() == 0 && devPtr) call.CopyOut(call.reply(), devPtr, sizeof(*devPtr));
//   return static_cast<cudaError_t>(call.status());
//
// Whether the row is synchronous comes from its traits. An asynchronous Send
// returns as soon as the record is published; errors the agent finds later
// surface through the shim's error state (cudaGetLastError and the next
// synchronizing call), as CUDA's own asynchronous errors do.
#ifndef REVENANT_SHIM_CALL_H_
#define REVENANT_SHIM_CALL_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "api/traits.h"
#include "api/wire.h"
#include "transport/shm_channel.h"

#define REVENANT_EXPORT __attribute__((visibility("default")))

namespace revenant {
namespace shim {

class Call {
 public:
  // Reserves `body_size` bytes of arguments. Never blocks without bound: a
  // full ring applies back-pressure up to the configured call deadline.
  // `send_async`: a synchronous row sent without waiting for its reply (the
  // row's async_if held).
  Call(api::ApiId id, size_t body_size, bool send_async = false);
  ~Call();
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  // False when the agent cannot be reached (the reason is logged once).
  bool ok() const { return ok_; }
  wire::Encoder& args() { return args_; }

  // Publishes the request; a synchronous row then waits for the reply.
  // False when the agent died or did not answer in time.
  bool Send();

  // The API's return value (cudaError_t/ncclResult_t as int32_t). For an
  // NCCL row it is the deferred NCCL error the reply carries when the call
  // itself succeeded (docs/design.md, "NCCL calls").
  int32_t status() const { return status_; }
  // What the agent's execution of this call returned (OUT values are valid
  // when it is 0).
  int32_t executed_status() const { return executed_status_; }
  // The deferred NCCL error this reply carried (0: none).
  int32_t nccl_deferred_error() const { return nccl_deferred_error_; }
  wire::Decoder& reply() { return reply_; }
  // The request's seq in the request ring once sent (0 before): the agent
  // executes requests in this order.
  uint64_t seq() const { return seq_; }

  // Copies the next byte field of the reply into `dst` (at most `size`
  // bytes). Leaves `dst` untouched when the reply carries none.
  void CopyOut(wire::Decoder& reply, void* dst, size_t size);

  // The status to return when ok() or Send() is false: `unreachable`, or
  // the not-supported/invalid error a failed local check chose.
  int32_t FailureStatus(int32_t unreachable) const;

 private:
  static size_t ch_limit(transport::ShmClientChannel* ch);
  // The library's "invalid argument" status.
  int32_t InvalidArgument() const;

  api::ApiId id_;
  const api::ApiTraits& traits_;
  int64_t start_ns_ = 0;  // REVENANT_CALL_STATS only
  transport::ShmClientChannel* channel_ = nullptr;
  bool ok_ = false;
  bool sent_ = false;
  bool sync_ = false;
  int reply_slot_ = -1;
  uint64_t seq_ = 0;
  int32_t status_ = 0;
  int32_t executed_status_ = 0;
  int32_t nccl_deferred_error_ = 0;
  int32_t failure_ = 0;
  bool has_failure_ = false;
  std::optional<transport::RecordWriter> writer_;
  wire::Encoder args_;
  wire::Decoder reply_;
};

// REVENANT_CALL_STATS=1: per API, the calls the application made and the time
// it spent in them (from the Call's construction to its destruction), printed
// at exit. Off: one predictable branch per call.
bool CallStatsOn();
void CountCall(api::ApiId id, int64_t start_ns);
std::string CallStatsReport();

// The wire value of a kernel's host stub address (FUNCTION handles): the
// shim's registration id for it, 0 for an unknown address.
uint64_t FunctionToWire(const void* host_stub);
// The error of a registered kernel whose resolution failed (the agent cannot
// run it: cudaErrorInvalidDeviceFunction, or why the agent was unreachable);
// 0 for a usable kernel and for an address that is no registered kernel's
// (its calls then answer what the runtime answers for one). A nonzero answer
// is also made the thread's last error, as the call's failure.
int32_t FunctionError(const void* host_stub);

// A `__device__` variable registered by __cudaRegisterVar, as the agent
// resolved it on first use (its module loaded there): the module and device
// name a copy names it by, its size, and (when asked for) the agent's
// address of it.
struct SymbolRef {
  uint64_t module_key = 0;
  std::string name;
  uint64_t address = 0;
  uint64_t size = 0;
};
// cudaSuccess, cudaErrorInvalidSymbol (not a registered variable, or the
// agent cannot find it) or the agent's unreachable status. Must be called
// with no Call open (resolving makes one). `want_address`: also the
// address (cudaGetSymbolAddress; journaled, so a replacement agent that has
// the variable elsewhere fails its recovery rather than let the
// application's copy of the address go stale).
int32_t ResolveSymbol(const void* symbol, SymbolRef* out, bool want_address = false);

// A new virtual id for a handle of `kind` the shim assigns (assign_if rows:
// api::ShimAssignedId with this process's next serial of the kind). Ids are
// never reused in a process, so one stays valid across agent recoveries.
uint64_t AssignHandle(api::HandleKind kind);

// REVENANT_SHIM_ANSWERS (default on): the library calls the shim may send
// without waiting or answer itself (assign_if, shim_answer and the library
// rows' async_if: cuBLASLt and cuDNN descriptors, heuristics, reads).
bool ShimAnswers();

// Whether the agent has answered a synchronous CUDA runtime call of this
// process with success (its device is up): creations the shim assigns wait
// for it, so a device that cannot start fails the first call, as natively.
bool CudaRuntimeAnswered();

// Byte size of a cudaMemPoolAttr value (int or cuuint64_t).
size_t MemPoolAttrSize(int attr);

// Logs "<name> is not supported by Revenant" once per name.
void LogNotSupported(const char* name);

}  // namespace shim
}  // namespace revenant

#endif  // REVENANT_SHIM_CALL_H_

// NCCL in the shim: the checks the asynchronous NCCL rows make at the call
// (shim/nccl_checks.h) and ncclCommGetAsyncError, which also reports the
// deferred error of an earlier asynchronous NCCL call.
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "api/hook_structs.h"
#include "api/wire.h"
#include "common/logging.h"
#include "common/clock.h"
#include "shim/call.h"
#include "shim/runtime.h"
#include "shim/nccl_checks.h"

namespace revenant {
namespace shim {
namespace {

// The agent's last ncclSuccess for a communicator's ncclCommGetAsyncError:
// the channel's NCCL error count before it was asked, and when.
struct HealthyAnswer {
  uint64_t nccl_errors = 0;
  int64_t at_ns = 0;
};

struct Registry {
  std::mutex mu;
  std::unordered_map<ncclComm_t, int> comms;  // communicator -> nranks (-1: unknown)
  std::unordered_map<ncclComm_t, HealthyAnswer> healthy;
  // Bumped (under mu) whenever `comms` changes: a thread's cached lookup is
  // valid while the generation it saw is current.
  std::atomic<uint64_t> generation{1};
};

// The last communicator this thread checked (a training loop uses one).
struct CachedComm {
  ncclComm_t comm = nullptr;
  int nranks = -1;
  uint64_t generation = 0;
};
thread_local CachedComm tls_cached;

Registry& Comms() {
  static Registry* r = new Registry();  // never destroyed: used from exit handlers
  return *r;
}

thread_local int tls_group_depth = 0;
// NCCL operations this thread queued since its outermost ncclGroupStart.
thread_local int tls_group_ops = 0;

int32_t Invalid(const char* why, long long value) {
  REVENANT_LOG(WARNING, "shim") << "NCCL call refused: " << why << " (" << value << ")";
  return ncclInvalidArgument;
}

}  // namespace

void NcclCommCreated(ncclComm_t comm, int nranks) {
  if (comm == nullptr) return;  // ncclCommSplit with NCCL_SPLIT_NOCOLOR
  Registry& r = Comms();
  std::lock_guard<std::mutex> lock(r.mu);
  r.comms[comm] = nranks;
  r.generation.fetch_add(1, std::memory_order_release);
}

void NcclCommGone(ncclComm_t comm) {
  Registry& r = Comms();
  std::lock_guard<std::mutex> lock(r.mu);
  r.comms.erase(comm);
  r.healthy.erase(comm);
  r.generation.fetch_add(1, std::memory_order_release);
}

int32_t NcclCheckCall(ncclComm_t comm, size_t count, int datatype, bool has_op, int op,
                      bool has_root, int root, const void* a, bool check_a, const void* b,
                      bool check_b) {
  if (comm == nullptr) return Invalid("null communicator", 0);
  int nranks = -1;
  Registry& r = Comms();
  if (tls_cached.comm == comm &&
      tls_cached.generation == r.generation.load(std::memory_order_acquire)) {
    nranks = tls_cached.nranks;
  } else {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.comms.find(comm);
    if (it == r.comms.end()) {
      REVENANT_LOG(WARNING, "shim") << "NCCL call refused: unknown communicator "
                                    << static_cast<const void*>(comm);
      return ncclInvalidArgument;
    }
    nranks = it->second;
    tls_cached = {comm, nranks, r.generation.load(std::memory_order_relaxed)};
  }
  if (datatype < 0 || datatype >= ncclNumTypes) return Invalid("invalid data type", datatype);
  if (has_op && (op < 0 || op >= ncclNumOps)) return Invalid("invalid reduction operation", op);
  if (has_root && (root < 0 || (nranks >= 0 && root >= nranks))) {
    return Invalid("root or peer out of range", root);
  }
  if (count > 0 && ((check_a && a == nullptr) || (check_b && b == nullptr))) {
    return Invalid("null buffer with count", static_cast<long long>(count));
  }
  if (tls_group_depth > 0) ++tls_group_ops;
  return ncclSuccess;
}

AsyncErrorAnswer NcclAsyncErrorAnswer(ncclComm_t comm, const transport::ShmClientChannel* channel) {
  if (channel == nullptr || !ShimAnswers()) return AsyncErrorAnswer::kAsk;
  const uint64_t errors = channel->nccl_errors();
  Registry& r = Comms();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.healthy.find(comm);
  if (it == r.healthy.end() || it->second.nccl_errors != errors) return AsyncErrorAnswer::kAsk;
  const int64_t now = MonotonicNanos();
  if (now - it->second.at_ns < kAsyncErrorAskEveryNanos) return AsyncErrorAnswer::kAnswered;
  it->second.at_ns = now;
  return AsyncErrorAnswer::kAnsweredAskBehind;
}

void NcclAsyncErrorAsked(ncclComm_t comm, uint64_t errors_before, bool healthy) {
  Registry& r = Comms();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!healthy || r.comms.find(comm) == r.comms.end()) {
    r.healthy.erase(comm);
    return;
  }
  r.healthy[comm] = HealthyAnswer{errors_before, MonotonicNanos()};
}

void NcclGroupStarted() { ++tls_group_depth; }

int32_t NcclCheckGroupEnd() {
  if (tls_group_depth > 0) return ncclSuccess;
  REVENANT_LOG(WARNING, "shim") << "ncclGroupEnd without ncclGroupStart";
  return ncclInvalidUsage;
}

void NcclGroupEnded() {
  if (tls_group_depth > 0) --tls_group_depth;
  if (tls_group_depth == 0) tls_group_ops = 0;
}

}  // namespace shim
}  // namespace revenant

// ncclCommGetAsyncError: the communicator's state from the agent; when that
// is ncclSuccess and an earlier asynchronous NCCL call failed in the agent
// (a deferred error this reply carries), that error is reported instead.
// PyTorch asks several times per step, from its main thread and its
// watchdog (which holds the lock the next collective needs): asked of the
// agent, each would wait for everything queued before it. So once the agent
// answered ncclSuccess for this communicator, and while it has kept no NCCL
// error since (the channel's count, ShmServerChannel::NoteNcclError), the
// shim answers ncclSuccess itself: for 100 ms without sending anything, then
// sending the call without waiting (when it finds the communicator failed,
// the agent bumps the count, Session::RunAndReply). A deferred error is
// reported at the first call after the agent kept it, as before, and a
// failure only NCCL sees (a remote peer's) at the first call after the
// agent ran a poll sent at most 100 ms after the failure.
extern "C" REVENANT_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm,
                                                               ncclResult_t* asyncError) {
  using revenant::shim::AsyncErrorAnswer;
  using revenant::shim::Call;
  if (asyncError == nullptr) return ncclInvalidArgument;
  revenant::transport::ShmClientChannel* channel = revenant::shim::Runtime::Get()->LiveChannel();
  const AsyncErrorAnswer answer = revenant::shim::NcclAsyncErrorAnswer(comm, channel);
  if (answer == AsyncErrorAnswer::kAnswered) {
    *asyncError = ncclSuccess;
    return ncclSuccess;
  }
  const uint64_t errors_before = channel != nullptr ? channel->nccl_errors() : 0;
  revenant::hooks::ncclCommGetAsyncErrorRequest req;
  req.comm = reinterpret_cast<uint64_t>(comm);
  req.asyncError = true;
  const bool behind = answer == AsyncErrorAnswer::kAnsweredAskBehind;
  Call call(revenant::api::ApiId::ncclCommGetAsyncError, req.Size(), /*async=*/behind);
  if (!call.ok()) return static_cast<ncclResult_t>(call.FailureStatus(ncclRemoteError));
  req.Encode(call.args());
  if (!call.Send()) return static_cast<ncclResult_t>(call.FailureStatus(ncclRemoteError));
  if (!behind && call.executed_status() != ncclSuccess) {
    return static_cast<ncclResult_t>(call.status());
  }
  *asyncError = ncclSuccess;
  if (behind) return ncclSuccess;
  revenant::hooks::ncclCommGetAsyncErrorReply reply;
  if (reply.Decode(call.reply(), req)) reply.asyncError.CopyTo(asyncError, sizeof(*asyncError));
  if (*asyncError == ncclSuccess && call.nccl_deferred_error() != 0) {
    *asyncError = static_cast<ncclResult_t>(call.nccl_deferred_error());
  }
  revenant::shim::NcclAsyncErrorAsked(comm, errors_before,
                                      channel != nullptr && *asyncError == ncclSuccess);
  return ncclSuccess;
}

extern "C" REVENANT_EXPORT ncclResult_t pncclCommGetAsyncError(ncclComm_t comm,
                                                                ncclResult_t* asyncError)
    __attribute__((alias("ncclCommGetAsyncError")));

// ncclGroupSimulateEnd, as NCCL 2.28 answers it (src/group.cc,
// ncclGroupEndInternal with simInfo): outside a group ncclInvalidUsage; a
// nested level only ends that level; the outermost level checks simInfo's
// magic (ncclInvalidArgument, the group still ends) and, for an empty group,
// ends it leaving simInfo as it was (NCCL fills the estimate only from the
// operations it planned). A group holding operations would need NCCL's
// cost model on the operations the agent queued, without running them: it
// is refused (ncclInvalidUsage, one log line) and stays open, so the
// operations are neither run nor lost; ncclGroupEnd still runs them.
extern "C" REVENANT_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  using revenant::shim::tls_group_depth;
  using revenant::shim::tls_group_ops;
  if (tls_group_depth == 0) {
    REVENANT_LOG(WARNING, "shim") << "ncclGroupSimulateEnd without ncclGroupStart";
    return ncclInvalidUsage;
  }
  if (tls_group_depth > 1) return ncclGroupEnd();
  if (tls_group_ops > 0) {
    REVENANT_LOG(ERROR, "shim")
        << "ncclGroupSimulateEnd over a group holding " << tls_group_ops
        << " NCCL operations is not supported under Revenant (ncclInvalidUsage): the "
           "operations cannot be simulated without running them; the group stays open";
    return ncclInvalidUsage;
  }
  bool valid_info = true;
  if (simInfo != nullptr) {
    ncclSimInfo_t copy{};
    size_t size = 0;
    std::memcpy(&size, &simInfo->size, sizeof(size));
    if (size > sizeof(copy)) size = sizeof(copy);
    std::memcpy(&copy, simInfo, size);
    if (copy.magic != 0x74685283u) {
      REVENANT_LOG(WARNING, "shim")
          << "ncclSimInfo_t argument not initialized via NCCL_SIM_INFO_INITIALIZER";
      valid_info = false;
    }
  }
  const ncclResult_t r = ncclGroupEnd();
  if (r != ncclSuccess) return r;
  return valid_info ? ncclSuccess : ncclInvalidArgument;
}

extern "C" REVENANT_EXPORT ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo)
    __attribute__((alias("ncclGroupSimulateEnd")));

#include "shim/call.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstring>
#include <mutex>
#include <vector>
#include <set>
#include <string>

#include "api/reply_prefix.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/logging.h"
#include "shim/idle.h"
#include "shim/runtime.h"

namespace revenant {
namespace shim {

namespace {
struct CallCounter {
  std::atomic<uint64_t> calls{0}, ns{0}, max_ns{0};
};
CallCounter g_call_counters[api::kApiCount];
std::atomic<bool> g_runtime_answered{false};
}  // namespace

bool CallStatsOn() {
  static const bool on = knobs::Bool(knobs::Id::kCallStats).value_or(false);
  return on;
}


void CountCall(api::ApiId id, int64_t start_ns) {
  const size_t i = static_cast<size_t>(id);
  if (i >= api::kApiCount) return;
  const uint64_t ns = static_cast<uint64_t>(MonotonicNanos() - start_ns);
  CallCounter& c = g_call_counters[i];
  c.calls.fetch_add(1, std::memory_order_relaxed);
  c.ns.fetch_add(ns, std::memory_order_relaxed);
  uint64_t m = c.max_ns.load(std::memory_order_relaxed);
  while (ns > m && !c.max_ns.compare_exchange_weak(m, ns, std::memory_order_relaxed)) {
  }
}

std::string CallStatsReport() {
  std::vector<size_t> ids;
  uint64_t calls = 0, ns = 0;
  for (size_t i = 0; i < api::kApiCount; ++i) {
    const uint64_t n = g_call_counters[i].calls.load(std::memory_order_relaxed);
    if (n == 0) continue;
    ids.push_back(i);
    calls += n;
    ns += g_call_counters[i].ns.load(std::memory_order_relaxed);
  }
  std::sort(ids.begin(), ids.end(), [](size_t a, size_t b) {
    return g_call_counters[a].ns.load(std::memory_order_relaxed) >
           g_call_counters[b].ns.load(std::memory_order_relaxed);
  });
  char line[256];
  std::snprintf(line, sizeof(line),
                "%" PRIu64 " calls, %.3f ms in them (and %" PRIu64
                " synchronizations/queries answered in the shim); by time:",
                calls, ns / 1e6, IdleAnswers());
  std::string out = line;
  for (size_t i : ids) {
    const CallCounter& c = g_call_counters[i];
    const api::ApiTraits& t = api::Traits(static_cast<uint32_t>(i));
    const uint64_t n = c.calls.load(std::memory_order_relaxed);
    const uint64_t cns = c.ns.load(std::memory_order_relaxed);
    std::snprintf(line, sizeof(line), "\n  %-40s %-5s %9" PRIu64 " calls %10.3f ms %8.2f us/call max %.1f us",
                  t.name, t.mode == api::Mode::kSync ? "sync" : "async", n, cns / 1e6,
                  cns / 1e3 / n, c.max_ns.load(std::memory_order_relaxed) / 1e3);
    out += line;
  }
  return out;
}

Call::Call(api::ApiId id, size_t body_size, bool send_async)
    : id_(id), traits_(api::Traits(id)), sync_(traits_.mode == api::Mode::kSync && !send_async) {
  if (CallStatsOn()) start_ns_ = MonotonicNanos();
  Runtime* rt = Runtime::Get();
  transport::ShmClientChannel* ch = rt->Channel();
  if (ch == nullptr) return;
  channel_ = ch;
  if (sync_) {
    const absl::Time deadline = rt->CallDeadline();
    absl::StatusOr<int> slot = ch->AcquireReplySlot(deadline);
    while (!slot.ok() && absl::IsUnavailable(slot.status()) && rt->WaitForRecovery(deadline)) {
      slot = ch->AcquireReplySlot(deadline);
    }
    if (!slot.ok()) return;
    reply_slot_ = *slot;
  }
  if (body_size > ch_limit(ch)) {
    REVENANT_LOG(ERROR, "shim") << traits_.name << ": " << body_size
                                << " bytes of arguments exceed the channel's limit";
    has_failure_ = true;
    failure_ = InvalidArgument();
    return;
  }
  // The clock is read only if the record has to wait (ring full, another
  // thread writing) or the agent died.
  absl::StatusOr<transport::RecordWriter> w =
      ch->BeginRecord(static_cast<uint32_t>(body_size), rt->CallTimeout());
  if (!w.ok() && absl::IsUnavailable(w.status())) {
    const absl::Time deadline = rt->CallDeadline();
    while (!w.ok() && absl::IsUnavailable(w.status()) && rt->WaitForRecovery(deadline)) {
      // The agent died; its replacement consumes the same ring.
      w = ch->BeginRecord(static_cast<uint32_t>(body_size), deadline);
    }
  }
  if (!w.ok()) return;
  writer_.emplace(std::move(*w));
  writer_->header().api_id = static_cast<uint16_t>(id);
  writer_->header().flags = 0;
  writer_->header().reply_slot = reply_slot_;
  args_ = wire::Encoder(writer_->body(), body_size);
  ok_ = true;
}

int32_t Call::InvalidArgument() const {
  switch (traits_.library) {
    case api::Library::kNccl: return 4;     // ncclInvalidArgument
    case api::Library::kCublas: return 7;   // CUBLAS_STATUS_INVALID_VALUE
    case api::Library::kCudnn: return 2000;  // CUDNN_STATUS_BAD_PARAM
    default: return cudaErrorInvalidValue;
  }
}

size_t Call::ch_limit(transport::ShmClientChannel* ch) {
  (void)ch;
  return transport::ChannelOptions().ring_capacity / 4 - sizeof(transport::RecordHeader);
}

Call::~Call() {
  if (reply_slot_ >= 0) channel_->ReleaseReplySlot(reply_slot_);
  if (start_ns_ != 0) CountCall(id_, start_ns_);
  // An unsent writer_ is destroyed here, which publishes nothing.
}

bool Call::Send() {
  if (!ok_) return false;
  if (args_.overflow()) {
    REVENANT_LOG(ERROR, "shim") << traits_.name << ": argument encoding overflowed";
    writer_.reset();
    has_failure_ = true;
    failure_ = InvalidArgument();
    return false;
  }
  Runtime* rt = Runtime::Get();
  const uint64_t seq = channel_->Commit(std::move(*writer_));
  seq_ = seq;
  writer_.reset();
  sent_ = true;
  if (!sync_) {
    status_ = 0;
    return true;
  }
  const absl::Time deadline = rt->CallDeadline();
  absl::StatusOr<transport::ReplyView> r = channel_->WaitReply(reply_slot_, seq, deadline);
  while (!r.ok() && absl::IsUnavailable(r.status()) && rt->WaitForRecovery(deadline)) {
    // The request stays in the ring (or the journal) until executed: the
    // replacement agent answers it in the same slot.
    r = channel_->WaitReply(reply_slot_, seq, deadline);
  }
  if (!r.ok()) {
    if (absl::IsDeadlineExceeded(r.status())) {
      REVENANT_LOG(ERROR, "shim") << traits_.name << ": the agent did not answer in time";
    }
    return false;
  }
  if (r->length < kReplyPrefixSize) {
    REVENANT_LOG(ERROR, "shim") << traits_.name << ": malformed reply";
    return false;
  }
  ReplyPrefix prefix;
  std::memcpy(&prefix, r->data, sizeof(prefix));
  if (prefix.deferred_error != 0) {
    rt->NoteDeferredError(prefix.deferred_error);
    SetLastError(prefix.deferred_error);
  }
  status_ = static_cast<int32_t>(r->status);
  executed_status_ = status_;
  if (traits_.library == api::Library::kNccl && prefix.nccl_deferred_error != 0) {
    // An earlier asynchronous NCCL call failed in the agent: this call
    // reports it (it was executed all the same).
    nccl_deferred_error_ = prefix.nccl_deferred_error;
    if (status_ == 0) status_ = nccl_deferred_error_;
  }
  reply_ = wire::Decoder(r->data + kReplyPrefixSize, r->length - kReplyPrefixSize);
  if (status_ == 0 && api::IsCudaRuntime(traits_.library) &&
      !g_runtime_answered.load(std::memory_order_relaxed)) {
    g_runtime_answered.store(true, std::memory_order_relaxed);
  }
  // cudaErrorNotReady (a query of pending work) is a result, not an error:
  // CUDA does not make it the last error.
  if (status_ != 0 && status_ != cudaErrorNotReady && api::IsCudaRuntime(traits_.library)) {
    SetLastError(status_);
  }
  return true;
}

void Call::CopyOut(wire::Decoder& reply, void* dst, size_t size) {
  const char* data = nullptr;
  uint64_t n = 0;
  if (!reply.GetBytes(&data, &n) || data == nullptr) return;
  std::memcpy(dst, data, n < size ? n : size);
}

int32_t Call::FailureStatus(int32_t unreachable) const {
  int32_t s = has_failure_ ? failure_ : unreachable;
  if (api::IsCudaRuntime(traits_.library)) SetLastError(s);
  return s;
}


bool CudaRuntimeAnswered() { return g_runtime_answered.load(std::memory_order_relaxed); }

bool ShimAnswers() {
  static const bool on = knobs::Bool(knobs::Id::kShimAnswers).value_or(true);
  return on;
}

uint64_t AssignHandle(api::HandleKind kind) {
  static std::atomic<uint64_t> serials[api::kHandleKindCount];
  const uint64_t serial =
      serials[static_cast<int>(kind)].fetch_add(1, std::memory_order_relaxed) + 1;
  return api::ShimAssignedId(kind, serial);
}

size_t MemPoolAttrSize(int attr) {
  switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies:
    case cudaMemPoolReuseAllowOpportunistic:
    case cudaMemPoolReuseAllowInternalDependencies:
      return sizeof(int);
    default:
      return sizeof(unsigned long long);  // thresholds and counters: cuuint64_t
  }
}

void LogNotSupported(const char* name) {
  static std::mutex mu;
  static std::set<std::string>* logged = new std::set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  if (logged->insert(name).second) {
    REVENANT_LOG(WARNING, "shim") << name << " is not supported by Revenant yet; it returns "
                                  << "a not-supported error (see docs/api_coverage.md)";
  }
}

}  // namespace shim
}  // namespace revenant

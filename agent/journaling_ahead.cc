#include "agent/journaling_ahead.h"

#include "agent/upload_capture.h"

#include "api/hook_protocol.h"
#include "api/traits.h"

namespace revenant {
namespace agent {

// A request the thread journaled already needs no journaling here; any
// other the executor journals itself, holding the hand-off lock until it is
// journaled (Journaled).
JournalingMode::Turn AheadJournaling::BeforeRun(const transport::RecordHeader& rec) {
  Turn turn;
  ExecutorWaitTimer timer(this, journal_->timing() && rec.seq > ahead_seen_);
  turn.locked = turn.here = LockToJournal(rec);
  if (!turn.here) StartBoundaryJournaledAhead(rec);
  if (turn.locked) turn.barrier = rec.reply_slot >= 0 || !Plain(rec);
  return turn;
}

void AheadJournaling::AfterRun(uint64_t seq, bool synchronous) {
  channel_->Release(seq);
  // The thread waits for this after a synchronous request or one it would
  // not journal (its barrier). The barrier was set before the request was
  // published as journaled, which the executor saw before running it; the
  // thread sets no later one until `done_`.
  if (seq == barrier_.load(std::memory_order_relaxed)) {
    done_.store(seq, std::memory_order_release);
    channel_->requests().WakeWaiters();
  }
}

bool AheadJournaling::Plain(const transport::RecordHeader& rec) const {
  // Not: a marked step; a request not journaled at all (recovery skips every
  // ring request up to the last journaled one, so the requests journaled
  // ahead must be contiguous); a minibatch boundary unless the thread may
  // journal boundaries (without snapshots, validator or chaos).
  if (rec.api_id == hooks::kMarkStepApiId) return false;
  if (api::Traits(static_cast<uint32_t>(rec.api_id)).journal == api::JournalClass::kSkip) {
    return false;
  }
  // A large upload: the executor journals it, as a device capture it then
  // runs (agent/upload_capture.h).
  if (IsCaptureCandidate(rec.api_id, absl::string_view(rec.body(), rec.body_size()),
                         kCaptureMinBytes)) {
    return false;
  }
  return options_.thread_boundaries || !journal_->BoundaryBefore(rec);
}

bool AheadJournaling::LockToJournal(const transport::RecordHeader& rec) {
  if (rec.seq <= ahead_seen_) return false;
  // The thread holds the lock while it journals. If it does not hold it now,
  // it is waiting (for the ring, or left this request to the executor), and
  // the request is journaled soonest here: waiting for the thread would add
  // its wake-up and a hand-over to a request the executor is ready to run
  // (the head of a step, when the executor has caught up with the
  // application). If it holds it, it is journaling this request or an
  // earlier one: spin (bounded) until it has.
  bool locked = false;
  SpinUntil(
      [&] {
        return journaled_.load(std::memory_order_acquire) >= rec.seq || (locked = mu_.TryLock());
      },
      absl::Microseconds(200));
  if (!locked && journaled_.load(std::memory_order_acquire) < rec.seq) {
    LockSpinning(mu_);
    locked = true;
  }
  ahead_seen_ = journaled_.load(std::memory_order_acquire);
  if (ahead_seen_ >= rec.seq) {
    if (locked) mu_.Unlock();
    return false;
  }
  return true;  // locked
}

void AheadJournaling::StartBoundaryJournaledAhead(const transport::RecordHeader& rec) {
  if (rec.seq != next_boundary_.load(std::memory_order_acquire)) return;
  // The thread journaled the boundary before this request: the backend
  // starts the minibatch now, in order (collective ordinals restart).
  uint64_t minibatch = 0;
  LockSpinning(mu_);
  minibatch = boundaries_.front().second;
  boundaries_.pop_front();
  next_boundary_.store(boundaries_.empty() ? 0 : boundaries_.front().first,
                       std::memory_order_release);
  mu_.Unlock();
  host_->StartMinibatch(minibatch);
}

}  // namespace agent
}  // namespace revenant

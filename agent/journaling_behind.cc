#include "agent/journaling_behind.h"

#include "agent/upload_capture.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "api/hook_protocol.h"
#include "api/hook_structs.h"
#include "api/traits.h"
#include "api/wire.h"
#include "common/logging.h"

namespace revenant {
namespace agent {

void BehindJournaling::Start() {
  exec_detector_ = journal_->detector();
  exec_detect_ = journal_->boundary_mode() == RequestJournal::BoundaryMode::kAuto;
  exec_minibatch_ = journal_->minibatch();
  executed_seq_ = released_seq_ = options_.journaled_through;
  JournalThreadMode::Start();
}

// The executor follows the minibatch boundaries itself (the journal's
// detector belongs to whoever journals); a plain request runs now and the
// thread journals it later; any other is journaled here before it runs,
// after everything before it.
JournalingMode::Turn BehindJournaling::BeforeRun(const transport::RecordHeader& rec) {
  Turn turn;
  turn.here = true;
  // (Not before the request whose boundary a predecessor placed: as the
  // journal, RequestJournal::BoundaryPlacedBefore.)
  const bool boundary =
      exec_detect_ && rec.api_id != hooks::kMarkStepApiId &&
      rec.seq != options_.boundary_placed_before &&
      exec_detector_.OnRequest(rec.api_id, absl::string_view(rec.body(), rec.body_size()));
  if (PlainBehind(rec, boundary)) {
    turn.here = false;
    if (boundary) StartMinibatchBehind(rec);
    return turn;
  }
  // A boundary request with a large input (an input batch carried in the
  // ring or read from pinned memory) stays the executor's: the thread would
  // hold the hand-off lock through its copy, and the step's next request
  // the executor journals (or its reply) would wait for that anyway, asleep
  // on the lock once it takes over 200 us (PyTorch's 1 MiB batch on an H100
  // VM: mean step 1.03 of native the old way, 1.17 handed back, while
  // train_mlp's 8 KiB batch went from 1.15 to 1.09: docs/performance.md).
  constexpr size_t kHandBackMaxBytes = 64 << 10;
  if (boundary && skip_handback_ && PlainBehind(rec, /*boundary=*/false) &&
      rec.body_size() + host_->CapturedPayload(rec).size() <= kHandBackMaxBytes &&
      host_->BoundaryWithoutWork(rec)) {
    // A step that stays inside the journal's minibatch (snapshots on, none
    // planned here): nothing to do at the boundary, so the request is plain
    // after all and the thread journals it, the boundary skipped. (It used
    // to be journaled here, after the executor caught the journal up: a
    // training step's whole backlog journaled on the critical path, once a
    // step.)
    handed_back_.store(rec.seq, std::memory_order_release);
    ++boundaries_handed_back_;
    channel_->requests().WakeWaiters();
    turn.here = false;
    return turn;
  }
  {
    ExecutorWaitTimer timer(this, journal_->timing());
    CatchUpLocked(rec.seq);
  }
  if (journaled_.load(std::memory_order_relaxed) >= rec.seq) {
    // Cannot happen (both sides classify a request alike): journaled
    // once, by the thread.
    REVENANT_LOG(ERROR, "agent") << "write-behind: request " << rec.seq
                                 << " was journaled by the thread; its boundary work, if "
                                    "any, is not done here";
    mu_.Unlock();
    turn.here = false;
  } else {
    turn.locked = true;
    turn.barrier = true;
  }
  return turn;
}

void BehindJournaling::BeforeReply(const transport::RecordHeader& rec) {
  if (exec_journaled_ == rec.seq) return;
  // Write-behind ran this synchronous request before it was journaled: the
  // reply waits until it is (the thread is usually done by now; if not,
  // the executor journals what is left itself).
  if (journaled_.load(std::memory_order_acquire) >= rec.seq) return;
  CatchUpLocked(rec.seq + 1);
  mu_.Unlock();
}

void BehindJournaling::Outcome(const transport::RecordHeader& rec, int32_t status,
                               absl::string_view outputs, bool after_reply) {
  if (!after_reply || outputs.size() > kHandedOutcomeMax) {
    OutcomeLocked(rec, status, outputs);
    return;
  }
  // The thread appends it (it waits for this request to finish; `done_`,
  // stored by AfterRun, publishes the fields).
  pending_header_ = rec;
  pending_status_ = status;
  pending_outputs_.assign(outputs.data(), outputs.size());
  pending_seq_ = rec.seq;
}

void BehindJournaling::AfterRun(uint64_t seq, bool synchronous) {
  executed_seq_ = seq;
  // The ring keeps a request until it is journaled too. A request the
  // executor journaled itself is journaled with everything before it (and
  // the thread waits for it: the barrier). Else the thread's progress is
  // read only every kBehindReleaseEvery requests: the thread writes that
  // cache line per request, and reading it per request cost the executor a
  // cache miss each.
  constexpr uint64_t kBehindReleaseEvery = 256;
  if (exec_journaled_ == seq || synchronous) {
    // Journaled (a reply waits for that): the thread, at its barrier after
    // this request, may go on.
    channel_->Release(seq);
    released_seq_ = seq;
    done_.store(seq, std::memory_order_release);
    channel_->requests().WakeWaiters();
  } else if (seq - released_seq_ >= kBehindReleaseEvery) {
    const uint64_t release = std::min(seq, journaled_.load(std::memory_order_acquire));
    if (release > released_seq_) {
      channel_->Release(release);
      released_seq_ = release;
    }
  }
}

absl::StatusOr<const transport::RecordHeader*> BehindJournaling::PeekBeforeWaiting() {
  if (released_seq_ >= executed_seq_) return nullptr;
  transport::RingConsumer& ring = channel_->requests();
  absl::StatusOr<const transport::RecordHeader*> rec = ring.TryPeek();
  if (rec.ok() && *rec == nullptr && idle_handoff_ &&
      journaled_.load(std::memory_order_acquire) < executed_seq_) {
    // The thread is still journaling what ran (an input batch's payload
    // takes it 0.1-0.3 ms per MiB): journaling the rest here would hold
    // up the application's next request, which usually comes meanwhile.
    // So wait, without the lock, for whichever comes first: the next
    // request (it runs at once; the thread goes on behind it) or the
    // thread done (its ring space is released below). Bounded: the thread
    // never waits for an idle executor, but if it is slow, the executor
    // catches up itself after kIdleHandOffWait as before.
    constexpr absl::Duration kIdleHandOffWait = absl::Milliseconds(20);
    // Ring space is released as the thread goes (every this many requests),
    // for a producer that may be waiting for it.
    constexpr uint64_t kIdleReleaseEvery = 64;
    const absl::Time deadline = absl::Now() + kIdleHandOffWait;
    const uint64_t target = executed_seq_;
    const uint64_t read_pos = ring.read_position();
    idle_wait_for_.store(target, std::memory_order_relaxed);
    while (true) {
      // (Pairs with the thread's fence after it stores journaled_.)
      std::atomic_thread_fence(std::memory_order_seq_cst);
      const uint64_t from = released_seq_;
      const absl::Status w = ring.WaitUntil(
          [&] {
            const uint64_t j = journaled_.load(std::memory_order_acquire);
            return j >= target || j >= from + kIdleReleaseEvery || ring.head_position() > read_pos;
          },
          deadline, "the journal thread behind an idle executor");
      if (absl::IsUnavailable(w)) {  // the application is gone
        idle_wait_for_.store(0, std::memory_order_relaxed);
        return w;
      }
      const uint64_t release = std::min(target, journaled_.load(std::memory_order_acquire));
      if (release > released_seq_) {
        channel_->Release(release);
        released_seq_ = release;
      }
      if (released_seq_ >= target) {
        idle_wait_for_.store(0, std::memory_order_relaxed);
        return nullptr;
      }
      rec = ring.TryPeek();
      if (!rec.ok() || *rec != nullptr || !w.ok()) break;  // a request, or the bound
    }
    idle_wait_for_.store(0, std::memory_order_relaxed);
    if (rec.ok() && *rec != nullptr) {
      ++idle_handoffs_;
      return rec;
    }
  }
  if (rec.ok() && *rec == nullptr) {
    // About to wait for the application: what ran is journaled (here, if
    // the thread has not yet) and its ring space released, so that a
    // producer waiting for space is never left waiting on us.
    CatchUpLocked(executed_seq_ + 1);
    mu_.Unlock();
    channel_->Release(executed_seq_);
    released_seq_ = executed_seq_;
  }
  return rec;
}

JournalThreadMode::Take BehindJournaling::Classify(const transport::RecordHeader& rec) const {
  const bool boundary = journal_->BoundaryBefore(rec);
  if (!PlainBehind(rec, boundary)) {
    // The thread is at `rec` (everything before it journaled): a handed
    // back request at or past it means the executor left this one to it.
    if (boundary && handed_back_.load(std::memory_order_acquire) >= rec.seq) {
      return Take::kSkippedBoundary;
    }
    return Take::kExecutor;
  }
  return boundary ? Take::kBoundaryFirst : Take::kJournal;
}

bool BehindJournaling::ThreadBoundary(const transport::RecordHeader& rec,
                                      std::function<bool()>* ready) {
  // The boundary is placed when the executor gets there
  // (PlaceBoundaryBefore), by the executor or, when it asks
  // (boundary_request_), here; the request is journaled after it.
  const uint64_t seq = rec.seq;
  if (boundary_request_.load(std::memory_order_acquire) >= seq &&
      boundary_placed_.load(std::memory_order_relaxed) < seq) {
    if (absl::Status s = journal_->PlaceBoundaryBefore(rec); !s.ok()) host_->JournalFailed(s);
    ++boundaries_by_thread_;
    boundary_placed_.store(seq, std::memory_order_release);
    return true;
  }
  *ready = [this, seq] {
    return boundary_placed_.load(std::memory_order_acquire) >= seq ||
           boundary_request_.load(std::memory_order_acquire) >= seq || stop_.load();
  };
  return false;
}

bool BehindJournaling::PlainBehind(const transport::RecordHeader& rec, bool boundary) const {
  // Journaled before it runs: a marked step; a request not journaled at all
  // (the journaled requests stay contiguous); a request that posts a host
  // callback (the callback tells the application something, and the
  // executor cannot hold it back); a copy from the staging area (the
  // application reuses it); a boundary unless the thread may journal
  // boundaries (snapshots, the validator and catching up do their boundary
  // work with the journaling). A synchronous request is plain: it runs at
  // once, and its reply waits until it is journaled (BeforeReply).
  if (rec.api_id == hooks::kMarkStepApiId) return false;
  const auto id = static_cast<api::ApiId>(rec.api_id);
  if (api::Traits(static_cast<uint32_t>(rec.api_id)).journal == api::JournalClass::kSkip) {
    return false;
  }
  if (id == api::ApiId::cudaLaunchHostFunc || id == api::ApiId::cudaStreamAddCallback ||
      id == api::ApiId::cudaGraphLaunch) {
    return false;
  }
  if (id == api::ApiId::cudaMemcpyAsync || id == api::ApiId::cudaMemcpy) {
    wire::Decoder in(rec.body(), rec.body_size());
    hooks::CopyHead h;
    if (!h.Decode(in) || h.mode == hooks::kStagingSource) return false;
    // A large upload: the executor journals it, as a device capture it then
    // runs (agent/upload_capture.h).
    if (IsCaptureCandidate(rec.api_id, absl::string_view(rec.body(), rec.body_size()),
                           kCaptureMinBytes)) {
      return false;
    }
  }
  return !boundary || options_.thread_boundaries;
}

void BehindJournaling::StartMinibatchBehind(const transport::RecordHeader& rec) {
  // The journal starts the minibatch now, as the executor does (after
  // everything before it, a marker only: the thread appends the request and
  // its input later). A journal that ended a minibatch behind its executor
  // would send a replacement to the wrong state.
  // The thread journals a request in ~0.4 us (H200): a short backlog costs
  // the executor less waiting than journaling it itself.
  constexpr uint64_t kBoundaryHandOffBacklog = 16;
  bool placed = false;
  if (boundary_handoff_ &&
      journaled_.load(std::memory_order_acquire) + kBoundaryHandOffBacklog >= rec.seq) {
    // The thread is at this request or a few before it: it journals them
    // and places the marker while the executor waits (a bounded spin, 20 us:
    // then the executor does what is left itself).
    ExecutorWaitTimer timer(this, journal_->timing());
    boundary_request_.store(rec.seq, std::memory_order_release);
    channel_->requests().WakeWaiters();
    placed = SpinUntil(
        [&] { return boundary_placed_.load(std::memory_order_acquire) >= rec.seq; },
        absl::Microseconds(20), /*yield_after=*/absl::Microseconds(2));
  }
  if (!placed) {
    {
      ExecutorWaitTimer timer(this, journal_->timing());
      CatchUpLocked(rec.seq);
    }
    // Under the lock: the thread may have placed it in the meantime.
    if (boundary_placed_.load(std::memory_order_relaxed) < rec.seq) {
      if (absl::Status s = journal_->PlaceBoundaryBefore(rec); !s.ok()) host_->JournalFailed(s);
      ++boundaries_by_executor_;
      boundary_placed_.store(rec.seq, std::memory_order_release);
    }
    mu_.Unlock();
    channel_->requests().WakeWaiters();
  }
  exec_minibatch_ = journal_->minibatch();
  host_->StartMinibatch(exec_minibatch_);
}

void BehindJournaling::CatchUpLocked(uint64_t seq) {
  LockSpinning(mu_);
  FlushHandedOutcomeLocked();
  while (journaled_.load(std::memory_order_relaxed) + 1 < seq) {
    absl::StatusOr<const transport::RecordHeader*> r = JournalNextLocked(/*queue_boundary=*/false);
    if (!r.ok() || *r == nullptr) {
      // The executor ran these requests, so they are in the ring: a ring
      // that no longer shows them is corrupt.
      host_->JournalFailed(absl::DataLossError(absl::StrCat(
          "write-behind: request ", journaled_.load() + 1, " ran but the ring no longer holds it",
          r.ok() ? std::string() : absl::StrCat(": ", r.status().message()))));
    }
    ++by_executor_;
    ++ran_unjournaled_;  // the executor is past it: it ran
  }
}

std::string BehindJournaling::StopStats() const {
  return absl::StrCat(", ", ran_unjournaled_,
                      " of them had run before; minibatch boundaries placed by the thread ",
                      boundaries_by_thread_, ", by the executor ", boundaries_by_executor_,
                      "; steps without a snapshot left to the thread ", boundaries_handed_back_,
                      "; the idle executor left the thread's backlog to it ", idle_handoffs_,
                      " times");
}

}  // namespace agent
}  // namespace revenant

#include "agent/journal_thread.h"

#include <pthread.h>
#include <sched.h>

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/knobs.h"
#include "common/logging.h"

namespace revenant {
namespace agent {

JournalThreadMode::JournalThreadMode(JournalingHost* host, transport::ShmServerChannel* channel,
                                     RequestJournal* journal, const JournalThreadOptions& options)
    : host_(host), channel_(channel), journal_(journal), options_(options) {}

JournalThreadMode::~JournalThreadMode() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  channel_->requests().WakeAll();
  thread_.join();
}

void JournalThreadMode::Start() {
  delay_us_ =
      static_cast<int>(knobs::Int(knobs::Id::kJournalThreadDelayUs, 0, 10000000).value_or(0));
  boundary_handoff_ = knobs::Bool(knobs::Id::kJournalBoundaryHandoff).value_or(true);
  idle_handoff_ = knobs::Bool(knobs::Id::kJournalIdleHandoff).value_or(true);
  skip_handback_ = knobs::Bool(knobs::Id::kJournalSkipHandback).value_or(true);
  if (const std::optional<std::string> d = knobs::String(knobs::Id::kJournalThreadDry)) {
    const std::string dry = *d;
    if (dry == "1") {
      dry_ = true;
      REVENANT_LOG(WARNING, "agent")
          << "REVENANT_JOURNAL_THREAD_DRY=1: the journal thread writes NOTHING (a measurement of "
             "the thread's protocol without its journaling; recovery would fail)";
    } else if (dry == "payload") {
      dry_payload_ = true;
      REVENANT_LOG(WARNING, "agent")
          << "REVENANT_JOURNAL_THREAD_DRY=payload: the journal thread writes its records WITHOUT "
             "the bytes copies read from the application's memory (a measurement of their "
             "capture; recovery would replay wrong inputs)";
    } else {
      REVENANT_LOG(WARNING, "agent") << "REVENANT_JOURNAL_THREAD_DRY=" << dry
                                     << " ignored: not 1 or payload";
    }
  }
  pos_ = channel_->requests().read_position();
  // Every request before the read position is journaled (a replacement's
  // replay ends there).
  journaled_.store(options_.journaled_through);
  thread_ = std::thread([this] { Loop(); });
  if (const std::optional<int64_t> c =
          knobs::Int(knobs::Id::kJournalThreadCpu, 0, CPU_SETSIZE - 1)) {
    // Places the thread on one CPU (away from the executor's and the
    // application's: a busy neighbour on the same core slows them).
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(static_cast<int>(*c), &set);
    if (const int e = pthread_setaffinity_np(thread_.native_handle(), sizeof(set), &set);
        e != 0) {
      REVENANT_LOG(WARNING, "agent") << "REVENANT_JOURNAL_THREAD_CPU=" << *c
                                     << ": cannot place the journal thread there (error " << e
                                     << ")";
    }
  }
}

void JournalThreadMode::Stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  channel_->requests().WakeAll();
  thread_.join();
  FlushHandedOutcomeLocked();  // the thread is gone: nobody else holds the lock
  REVENANT_LOG(INFO, "agent") << "journal thread: " << by_thread_
                              << " requests journaled by it, " << by_executor_
                              << " by the executor" << StopStats();
  if (journal_->timing()) {
    REVENANT_LOG(INFO, "agent") << absl::StrFormat(
        "journal thread: the executor waited for it or caught up %d times, %.3f ms in all "
        "(%.3f us each)",
        executor_waits_, executor_ns_ / 1e6,
        executor_waits_ ? executor_ns_ / 1e3 / executor_waits_ : 0.0);
  }
}

void JournalThreadMode::Journaled(const transport::RecordHeader& rec, Turn* turn) {
  if (!turn->locked) return;
  pos_ = channel_->requests().read_position() + rec.stride();
  if (turn->barrier) barrier_.store(rec.seq, std::memory_order_release);
  journaled_.store(rec.seq, std::memory_order_release);
  ahead_seen_ = rec.seq;
  JournaledHereLocked(rec);
  ++by_executor_;
  turn->locked = false;
  mu_.Unlock();
}

void JournalThreadMode::OutcomeLocked(const transport::RecordHeader& rec, int32_t status,
                                      absl::string_view outputs) {
  // The thread waits for this request to finish (barrier): the lock only
  // orders memory.
  LockSpinning(mu_);
  absl::Status s = journal_->AfterExecute(rec, status, outputs);
  mu_.Unlock();
  if (!s.ok()) host_->JournalFailed(s);
}

void JournalThreadMode::FlushHandedOutcomeLocked() {
  if (pending_seq_ == 0) return;
  if (absl::Status s = journal_->AfterExecute(pending_header_, pending_status_, pending_outputs_);
      !s.ok()) {
    host_->JournalFailed(s);
  }
  pending_seq_ = 0;
}

absl::StatusOr<const transport::RecordHeader*> JournalThreadMode::JournalNextLocked(
    bool queue_boundary) {
  uint64_t pos = pos_;
  absl::StatusOr<const transport::RecordHeader*> r = channel_->requests().PeekAt(&pos);
  if (!r.ok()) return r;
  pos_ = pos;  // past padding
  if (*r != nullptr) JournalRecordLocked(**r, queue_boundary);
  return r;
}

void JournalThreadMode::JournalRecordLocked(const transport::RecordHeader& rec,
                                            bool queue_boundary) {
  const uint64_t minibatch = journal_->minibatch();
  // Write-behind: a detected boundary journaled here after it ran, by the
  // thread or by the executor catching up, is one the executor handed back
  // (BoundaryWithoutWork): the step stays inside the journal's minibatch.
  // (Any other boundary is placed when the executor starts its minibatch,
  // or journaled by the executor before it runs.)
  if (handed_back_.load(std::memory_order_acquire) >= rec.seq && journal_->BoundaryBefore(rec)) {
    journal_->SkipBoundaryFor(rec.seq);
  }
  if (dry_) {
    // Measurement only (REVENANT_JOURNAL_THREAD_DRY=1): nothing is written.
  } else if (absl::Status s = journal_->BeforeExecute(
                 rec, dry_payload_ ? absl::string_view() : host_->CapturedPayload(rec));
             !s.ok()) {
    host_->JournalFailed(s);
  }
  if (queue_boundary && journal_->minibatch() != minibatch) {
    boundaries_.emplace_back(rec.seq, journal_->minibatch());
    if (boundaries_.size() == 1) next_boundary_.store(rec.seq, std::memory_order_release);
  } else if (!QueuesBoundaries() && journal_->minibatch() != minibatch && !dry_) {
    // Write-behind places every boundary when the executor starts its
    // minibatch: a journal that started one on its own would send a
    // replacement to a state its predecessor never had.
    host_->JournalFailed(absl::InternalError(absl::StrCat(
        "write-behind: the journal started minibatch ", journal_->minibatch(), " at request ",
        rec.seq, " which the executor ran inside minibatch ", minibatch)));
  }
  pos_ += rec.stride();
  // Its outcome entry comes next: nothing is journaled until it finished.
  if (rec.reply_slot >= 0) barrier_.store(rec.seq, std::memory_order_release);
  journaled_.store(rec.seq, std::memory_order_release);
}

void JournalThreadMode::Loop() {
  pthread_setname_np(pthread_self(), "journal-thread");
  transport::RingConsumer& ring = channel_->requests();
  bool delayed = false;  // the test delay before the next request is over
  while (!stop_.load(std::memory_order_acquire)) {
    std::function<bool()> ready;
    const char* what = "the journal thread: a request";
    bool delay_now = false;
    {
      absl::MutexLock lock(&mu_);
      const uint64_t barrier = barrier_.load(std::memory_order_acquire);
      const bool finished = done_.load(std::memory_order_acquire) >= barrier;
      // An outcome the executor handed over once it finished its request.
      if (finished) FlushHandedOutcomeLocked();
      if (!finished) {
        // A synchronous request, or one the executor journaled, is not
        // finished yet.
        ready = [this, barrier] {
          return done_.load(std::memory_order_acquire) >= barrier || stop_.load();
        };
        what = "the journal thread: the executor finishing a synchronous request";
      } else {
        uint64_t pos = pos_;
        absl::StatusOr<const transport::RecordHeader*> r = ring.PeekAt(&pos);
        if (!r.ok()) {
          // The executor reaches the same record and reports it.
          REVENANT_LOG(WARNING, "agent") << "journal thread stops: " << r.status();
          return;
        }
        pos_ = pos;  // past padding
        Take take = *r == nullptr ? Take::kJournal : Classify(**r);
        if (take == Take::kSkippedBoundary) take = Take::kJournal;  // JournalRecordLocked skips it
        if (*r == nullptr) {
          ready = [this, &ring, pos] { return ring.head_position() > pos || stop_.load(); };
        } else if (take == Take::kExecutor) {
          const uint64_t seq = (*r)->seq;
          ready = [this, seq] {
            return journaled_.load(std::memory_order_acquire) >= seq ||
                   handed_back_.load(std::memory_order_acquire) >= seq || stop_.load();
          };
          what = "the journal thread: the executor journaling a request";
        } else if (take == Take::kBoundaryFirst) {
          if (ThreadBoundary(**r, &ready)) continue;  // the request itself next
          what = "the journal thread: the executor starting a minibatch";
        } else if (delay_us_ > 0 && !delayed) {
          delayed = true;
          delay_now = true;
        } else {
          delayed = false;
          // (Read first: once journaled, the executor may release it.)
          const uint64_t seq = (*r)->seq;
          JournalRecordLocked(**r, QueuesBoundaries());
          ++by_thread_;
          // An idle executor waiting for this request to be journaled
          // (write-behind) may release the ring now; it releases as the
          // thread goes, every 64 requests (BehindJournaling::PeekBeforeWaiting).
          // (The fence pairs with the executor's between its store of
          // idle_wait_for_ and its read of journaled_.)
          std::atomic_thread_fence(std::memory_order_seq_cst);
          const uint64_t waiting_for = idle_wait_for_.load(std::memory_order_relaxed);
          if (waiting_for != 0 && (seq >= waiting_for || seq % 64 == 0)) ring.WakeWaiters();
          continue;
        }
      }
    }
    if (delay_now) {
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us_));
      continue;
    }
    const absl::Status w = ring.WaitUntil(ready, absl::Now() + absl::Milliseconds(200), what);
    if (absl::IsUnavailable(w)) return;  // the application is gone
  }
}

}  // namespace agent
}  // namespace revenant

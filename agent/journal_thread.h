// JournalThreadMode: what the two modes with a journal thread share
// (AheadJournaling, BehindJournaling; docs/design.md, "The journal thread").
//
// The ring's requests are journaled in seq order, each exactly once, by the
// thread or by the executor, under `mu_`. The thread takes the requests its
// mode's Classify allows; at any other it stops until the executor has
// journaled it. After a synchronous request (its outcome entry comes next in
// the journal) it waits until the executor finished it (barrier).
//
// The fields each side writes are on their own cache lines: the other side
// polls them, and a shared line moved between the cores on every request
// (it showed in the executor's profile on the H200).
#ifndef REVENANT_AGENT_JOURNAL_THREAD_H_
#define REVENANT_AGENT_JOURNAL_THREAD_H_

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/journaling_mode.h"

namespace revenant {
namespace agent {

// Spins (pause) until done() holds, reading the clock every 32 looks: false
// after `bound`; from `yield_after` on, each clock read also yields the CPU
// (on a machine with fewer cores than busy threads, the thread waited for
// may need this one's).
template <typename Done>
bool SpinUntil(Done done, absl::Duration bound,
               absl::Duration yield_after = absl::InfiniteDuration()) {
  const absl::Time start = absl::Now();
  for (int i = 1;; ++i) {
    if (done()) return true;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    if ((i & 31) == 0) {
      const absl::Duration waited = absl::Now() - start;
      if (waited >= bound) return false;
      if (waited >= yield_after) sched_yield();
    }
  }
}

// The executor's way into the hand-off lock: the thread holds it for one
// request's journaling (a few microseconds at most), and absl::Mutex puts a
// waiter to sleep after a short spin -- a futex wake-up (tens of
// microseconds in a VM) on the step's critical path. So spin on TryLock by
// the clock first (bounded), then block.
inline void LockSpinning(absl::Mutex& mu) {
  if (SpinUntil([&mu] { return mu.TryLock(); }, absl::Microseconds(200))) return;
  mu.Lock();
}

class JournalThreadMode : public JournalingMode {
 public:
  ~JournalThreadMode() override;

  void Start() override;
  void Stop() override;
  void Journaled(const transport::RecordHeader& rec, Turn* turn) override;

 protected:
  JournalThreadMode(JournalingHost* host, transport::ShmServerChannel* channel,
                    RequestJournal* journal, const JournalThreadOptions& options);

  // What the thread does with the next request of the ring.
  enum class Take {
    kJournal,        // journals it
    kExecutor,       // leaves it to the executor, waits until it is journaled
    kBoundaryFirst,  // write-behind: places the boundary before it first
    // Write-behind: a detected boundary the executor handed back (no
    // snapshot or journal boundary there): journals it, the boundary
    // skipped (RequestJournal::SkipBoundaryFor).
    kSkippedBoundary,
  };
  virtual Take Classify(const transport::RecordHeader& rec) const = 0;
  // kBoundaryFirst: places the boundary before `rec` now if the executor
  // asked for it (returns true), else sets what to wait for.
  virtual bool ThreadBoundary(const transport::RecordHeader& rec,
                              std::function<bool()>* ready) {
    return false;
  }
  // Whether a boundary the thread journals is queued for the executor
  // (journal-ahead), rather than placed when the executor starts it.
  virtual bool QueuesBoundaries() const = 0;
  // Journaled: the executor journaled `rec` (mu_ still held).
  virtual void JournaledHereLocked(const transport::RecordHeader& rec) {}
  // Extra counters for the line Stop logs.
  virtual std::string StopStats() const { return std::string(); }

  // Appends the outcome entry of `rec` under the lock (the thread waits for
  // this request to finish: the lock only orders memory).
  void OutcomeLocked(const transport::RecordHeader& rec, int32_t status,
                     absl::string_view outputs);
  // Write-behind: appends the outcome handed to the thread, if any (mu_
  // held).
  void FlushHandedOutcomeLocked();
  // Journals the ring's request at pos_ (mu_ held). Returns the record,
  // nullptr if none is readable yet.
  absl::StatusOr<const transport::RecordHeader*> JournalNextLocked(bool queue_boundary);
  // Journals `rec`, the ring's request at pos_ (mu_ held), and moves past
  // it; `queue_boundary`: a boundary it starts is queued for the executor
  // (journal-ahead).
  void JournalRecordLocked(const transport::RecordHeader& rec, bool queue_boundary);

  // With REVENANT_JOURNAL_TIMING=1: adds its lifetime to the executor's
  // time on the journal thread (executor_ns_, executor_waits_).
  class ExecutorWaitTimer {
   public:
    ExecutorWaitTimer(JournalThreadMode* m, bool on)
        : m_(on ? m : nullptr),
          t0_(on ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point()) {}
    ~ExecutorWaitTimer() {
      if (m_ == nullptr) return;
      m_->executor_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::steady_clock::now() - t0_)
                              .count();
      ++m_->executor_waits_;
    }
    ExecutorWaitTimer(const ExecutorWaitTimer&) = delete;
    ExecutorWaitTimer& operator=(const ExecutorWaitTimer&) = delete;

   private:
    JournalThreadMode* const m_;
    const std::chrono::steady_clock::time_point t0_;
  };

  JournalingHost* const host_;
  transport::ShmServerChannel* const channel_;
  RequestJournal* const journal_;
  const JournalThreadOptions options_;

  alignas(64) absl::Mutex mu_;
  uint64_t pos_ = 0;  // ring position after the last journaled request (mu_)
  // Written by the thread (and by the executor when it journals itself).
  alignas(64) std::atomic<uint64_t> journaled_{0};  // every request <= this is journaled
  std::atomic<uint64_t> barrier_{0};  // nothing journaled until done_ >= barrier_
  // Written by the executor, only when it finishes the barrier request.
  alignas(64) std::atomic<uint64_t> done_{0};  // the executor finished the barrier (>= it)
  // Boundaries the thread journaled: (request seq, minibatch it starts).
  std::deque<std::pair<uint64_t, uint64_t>> boundaries_;  // mu_
  alignas(64) std::atomic<uint64_t> next_boundary_{0};  // boundaries_.front().first, 0: none
  // Write-behind: the request before which a minibatch boundary was last
  // placed in the journal (RequestJournal::PlaceBoundaryBefore, when the
  // executor starts that minibatch: by the executor, or by the thread at
  // its request). The thread journals such a request only after that, so
  // the journal's minibatch is always the executor's (as with inline
  // journaling): a replacement's journal names the minibatch its
  // predecessor was in.
  alignas(64) std::atomic<uint64_t> boundary_placed_{0};
  // Write-behind: the boundary request the executor waits at, asking the
  // thread to place it (the thread had journaled everything before it).
  // The thread's journal state is in its own caches; placing the marker
  // on the executor took it a cache miss per line (~0.7 us per step on the
  // H200). Whoever places a boundary does so under mu_, after checking
  // boundary_placed_.
  alignas(64) std::atomic<uint64_t> boundary_request_{0};
  uint64_t boundaries_by_thread_ = 0, boundaries_by_executor_ = 0;  // mu_
  // REVENANT_JOURNAL_BOUNDARY_HANDOFF=0 (measurements): the executor
  // places every boundary itself.
  bool boundary_handoff_ = true;
  // REVENANT_JOURNAL_IDLE_HANDOFF=0 (measurements): write-behind, an idle
  // executor journals the thread's backlog itself (BehindJournaling::
  // PeekBeforeWaiting).
  bool idle_handoff_ = true;
  // Write-behind: the last detected boundary request the executor left to
  // the thread (BoundaryWithoutWork: a step inside the journal's minibatch).
  // The thread, at a boundary it classified as the executor's, waits for
  // the executor to journal it or to hand it back here.
  alignas(64) std::atomic<uint64_t> handed_back_{0};
  // REVENANT_JOURNAL_SKIP_HANDBACK=0 (measurements): the executor journals
  // every detected boundary itself while snapshots are on.
  bool skip_handback_ = true;
  // Write-behind: the executor waits, without the lock, for the thread to
  // journal through this request (0: it does not wait); the thread wakes it.
  alignas(64) std::atomic<uint64_t> idle_wait_for_{0};
  // Write-behind: the outcome of a wait or synchronous copy, handed to the
  // thread after the reply (OutcomeMayFollowReply); pending_seq_ 0: none.
  // Written by the executor before it stores `done_` for that request;
  // appended (and cleared) under mu_ by the thread once it sees `done_`, or
  // by the executor before it journals anything else.
  uint64_t pending_seq_ = 0;
  transport::RecordHeader pending_header_;
  int32_t pending_status_ = 0;
  std::string pending_outputs_;
  // Test hook (REVENANT_JOURNAL_THREAD_DELAY_US): the thread sleeps this
  // long before each request, so that tests find the executor ahead of it.
  int delay_us_ = 0;
  // Measurement hook (REVENANT_JOURNAL_THREAD_DRY=1): the thread takes
  // requests but writes nothing, to separate the cost of its journaling
  // from that of the hand-over protocol. Never for real jobs.
  bool dry_ = false;
  // REVENANT_JOURNAL_THREAD_DRY=payload: records without the bytes a copy
  // reads from the application's memory (the input capture's share).
  bool dry_payload_ = false;
  std::atomic<bool> stop_{false};
  uint64_t by_thread_ = 0, by_executor_ = 0;  // requests journaled (mu_)
  // Write-behind: requests the executor journaled after it had run them
  // (catching up; the thread's late ones are not counted).
  uint64_t ran_unjournaled_ = 0;
  // With REVENANT_JOURNAL_TIMING=1: the executor's time spent on the
  // journal while the thread journals (waiting for the thread, starting
  // queued boundaries, outcome entries), and how often it waited.
  uint64_t executor_ns_ = 0, executor_waits_ = 0;
  uint64_t ahead_seen_ = 0;  // the executor's last read of journaled_
  std::thread thread_;

 private:
  void Loop();
};

}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_JOURNAL_THREAD_H_

// JournalingMode: how the executor gets a request journaled (log before
// apply) and when it may release it to the ring -- one interface, one class
// per mode (docs/design.md, "The journal thread"):
//
//   InlineJournaling  (journaling_inline.h): the executor journals every
//                     request itself, before it runs it;
//   AheadJournaling   (journaling_ahead.h): a journal thread journals the
//                     plain requests before the executor runs them;
//   BehindJournaling  (journaling_behind.h): the executor runs plain
//                     asynchronous requests at once and the journal thread
//                     journals them behind it (write-behind).
//
// The executor (Session) calls, per request:
//
//   JournalingMode::Turn turn = mode->BeforeRun(rec);  // before-run
//   if (turn.here) ...journal rec itself (RequestJournal::BeforeExecute,
//                  with the boundary work: snapshots, validator)...
//   mode->Journaled(rec, &turn);                       // published
//   ...run...
//   mode->BeforeReply(rec);   // a reply: rec is journaled by now
//   mode->Outcome(...);       // a synchronous request's outcome entry
//   mode->AfterRun(seq, synchronous);   // after-run: ring space released
//
// Minibatch boundaries (boundary) a mode's thread journals are started in
// the backend through JournalingHost::StartMinibatch, in request order.
#ifndef REVENANT_AGENT_JOURNALING_MODE_H_
#define REVENANT_AGENT_JOURNALING_MODE_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/journaling.h"
#include "transport/shm_channel.h"

namespace revenant {
namespace agent {

// What a journaling mode needs of the session it journals for.
class JournalingHost {
 public:
  virtual ~JournalingHost() = default;
  // Bytes `rec` reads from shared host memory or the staging area, for the
  // journal (both may be reused by the application once it ran).
  virtual absl::string_view CapturedPayload(const transport::RecordHeader& rec) const = 0;
  // A minibatch boundary was journaled before the request about to run:
  // the backend starts `minibatch` (collective ordinals restart) and the
  // channel notes the host callbacks posted so far.
  virtual void StartMinibatch(uint64_t minibatch) = 0;
  // Write-behind: the executor is at `rec`, a detected minibatch boundary
  // that the thread would journal but for the work a boundary may carry (a
  // snapshot, a journal boundary). Plans that work now: true when there is
  // none (the step stays inside the journal's minibatch; the thread
  // journals `rec` with the boundary skipped); else the plan is kept for
  // the executor's own journaling of `rec`, which follows.
  virtual bool BoundaryWithoutWork(const transport::RecordHeader& rec) { return false; }
  // The journal cannot be written: tells the application and exits.
  [[noreturn]] virtual void JournalFailed(const absl::Status& status) = 0;
};

class JournalingMode {
 public:
  // Who journals a request (the executor or the journal thread) and the
  // hand-off lock the executor holds for it.
  struct Turn {
    bool here = false;     // the executor journals it
    bool locked = false;   // the hand-off lock is held until Journaled
    bool barrier = false;  // the thread waits until this request ran
  };

  virtual ~JournalingMode() = default;

  // Around Session::Run: starts and stops the journal thread, if any.
  virtual void Start() {}
  virtual void Stop() {}

  // before-run: whether the executor journals `rec` itself (then it does so
  // before Journaled); else the thread journaled it, or journals it later
  // (write-behind), and a boundary before it is started here.
  virtual Turn BeforeRun(const transport::RecordHeader& rec) = 0;
  // Publishes `rec` as journaled by the executor; releases the lock.
  virtual void Journaled(const transport::RecordHeader& rec, Turn* turn) {}
  // Returns once `rec` (a request with a reply) is journaled.
  virtual void BeforeReply(const transport::RecordHeader& rec) {}
  // Appends the outcome entry of the synchronous request `rec`;
  // `after_reply`: its reply is posted already
  // (RequestJournal::OutcomeMayFollowReply), so the thread may append it.
  virtual void Outcome(const transport::RecordHeader& rec, int32_t status,
                       absl::string_view outputs, bool after_reply) = 0;
  // after-run: `seq` ran (and the ring advanced past it); releases what may
  // be released.
  virtual void AfterRun(uint64_t seq, bool synchronous) = 0;
  // Before the executor waits for the application: the next request if one
  // is there already, else nullptr (having released everything that ran).
  virtual absl::StatusOr<const transport::RecordHeader*> PeekBeforeWaiting() { return nullptr; }
  // The minibatch the executor is in (the journal's may lag behind it).
  virtual uint64_t ExecutorMinibatch() const = 0;
};

enum class JournalThreadKind { kOff, kAhead, kBehind };

// The journal thread's settings (SessionOptions::journal_thread and the
// knobs that tune or measure it).
struct JournalThreadOptions {
  // Whether the thread may journal minibatch boundaries itself: not with
  // snapshots, the validator, chaos or catching up (their boundary work runs
  // with the journaling).
  bool thread_boundaries = false;
  // Every request up to this one is journaled already (a replacement's
  // replay ended there).
  uint64_t journaled_through = 0;
  // A replacement: its predecessor placed the current minibatch's boundary
  // before this request (0: none): not a boundary again.
  uint64_t boundary_placed_before = 0;
};

// The mode for `kind`; InlineJournaling for kOff or without a journal
// (`journal` null: nothing is journaled).
std::unique_ptr<JournalingMode> MakeJournalingMode(JournalThreadKind kind, JournalingHost* host,
                                                   transport::ShmServerChannel* channel,
                                                   RequestJournal* journal,
                                                   const JournalThreadOptions& options);

}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_JOURNALING_MODE_H_

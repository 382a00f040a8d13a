// BehindJournaling (--journal_thread=behind, write-behind): the executor
// runs plain asynchronous requests at once and the journal thread journals
// them behind it (agent/journal_thread.h has the hand-off both thread modes
// share).
//
// The ring keeps every request until it is journaled; every request whose
// effect reaches the application (a reply, a host callback) is journaled
// before it runs, and before then everything earlier: what the application
// was told is always in the journal, and the rest is still in its ring. The
// executor starts minibatches from its own detector; it catches the journal
// up itself (CatchUpLocked) before a request that is not plain, before a
// reply (BeforeReply) and before it waits for the application; it releases
// ring space only up to the journaled request. A detected boundary where
// the snapshots plan nothing is handed back to the thread (handed_back_) and
// journaled as a plain request, the boundary skipped.
#ifndef REVENANT_AGENT_JOURNALING_BEHIND_H_
#define REVENANT_AGENT_JOURNALING_BEHIND_H_

#include <string>

#include "agent/journal_thread.h"

namespace revenant {
namespace agent {

class BehindJournaling : public JournalThreadMode {
 public:
  BehindJournaling(JournalingHost* host, transport::ShmServerChannel* channel,
                   RequestJournal* journal, const JournalThreadOptions& options)
      : JournalThreadMode(host, channel, journal, options) {}

  void Start() override;
  Turn BeforeRun(const transport::RecordHeader& rec) override;
  void BeforeReply(const transport::RecordHeader& rec) override;
  void Outcome(const transport::RecordHeader& rec, int32_t status, absl::string_view outputs,
               bool after_reply) override;
  void AfterRun(uint64_t seq, bool synchronous) override;
  absl::StatusOr<const transport::RecordHeader*> PeekBeforeWaiting() override;
  uint64_t ExecutorMinibatch() const override { return exec_minibatch_; }

 private:
  Take Classify(const transport::RecordHeader& rec) const override;
  bool ThreadBoundary(const transport::RecordHeader& rec, std::function<bool()>* ready) override;
  bool QueuesBoundaries() const override { return false; }  // the executor started it
  void JournaledHereLocked(const transport::RecordHeader& rec) override {
    exec_minibatch_ = journal_->minibatch();
    exec_journaled_ = rec.seq;
  }
  std::string StopStats() const override;

  // Whether `rec` may run before it is journaled (the thread journals it
  // later); `boundary`: a minibatch boundary comes before it.
  bool PlainBehind(const transport::RecordHeader& rec, bool boundary) const;
  // A plain request `rec` that starts a minibatch: the boundary is placed in
  // the journal (by the thread, which the executor asks and waits for when
  // it is close behind, else here) and the backend starts the minibatch.
  void StartMinibatchBehind(const transport::RecordHeader& rec);
  // Takes the lock and journals every request before `seq` that the thread
  // has not journaled yet (they are all plain); returns with the lock held.
  void CatchUpLocked(uint64_t seq);
  // Larger outputs are journaled by the executor (no copy to hand over).
  static constexpr size_t kHandedOutcomeMax = 4096;

  // The executor's own boundary detection (the journal's detector belongs
  // to whichever thread journals) and minibatch number.
  MinibatchDetector exec_detector_;
  uint64_t exec_minibatch_ = 0;
  bool exec_detect_ = false;  // automatic boundaries
  uint64_t executed_seq_ = 0;  // the last request the executor ran
  uint64_t released_seq_ = 0;  // the last request released to the ring
  uint64_t exec_journaled_ = 0;  // the last request the executor journaled
  // Times an idle executor left the thread's backlog to it and ran the next
  // request instead (PeekBeforeWaiting).
  uint64_t idle_handoffs_ = 0;
  // Detected boundaries the executor handed back to the thread (executor).
  uint64_t boundaries_handed_back_ = 0;
};

}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_JOURNALING_BEHIND_H_

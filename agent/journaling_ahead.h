// AheadJournaling (--journal_thread=ahead): the journal thread journals the
// plain requests before the executor runs them (journal/journal_thread.h has
// the hand-off both thread modes share).
//
// The executor runs a request only once it is journaled, by the thread or by
// itself when the thread stopped at it or has not reached it within a
// bounded spin. A boundary the thread journaled is queued for the executor,
// which starts the minibatch in the backend just before that request. After
// a synchronous request, or one the thread would not journal, the thread
// waits until the executor has run it (the barrier): its outcome entry, or
// the boundary work done with it, comes before the next entry.
#ifndef REVENANT_AGENT_JOURNALING_AHEAD_H_
#define REVENANT_AGENT_JOURNALING_AHEAD_H_

#include "agent/journal_thread.h"

namespace revenant {
namespace agent {

class AheadJournaling : public JournalThreadMode {
 public:
  AheadJournaling(JournalingHost* host, transport::ShmServerChannel* channel,
                  RequestJournal* journal, const JournalThreadOptions& options)
      : JournalThreadMode(host, channel, journal, options) {}

  Turn BeforeRun(const transport::RecordHeader& rec) override;
  void Outcome(const transport::RecordHeader& rec, int32_t status, absl::string_view outputs,
               bool after_reply) override {
    OutcomeLocked(rec, status, outputs);
  }
  void AfterRun(uint64_t seq, bool synchronous) override;
  uint64_t ExecutorMinibatch() const override { return journal_->minibatch(); }

 private:
  Take Classify(const transport::RecordHeader& rec) const override {
    return Plain(rec) ? Take::kJournal : Take::kExecutor;
  }
  bool QueuesBoundaries() const override { return true; }
  // Whether the thread may journal `rec` (mu_ held).
  bool Plain(const transport::RecordHeader& rec) const;
  // Whether the executor journals `rec` itself; if so, returns with mu_
  // held (else the thread journaled it, possibly after a bounded spin).
  bool LockToJournal(const transport::RecordHeader& rec);
  // A request the thread journaled a boundary before: starts the minibatch
  // in the backend.
  void StartBoundaryJournaledAhead(const transport::RecordHeader& rec);
};

}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_JOURNALING_AHEAD_H_

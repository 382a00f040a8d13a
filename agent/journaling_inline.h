// InlineJournaling: the executor journals every request itself, just before
// it runs it (log before apply), and releases it to the ring once it ran.
// The mode without a journal thread (--journal_thread=off), and the one a
// session without a journal uses (nothing is journaled then).
#ifndef REVENANT_AGENT_JOURNALING_INLINE_H_
#define REVENANT_AGENT_JOURNALING_INLINE_H_

#include "agent/journaling_mode.h"

namespace revenant {
namespace agent {

class InlineJournaling : public JournalingMode {
 public:
  // `journal` may be null (no journal).
  InlineJournaling(JournalingHost* host, transport::ShmServerChannel* channel,
                   RequestJournal* journal)
      : host_(host), channel_(channel), journal_(journal) {}

  Turn BeforeRun(const transport::RecordHeader& rec) override {
    Turn turn;
    turn.here = journal_ != nullptr;
    return turn;
  }
  void Outcome(const transport::RecordHeader& rec, int32_t status, absl::string_view outputs,
               bool after_reply) override;
  void AfterRun(uint64_t seq, bool synchronous) override { channel_->Release(seq); }
  uint64_t ExecutorMinibatch() const override {
    return journal_ == nullptr ? 0 : journal_->minibatch();
  }

 private:
  JournalingHost* const host_;
  transport::ShmServerChannel* const channel_;
  RequestJournal* const journal_;
};

}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_JOURNALING_INLINE_H_

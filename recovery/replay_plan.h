// Replay planning: which entries of a dead agent's journal a replacement
// agent replays, where it takes the state at the journal's minibatch
// boundary, which requests it answers without running them and which it
// skips; and which requests of a minibatch log the journal validator
// replays silently (docs/recovery.md, "Sequence" and "Validator").
//
// The agent carries the plan out (Session::Recover, Session::ReplaySilently
// through the Validator): it executes, restores and answers; the decisions
// and their reasons are here, which is where a new replay rule goes. The
// plan needs no device and no application: what only the agent knows (its
// channel's reply slots, the host memory it shares with the application)
// comes in as small callables.
//
//   absl::StatusOr<ReplayLog> log = ReadReplayLog(journal_dir);
//   ReplayPlan plan(*log, {snapshot_boundary_seq,
//                          LastAnsweredRequest(log->entries, slots),
//                          copies_into_shared_host});
//   for (const ReplayRequest& r : plan.requests()) {
//     if (plan.TakesBoundaryBefore(r)) plan.BoundaryTaken(/*survivors_ahead=*/...);
//     switch (plan.ActionFor(r)) { ... }  // replay, answer superseded, skip
//   }
//   if (plan.TakesBoundaryAtEnd()) ...;
//
// Journal entries are read as the agent's RequestJournal writes them
// (agent/journaling.h): request seq s is journaled as 2s, its outcome as
// 2s + 1 right after it, and the reply slot a request named rides in the
// upper half of its flags.
#ifndef REVENANT_RECOVERY_REPLAY_PLAN_H_
#define REVENANT_RECOVERY_REPLAY_PLAN_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "journal/journal.h"

namespace revenant {
namespace recovery {

// The dead agent's journal for a replay: both logs merged back into request
// order, each entry marked with the log it came from.
struct ReplayLog {
  std::vector<journal::JournalEntry> entries;
  std::vector<bool> from_minibatch;
  uint64_t minibatch = 0;  // the minibatch log's; 0: before the first boundary
  // The first request after that minibatch's boundary (its marker's
  // boundary_seq): every request before it was journaled; 0: not known.
  uint64_t boundary_seq = 0;
};

// Completes entries read back from a journal: bytes they only reference
// outside the journal's own files, which the agent knows how to load. An
// error refuses the read.
using LoadReferenced = std::function<absl::Status(std::vector<journal::JournalEntry>* entries)>;

// Reads the journal in `journal_dir` (its setup and minibatch logs) as a
// replacement replays it; `load` (may be null) completes the entries of both
// logs before they are merged. kDataLoss for a corrupt journal (never
// replayed), kNotFound where there is none.
absl::StatusOr<ReplayLog> ReadReplayLog(const std::string& journal_dir,
                                        const LoadReferenced& load = nullptr);

// ReadReplayLog's merge: `entries` holds the setup log (its first
// `setup_entries`) then the minibatch log, each in seq order; the result is
// one log in request order.
ReplayLog MergeLogs(std::vector<journal::JournalEntry> entries, size_t setup_entries,
                    uint64_t minibatch);

// One request of a journal with its outcome (outcome entries are not
// requests of their own).
struct ReplayRequest {
  const journal::JournalEntry* entry = nullptr;
  // The outcome the dead agent recorded (a synchronous request's), or null.
  const journal::JournalEntry* outcome = nullptr;
  uint64_t seq = 0;  // the request's sequence number in the application's ring
  bool from_minibatch = false;
};

// The requests of `entries` (request order), each with its outcome.
// `from_minibatch` (may be null: all false) marks the log of each entry.
std::vector<ReplayRequest> RequestsOf(const std::vector<journal::JournalEntry>& entries,
                                      const std::vector<bool>* from_minibatch = nullptr);

// The application's reply slots as the agent's channel shows them.
struct ReplySlots {
  uint32_t count = 0;
  // The request whose reply slot `slot` (< count) holds last
  // (ShmServerChannel::ReplySeq).
  std::function<uint64_t(uint32_t slot)> last_reply;
};

// The last synchronous request whose reply reached the application: it has
// an outcome entry, or its reply slot holds its reply or a later one. 0 if
// none did.
uint64_t LastAnsweredRequest(const std::vector<journal::JournalEntry>& entries,
                             const ReplySlots& slots);

// Whether `e` copies into host memory the agent shares with the application
// (the agent knows the ranges: Session::IsSharedHost).
using CopyIntoSharedHost = std::function<bool(const journal::JournalEntry& e)>;

// What a replacement does with one request of the journal.
enum class ReplayAction {
  kReplay,            // run it again; its outcome, if any, is compared
  kAnswerSuperseded,  // not run; answered, without results, if awaited
  kSkip,              // neither run nor answered
};

// A replacement's replay of one journal, request by request. The plan keeps
// the one piece of state the decisions depend on: whether the boundary
// state was taken yet, and whether the survivors turned out to be past the
// journal's minibatch then.
class ReplayPlan {
 public:
  struct Options {
    // The first request the boundary snapshot of the journal's minibatch
    // does not include (Snapshot::boundary_seq); none: no snapshot.
    std::optional<uint64_t> snapshot_boundary_seq;
    // LastAnsweredRequest of the journal.
    uint64_t last_answered = 0;
    // Null: no request copies into shared host memory.
    CopyIntoSharedHost copies_into_shared_host;
  };

  // `log` must outlive the plan.
  ReplayPlan(const ReplayLog& log, Options options);

  const std::vector<ReplayRequest>& requests() const { return requests_; }
  uint64_t minibatch() const { return minibatch_; }
  // The last request the journal holds (every request, superseded and
  // skipped ones included): the ring's requests through it are done.
  uint64_t last_request() const { return last_request_; }

  // Whether the requests replayed now come before the boundary (the setup
  // log's, from an earlier minibatch: the application ran them, and their
  // host callbacks, long ago). False from the start before the first
  // boundary (minibatch 0), where the whole journal is the current
  // minibatch.
  bool in_setup() const { return !boundary_taken_; }
  // Whether the state at the boundary (snapshot, survivors) is to be taken
  // right before `r` (at most once).
  bool TakesBoundaryBefore(const ReplayRequest& r) const;
  // After the last request: whether the boundary state is still to be
  // taken (the minibatch log was empty).
  bool TakesBoundaryAtEnd() const { return !boundary_taken_; }
  // The boundary state was taken; `survivors_ahead`: the survivors were
  // past the journal's minibatch (their state supersedes it).
  void BoundaryTaken(bool survivors_ahead);
  bool survivors_ahead() const { return survivors_ahead_; }

  // What to do with `r`, in request order (the shared host ranges are
  // asked when its turn comes: earlier replayed requests map and unmap
  // them).
  ReplayAction ActionFor(const ReplayRequest& r) const;

 private:
  const uint64_t minibatch_;
  const Options options_;
  std::vector<ReplayRequest> requests_;
  uint64_t last_request_ = 0;
  bool boundary_taken_;
  bool survivors_ahead_ = false;
};

// The validator's silent replay of one minibatch (agent/validator.h).

// The minibatch log in `journal_dir`, read as a replacement would read it
// (`load`, may be null, completes its entries); kFailedPrecondition when it
// is the log of another minibatch than `minibatch`.
absl::StatusOr<std::vector<journal::JournalEntry>> ReadMinibatchLog(
    const std::string& journal_dir, uint64_t minibatch, const LoadReferenced& load = nullptr);

struct SilentReplayPlan {
  std::vector<ReplayRequest> requests;
  bool collectives = false;  // it holds NCCL requests
};

// The requests of a minibatch log for a silent replay. kFailedPrecondition
// when it cannot be replayed on its own (an NCCL group spans a boundary).
absl::StatusOr<SilentReplayPlan> PlanSilentReplay(
    const std::vector<journal::JournalEntry>& minibatch_log);

// Whether a silent replay runs `e` (the others change nothing the replay
// compares and would touch what belongs to the application now).
bool ReplaysSilently(const journal::JournalEntry& e,
                     const CopyIntoSharedHost& copies_into_shared_host);

}  // namespace recovery
}  // namespace revenant

#endif  // REVENANT_RECOVERY_REPLAY_PLAN_H_
